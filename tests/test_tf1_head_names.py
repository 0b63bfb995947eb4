"""A task head names its own TF1 variables; one weight check reports every problem."""

import numpy as np
import pytest

from albert_tf import AlbertConfig
from albert_tf.checkpoints import (
    TF1_NAME_RULES,
    CheckpointMismatchError,
    assign_tf1_checkpoint,
    check_weights,
    head_tf1_names,
    tf1_variable_map,
)
from albert_tf.modeling.heads.classifier import AlbertClassifier
from tests.contracts import check_tf1_round_trip, model_inputs, original_tf1_names
from tests.model_configs import MICRO

TINY = AlbertConfig(**MICRO)


class _RenamedHeadClassifier(AlbertClassifier):
    # A new head only declares its rules; the shared table and the checkpoints stage are untouched.
    TF1_HEAD_RULES = ((r"^classifier/(output_weights|output_bias)$", r"cls/new_task/\1"),)


def _built(model_class):
    model = model_class(TINY, num_labels=3)
    ids = np.ones((1, 4), np.int32)
    model({"input_ids": ids, "input_mask": ids, "segment_ids": 0 * ids})
    return model


def test_shared_table_names_no_task_head():
    assert not any("classifier" in pattern for pattern, _ in TF1_NAME_RULES)


def test_classifier_head_names_come_from_its_class():
    model = _built(AlbertClassifier)
    assert head_tf1_names(model) == {"output_weights", "output_bias"}
    assert {"output_weights", "output_bias"} <= set(tf1_variable_map(model))


def test_a_new_head_round_trips_under_its_own_names(tmp_path):
    model = _built(_RenamedHeadClassifier)
    head = {"cls/new_task/output_weights", "cls/new_task/output_bias"}
    assert head_tf1_names(model) == head
    # Exactly the backbone's names and the head's new ones: no `output_weights` left.
    expected = original_tf1_names(TINY) | head
    inputs = model_inputs(TINY)
    clone = _built(_RenamedHeadClassifier)
    check_tf1_round_trip(
        model, clone, inputs, tmp_path / "model.ckpt", expected, assign_tf1_checkpoint
    )


def test_check_weights_lists_missing_unexpected_and_mismatched():
    expected = {"a": (2, 3), "b": (4,), "c": (1,)}
    found = {"a": (2, 3), "b": (5,), "d": (7,)}
    with pytest.raises(CheckpointMismatchError) as raised:
        check_weights(expected, found, "ckpt", "model")
    message = str(raised.value)
    assert message.startswith("ckpt does not match the model (3 problems):")
    assert "missing from checkpoint: c (1,)" in message
    assert "unexpected in checkpoint: d (7,)" in message
    assert "shape mismatch: b checkpoint (5,) vs model (4,)" in message
    with pytest.raises(CheckpointMismatchError, match=r"\(2 problems\)"):
        check_weights(expected, found, "ckpt", "model", allow_unexpected=True)
    check_weights({"a": (2, 3)}, {"a": (2, 3), "d": (7,)}, "ckpt", "model", allow_unexpected=True)
