"""`AlbertSquadV1`: the original `run_squad_v1.py` model (`squad_utils.create_v1_model`).

Head: logits = sequence_output · output_weightsᵀ + output_bias with `output_weights` [2, H]
(truncated normal, std 0.02, hard-coded as the original) and `output_bias` [2]; row 0 gives the
start logits, row 1 the end logits. No dropout and no masking: the original hands every position,
padding included, to post-processing. Loss = mean of the start and end softmax cross-entropies
(`SquadV1Loss`).
`TF1_HEAD_RULES` names the variables `cls/squad/...`, as an original checkpoint does.
"""

from __future__ import annotations

import keras
from keras import ops

from albert_tf.config import AlbertConfig
from albert_tf.modeling.heads.losses import SquadV1Loss
from albert_tf.modeling.heads.task import AlbertTask, task_inputs
from albert_tf.modeling.model import AlbertModel, resolve_backbone

HEAD_NAME = "squad"
HEAD_INIT_STDDEV = 0.02  # hard-coded in the original, not `initializer_range`


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
class AlbertSquadV1(AlbertTask):
    """ALBERT backbone + the original SQuAD v1.1 span head.

    Inputs: int32 [B, T] `input_ids`, `input_mask`, `segment_ids`. Outputs: `start_logits` and
    `end_logits`, float32 [B, T], unmasked. `fit` takes (features, labels) batches, the labels a
    dict with `start_positions` and `end_positions` (int [B]); the original's loss
    (CE(start) + CE(end)) / 2 (`SquadV1Loss`).

    Args:
        config: the backbone's `AlbertConfig` (or its dict); None when `backbone` is given.
        seed: seed of the head's initializer (None: random).
        backbone, dtype, name: as every `AlbertTask` takes them.

    Example:
        >>> model = AlbertSquadV1(AlbertConfig.from_json_file("albert_config.json"))
        >>> outputs = model({"input_ids": ids, "input_mask": mask, "segment_ids": segments})
        >>> outputs["start_logits"].shape  # (B, T)
    """

    # Original TF1 names of the head's variables (the backbone's come from the shared table).
    TF1_HEAD_RULES = ((rf"^{HEAD_NAME}/(output_weights|output_bias)$", r"cls/squad/\1"),)

    def __init__(
        self,
        config: AlbertConfig | dict | None = None,
        seed: int | None = None,
        *,
        backbone: AlbertModel | None = None,
        dtype=None,
        name: str = "albert_squad_v1",
        **kwargs,
    ):
        # === Layers ===
        backbone = resolve_backbone(config, backbone, dtype)
        head = AlbertSquadV1Head(seed=seed, dtype=backbone.dtype_policy, name=HEAD_NAME)

        # === Functional model ===
        inputs = task_inputs()
        start_logits, end_logits = head(backbone(inputs)["sequence_output"])
        outputs = {"start_logits": start_logits, "end_logits": end_logits}
        super().__init__(inputs, outputs, backbone, head, name=name, **kwargs)

        # === Config ===
        self.seed = seed

    def extra_config(self):
        return {"seed": self.seed}

    def default_loss(self):
        return SquadV1Loss()
