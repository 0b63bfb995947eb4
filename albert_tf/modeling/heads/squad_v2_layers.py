"""The three parts of the SQuAD v2 head, one layer per variable scope of the original.

`squad_utils.create_v2_model` builds its head in the scopes `start_logits`, `end_logits` and
`answer_class`; each layer here is named after its scope and holds sublayers named as the
original's (`dense`, `dense_0`, `LayerNorm`, `dense_1`), so a variable's path under the head is
its original name. Initialisers are the original's: truncated normal with `initializer_range`,
zero biases, LayerNorm epsilon 1e-12.
"""

from __future__ import annotations

import keras
from keras import ops

from albert_tf.modeling.layer_norm import AlbertLayerNorm
from albert_tf.modeling.layers import LAYER_NORM_EPSILON, ConfigLayer

# The original masks invalid positions with x * (1 - p_mask) - 1e30 * p_mask (float32 only).
MASKED_LOGIT = 1e30


def mask_logits(logits, p_mask):
    """float32 `logits * (1 - p_mask) - 1e30 * p_mask`; `p_mask` broadcasts against `logits`."""
    logits = ops.cast(logits, "float32")
    p_mask = ops.cast(p_mask, "float32")
    return logits * (1.0 - p_mask) - MASKED_LOGIT * p_mask


def _dense(units: int, layer: ConfigLayer, name: str, seed, activation=None, use_bias=True):
    """A sublayer of `layer`: its config's initializer range and its dtype policy."""
    return keras.layers.Dense(
        units,
        activation=activation,
        use_bias=use_bias,
        kernel_initializer=keras.initializers.TruncatedNormal(
            stddev=layer.config.initializer_range, seed=seed
        ),
        dtype=layer.dtype_policy,
        name=name,
    )


def _seed(seed: int | None, offset: int) -> int | None:
    # Each Dense gets its own seed: two initialisers with one seed draw the same values.
    return None if seed is None else seed + offset


@keras.saving.register_keras_serializable(package="albert_tf")
class SquadStartLogits(ConfigLayer):
    """`start_logits`: `dense` H -> 1 on every position; unmasked logits [B, T] (compute dtype).

    Args:
        config: the backbone's `AlbertConfig`.
        seed: initializer seed (None: random).

    Example:
        >>> logits = SquadStartLogits(config, name="start_logits")(sequence_output)
    """

    def __init__(self, config, seed: int | None = None, **kwargs):
        super().__init__(config, **kwargs)
        self.seed = seed
        self.dense = _dense(1, self, "dense", _seed(seed, 0))

    def build(self, sequence_output_shape):
        self.dense.build((None, self.config.hidden_size))

    def call(self, sequence_output):
        return ops.squeeze(self.dense(sequence_output), -1)

    def compute_output_shape(self, sequence_output_shape):
        return tuple(sequence_output_shape[:-1])

    def get_config(self):
        return {**super().get_config(), "seed": self.seed}


@keras.saving.register_keras_serializable(package="albert_tf")
class SquadEndLogits(ConfigLayer):
    """`end_logits`: for each start, dense_0(concat(h_t, h_start)) with tanh, LayerNorm, dense_1.

    Called on the sequence output [B, T, H] and the features of K candidate starts [B, K, H];
    returns unmasked end logits [B, K, T]. `dense_0`'s kernel [2H, H] is applied in two halves
    (h_t · W[:H] + h_start · W[H:]): the same sum as on the concatenation, without materialising
    [B, K, T, 2H].

    Args:
        config: the backbone's `AlbertConfig`.
        seed: initializer seed (None: random).

    Example:
        >>> end_logits = SquadEndLogits(config, name="end_logits")(sequence_output, start_features)
    """

    def __init__(self, config, seed: int | None = None, **kwargs):
        super().__init__(config, **kwargs)
        self.seed = seed
        hidden = config.hidden_size
        self.dense_0 = _dense(hidden, self, "dense_0", _seed(seed, 1))
        self.layer_norm = AlbertLayerNorm(
            epsilon=LAYER_NORM_EPSILON, dtype=self.dtype_policy, name="LayerNorm"
        )
        self.dense_1 = _dense(1, self, "dense_1", _seed(seed, 2))

    def build(self, sequence_output_shape, start_features_shape=None):
        hidden = self.config.hidden_size
        self.dense_0.build((None, 2 * hidden))
        self.layer_norm.build((None, hidden))
        self.dense_1.build((None, hidden))

    def call(self, sequence_output, start_features, training=None):
        hidden = self.config.hidden_size
        kernel = ops.cast(self.dense_0.kernel, sequence_output.dtype)
        bias = ops.cast(self.dense_0.bias, sequence_output.dtype)
        token_part = ops.matmul(sequence_output, kernel[:hidden])  # [B, T, H]
        start_part = ops.matmul(start_features, kernel[hidden:]) + bias  # [B, K, H]
        x = ops.tanh(ops.expand_dims(token_part, 1) + ops.expand_dims(start_part, 2))
        x = self.layer_norm(x, training=training)  # [B, K, T, H]
        return ops.squeeze(self.dense_1(x), -1)

    def compute_output_shape(self, sequence_output_shape, start_features_shape):
        return (sequence_output_shape[0], start_features_shape[1], sequence_output_shape[1])

    def get_config(self):
        return {**super().get_config(), "seed": self.seed}


@keras.saving.register_keras_serializable(package="albert_tf")
class SquadAnswerClass(ConfigLayer):
    """`answer_class`: concat(Σ_t p_start(t) h_t, h_[CLS]) -> dense_0 H tanh -> dropout ->
    dense_1 -> 1 (no bias); float32 `cls_logits` [B], the logit that the window has no answer.

    Args:
        config: the backbone's `AlbertConfig`.
        dropout_rate: dropout on dense_0's output in training (the original's `dropout_prob`).
        seed: initializer and dropout seed (None: random).

    Example:
        >>> cls_logits = SquadAnswerClass(config, 0.1, name="answer_class")(sequence, start_probs)
    """

    def __init__(self, config, dropout_rate: float = 0.1, seed: int | None = None, **kwargs):
        super().__init__(config, **kwargs)
        self.dropout_rate = float(dropout_rate)
        self.seed = seed
        hidden = config.hidden_size
        self.dense_0 = _dense(hidden, self, "dense_0", _seed(seed, 3), activation="tanh")
        self.dropout = keras.layers.Dropout(self.dropout_rate, seed=seed, dtype=self.dtype_policy)
        self.dense_1 = _dense(1, self, "dense_1", _seed(seed, 4), use_bias=False)

    def build(self, sequence_output_shape, start_probs_shape=None):
        hidden = self.config.hidden_size
        self.dense_0.build((None, 2 * hidden))
        self.dense_1.build((None, hidden))

    def call(self, sequence_output, start_probs, training=None):
        """`start_probs` [B, T]: softmax of the masked start logits."""
        start_probs = ops.cast(start_probs, sequence_output.dtype)
        start_feature = ops.einsum("bt,bth->bh", start_probs, sequence_output)
        features = ops.concatenate([start_feature, sequence_output[:, 0, :]], axis=-1)
        x = self.dropout(self.dense_0(features), training=training)
        return ops.cast(ops.squeeze(self.dense_1(x), -1), "float32")

    def compute_output_shape(self, sequence_output_shape, start_probs_shape=None):
        return (sequence_output_shape[0],)

    def get_config(self):
        return {**super().get_config(), "dropout_rate": self.dropout_rate, "seed": self.seed}
