"""`AlbertSquadV2`: the original `run_squad_v2.py` model (`squad_utils.create_v2_model`).

XLNet-style head on the sequence output: masked start log-probabilities; end log-probabilities
conditioned on a start (the gold one when the inputs carry `start_positions`, the top
`start_n_top` ones otherwise, keeping the top `end_n_top` ends of each); and `cls_logits`, the
logit that the window holds no answer. Invalid positions (`p_mask` 1: query, [SEP], padding) are
masked with -1e30 in float32. `TF1_HEAD_RULES` names the variables as the original checkpoint does
(`start_logits/dense`, `end_logits/{dense_0,LayerNorm,dense_1}`, `answer_class/{dense_0,dense_1}`).
"""

from __future__ import annotations

import keras
from keras import ops

from albert_tf.config import AlbertConfig
from albert_tf.modeling.heads.losses import SquadV2Loss
from albert_tf.modeling.heads.squad_v2_layers import (
    SquadAnswerClass,
    SquadEndLogits,
    SquadStartLogits,
    mask_logits,
)
from albert_tf.modeling.heads.task import AlbertTask, task_inputs
from albert_tf.modeling.model import BACKBONE_INPUTS, AlbertModel, resolve_backbone

HEAD_NAME = "squad_v2"
SQUAD_V2_INPUTS = (*BACKBONE_INPUTS, "p_mask")
# The original's flag defaults.
DEFAULT_N_TOP = 5
DEFAULT_DROPOUT = 0.1


