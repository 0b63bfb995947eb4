"""SQuAD v1.1 and v2.0 heads: the original's names, outputs, beam, losses and checkpoints."""

import functools
import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from albert_tf import AlbertConfig
from albert_tf.checkpoints import (
    CheckpointMismatchError,
    assign_tf1_checkpoint,
    read_tf1_checkpoint,
    tf1_variable_map,
)
from albert_tf.checkpoints.task_heads import (
    assign_task_weights,
    initialize_task_model,
    load_task_checkpoint,
)
from albert_tf.modeling.heads.squad_v1 import AlbertSquadV1
from albert_tf.modeling.heads.squad_v2 import AlbertSquadV2
from albert_tf.training.optimization import uses_weight_decay
from tests.conftest import FIXTURES, ORIGINAL_CHECKPOINTS
from tests.contracts import model_inputs, original_tf1_names, run_model_contract_test
from tests.model_configs import MICRO
from tests.tolerances import FEW_OPS, GOLDEN, assert_close_to_scale

# Compares floats against goldens or another form of the model: CI reruns it on other kernels.
pytestmark = pytest.mark.numerics

SQUAD = FIXTURES / "original_squad"
V1, V2 = SQUAD / "squad_v1_tiny", SQUAD / "squad_v2_tiny"
SHARED = ORIGINAL_CHECKPOINTS / "albert_tiny_shared"
BACKBONE = ("input_ids", "input_mask", "segment_ids")
V2_HEAD = {
    "start_logits/dense/kernel",
    "start_logits/dense/bias",
    "end_logits/dense_0/kernel",
    "end_logits/dense_0/bias",
    "end_logits/LayerNorm/gamma",
    "end_logits/LayerNorm/beta",
    "end_logits/dense_1/kernel",
    "end_logits/dense_1/bias",
    "answer_class/dense_0/kernel",
    "answer_class/dense_0/bias",
    "answer_class/dense_1/kernel",
}


@functools.cache
def features(split: str) -> dict[str, np.ndarray]:
    """The original features at 128/32/24 as model inputs; labels for the training split."""
    path = SQUAD / f"features_{split}_seq128_stride32_q24.json"
    rows = json.loads(path.read_text())["features"]
    arrays = {
        k: np.array([r[k] for r in rows], np.int32)
        for k in ("input_ids", "input_mask", "segment_ids", "p_mask")
    }
    if split == "train":
        arrays["start_positions"] = np.array([r["start_position"] for r in rows], np.int32)
        arrays["end_positions"] = np.array([r["end_position"] for r in rows], np.int32)
        arrays["is_impossible"] = np.array([r["is_impossible"] for r in rows], np.int32)
    return arrays


def labels(batch) -> dict[str, np.ndarray]:
    """The training labels of a `features("train")` batch, as `fit` takes them (y)."""
    return {k: batch[k] for k in ("start_positions", "end_positions", "is_impossible")}


def config() -> AlbertConfig:
    return AlbertConfig.from_json_file(V1 / "albert_config.json")


def loaded(model_class, folder, **kwargs):
    model = model_class(config(), **kwargs)
    load_task_checkpoint(model, folder)
    return model


def fixture_shapes(folder) -> dict[str, tuple]:
    return {n: tuple(s) for n, s in json.loads((folder / "variables.json").read_text()).items()}


@pytest.mark.parametrize("model_class, folder", [(AlbertSquadV1, V1), (AlbertSquadV2, V2)])
def test_tf1_names_and_shapes_are_the_original_checkpoints(model_class, folder):
    model = model_class(config())
    names = {name: tuple(v.shape) for name, v in tf1_variable_map(model).items()}
    assert names == fixture_shapes(folder)
    # The original's weight-decay exclusions reach the head: biases and LayerNorm are excluded.
    decayed = {v.path for v in model.weights if uses_weight_decay(v.path)}
    assert not {p for p in decayed if "bias" in p or "LayerNorm" in p}


def test_v1_reproduces_the_original_logits():
    expected = np.load(V1 / "expected.npz")
    inputs = features("eval")
    outputs = loaded(AlbertSquadV1, V1)({k: inputs[k] for k in BACKBONE})
    for key in ("start_logits", "end_logits"):
        assert outputs[key].shape == (39, 128) and outputs[key].dtype == "float32"
        assert_close_to_scale(outputs[key], expected[key], GOLDEN, err_msg=key)


def test_v1_loss_is_the_mean_of_start_and_end_cross_entropy():
    model = loaded(AlbertSquadV1, V1)
    batch = features("train")
    outputs = model(batch)
    model.compile()  # the original's loss
    loss = model.compute_loss(x=batch, y=labels(batch), y_pred=outputs)

    def cross_entropy(logits, positions):
        logits = logits.numpy().astype(np.float64)
        log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        return -log_probs[np.arange(len(positions)), positions].mean()

    start = cross_entropy(outputs["start_logits"], batch["start_positions"])
    end = cross_entropy(outputs["end_logits"], batch["end_positions"])
    assert_close_to_scale(loss, (start + end) / 2, FEW_OPS)
    with pytest.raises(ValueError, match="end_positions"):
        model.compute_loss(y={"start_positions": batch["start_positions"]}, y_pred=outputs)


