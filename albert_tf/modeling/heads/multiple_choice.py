"""`AlbertMultipleChoice`: the original `run_race.py` model (`race_utils.create_model`).

Each question comes as C (4 for RACE) sequences [B, C, T]; they run through the backbone as
B·C rows, and each row's pooled output gets a score = dropout(pooled) · output_weightsᵀ +
output_bias with `output_weights` [1, H] (truncated normal, std 0.02) and `output_bias` [1];
the C scores of a question are its logits, trained with softmax cross-entropy. The variables keep
the original's top-level names (`TF1_HEAD_RULES`).
"""

from __future__ import annotations

import keras
from keras import ops

from albert_tf.config import AlbertConfig
from albert_tf.modeling.heads.classifier import AlbertClassifierHead
from albert_tf.modeling.heads.losses import LogitsAccuracy, SoftmaxCrossEntropy
from albert_tf.modeling.heads.task import AlbertTask, task_inputs
from albert_tf.modeling.model import AlbertModel, resolve_backbone

HEAD_NAME = "multiple_choice"
RACE_NUM_CHOICES = 4
DEFAULT_DROPOUT = 0.1  # the original's `dropout_prob` flag; the v2 models' RACE recipe uses 0


@keras.saving.register_keras_serializable(package="albert_tf")
class FoldChoices(keras.layers.Layer):
    """{name: int [B, C, T]} -> {name: int [B·C, T]}: the choices of a question as batch rows.

    Example:
        >>> rows = FoldChoices()({"input_ids": ids})  # ids [2, 4, 128] -> rows["input_ids"] [8, 128]
    """

    def call(self, inputs):
        return {
            name: ops.reshape(value, (-1, ops.shape(value)[-1])) for name, value in inputs.items()
        }

    def compute_output_shape(self, input_shape):
        return {name: (None, shape[-1]) for name, shape in input_shape.items()}


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertMultipleChoiceHead(AlbertClassifierHead):
    """One score per row of pooled outputs [B·C, H], regrouped as float32 logits [B, C].

    Args:
        num_choices: C, the choices of a question.
        dropout_rate: dropout on the pooled output in training.
        seed: initializer and dropout seed (None: random).

    Example:
        >>> logits = AlbertMultipleChoiceHead(4, name="multiple_choice")(pooled)  # [B*4, H]
    """

    def __init__(
        self,
        num_choices: int = RACE_NUM_CHOICES,
        dropout_rate: float = DEFAULT_DROPOUT,
        seed: int | None = None,
        **kwargs,
    ):
        kwargs.pop("num_labels", None)  # always 1: one score per choice
        super().__init__(num_labels=1, dropout_rate=dropout_rate, seed=seed, **kwargs)
        self.num_choices = int(num_choices)

    def call(self, pooled_output, training=None):
        scores = super().call(pooled_output, training=training)
        return ops.reshape(scores, (-1, self.num_choices))

    def compute_output_shape(self, pooled_shape):
        return (None, self.num_choices)

    def get_config(self):
        config = super().get_config()
        del config["num_labels"]
        return {**config, "num_choices": self.num_choices}


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertMultipleChoice(AlbertTask):
    """ALBERT backbone + the original RACE multiple-choice head.

    Inputs: int32 [B, C, T] `input_ids`, `input_mask`, `segment_ids` (C = `num_choices`).
    Outputs: float32 `logits` and `probabilities` [B, C]. `fit` takes (features, label ids [B])
    batches, the right choice; the original's loss: mean softmax cross-entropy over the choices.

    Args:
        config: the backbone's `AlbertConfig` (or its dict); None when `backbone` is given.
        num_choices: C (RACE: 4).
        dropout_prob: dropout on the pooled output in training (the original's flag, 0.1).
        seed: seed of the head's initializer and dropout (None: random).
        backbone, dtype, name: as every `AlbertTask` takes them.

    Example:
        >>> model = AlbertMultipleChoice(config, dropout_prob=0.0)
        >>> model({"input_ids": ids, "input_mask": mask, "segment_ids": seg})["logits"]  # [B, 4]
    """

    # The original `run_race.py` keeps the head's variables at the checkpoint's top level.
    TF1_HEAD_RULES = ((rf"^{HEAD_NAME}/(output_weights|output_bias)$", r"\1"),)

    def __init__(
        self,
        config: AlbertConfig | dict | None = None,
        num_choices: int = RACE_NUM_CHOICES,
        dropout_prob: float = DEFAULT_DROPOUT,
        seed: int | None = None,
        *,
        backbone: AlbertModel | None = None,
        dtype=None,
        name: str = "albert_multiple_choice",
        **kwargs,
    ):
        num_choices, dropout_prob = int(num_choices), float(dropout_prob)
        if num_choices < 2:
            raise ValueError(f"num_choices must be >= 2, got {num_choices}")
        if not 0.0 <= dropout_prob < 1.0:
            raise ValueError(f"dropout_prob must be in [0, 1), got {dropout_prob}")
        # === Layers ===
        backbone = resolve_backbone(config, backbone, dtype)
        dtype = backbone.dtype_policy
        fold = FoldChoices(dtype=dtype, name="fold_choices")
        head = AlbertMultipleChoiceHead(
            num_choices, dropout_prob, seed=seed, dtype=dtype, name=HEAD_NAME
        )
        to_probabilities = keras.layers.Softmax(name="probabilities", dtype="float32")

        # === Functional model ===
        inputs = task_inputs(shape=(num_choices, None))
        logits = head(backbone(fold(inputs))["pooled_output"])
        outputs = {"logits": logits, "probabilities": to_probabilities(logits)}
        super().__init__(inputs, outputs, backbone, head, name=name, **kwargs)

        # === Config ===
        self.num_choices, self.dropout_prob, self.seed = num_choices, dropout_prob, seed

    def extra_config(self):
        return {
            "num_choices": self.num_choices,
            "dropout_prob": self.dropout_prob,
            "seed": self.seed,
        }

    def default_loss(self):
        return SoftmaxCrossEntropy()

    def default_metrics(self):
        return [LogitsAccuracy()]