def _gather_positions(sequence_output, positions):
    """sequence_output [B, T, H] at int positions [B, K] -> [B, K, H]."""
    index = ops.expand_dims(ops.cast(positions, "int32"), -1)
    return ops.take_along_axis(sequence_output, index, axis=1)


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertSquadV2Head(keras.layers.Layer):
    """The SQuAD v2 head: `start_logits`, `end_logits` and `answer_class` on the sequence output.

    Called on (sequence_output [B, T, H], p_mask int [B, T]) it runs the original's inference
    beam and returns float32 `start_top_log_probs` [B, k], `end_top_log_probs` [B, k·k'],
    `cls_logits` [B] and int32 `start_top_index`, `end_top_index` (k = start_n_top,
    k' = end_n_top; end entries are grouped by start). With `start_positions` int [B] (teacher
    forcing, as the original's training graph) it returns float32 `start_log_probs`,
    `end_log_probs` [B, T] and `cls_logits` [B].

    Args:
        config: the backbone's `AlbertConfig` (hidden size, initializer range).
        start_n_top: starts kept by the inference beam.
        end_n_top: ends kept per start.
        dropout_rate: dropout inside `answer_class` in training.
        seed: initializer and dropout seed (None: random).

    Example:
        >>> head = AlbertSquadV2Head(config, name="squad_v2")
        >>> beam = head(sequence_output, p_mask)
        >>> train = head(sequence_output, p_mask, start_positions=gold_starts, training=True)
    """

    def __init__(
        self,
        config: AlbertConfig | dict,
        start_n_top: int = DEFAULT_N_TOP,
        end_n_top: int = DEFAULT_N_TOP,
        dropout_rate: float = DEFAULT_DROPOUT,
        seed: int | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        config = config if isinstance(config, AlbertConfig) else AlbertConfig.from_dict(config)
        self.config = config
        self.start_n_top = int(start_n_top)
        self.end_n_top = int(end_n_top)
        self.dropout_rate = float(dropout_rate)
        self.seed = seed
        dtype = self.dtype_policy
        self.start_logits = SquadStartLogits(config, seed=seed, dtype=dtype, name="start_logits")
        self.end_logits = SquadEndLogits(config, seed=seed, dtype=dtype, name="end_logits")
        self.answer_class = SquadAnswerClass(
            config, self.dropout_rate, seed=seed, dtype=dtype, name="answer_class"
        )

    def build(self, sequence_output_shape, p_mask_shape=None, start_positions_shape=None):
        hidden = self.config.hidden_size
        self.start_logits.build((None, None, hidden))
        self.end_logits.build((None, None, hidden), (None, None, hidden))
        self.answer_class.build((None, None, hidden), (None, None))

    def call(self, sequence_output, p_mask, start_positions=None, training=None):
        start_logits = mask_logits(self.start_logits(sequence_output), p_mask)
        start_log_probs = ops.log_softmax(start_logits, axis=-1)
        cls_logits = self.answer_class(
            sequence_output, ops.softmax(start_logits, axis=-1), training=training
        )
        if start_positions is not None:
            starts = ops.reshape(start_positions, (-1, 1))
            end_logits = self.end_logits(
                sequence_output, _gather_positions(sequence_output, starts), training=training
            )
            end_log_probs = ops.log_softmax(mask_logits(end_logits[:, 0], p_mask), axis=-1)
            return {
                "start_log_probs": start_log_probs,
                "end_log_probs": end_log_probs,
                "cls_logits": cls_logits,
            }
        start_top_log_probs, start_top_index = ops.top_k(start_log_probs, self.start_n_top)
        end_logits = self.end_logits(
            sequence_output, _gather_positions(sequence_output, start_top_index), training=training
        )  # [B, k, T]
        end_logits = mask_logits(end_logits, ops.expand_dims(p_mask, 1))
        end_top_log_probs, end_top_index = ops.top_k(
            ops.log_softmax(end_logits, axis=-1), self.end_n_top
        )
        beam = self.start_n_top * self.end_n_top
        return {
            "start_top_log_probs": start_top_log_probs,
            "start_top_index": ops.cast(start_top_index, "int32"),
            "end_top_log_probs": ops.reshape(end_top_log_probs, (-1, beam)),
            "end_top_index": ops.reshape(ops.cast(end_top_index, "int32"), (-1, beam)),
            "cls_logits": cls_logits,
        }

    def get_config(self):
        return {
            **super().get_config(),
            "config": self.config.to_dict(),
            "start_n_top": self.start_n_top,
            "end_n_top": self.end_n_top,
            "dropout_rate": self.dropout_rate,
            "seed": self.seed,
        }


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertSquadV2(AlbertTask):
    """ALBERT backbone + the original SQuAD v2.0 head (start, end beam, answerability).

    Inputs: int32 [B, T] `input_ids`, `input_mask`, `segment_ids` and `p_mask` (1 where no answer
    may start or end). Without `start_positions` among them the outputs are the inference beam's
    (`start_top_log_probs`, `start_top_index`, `end_top_log_probs`, `end_top_index`,
    `cls_logits`); with `start_positions` (int [B]) the end head is fed the gold start and the
    outputs are `start_log_probs`, `end_log_probs` [B, T] and `cls_logits`, whether training or
    not (so `evaluate` reports the training loss). `fit` takes (features, labels) batches whose
    features hold `start_positions` (teacher forcing, as the original's training graph) and whose
    labels are a dict of `start_positions`, `end_positions` and `is_impossible`; the original's
    loss (CE(start) + CE(end)) / 2 + 0.5 · sigmoid-CE(cls_logits, is_impossible) (`SquadV2Loss`).

    Args:
        config: the backbone's `AlbertConfig` (or its dict); None when `backbone` is given.
        start_n_top: starts kept by the inference beam (the original's default 5).
        end_n_top: ends kept per start (default 5).
        dropout_prob: dropout inside `answer_class` in training (default 0.1).
        seed: seed of the head's initializers and dropout (None: random).
        backbone, dtype, name: as every `AlbertTask` takes them.

    Example:
        >>> model = AlbertSquadV2(AlbertConfig.from_json_file("albert_config.json"))
        >>> beam = model({"input_ids": ids, "input_mask": mask, "segment_ids": seg, "p_mask": p})
        >>> beam["end_top_index"].shape  # (B, 25)
    """

    TF1_HEAD_RULES = ((rf"^{HEAD_NAME}/((start_logits|end_logits|answer_class)/.+)$", r"\1"),)
    INPUTS = SQUAD_V2_INPUTS

    def __init__(
        self,
        config: AlbertConfig | dict | None = None,
        start_n_top: int = DEFAULT_N_TOP,
        end_n_top: int = DEFAULT_N_TOP,
        dropout_prob: float = DEFAULT_DROPOUT,
        seed: int | None = None,
        *,
        backbone: AlbertModel | None = None,
        dtype=None,
        name: str = "albert_squad_v2",
        **kwargs,
    ):
        start_n_top, end_n_top, dropout_prob = int(start_n_top), int(end_n_top), float(dropout_prob)
        if start_n_top < 1 or end_n_top < 1:
            raise ValueError(
                f"start_n_top and end_n_top must be >= 1, got {start_n_top}, {end_n_top}"
            )
        if not 0.0 <= dropout_prob < 1.0:
            raise ValueError(f"dropout_prob must be in [0, 1), got {dropout_prob}")
        # === Layers ===
        backbone = resolve_backbone(config, backbone, dtype)
        head = AlbertSquadV2Head(
            backbone.config,
            start_n_top,
            end_n_top,
            dropout_prob,
            seed=seed,
            dtype=backbone.dtype_policy,
            name=HEAD_NAME,
        )

        # === Functional model (the inference form) ===
        inputs = task_inputs(SQUAD_V2_INPUTS)
        sequence_output = backbone({k: inputs[k] for k in BACKBONE_INPUTS})["sequence_output"]
        outputs = head(sequence_output, inputs["p_mask"])
        super().__init__(inputs, outputs, backbone, head, name=name, **kwargs)

        # === Config ===
        self.start_n_top, self.end_n_top = start_n_top, end_n_top
        self.dropout_prob, self.seed = dropout_prob, seed

    def extra_config(self):
        return {
            "start_n_top": self.start_n_top,
            "end_n_top": self.end_n_top,
            "dropout_prob": self.dropout_prob,
            "seed": self.seed,
        }

    def default_loss(self):
        return SquadV2Loss()

    def call(self, inputs, training=None):
        if "start_positions" not in inputs:
            return super().call(inputs, training=training)
        backbone_inputs = {k: inputs[k] for k in BACKBONE_INPUTS}
        sequence_output = self.backbone(backbone_inputs, training=training)["sequence_output"]
        return self.head(
            sequence_output,
            inputs["p_mask"],
            start_positions=inputs["start_positions"],
            training=training,
        )
