"""AlbertClassifier: the original head's names, shapes and maths; TF1 checkpoints in and out."""

import json
import pathlib

import keras
import numpy as np
import pytest
import tensorflow as tf

from albert_tf import AlbertConfig
from albert_tf.checkpoints import (
    CheckpointMismatchError,
    load_tf1_checkpoint,
    save_tf1_checkpoint,
    tf1_variable_map,
    tf1_weights,
)
from albert_tf.checkpoints.task_heads import (
    assign_task_weights,
    initialize_task_model,
    load_task_checkpoint,
)
from albert_tf.modeling.heads.classifier import AlbertClassifier
from albert_tf.training.optimization import uses_weight_decay
from tests.contracts import model_inputs, original_tf1_names, run_model_contract_test
from tests.model_configs import MICRO
from tests.tolerances import GOLDEN, SAME_MODEL, assert_close_to_scale

# Compares floats against goldens or another form of the model: CI reruns it on other kernels.
pytestmark = pytest.mark.numerics

CHECKPOINTS = pathlib.Path(__file__).parent / "fixtures" / "original_checkpoints"
SHARED = CHECKPOINTS / "albert_tiny_shared"
INPUTS = ("input_ids", "input_mask", "segment_ids")


def golden():
    config = AlbertConfig.from_json_file(SHARED / "albert_config.json")
    expected = np.load(SHARED / "expected.npz")
    return config, {k: expected[k] for k in INPUTS}, expected


def random_head(num_labels, hidden, seed=0):
    rng = np.random.default_rng(seed)
    return {
        "output_weights": rng.normal(size=(num_labels, hidden)).astype(np.float32),
        "output_bias": rng.normal(size=(num_labels,)).astype(np.float32),
    }


def test_tf1_names_are_the_original_classifier_checkpoints():
    config, _, _ = golden()
    model = AlbertClassifier(config, num_labels=3)
    names = {name: tuple(v.shape) for name, v in tf1_variable_map(model).items()}
    original = json.loads((SHARED / "variables.json").read_text())
    expected = {n: tuple(s) for n, s in original.items() if n.startswith("bert/")}
    expected.update(output_weights=(3, 32), output_bias=(3,))  # [num_labels, H], not a Dense kernel
    assert names == expected
    # The original's weight-decay exclusions: the bias is excluded, the weights are decayed.
    paths = {v.path for v in model.weights}
    assert {"classifier/output_weights", "classifier/output_bias"} <= paths
    assert uses_weight_decay("classifier/output_weights")
    assert not uses_weight_decay("classifier/output_bias")


def test_logits_are_pooled_times_output_weights_transposed_on_golden_weights():
    config, inputs, expected = golden()
    model = AlbertClassifier(config, num_labels=3)
    tensors = {**load_tf1_weights(), **random_head(3, 32)}
    assert assign_task_weights(model, tensors, "golden", require_head=True)
    outputs = model(inputs)
    logits = expected["pooled_output"] @ tensors["output_weights"].T + tensors["output_bias"]
    # The pooled output is within GOLDEN of the original's; the head's matmul amplifies that by
    # at most the largest L1 norm of a row of its weights.
    amplification = np.abs(tensors["output_weights"]).sum(1).max()
    assert_close_to_scale(outputs["logits"], logits, GOLDEN * max(1.0, amplification))
    assert_close_to_scale(
        outputs["probabilities"], tf.nn.softmax(logits), GOLDEN * max(1.0, amplification)
    )
    assert outputs["logits"].dtype == outputs["probabilities"].dtype == "float32"


def load_tf1_weights():
    return tf1_weights(load_tf1_checkpoint(SHARED, SHARED / "albert_config.json"))


@pytest.mark.parametrize("folder", ["albert_tiny_shared", "albert_tiny_shared_training"])
def test_init_from_original_pretraining_checkpoint(folder):
    config, inputs, expected = golden()
    model = AlbertClassifier(config, num_labels=2)
    head_before = model.head.output_weights.numpy()
    assert not initialize_task_model(model, CHECKPOINTS / folder)  # no head in it
    np.testing.assert_array_equal(model.head.output_weights.numpy(), head_before)
    pooled = model.backbone(inputs)["pooled_output"]
    assert_close_to_scale(pooled, expected["pooled_output"], GOLDEN)


def test_tf1_round_trip_and_strict_load(tmp_path):
    config, inputs, _ = golden()
    model = AlbertClassifier(config, num_labels=3)
    prefix = save_tf1_checkpoint(model, tmp_path / "run" / "model.ckpt-7", global_step=7)
    listed = dict(tf.train.list_variables(prefix))
    assert listed["output_weights"] == [3, 32] and listed["output_bias"] == [3]
    assert listed["global_step"] == [] and len(listed) == len(model.weights) + 1
    assert tf.train.latest_checkpoint(str(tmp_path / "run")) == prefix
    assert not [p for p in (tmp_path / "run").iterdir() if p.name.startswith(".")]
    clone = AlbertClassifier(config, num_labels=3)
    load_task_checkpoint(clone, tmp_path / "run")
    np.testing.assert_array_equal(clone(inputs)["logits"], model(inputs)["logits"])
    with pytest.raises(CheckpointMismatchError, match="missing from checkpoint: output_weights"):
        load_task_checkpoint(clone, SHARED)  # a pretraining checkpoint has no head