def test_v2_reproduces_the_original_inference_beam():
    expected = np.load(V2 / "expected.npz")
    inputs = features("eval")
    outputs = loaded(AlbertSquadV2, V2)({k: inputs[k] for k in (*BACKBONE, "p_mask")})
    assert set(outputs) == {
        "start_top_log_probs",
        "start_top_index",
        "end_top_log_probs",
        "end_top_index",
        "cls_logits",
    }
    for key in ("start_top_index", "end_top_index"):
        assert outputs[key].dtype == "int32"
        np.testing.assert_array_equal(outputs[key], expected[key], err_msg=key)
    for key in ("start_top_log_probs", "end_top_log_probs", "cls_logits"):
        assert outputs[key].shape == expected[key].shape and outputs[key].dtype == "float32"
        assert_close_to_scale(outputs[key], expected[key], GOLDEN, err_msg=key)


@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
def test_v2_reproduces_the_original_teacher_forced_outputs(training):
    expected = np.load(V2 / "expected.npz")
    inputs = features("train")
    np.testing.assert_array_equal(inputs["start_positions"], expected["train_start_positions"])
    model = loaded(
        AlbertSquadV2, V2, dropout_prob=0.0
    )  # the fixture's training outputs: no dropout
    outputs = model(inputs, training=training)
    assert set(outputs) == {"start_log_probs", "end_log_probs", "cls_logits"}
    valid = inputs["p_mask"] == 0
    for key in ("start_log_probs", "end_log_probs"):
        actual, golden = np.asarray(outputs[key]), expected[f"train_{key}"]
        assert_close_to_scale(actual[valid], golden[valid], GOLDEN, err_msg=key)
        # The original's mask constant survives the log-softmax exactly.
        np.testing.assert_array_equal(actual[~valid], golden[~valid], err_msg=key)
    assert_close_to_scale(outputs["cls_logits"], expected["train_cls_logits"], GOLDEN)


def test_v2_loss_is_the_originals():
    expected = np.load(V2 / "expected.npz")
    batch = features("train")
    model = loaded(AlbertSquadV2, V2, dropout_prob=0.0)
    model.compile()  # the original's loss
    loss = float(model.compute_loss(x=batch, y=labels(batch), y_pred=model(batch)))
    rows = np.arange(39)
    start = -expected["train_start_log_probs"][rows, batch["start_positions"]].astype(np.float64)
    end = -expected["train_end_log_probs"][rows, batch["end_positions"]].astype(np.float64)
    logits, impossible = expected["train_cls_logits"].astype(np.float64), batch["is_impossible"]
    answer_class = np.maximum(logits, 0) - logits * impossible + np.log1p(np.exp(-np.abs(logits)))
    golden = (start.mean() + end.mean()) / 2 + 0.5 * answer_class.mean()
    assert_close_to_scale(loss, golden, GOLDEN)
    with pytest.raises(ValueError, match="teacher-forced"):
        inference = model({k: batch[k] for k in (*BACKBONE, "p_mask")})
        model.compute_loss(x=batch, y=labels(batch), y_pred=inference)


def test_v2_answer_class_dropout_acts_only_in_training():
    inputs = features("train")
    model = loaded(AlbertSquadV2, V2)
    assert model.head.answer_class.dropout.rate == 0.1  # the original flag's default
    inference = model(inputs)["cls_logits"]
    np.testing.assert_array_equal(model(inputs)["cls_logits"], inference)
    assert not np.allclose(model(inputs, training=True)["cls_logits"], inference)


def micro_v2_inputs(cfg):
    inputs = model_inputs(cfg)
    # [CLS] then a 1-piece "query" [SEP] (masked) and the rest, padding masked too.
    p_mask = 1 - inputs["input_mask"]
    p_mask[:, 1:3] = 1
    return {**inputs, "p_mask": p_mask.astype(np.int32)}


MICRO_LABELS = {
    "start_positions": np.array([3, 0], np.int32),
    "end_positions": np.array([5, 0], np.int32),
    "is_impossible": np.array([0, 1], np.int32),
}


# One fit step: the span heads read the sequence output only, so the pooler gets no gradient.
@pytest.mark.half_precision
@pytest.mark.filterwarnings("ignore:Gradients do not exist:UserWarning")
def test_v1_keeps_the_model_contract():
    cfg = AlbertConfig(**MICRO)
    run_model_contract_test(
        AlbertSquadV1,
        {"config": cfg, "seed": 3},
        model_inputs(cfg),
        expected_tf1_names=original_tf1_names(cfg)
        | {"cls/squad/output_weights", "cls/squad/output_bias"},
        tf1_loader=load_task_checkpoint,
        expected_output_shapes={"start_logits": (2, 8), "end_logits": (2, 8)},
        train_batch=(model_inputs(cfg), MICRO_LABELS),
    )


