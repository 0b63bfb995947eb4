"""Original TF1 checkpoints: golden outputs, name table, round trip, error reporting."""

import dataclasses
import json
import pathlib

import keras
import numpy as np
import pytest
import tensorflow as tf

from albert_tf import AlbertConfig, AlbertPretrainer
from albert_tf.checkpoints import (
    CheckpointMismatchError,
    load_tf1_checkpoint,
    read_tf1_checkpoint,
    save_tf1_checkpoint,
    tf1_variable_map,
)
from tests.contracts import check_tf1_names, original_tf1_names
from tests.model_configs import MICRO
from tests.tolerances import GOLDEN, assert_close_to_scale

# Compares floats against goldens or another form of the model: CI reruns it on other kernels.
pytestmark = pytest.mark.numerics

CHECKPOINTS = pathlib.Path(__file__).parent / "fixtures" / "original_checkpoints"
FOLDERS = sorted(p.name for p in CHECKPOINTS.iterdir() if p.is_dir())
INPUTS = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions")


def golden_outputs(model, expected):
    outputs = model({k: expected[k] for k in INPUTS})
    vocab = outputs["mlm_logits"].shape[-1]
    return {
        "sequence_output": outputs["sequence_output"].numpy(),
        "pooled_output": outputs["pooled_output"].numpy(),
        "mlm_log_probs": keras.ops.log_softmax(outputs["mlm_logits"], -1)
        .numpy()
        .reshape(-1, vocab),
        "sop_log_probs": keras.ops.log_softmax(outputs["sop_logits"], -1).numpy(),
    }


def assert_matches_golden(model, folder):
    expected = np.load(CHECKPOINTS / folder / "expected.npz")
    ours = golden_outputs(model, expected)
    real = expected["input_mask"].astype(bool)  # padded positions are not meaningful
    assert_close_to_scale(ours["sequence_output"][real], expected["sequence_output"][real], GOLDEN)
    for key in ("pooled_output", "mlm_log_probs", "sop_log_probs"):
        assert_close_to_scale(ours[key], expected[key], GOLDEN, err_msg=key)


def test_fixture_folders_are_all_covered():
    assert FOLDERS == ["albert_tiny_grouped", "albert_tiny_shared", "albert_tiny_shared_training"]


@pytest.mark.parametrize("folder", FOLDERS)
def test_golden_outputs_of_the_original_code(folder):
    model = load_tf1_checkpoint(CHECKPOINTS / folder, CHECKPOINTS / folder / "albert_config.json")
    assert_matches_golden(model, folder)


@pytest.mark.parametrize("folder", ["albert_tiny_grouped", "albert_tiny_shared"])
def test_name_table_gives_exactly_the_original_variables(folder):
    config = AlbertConfig.from_json_file(CHECKPOINTS / folder / "albert_config.json")
    original = json.loads((CHECKPOINTS / folder / "variables.json").read_text())
    names = {name: tuple(v.shape) for name, v in tf1_variable_map(AlbertPretrainer(config)).items()}
    assert names == {name: tuple(shape) for name, shape in original.items()}


@pytest.mark.parametrize("sharing", ["all", "attention", "ffn", "none"])
def test_name_table_covers_every_variable_of_every_sharing_mode(sharing):
    config = AlbertConfig(
        **dict(MICRO, num_hidden_layers=3), num_hidden_groups=2, inner_group_num=2, sharing=sharing
    )
    check_tf1_names(AlbertPretrainer(config), original_tf1_names(config, "pretraining"))


def test_training_checkpoint_slots_and_step_are_skipped():
    reader = tf.train.load_checkpoint(
        str(CHECKPOINTS / "albert_tiny_shared_training" / "model.ckpt-best")
    )
    all_names = reader.get_variable_to_shape_map()
    assert "global_step" in all_names and any(n.endswith("/adam_m") for n in all_names)
    kept = read_tf1_checkpoint(CHECKPOINTS / "albert_tiny_shared_training")
    assert not any(n.endswith(("adam_m", "adam_v")) or n == "global_step" for n in kept)


def test_save_then_load_round_trips_exactly(tmp_path):
    folder = CHECKPOINTS / "albert_tiny_grouped"
    model = load_tf1_checkpoint(folder, folder / "albert_config.json")
    prefix = save_tf1_checkpoint(model, tmp_path / "out" / "model.ckpt", global_step=7)
    original, written = read_tf1_checkpoint(folder), read_tf1_checkpoint(prefix)
    assert original.keys() == written.keys()
    for name in original:
        np.testing.assert_array_equal(original[name], written[name], err_msg=name)
    assert tf.train.load_checkpoint(prefix).get_tensor("global_step") == 7
    assert tf.train.latest_checkpoint(str(tmp_path / "out")) == prefix  # state file written
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]  # no staging
    reloaded = load_tf1_checkpoint(tmp_path / "out", folder / "albert_config.json")
    assert_matches_golden(reloaded, "albert_tiny_grouped")


def test_mismatch_names_every_problem(tmp_path):
    folder = CHECKPOINTS / "albert_tiny_shared"
    wrong = AlbertConfig.from_json_file(folder / "albert_config.json")
    wrong.intermediate_size = 48  # shape mismatches in the FFN
    wrong.num_hidden_groups = 2  # group_1 variables missing
    with pytest.raises(CheckpointMismatchError) as error:
        load_tf1_checkpoint(folder, wrong)
    message = str(error.value)
    assert "missing from checkpoint: bert/encoder/transformer/group_1/" in message
    assert (
        "shape mismatch: bert/encoder/transformer/group_0/inner_group_0/ffn_1/intermediate/dense/kernel checkpoint (32, 64) vs model (32, 48)"
        in message
    )
    assert message.count("missing from checkpoint") == 16


def test_unexpected_variables_are_reported(tmp_path):
    folder = CHECKPOINTS / "albert_tiny_grouped"
    bigger = AlbertConfig.from_json_file(folder / "albert_config.json")
    smaller = dataclasses.replace(bigger, num_hidden_groups=1)
    with pytest.raises(
        CheckpointMismatchError, match="unexpected in checkpoint: bert/encoder/transformer/group_1"
    ):
        load_tf1_checkpoint(folder, smaller)


def test_missing_checkpoint_errors_name_the_path(tmp_path):
    config = CHECKPOINTS / "albert_tiny_shared" / "albert_config.json"
    with pytest.raises(FileNotFoundError, match="nothing_here"):
        load_tf1_checkpoint(tmp_path / "nothing_here", config)
    (tmp_path / "a.index").write_bytes(b"")
    (tmp_path / "b.index").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="2 candidates"):
        load_tf1_checkpoint(tmp_path, config)
