"""RACE multiple-choice head: the original's names, logits, loss, dropout and checkpoints."""

import functools
import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from albert_tf import AlbertConfig
from albert_tf.checkpoints import CheckpointMismatchError, read_tf1_checkpoint, tf1_variable_map
from albert_tf.checkpoints.task_heads import (
    assign_task_weights,
    initialize_task_model,
    load_task_checkpoint,
)
from albert_tf.modeling.heads.multiple_choice import AlbertMultipleChoice
from tests.conftest import FIXTURES, ORIGINAL_CHECKPOINTS
from tests.contracts import model_inputs, original_tf1_names, run_model_contract_test
from tests.model_configs import MICRO
from tests.tolerances import GOLDEN, assert_close_to_scale

# Compares floats against goldens or another form of the model: CI reruns it on other kernels.
pytestmark = pytest.mark.numerics

RACE = FIXTURES / "original_race"
TINY = RACE / "race_tiny"
SHARED = ORIGINAL_CHECKPOINTS / "albert_tiny_shared"
INPUTS = ("input_ids", "input_mask", "segment_ids")


@functools.cache
def dev_features() -> dict[str, np.ndarray]:
    """The original dev features (9 questions x 4 options x 128) with their `label_ids`."""
    rows = json.loads((RACE / "features_dev_seq128_qa32.json").read_text())["features"]
    arrays = {k: np.array([r[k] for r in rows], np.int32) for k in INPUTS}
    arrays["label_ids"] = np.array([r["label_id"] for r in rows], np.int32)
    return arrays


def config() -> AlbertConfig:
    return AlbertConfig.from_json_file(TINY / "albert_config.json")


def loaded(**kwargs) -> AlbertMultipleChoice:
    model = AlbertMultipleChoice(config(), **kwargs)
    load_task_checkpoint(model, TINY)
    return model


def test_tf1_names_and_shapes_are_the_original_checkpoints():
    model = AlbertMultipleChoice(config())
    names = {name: tuple(v.shape) for name, v in tf1_variable_map(model).items()}
    original = json.loads((TINY / "variables.json").read_text())
    assert names == {n: tuple(s) for n, s in original.items()}
    assert {"multiple_choice/output_weights", "multiple_choice/output_bias"} <= {
        v.path for v in model.weights
    }


def test_reproduces_the_original_logits_and_loss():
    expected = np.load(TINY / "expected.npz")
    batch = dev_features()
    model = loaded(dropout_prob=0.0)
    outputs = model({k: batch[k] for k in INPUTS})
    assert outputs["logits"].shape == (9, 4) and outputs["logits"].dtype == "float32"
    assert_close_to_scale(outputs["logits"], expected["logits"], GOLDEN)
    logits = outputs["logits"].numpy().astype(np.float64)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    per_example_loss = -log_probs[np.arange(9), batch["label_ids"]]
    assert_close_to_scale(per_example_loss, expected["per_example_loss"], GOLDEN)
    assert_close_to_scale(np.exp(log_probs), outputs["probabilities"], GOLDEN)
    model.compile()  # the original's loss
    loss = model.compute_loss(x=batch, y=batch["label_ids"], y_pred=outputs)
    assert_close_to_scale(loss, expected["loss"], GOLDEN)


@pytest.mark.half_precision
def test_keeps_the_model_contract():
    cfg = AlbertConfig(**MICRO)
    flat = model_inputs(cfg, batch=8)
    # Two questions of four choices; the last choice of each is padded (as `model_inputs` pads).
    inputs = {k: np.stack([v[[0, 1, 2, 7]], v[[3, 4, 5, 7]]]) for k, v in flat.items()}
    run_model_contract_test(
        AlbertMultipleChoice,
        {"config": cfg, "num_choices": 4, "dropout_prob": 0.0, "seed": 2},
        inputs,
        expected_tf1_names=original_tf1_names(cfg, "classifier"),  # top-level output_*
        tf1_loader=load_task_checkpoint,
        expected_output_shapes={"logits": (2, 4), "probabilities": (2, 4)},
        train_batch=(inputs, np.array([1, 3], np.int32)),
        float32_layers=("probabilities",),
    )


def test_init_from_an_original_pretraining_checkpoint():
    golden = np.load(SHARED / "expected.npz")
    model = AlbertMultipleChoice(AlbertConfig.from_json_file(SHARED / "albert_config.json"))
    head_before = model.head.output_weights.numpy()
    assert not initialize_task_model(model, SHARED)
    np.testing.assert_array_equal(model.head.output_weights.numpy(), head_before)
    assert 0 < np.abs(head_before).max() <= 0.04  # fresh: truncated normal, std 0.02
    np.testing.assert_array_equal(model.head.output_bias.numpy(), 0)
    pooled = model.backbone({k: golden[k] for k in INPUTS})["pooled_output"]
    assert_close_to_scale(pooled, golden["pooled_output"], GOLDEN)


def test_backbone_from_a_squad_checkpoint_then_the_head():
    # The RACE and SQuAD fixtures share their backbone weights: only the head is RACE's own.
    model = AlbertMultipleChoice(config(), dropout_prob=0.0)
    assert not initialize_task_model(model, FIXTURES / "original_squad" / "squad_v1_tiny")
    tensors = read_tf1_checkpoint(TINY)
    with pytest.raises(CheckpointMismatchError, match="missing from checkpoint: output_bias"):
        assign_task_weights(model, {"output_weights": tensors["output_weights"]}, "x", True)
    model.head.output_weights.assign(tensors["output_weights"])
    model.head.output_bias.assign(tensors["output_bias"])
    batch = dev_features()
    logits = model({k: batch[k] for k in INPUTS})["logits"]
    assert_close_to_scale(logits, np.load(TINY / "expected.npz")["logits"], GOLDEN)


def test_dropout_is_configurable_and_only_in_training():
    batch = {k: v[:3] for k, v in dev_features().items()}
    for rate in (0.0, 0.1):
        model = loaded(dropout_prob=rate)
        assert model.head.dropout.rate == rate
        inference = model(batch)["logits"]
        same = np.allclose(model(batch, training=True)["logits"], inference)
        assert same == (rate == 0.0), rate
    with pytest.raises(ValueError, match="dropout_prob"):
        AlbertMultipleChoice(config(), dropout_prob=1.0)


def test_fit_reports_loss_and_accuracy():
    keras.utils.set_random_seed(0)
    model = loaded(dropout_prob=0.0)
    batch = dev_features()
    inputs = {k: batch[k] for k in INPUTS}
    batches = tf.data.Dataset.from_tensor_slices((inputs, batch["label_ids"])).batch(9)
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    history = model.fit(batches, epochs=5, shuffle=False, verbose=0).history
    assert_close_to_scale(history["loss"][0], np.load(TINY / "expected.npz")["loss"], GOLDEN)
    assert history["loss"][-1] < history["loss"][0] and "accuracy" in history