@pytest.mark.half_precision
@pytest.mark.filterwarnings("ignore:Gradients do not exist:UserWarning")
def test_v2_keeps_the_model_contract():
    cfg = AlbertConfig(**MICRO)
    run_model_contract_test(
        AlbertSquadV2,
        {"config": cfg, "start_n_top": 3, "end_n_top": 2, "dropout_prob": 0.2, "seed": 5},
        micro_v2_inputs(cfg),
        expected_tf1_names=original_tf1_names(cfg) | V2_HEAD,
        tf1_loader=load_task_checkpoint,
        # Teacher forcing: the gold starts are features too.
        train_batch=(
            {**micro_v2_inputs(cfg), "start_positions": MICRO_LABELS["start_positions"]},
            MICRO_LABELS,
        ),
        expected_output_shapes={
            "start_top_log_probs": (2, 3),
            "start_top_index": (2, 3),
            "end_top_log_probs": (2, 6),
            "end_top_index": (2, 6),
            "cls_logits": (2,),
        },
    )


@pytest.mark.parametrize("model_class", [AlbertSquadV1, AlbertSquadV2])
def test_init_from_an_original_pretraining_checkpoint(model_class):
    golden = np.load(SHARED / "expected.npz")
    model = model_class(AlbertConfig.from_json_file(SHARED / "albert_config.json"))
    head_before = [v.numpy() for v in model.head.weights]
    assert not initialize_task_model(model, SHARED)  # no head in a pretraining checkpoint
    for before, after in zip(head_before, model.head.weights):
        np.testing.assert_array_equal(after.numpy(), before)
    pooled = model.backbone({k: golden[k] for k in BACKBONE})["pooled_output"]
    assert_close_to_scale(pooled, golden["pooled_output"], GOLDEN)
    # Fresh head: truncated normal at std 0.02 (cut at 2 sigma), zero biases.
    for variable in model.head.weights:
        values = variable.numpy()
        if "kernel" in variable.path or "weights" in variable.path:
            assert 0 < np.abs(values).max() <= 0.04 and np.abs(values.std() - 0.02) < 0.01
        elif "bias" in variable.path or "beta" in variable.path:
            np.testing.assert_array_equal(values, 0)


@pytest.mark.parametrize(
    "model_class, other, own", [(AlbertSquadV1, V2, V1), (AlbertSquadV2, V1, V2)]
)
def test_another_heads_checkpoint_gives_the_backbone_only(model_class, other, own):
    model = model_class(config())
    assert not initialize_task_model(model, other)  # the other version's head is ignored
    reference = loaded(model_class, own)
    inputs = {k: features("eval")[k][:4] for k in BACKBONE}
    np.testing.assert_array_equal(
        model.backbone(inputs)["sequence_output"], reference.backbone(inputs)["sequence_output"]
    )
    assert initialize_task_model(model, own)
    with pytest.raises(CheckpointMismatchError, match="missing from checkpoint: "):
        load_task_checkpoint(model, other)  # a complete load needs this head


def test_init_from_our_keras_file_loads_the_head_too(tmp_path):
    trained = loaded(AlbertSquadV2, V2)
    trained.save(tmp_path / "squad_v2.keras")
    model = AlbertSquadV2(config())
    assert initialize_task_model(model, tmp_path / "squad_v2.keras")
    inputs = {k: v[:4] for k, v in features("eval").items()}
    for key, value in model(inputs).items():
        np.testing.assert_array_equal(value, trained(inputs)[key], err_msg=key)
    with pytest.raises(ValueError, match='Missing data for input "p_mask"'):
        model({k: inputs[k] for k in BACKBONE})


def test_mismatches_are_listed():
    model = AlbertSquadV2(config())
    with pytest.raises(CheckpointMismatchError) as raised:
        assign_tf1_checkpoint(model, str(V1 / "model.ckpt"))  # strict: every name must match
    message = str(raised.value)
    assert "missing from checkpoint: end_logits/dense_0/kernel (64, 32)" in message
    assert "unexpected in checkpoint: cls/squad/output_weights (2, 32)" in message
    tensors = read_tf1_checkpoint(V2)
    tensors["end_logits/dense_0/kernel"] = tensors["end_logits/dense_0/kernel"][:32]
    with pytest.raises(
        CheckpointMismatchError,
        match=r"shape mismatch: end_logits/dense_0/kernel checkpoint \(32, 32\) vs model \(64, 32\)",
    ):
        assign_task_weights(model, tensors, "edited", require_head=True)


# The span heads read the sequence output only: the pooler gets no gradient, as in the original.
@pytest.mark.filterwarnings("ignore:Gradients do not exist:UserWarning")
def test_v2_fits_the_training_features():
    # One graph-mode training run: the teacher-forced branch is chosen while tracing `fit`.
    keras.utils.set_random_seed(0)
    model = loaded(AlbertSquadV2, V2)
    batch = features("train")
    inputs = {k: batch[k] for k in (*BACKBONE, "p_mask", "start_positions")}
    batches = tf.data.Dataset.from_tensor_slices((inputs, labels(batch))).batch(13)
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    losses = model.fit(batches, epochs=4, shuffle=False, verbose=0).history["loss"]
    assert losses[-1] < losses[0]