def test_head_of_another_label_count_is_not_loaded(tmp_path):
    config, inputs, _ = golden()
    mnli = AlbertClassifier(config, num_labels=3)
    prefix = save_tf1_checkpoint(mnli, tmp_path / "model.ckpt-1")
    rte = AlbertClassifier(config, num_labels=2)
    assert not initialize_task_model(rte, prefix)
    np.testing.assert_array_equal(
        rte.backbone(inputs)["pooled_output"], mnli.backbone(inputs)["pooled_output"]
    )
    same = AlbertClassifier(config, num_labels=3)
    assert initialize_task_model(same, prefix)
    np.testing.assert_array_equal(same(inputs)["logits"], mnli(inputs)["logits"])


def test_backbone_mismatch_lists_problems():
    config, _, _ = golden()
    wrong = AlbertConfig.from_dict({**config.to_dict(), "intermediate_size": 48})
    with pytest.raises(
        CheckpointMismatchError, match=r"shape mismatch: .*ffn_1/intermediate/dense/kernel"
    ):
        initialize_task_model(AlbertClassifier(wrong, 2), SHARED)


def test_init_from_our_keras_pretrainer(tmp_path):
    config, inputs, expected = golden()
    pretrainer = load_tf1_checkpoint(SHARED, config)
    pretrainer.save(tmp_path / "pretrained.keras")
    model = AlbertClassifier(config, num_labels=2)
    assert not initialize_task_model(model, tmp_path / "pretrained.keras")
    assert_close_to_scale(
        model.backbone(inputs)["pooled_output"], expected["pooled_output"], GOLDEN
    )
    with pytest.raises(FileNotFoundError, match="nothing.keras"):
        initialize_task_model(model, tmp_path / "nothing.keras")


def test_keras_file_loads_in_safe_mode(tmp_path):
    config, inputs, _ = golden()
    model = AlbertClassifier(config, num_labels=3, seed=1)
    model.save(tmp_path / "classifier.keras")
    loaded = keras.saving.load_model(tmp_path / "classifier.keras", safe_mode=True)
    assert isinstance(loaded, AlbertClassifier) and loaded.num_labels == 3
    assert loaded.get_config() == model.get_config()
    assert_close_to_scale(
        loaded(inputs)["probabilities"], model(inputs)["probabilities"], SAME_MODEL
    )


@pytest.mark.half_precision
@pytest.mark.parametrize(
    "head_kwargs",
    [dict(num_labels=3, seed=1), dict(num_labels=1, regression=True)],
    ids=["classification", "regression"],
)
def test_classifier_keeps_the_model_contract(head_kwargs):
    config = AlbertConfig(**MICRO)
    labels = head_kwargs["num_labels"]
    regression = head_kwargs.get("regression", False)
    run_model_contract_test(
        AlbertClassifier,
        {"config": config, **head_kwargs},
        model_inputs(config),
        expected_tf1_names=original_tf1_names(config, "classifier"),
        tf1_loader=load_task_checkpoint,
        expected_output_shapes={"logits": (2, labels), "probabilities": (2, labels)},
        train_batch=(
            model_inputs(config),
            np.array([0.5, 4.0], np.float32) if regression else np.array([2, 0], np.int32),
        ),
        # "probabilities" come out in float32 under a mixed policy: the softmax runs in float32,
        # a regression's scores are cast to it (the predictions written are not rounded to bf16).
        float32_layers=("probabilities",),
    )


def test_regression_head_outputs_one_score():
    config, inputs, _ = golden()
    model = AlbertClassifier(config, num_labels=1, regression=True)
    outputs = model(inputs)
    assert outputs["logits"].shape == (2, 1)
    np.testing.assert_array_equal(outputs["probabilities"], outputs["logits"])  # as the original
    with pytest.raises(ValueError, match="num_labels=1"):
        AlbertClassifier(config, num_labels=2, regression=True)


def test_head_dropout_is_fixed_at_0_1_and_only_in_training():
    config, inputs, _ = golden()  # the config has dropout 0: only the head's dropout remains
    model = AlbertClassifier(config, num_labels=2)
    assert model.head.dropout.rate == 0.1
    np.testing.assert_array_equal(model(inputs)["logits"], model(inputs)["logits"])
    assert not np.allclose(model(inputs, training=True)["logits"], model(inputs)["logits"])


@pytest.mark.parametrize("regression", [False, True])
def test_fit_on_features_and_label_ids(regression):
    keras.utils.set_random_seed(0)
    config, inputs, _ = golden()
    model = AlbertClassifier(config, num_labels=1 if regression else 2, regression=regression)
    labels = np.array([0.5, 4.0], np.float32) if regression else np.array([0, 1], np.int32)
    batch = tf.data.Dataset.from_tensors((inputs, labels))
    model.compile(optimizer=keras.optimizers.Adam(3e-3))  # the original's loss and accuracy
    logits = model(inputs)["logits"].numpy().astype(np.float64)
    if regression:  # the original's loss: mean squared error / mean softmax cross-entropy
        expected = np.mean((logits[:, 0] - labels) ** 2)
    else:
        expected = np.mean(np.log(np.exp(logits).sum(-1)) - logits[[0, 1], labels])
    before = model.evaluate(batch, verbose=0, return_dict=True)
    assert before["loss"] == pytest.approx(expected, rel=1e-5)
    history = model.fit(batch.repeat(100), shuffle=False, verbose=0)
    after = model.evaluate(batch, verbose=0, return_dict=True)
    assert after["loss"] < 0.1 * before["loss"]  # memorises the batch
    if not regression:
        assert after["accuracy"] == 1.0 and "accuracy" in history.history
