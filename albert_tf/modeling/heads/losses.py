"""The original task losses and metrics as Keras `Loss` / `Metric` classes.

Each takes the batch's labels (`y`: a tensor, or a dict of label tensors named as the original's
features) and the model's whole output dict, and returns one value per example: Keras averages
them over the batch ("sum_over_batch_size") and scales the mean for tf.distribute, so the mean
is the original's `tf.reduce_mean` of the same per-example losses.
"""

from __future__ import annotations

from collections.abc import Mapping

import keras
from keras import ops

# The original weighs the SQuAD v2 answerability loss by 0.5 "so that the scale is comparable".
ANSWER_CLASS_LOSS_WEIGHT = 0.5


def labels_named(y_true, names: tuple[str, ...], owner: str) -> dict:
    """The label tensors `names` of a dict `y_true`; ValueError naming those missing."""
    missing = [n for n in names if not isinstance(y_true, Mapping) or n not in y_true]
    if missing:
        raise ValueError(f"{owner} needs the labels {missing}: pass them as a dict y")
    return {n: y_true[n] for n in names}


def position_nll(log_probs, positions):
    """-log_probs[b, positions[b]] per example [B]: the original's one-hot cross-entropy.

    `log_probs` float [B, T] (already normalised over T), `positions` int [B] or [B, 1].
    """
    positions = ops.reshape(ops.cast(positions, "int32"), (-1, 1))
    picked = ops.take_along_axis(ops.cast(log_probs, "float32"), positions, axis=1)
    return -ops.reshape(picked, (-1,))


def _class_ids(y_true):
    return ops.reshape(ops.cast(y_true, "int32"), (-1,))


@keras.saving.register_keras_serializable(package="albert_tf")
class SoftmaxCrossEntropy(keras.losses.Loss):
    """Softmax cross-entropy of the `logits` output [B, C] against class ids [B]: the original
    classifier's (`run_classifier.py`) and RACE's `per_example_loss`.

    Example:
        >>> model.compile(optimizer, loss=SoftmaxCrossEntropy())
    """

    def __init__(self, name="softmax_cross_entropy", **kwargs):
        super().__init__(name=name, **kwargs)

    def call(self, y_true, y_pred):
        return keras.losses.sparse_categorical_crossentropy(
            _class_ids(y_true), y_pred["logits"], from_logits=True
        )


@keras.saving.register_keras_serializable(package="albert_tf")
class SquaredError(keras.losses.Loss):
    """(score - label)² of the one-column `logits` output [B, 1]: the original STS-B loss.

    Example:
        >>> model.compile(optimizer, loss=SquaredError())
    """

    def __init__(self, name="squared_error", **kwargs):
        super().__init__(name=name, **kwargs)

    def call(self, y_true, y_pred):
        scores = ops.reshape(y_pred["logits"], (-1,))
        return ops.square(scores - ops.reshape(ops.cast(y_true, "float32"), (-1,)))


@keras.saving.register_keras_serializable(package="albert_tf")
class SquadV1Loss(keras.losses.Loss):
    """(CE(start) + CE(end)) / 2 over all positions of `start_logits` / `end_logits` [B, T],
    against the labels `start_positions` and `end_positions` [B]: the original v1.1 loss.

    Example:
        >>> model.compile(optimizer, loss=SquadV1Loss())
    """

    LABELS = ("start_positions", "end_positions")

    def __init__(self, name="squad_v1_loss", **kwargs):
        super().__init__(name=name, **kwargs)

    def call(self, y_true, y_pred):
        labels = labels_named(y_true, self.LABELS, "the SQuAD v1.1 loss")
        start = position_nll(ops.log_softmax(y_pred["start_logits"]), labels["start_positions"])
        end = position_nll(ops.log_softmax(y_pred["end_logits"]), labels["end_positions"])
        return (start + end) / 2.0


@keras.saving.register_keras_serializable(package="albert_tf")
class SquadV2Loss(keras.losses.Loss):
    """(CE(start) + CE(end)) / 2 + 0.5 · sigmoid-CE(cls_logits, is_impossible): the original v2.0
    loss, on the teacher-forced outputs (`start_log_probs`, `end_log_probs` [B, T], `cls_logits`
    [B]) and the labels `start_positions`, `end_positions`, `is_impossible` [B].

    Example:
        >>> model.compile(optimizer, loss=SquadV2Loss())
    """

    LABELS = ("start_positions", "end_positions", "is_impossible")

    def __init__(self, name="squad_v2_loss", **kwargs):
        super().__init__(name=name, **kwargs)

    def call(self, y_true, y_pred):
        labels = labels_named(y_true, self.LABELS, "the SQuAD v2.0 loss")
        if "end_log_probs" not in y_pred:
            raise ValueError(
                "the SQuAD v2.0 loss needs the teacher-forced outputs: put `start_positions` "
                "in the input features"
            )
        start = position_nll(y_pred["start_log_probs"], labels["start_positions"])
        end = position_nll(y_pred["end_log_probs"], labels["end_positions"])
        impossible = ops.reshape(ops.cast(labels["is_impossible"], "float32"), (-1,))
        answer_class = ops.binary_crossentropy(impossible, y_pred["cls_logits"], from_logits=True)
        return (start + end) / 2.0 + ANSWER_CLASS_LOSS_WEIGHT * answer_class


@keras.saving.register_keras_serializable(package="albert_tf")
class LogitsAccuracy(keras.metrics.Mean):
    """The share of examples whose largest `logits` entry is their class id: the original's
    `eval_accuracy` (classifier, RACE).

    Example:
        >>> model.compile(optimizer, metrics=[LogitsAccuracy()])  # logged as "accuracy"
    """

    def __init__(self, name="accuracy", **kwargs):
        super().__init__(name=name, **kwargs)

    def update_state(self, y_true, y_pred, sample_weight=None):
        labels = ops.cast(_class_ids(y_true), "int64")
        correct = ops.equal(ops.argmax(y_pred["logits"], axis=-1), labels)
        return super().update_state(ops.cast(correct, "float32"), sample_weight=sample_weight)
