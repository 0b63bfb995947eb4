"""`AlbertClassifier`: the original `run_classifier.py` model.

Head (as `classifier_utils.create_model`): dropout 0.1 (hard-coded, whatever the config says) on
the pooled output, then logits = pooled · output_weightsᵀ + output_bias with `output_weights`
[num_labels, H] (truncated normal, std 0.02) — the transpose of a Keras Dense kernel, kept so the
variable is the original's. `TF1_HEAD_RULES` names them as the original checkpoint does; the
checkpoints stage reads and writes them (`albert_tf.checkpoints.task_heads`).
"""

from __future__ import annotations

from collections.abc import Mapping

import keras
from keras import ops
from keras.src.losses.loss import scale_loss_for_distribution

from albert_tf.config import AlbertConfig
from albert_tf.modeling.model import BACKBONE_INPUTS, AlbertModel, ConfiguredModel

HEAD_NAME = "classifier"
HEAD_DROPOUT = 0.1  # hard-coded in the original, independent of the config's dropout
HEAD_INIT_STDDEV = 0.02  # hard-coded in the original, not `initializer_range`


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertClassifierHead(keras.layers.Layer):
    """Dropout, then `pooled · output_weightsᵀ + output_bias`; float32 logits [B, num_labels]."""

    def __init__(
        self, num_labels: int, dropout_rate: float = HEAD_DROPOUT, seed: int | None = None, **kwargs
    ):
        super().__init__(**kwargs)
        self.num_labels = int(num_labels)
        self.dropout_rate = float(dropout_rate)
        self.seed = seed
        self.dropout = keras.layers.Dropout(self.dropout_rate, seed=seed)

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
class AlbertClassifier(ConfiguredModel):
    """ALBERT backbone + the original classification (or STS-B regression) head.

    Inputs: int32 [B, T] `input_ids`, `input_mask`, `segment_ids`. Outputs: `logits` and
    `probabilities`, both float32 [B, num_labels]; for `regression=True` (num_labels 1) the
    "probabilities" are the raw scores, as the original's exported `probabilities` were for STS-B.
    `fit` takes feature dicts with `label_ids` (int; float for regression), or (x, y):
    loss = mean softmax cross-entropy, or mean squared error for regression.
    """

    # Original TF1 names of the head's variables (the backbone's come from the shared table):
    # `run_classifier.py` keeps them at the checkpoint's top level.
    TF1_HEAD_RULES = ((rf"^{HEAD_NAME}/(output_weights|output_bias)$", r"\1"),)

    def __init__(
        self,
        config: AlbertConfig | dict,
        num_labels: int = 2,
        regression: bool = False,
        seed: int | None = None,
        name: str = "albert_classifier",
        **kwargs,
    ):
        config = config if isinstance(config, AlbertConfig) else AlbertConfig.from_dict(config)
        num_labels = int(num_labels)  # a numpy integer would make `get_config` non-JSON
        if regression and num_labels != 1:
            raise ValueError(f"regression takes num_labels=1, got {num_labels}")
        if num_labels < 1:
            raise ValueError(f"num_labels must be >= 1, got {num_labels}")
        # === Layers ===
        backbone = AlbertModel(config)
        head = AlbertClassifierHead(num_labels, seed=seed, name=HEAD_NAME)
        to_probabilities = (
            keras.layers.Identity(name="probabilities")
            if regression
            else keras.layers.Softmax(name="probabilities", dtype="float32")
        )

        # === Functional model ===
        inputs = {
            name: keras.Input(shape=(None,), dtype="int32", name=name) for name in BACKBONE_INPUTS
        }
        logits = head(backbone(inputs)["pooled_output"])
        super().__init__(
            inputs=inputs,
            outputs={"logits": logits, "probabilities": to_probabilities(logits)},
            name=name,
            **kwargs,
        )

        # === Config ===
        self.config = config
        self.num_labels = num_labels
        self.regression = regression
        self.seed = seed
        self.backbone = backbone
        self.head = head
        self.accuracy_tracker = None if regression else keras.metrics.Mean(name="accuracy")

    def extra_config(self):
        return {"num_labels": self.num_labels, "regression": self.regression, "seed": self.seed}

    def call(self, inputs, training=None):
        # Labels and other features of the input dict pass through `fit` untouched.
        return super().call({k: inputs[k] for k in BACKBONE_INPUTS}, training=training)

    def _labels(self, x, y):
        if y is not None:
            return y
        if not isinstance(x, Mapping) or "label_ids" not in x:
            raise ValueError("AlbertClassifier.fit needs labels: pass y, or `label_ids` in x")
        return x["label_ids"]

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """Mean softmax cross-entropy (MSE for regression), as the original, plus layer losses."""
        labels = self._labels(x, y)
        logits = y_pred["logits"]
        if self.regression:
            scores = ops.reshape(logits, (-1,))
            loss = ops.mean(ops.square(scores - ops.reshape(ops.cast(labels, "float32"), (-1,))))
        else:
            loss = ops.mean(
                keras.losses.sparse_categorical_crossentropy(
                    ops.reshape(ops.cast(labels, "int32"), (-1,)), logits, from_logits=True
                )
            )
        if self.losses:
            loss = loss + ops.sum(self.losses)
        return scale_loss_for_distribution(loss)

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        if self.accuracy_tracker is not None:
            labels = ops.reshape(ops.cast(self._labels(x, y), "int64"), (-1,))
            correct = ops.equal(ops.argmax(y_pred["logits"], axis=-1), labels)
            self.accuracy_tracker.update_state(ops.cast(correct, "float32"))
        return self.step_logs()

    @property
    def metrics(self):
        extra = [] if self.accuracy_tracker is None else [self.accuracy_tracker]
        return [*super().metrics, *extra]
