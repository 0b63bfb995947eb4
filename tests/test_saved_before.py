"""What earlier versions of this code saved still loads and resumes: `.keras` files of every model
kind, a stopped fine-tuning run and a stopped pretraining run (`tests/fixtures/saved_before_keras_heads`)."""

import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

import albert_tf.modeling  # noqa: F401  (registers every model class for load_model)
from albert_tf.checkpoints import read_tf1_checkpoint
from albert_tf.config import AlbertConfig
from albert_tf.finetuning import loop
from albert_tf.training.distribution import build_strategy
from albert_tf.training.pretraining import run_pretraining
from tests.conftest import FIXTURES
from tests.test_finetuning_loop import HasSevenTask, Settings
from tests.test_pretraining import options
from tests.tolerances import SAME_MODEL, assert_close_to_scale

SAVED = FIXTURES / "saved_before_keras_heads"
KINDS = {
    "albert_model": "AlbertModel",
    "albert_pretrainer": "AlbertPretrainer",
    "classifier": "AlbertClassifier",
    "classifier_regression": "AlbertClassifier",
    "squad_v1": "AlbertSquadV1",
    "squad_v2": "AlbertSquadV2",
    "multiple_choice": "AlbertMultipleChoice",
}


@pytest.mark.parametrize("name", sorted(KINDS))
def test_keras_file_loads_in_safe_mode_with_the_same_outputs(name):
    model = keras.saving.load_model(SAVED / f"{name}.keras", safe_mode=True)
    assert type(model).__name__ == KINDS[name]
    assert model.compute_dtype == "float32"
    saved = np.load(SAVED / "keras_outputs.npz")
    inputs = {k.rsplit("/", 1)[1]: saved[k] for k in saved if k.startswith(f"{name}/input/")}
    outputs = model(inputs, training=False)
    expected = {k.rsplit("/", 1)[1]: saved[k] for k in saved if k.startswith(f"{name}/output/")}
    assert set(outputs) == set(expected)
    for key, value in expected.items():
        if value.dtype.kind == "i":
            np.testing.assert_array_equal(outputs[key], value, err_msg=key)
        else:
            assert_close_to_scale(outputs[key], value, SAME_MODEL, err_msg=key)


def test_a_stopped_fine_tuning_run_resumes_from_its_checkpoint_and_optimizer_state(tmp_path):
    out = tmp_path / "out"
    shutil.copytree(SAVED / "finetuning_run", out)
    settings = Settings(str(out), albert_config_file=str(SAVED / "albert_config.json"))
    task = HasSevenTask(settings)
    summary = loop.run(task, do_train=True, do_eval=False, do_predict=False)
    assert task.calls == [("load", str(out / "model.ckpt-3"))]
    assert [p.rsplit("/", 1)[1] for p in summary["checkpoints"]] == ["model.ckpt-6"]
    state = tf.train.load_checkpoint(str(out / "train_state" / "optimizer-6"))
    assert int(state.get_tensor("optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE")) == 6
    before, after = (read_tf1_checkpoint(out / f"model.ckpt-{s}") for s in (3, 6))
    assert before.keys() == after.keys()
    assert any(not np.array_equal(before[n], after[n]) for n in before)


def test_a_stopped_pretraining_run_resumes_from_its_checkpoint(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(SAVED / "pretraining_run" / "run", run)
    # The run's settings: the test defaults (lr 0.01, a checkpoint every 4 steps, seed 1), 8 steps.
    records = str(SAVED / "pretraining_run" / "records.tfrecord")
    small = dict(max_seq_length=16, max_predictions_per_seq=2, train_batch_size=4)
    settings = options(run, input_file=records, num_warmup_steps=1, **small)
    config = AlbertConfig.from_json_file(SAVED / "albert_config.json")
    results = run_pretraining(settings, config, build_strategy("one_device"))
    assert results["resumed_from"] == str(run / "checkpoints" / "ckpt-4")
    assert results["global_step"] == 8
    assert [h["step"] for h in results["train_history"]] == [6, 8]
    state = tf.train.load_checkpoint(str(run / "checkpoints" / "ckpt-8"))
    assert int(state.get_tensor("optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE")) == 8
