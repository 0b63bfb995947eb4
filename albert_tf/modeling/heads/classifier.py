"""`AlbertClassifier`: the original `run_classifier.py` model.

Head (as `classifier_utils.create_model`): dropout 0.1 (hard-coded, whatever the config says) on
the pooled output, then logits = pooled · output_weightsᵀ + output_bias with `output_weights`
[num_labels, H] (truncated normal, std 0.02) — the transpose of a Keras Dense kernel, kept so the
variable is the original's. `TF1_HEAD_RULES` names them as the original checkpoint does; the
checkpoints stage reads and writes them (`albert_tf.checkpoints.task_heads`).
"""

from __future__ import annotations

import keras
from keras import ops

from albert_tf.config import AlbertConfig
from albert_tf.modeling.heads.losses import LogitsAccuracy, SoftmaxCrossEntropy, SquaredError
from albert_tf.modeling.heads.task import AlbertTask, task_inputs
from albert_tf.modeling.model import AlbertModel, resolve_backbone

HEAD_NAME = "classifier"
HEAD_DROPOUT = 0.1  # hard-coded in the original, independent of the config's dropout
HEAD_INIT_STDDEV = 0.02  # hard-coded in the original, not `initializer_range`


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertClassifierHead(keras.layers.Layer):
    """Dropout, then `pooled · output_weightsᵀ + output_bias`; float32 logits [B, num_labels].

    Args:
        num_labels: the classes (1: a regression score).
        dropout_rate: the original's fixed 0.1 before the dense layer, in training only.
        seed: seeds the weights' initializer and the dropout.

    Example:
        head = AlbertClassifierHead(3, name="classifier")
        logits = head(pooled_output)  # [B, 3]
    """

    def __init__(
        self, num_labels: int, dropout_rate: float = HEAD_DROPOUT, seed: int | None = None, **kwargs
    ):
        super().__init__(**kwargs)
        self.num_labels = int(num_labels)
        self.dropout_rate = float(dropout_rate)
        self.seed = seed
        self.dropout = keras.layers.Dropout(self.dropout_rate, seed=seed, dtype=self.dtype_policy)

    def build(self, pooled_shape):
        self.output_weights = self.add_weight(
            name="output_weights",
            shape=(self.num_labels, pooled_shape[-1]),
            initializer=keras.initializers.TruncatedNormal(stddev=HEAD_INIT_STDDEV, seed=self.seed),
        )
        self.output_bias = self.add_weight(
            name="output_bias", shape=(self.num_labels,), initializer="zeros"
        )

    def call(self, pooled_output, training=None):
        x = self.dropout(pooled_output, training=training)
        logits = ops.matmul(x, ops.transpose(ops.cast(self.output_weights, x.dtype)))
        return ops.cast(logits + ops.cast(self.output_bias, logits.dtype), "float32")

    def compute_output_shape(self, pooled_shape):
        return (pooled_shape[0], self.num_labels)

    def get_config(self):
        return {
            **super().get_config(),
            "num_labels": self.num_labels,
            "dropout_rate": self.dropout_rate,
            "seed": self.seed,
        }


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertClassifier(AlbertTask):
    """ALBERT backbone + the original classification (or STS-B regression) head.

    Inputs: int32 [B, T] `input_ids`, `input_mask`, `segment_ids`. Outputs: `logits` and
    `probabilities`, both float32 [B, num_labels]; for `regression=True` (num_labels 1) the
    "probabilities" are the raw scores, as the original's exported `probabilities` were for STS-B.
    `fit` takes (features, label ids) batches (float scores for regression); the original's loss:
    mean softmax cross-entropy (`SoftmaxCrossEntropy`), or mean squared error (`SquaredError`).

    Args:
        config: the backbone's `AlbertConfig` (or its dict); None when `backbone` is given.
        num_labels: the classes (1 for regression).
        regression: a score instead of classes (STS-B).
        seed: seed of the head's initializer and dropout (None: random).
        backbone, dtype, name: as every `AlbertTask` takes them.

    Example:
        >>> model = AlbertClassifier(config, num_labels=3, dtype="mixed_bfloat16")
        >>> model.compile(optimizer=create_optimizer(3e-5, 1000, 100))
        >>> model.fit(dataset_of_features_and_label_ids)
    """

    # Original TF1 names of the head's variables (the backbone's come from the shared table):
    # `run_classifier.py` keeps them at the checkpoint's top level.
    TF1_HEAD_RULES = ((rf"^{HEAD_NAME}/(output_weights|output_bias)$", r"\1"),)

    def __init__(
        self,
        config: AlbertConfig | dict | None = None,
        num_labels: int = 2,
        regression: bool = False,
        seed: int | None = None,
        *,
        backbone: AlbertModel | None = None,
        dtype=None,
        name: str = "albert_classifier",
        **kwargs,
    ):
        num_labels = int(num_labels)  # a numpy integer would make `get_config` non-JSON
        if regression and num_labels != 1:
            raise ValueError(f"regression takes num_labels=1, got {num_labels}")
        if num_labels < 1:
            raise ValueError(f"num_labels must be >= 1, got {num_labels}")
        # === Layers ===
        backbone = resolve_backbone(config, backbone, dtype)
        head = AlbertClassifierHead(
            num_labels, seed=seed, dtype=backbone.dtype_policy, name=HEAD_NAME
        )
        to_probabilities = (
            keras.layers.Identity(dtype="float32", name="probabilities")
            if regression
            else keras.layers.Softmax(name="probabilities", dtype="float32")
        )

        # === Functional model ===
        inputs = task_inputs()
        logits = head(backbone(inputs)["pooled_output"])
        outputs = {"logits": logits, "probabilities": to_probabilities(logits)}
        super().__init__(inputs, outputs, backbone, head, name=name, **kwargs)

        # === Config ===
        self.num_labels, self.regression, self.seed = num_labels, regression, seed

    def extra_config(self):
        return {"num_labels": self.num_labels, "regression": self.regression, "seed": self.seed}

    def default_loss(self):
        return SquaredError() if self.regression else SoftmaxCrossEntropy()

    def default_metrics(self):
        return [] if self.regression else [LogitsAccuracy()]
