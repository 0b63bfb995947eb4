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
from keras.src.losses.loss import scale_loss_for_distribution

from albert_tf.config import AlbertConfig
from albert_tf.modeling.heads.squad_v1 import labels_from, position_loss
from albert_tf.modeling.heads.squad_v2_layers import (
    SquadAnswerClass,
    SquadEndLogits,
    SquadStartLogits,
    mask_logits,
)
from albert_tf.modeling.model import BACKBONE_INPUTS, AlbertModel, ConfiguredModel

HEAD_NAME = "squad_v2"
SQUAD_V2_INPUTS = (*BACKBONE_INPUTS, "p_mask")
# The original's flag defaults.
DEFAULT_N_TOP = 5
DEFAULT_DROPOUT = 0.1
# The original weighs the answerability loss by 0.5 "so that the scale is comparable".
ANSWER_CLASS_LOSS_WEIGHT = 0.5


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
        self.start_logits = SquadStartLogits(config, seed=seed, name="start_logits")
        self.end_logits = SquadEndLogits(config, seed=seed, name="end_logits")
        self.answer_class = SquadAnswerClass(
            config, self.dropout_rate, seed=seed, name="answer_class"
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
class AlbertSquadV2(ConfiguredModel):
    """ALBERT backbone + the original SQuAD v2.0 head (start, end beam, answerability).

    Inputs: int32 [B, T] `input_ids`, `input_mask`, `segment_ids` and `p_mask` (1 where no answer
    may start or end). Without `start_positions` among them the outputs are the inference beam's
    (`start_top_log_probs`, `start_top_index`, `end_top_log_probs`, `end_top_index`,
    `cls_logits`); with `start_positions` (int [B]) the end head is fed the gold start and the
    outputs are `start_log_probs`, `end_log_probs` [B, T] and `cls_logits`, whether training or
    not (so `evaluate` reports the training loss). `fit` takes feature dicts with
    `start_positions`, `end_positions` and `is_impossible`; loss =
    (CE(start) + CE(end)) / 2 + 0.5 · sigmoid-CE(cls_logits, is_impossible).

    Args:
        config: the backbone's `AlbertConfig` (or its dict).
        start_n_top: starts kept by the inference beam (the original's default 5).
        end_n_top: ends kept per start (default 5).
        dropout_prob: dropout inside `answer_class` in training (default 0.1).
        seed: seed of the head's initializers and dropout (None: random).
        name: the model's name.

    Example:
        >>> model = AlbertSquadV2(AlbertConfig.from_json_file("albert_config.json"))
        >>> beam = model({"input_ids": ids, "input_mask": mask, "segment_ids": seg, "p_mask": p})
        >>> beam["end_top_index"].shape  # (B, 25)
    """

    TF1_HEAD_RULES = ((rf"^{HEAD_NAME}/((start_logits|end_logits|answer_class)/.+)$", r"\1"),)
    LABELS = ("start_positions", "end_positions", "is_impossible")

    def __init__(
        self,
        config: AlbertConfig | dict,
        start_n_top: int = DEFAULT_N_TOP,
        end_n_top: int = DEFAULT_N_TOP,
        dropout_prob: float = DEFAULT_DROPOUT,
        seed: int | None = None,
        name: str = "albert_squad_v2",
        **kwargs,
    ):
        config = config if isinstance(config, AlbertConfig) else AlbertConfig.from_dict(config)
        start_n_top, end_n_top, dropout_prob = int(start_n_top), int(end_n_top), float(dropout_prob)
        if start_n_top < 1 or end_n_top < 1:
            raise ValueError(
                f"start_n_top and end_n_top must be >= 1, got {start_n_top}, {end_n_top}"
            )
        if not 0.0 <= dropout_prob < 1.0:
            raise ValueError(f"dropout_prob must be in [0, 1), got {dropout_prob}")
        # === Layers ===
        backbone = AlbertModel(config)
        head = AlbertSquadV2Head(
            config, start_n_top, end_n_top, dropout_prob, seed=seed, name=HEAD_NAME
        )

        # === Functional model (the inference form) ===
        inputs = {
            name: keras.Input(shape=(None,), dtype="int32", name=name) for name in SQUAD_V2_INPUTS
        }
        sequence_output = backbone({k: inputs[k] for k in BACKBONE_INPUTS})["sequence_output"]
        super().__init__(
            inputs=inputs, outputs=head(sequence_output, inputs["p_mask"]), name=name, **kwargs
        )

        # === Config ===
        self.config = config
        self.start_n_top = start_n_top
        self.end_n_top = end_n_top
        self.dropout_prob = dropout_prob
        self.seed = seed
        self.backbone = backbone
        self.head = head

    def extra_config(self):
        return {
            "start_n_top": self.start_n_top,
            "end_n_top": self.end_n_top,
            "dropout_prob": self.dropout_prob,
            "seed": self.seed,
        }

    def call(self, inputs, training=None):
        if "start_positions" not in inputs:
            # Labels and other features of the input dict are ignored.
            return super().call({k: inputs[k] for k in SQUAD_V2_INPUTS}, training=training)
        backbone_inputs = {k: inputs[k] for k in BACKBONE_INPUTS}
        sequence_output = self.backbone(backbone_inputs, training=training)["sequence_output"]
        return self.head(
            sequence_output,
            inputs["p_mask"],
            start_positions=inputs["start_positions"],
            training=training,
        )

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """The original's: (CE(start) + CE(end)) / 2 + 0.5 · mean sigmoid-CE(is_impossible)."""
        labels = labels_from(x, y, self.LABELS, type(self).__name__)
        if "end_log_probs" not in y_pred:
            raise ValueError(
                "AlbertSquadV2's loss needs the teacher-forced outputs: put `start_positions` "
                "in the input features"
            )
        start = position_loss(y_pred["start_log_probs"], labels["start_positions"])
        end = position_loss(y_pred["end_log_probs"], labels["end_positions"])
        impossible = ops.reshape(ops.cast(labels["is_impossible"], "float32"), (-1,))
        answer_class = ops.mean(
            ops.binary_crossentropy(impossible, y_pred["cls_logits"], from_logits=True)
        )
        loss = (start + end) / 2.0 + ANSWER_CLASS_LOSS_WEIGHT * answer_class
        if self.losses:
            loss = loss + ops.sum(self.losses)
        return scale_loss_for_distribution(loss)

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        return self.step_logs()
