"""`AlbertSquadV1`: the original `run_squad_v1.py` model (`squad_utils.create_v1_model`).

Head: logits = sequence_output · output_weightsᵀ + output_bias with `output_weights` [2, H]
(truncated normal, std 0.02, hard-coded as the original) and `output_bias` [2]; row 0 gives the
start logits, row 1 the end logits. No dropout and no masking: the original hands every position,
padding included, to post-processing. Loss = mean of the start and end softmax cross-entropies.
`TF1_HEAD_RULES` names the variables `cls/squad/...`, as an original checkpoint does.
"""

from __future__ import annotations

from collections.abc import Mapping

import keras
from keras import ops
from keras.src.losses.loss import scale_loss_for_distribution

from albert_tf.config import AlbertConfig
from albert_tf.modeling.model import BACKBONE_INPUTS, AlbertModel, ConfiguredModel

HEAD_NAME = "squad"
HEAD_INIT_STDDEV = 0.02  # hard-coded in the original, not `initializer_range`


def position_loss(log_probs, positions):
    """Mean over the batch of -log_probs[b, positions[b]]: the original's one-hot cross-entropy.

    `log_probs` float [B, T] (already normalised over T), `positions` int [B] or [B, 1].
    """
    positions = ops.reshape(ops.cast(positions, "int32"), (-1, 1))
    picked = ops.take_along_axis(ops.cast(log_probs, "float32"), positions, axis=1)
    return -ops.mean(picked)


def labels_from(x, y, names: tuple[str, ...], model_name: str) -> dict:
    """The label features `names` from `y` (a dict) or else from the feature dict `x`."""
    source = y if isinstance(y, Mapping) else x
    missing = [n for n in names if not isinstance(source, Mapping) or n not in source]
    if missing:
        raise ValueError(f"{model_name} needs the labels {missing}: pass them in x or as a dict y")
    return {n: source[n] for n in names}


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertSquadV1Head(keras.layers.Layer):
    """`cls/squad`: float32 start and end logits [B, T] from the sequence output [B, T, H].

    Args:
        seed: seed of the truncated-normal initializer of `output_weights` (None: random).

    Example:
        >>> head = AlbertSquadV1Head(name="squad")
        >>> start_logits, end_logits = head(keras.ops.ones((2, 8, 16)))
    """

    def __init__(self, seed: int | None = None, **kwargs):
        super().__init__(**kwargs)
        self.seed = seed

    def build(self, sequence_shape):
        self.output_weights = self.add_weight(
            name="output_weights",
            shape=(2, sequence_shape[-1]),
            initializer=keras.initializers.TruncatedNormal(stddev=HEAD_INIT_STDDEV, seed=self.seed),
        )
        self.output_bias = self.add_weight(name="output_bias", shape=(2,), initializer="zeros")

    def call(self, sequence_output):
        weights = ops.cast(self.output_weights, sequence_output.dtype)
        logits = ops.matmul(sequence_output, ops.transpose(weights))
        logits = ops.cast(logits + ops.cast(self.output_bias, logits.dtype), "float32")
        return logits[..., 0], logits[..., 1]

    def compute_output_shape(self, sequence_shape):
        return tuple(sequence_shape[:-1]), tuple(sequence_shape[:-1])

    def get_config(self):
        return {**super().get_config(), "seed": self.seed}


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertSquadV1(ConfiguredModel):
    """ALBERT backbone + the original SQuAD v1.1 span head.

    Inputs: int32 [B, T] `input_ids`, `input_mask`, `segment_ids`. Outputs: `start_logits` and
    `end_logits`, float32 [B, T], unmasked. `fit` takes feature dicts holding `start_positions`
    and `end_positions` (int [B]), or those two as a dict y; loss = (CE(start) + CE(end)) / 2.

    Args:
        config: the backbone's `AlbertConfig` (or its dict).
        seed: seed of the head's initializer (None: random).
        name: the model's name.

    Example:
        >>> model = AlbertSquadV1(AlbertConfig.from_json_file("albert_config.json"))
        >>> outputs = model({"input_ids": ids, "input_mask": mask, "segment_ids": segments})
        >>> outputs["start_logits"].shape  # (B, T)
    """

    # Original TF1 names of the head's variables (the backbone's come from the shared table).
    TF1_HEAD_RULES = ((rf"^{HEAD_NAME}/(output_weights|output_bias)$", r"cls/squad/\1"),)
    LABELS = ("start_positions", "end_positions")

    def __init__(
        self,
        config: AlbertConfig | dict,
        seed: int | None = None,
        name: str = "albert_squad_v1",
        **kwargs,
    ):
        config = config if isinstance(config, AlbertConfig) else AlbertConfig.from_dict(config)
        # === Layers ===
        backbone = AlbertModel(config)
        head = AlbertSquadV1Head(seed=seed, name=HEAD_NAME)

        # === Functional model ===
        inputs = {
            name: keras.Input(shape=(None,), dtype="int32", name=name) for name in BACKBONE_INPUTS
        }
        start_logits, end_logits = head(backbone(inputs)["sequence_output"])
        super().__init__(
            inputs=inputs,
            outputs={"start_logits": start_logits, "end_logits": end_logits},
            name=name,
            **kwargs,
        )

        # === Config ===
        self.config = config
        self.seed = seed
        self.backbone = backbone
        self.head = head

    def extra_config(self):
        return {"seed": self.seed}

    def call(self, inputs, training=None):
        # Labels and other features of the input dict pass through `fit` untouched.
        return super().call({k: inputs[k] for k in BACKBONE_INPUTS}, training=training)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """(CE(start) + CE(end)) / 2 over all positions, as the original, plus layer losses."""
        labels = labels_from(x, y, self.LABELS, type(self).__name__)
        start = position_loss(ops.log_softmax(y_pred["start_logits"]), labels["start_positions"])
        end = position_loss(ops.log_softmax(y_pred["end_logits"]), labels["end_positions"])
        loss = (start + end) / 2.0
        if self.losses:
            loss = loss + ops.sum(self.losses)
        return scale_loss_for_distribution(loss)

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        return self.step_logs()
