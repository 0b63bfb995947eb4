"""ALBERT's building blocks as Keras 3 layers.

Layer and variable names mirror the original TF1 scopes (`word_embeddings`, `LayerNorm`, `query`,
`output_bias`, ...): names are the checkpoint's vocabulary (see `albert_tf.checkpoints.tf1`), and
they are what the original LAMB's exclusion regexes (`LayerNorm`, `bias`) match.
"""

from __future__ import annotations

import keras
from keras import ops

from albert_tf.config import AlbertConfig
from albert_tf.modeling.fused_gelu import bias_gelu
from albert_tf.modeling.layer_norm import AlbertLayerNorm

# The original adds -10000 (not -inf) to the scores of padded keys; kept for parity.
MASK_ADDER = -10000.0
LAYER_NORM_EPSILON = 1e-12


def initializer(config: AlbertConfig) -> keras.initializers.Initializer:
    """Truncated normal at 2 sigma, as TF1's `truncated_normal_initializer`."""
    return keras.initializers.TruncatedNormal(stddev=config.initializer_range)


def activation(name: str | None):
    """The original `get_activation`: its "gelu" is the tanh approximation (HF's `gelu_new`);
    "gelu_erf" is the exact form (transformers' plain `gelu`)."""
    if name == "gelu":
        return "gelu_approximate"
    return name


@keras.saving.register_keras_serializable(package="albert_tf")
def gelu_approximate(x):
    """0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))), the original's `gelu`."""
    return keras.activations.gelu(x, approximate=True)


@keras.saving.register_keras_serializable(package="albert_tf")
def gelu_erf(x):
    """0.5x(1 + erf(x / sqrt(2))), the exact GELU: what a transformers config calls `gelu`."""
    return keras.activations.gelu(x, approximate=False)


# Activations given as functions (Keras's own names would pick another form or none).
_ACTIVATION_FUNCTIONS = {"gelu_approximate": gelu_approximate, "gelu_erf": gelu_erf}


def _layer_norm(name: str, dtype=None) -> AlbertLayerNorm:
    return AlbertLayerNorm(epsilon=LAYER_NORM_EPSILON, dtype=dtype, name=name)


def _dense(units: int, config: AlbertConfig, name: str, act: str | None = None, dtype=None):
    act = _ACTIVATION_FUNCTIONS.get(activation(act), act)
    return keras.layers.Dense(
        units, activation=act, kernel_initializer=initializer(config), dtype=dtype, name=name
    )


class ConfigLayer(keras.layers.Layer):
    """A layer built from an `AlbertConfig`, which it serialises for `.keras` files.

    Its sublayers take its dtype policy (`dtype=self.dtype_policy`): a model's precision is the
    `dtype` it passes to its layers (None: Keras's global policy, read once when it is built).
    """

    def __init__(self, config: AlbertConfig, **kwargs):
        super().__init__(**kwargs)
        self.config = config

    def get_config(self):
        return {**super().get_config(), "config": self.config.to_dict()}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        return cls(AlbertConfig.from_dict(config.pop("config")), **config)


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertEmbeddings(ConfigLayer):
    """Word + token-type + absolute position embeddings at width E, then LayerNorm and dropout."""

    def __init__(self, config: AlbertConfig, **kwargs):
        super().__init__(config, **kwargs)
        self.layer_norm = _layer_norm("LayerNorm", self.dtype_policy)
        self.dropout = keras.layers.Dropout(config.hidden_dropout_prob, dtype=self.dtype_policy)

    def build(self, input_shape=None):
        c = self.config
        init = initializer(c)
        self.word_embeddings = self.add_weight(
            name="word_embeddings", shape=(c.vocab_size, c.embedding_size), initializer=init
        )
        self.token_type_embeddings = self.add_weight(
            name="token_type_embeddings",
            shape=(c.type_vocab_size, c.embedding_size),
            initializer=init,
        )
        self.position_embeddings = self.add_weight(
            name="position_embeddings",
            shape=(c.max_position_embeddings, c.embedding_size),
            initializer=init,
        )
        self.layer_norm.build((None, None, c.embedding_size))

    def call(self, input_ids, segment_ids, training=None):
        seq_length = ops.shape(input_ids)[1]
        x = ops.take(self.word_embeddings, input_ids, axis=0)
        x = x + ops.take(self.token_type_embeddings, segment_ids, axis=0)
        x = x + ops.expand_dims(self.position_embeddings[:seq_length], 0)
        return self.dropout(self.layer_norm(x), training=training)

    def compute_output_shape(self, input_shape, *args):
        return (*input_shape, self.config.embedding_size)


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertAttention(ConfigLayer):
    """Self-attention, output projection, dropout and the post-attention `LayerNorm(x + attn)`."""

    def __init__(self, config: AlbertConfig, **kwargs):
        super().__init__(config, **kwargs)
        h, dtype = config.hidden_size, self.dtype_policy
        self.query = _dense(h, config, "query", dtype=dtype)
        self.key = _dense(h, config, "key", dtype=dtype)
        self.value = _dense(h, config, "value", dtype=dtype)
        self.output_dense = _dense(h, config, "output_dense", dtype=dtype)
        self.layer_norm = _layer_norm("LayerNorm", dtype)
        self.probs_dropout = keras.layers.Dropout(config.attention_probs_dropout_prob, dtype=dtype)
        self.output_dropout = keras.layers.Dropout(config.hidden_dropout_prob, dtype=dtype)
        # Added to the scores of padded keys. Not serialised: only a full-integer TFLite export
        # lowers it (to keep the resolution of quantized scores) while it traces its model.
        self.mask_adder = MASK_ADDER

    def build(self, input_shape):
        for sublayer in (self.query, self.key, self.value, self.output_dense, self.layer_norm):
            sublayer.build(input_shape)

    def _split_heads(self, x):
        # [B, T, H] -> [B, N, T, D]; plain reshape/transpose/matmul keep TFLite on builtin ops.
        shape = ops.shape(x)
        x = ops.reshape(
            x, (shape[0], shape[1], self.config.num_attention_heads, self.config.head_size)
        )
        return ops.transpose(x, (0, 2, 1, 3))

    def call(self, x, input_mask, training=None):
        """`input_mask`: int [B, T], 1 for real tokens; padded keys get -10000 added to scores.

        The mask arrives as ints (Keras would autocast a float bias to bfloat16, where -10000
        rounds to -9984) and becomes a float32 bias here.
        """
        key_is_padding = 1.0 - ops.cast(input_mask, "float32")
        attention_bias = ops.expand_dims(ops.expand_dims(key_is_padding * self.mask_adder, 1), 1)
        q = self._split_heads(self.query(x))
        k = self._split_heads(self.key(x))
        v = self._split_heads(self.value(x))
        scores = ops.matmul(q, ops.transpose(k, (0, 1, 3, 2)))
        scores = scores * ops.cast(1.0 / self.config.head_size**0.5, scores.dtype)
        # Softmax in float32: -10000 and large logits are unsafe in float16.
        probs = ops.softmax(ops.cast(scores, "float32") + attention_bias, axis=-1)
        probs = self.probs_dropout(ops.cast(probs, v.dtype), training=training)
        context = ops.transpose(ops.matmul(probs, v), (0, 2, 1, 3))
        shape = ops.shape(context)
        context = ops.reshape(context, (shape[0], shape[1], self.config.hidden_size))
        attention = self.output_dropout(self.output_dense(context), training=training)
        return self.layer_norm(x + attention)

    def compute_output_shape(self, input_shape, *args):
        return input_shape


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertFeedForward(ConfigLayer):
    """Dense H->I with the activation, dense I->H, dropout and `LayerNorm(x + ffn)`."""

    def __init__(self, config: AlbertConfig, **kwargs):
        super().__init__(config, **kwargs)
        dtype = self.dtype_policy
        self.intermediate_dense = _dense(
            config.intermediate_size, config, "intermediate_dense", config.hidden_act, dtype
        )
        self.output_dense = _dense(config.hidden_size, config, "output_dense", dtype=dtype)
        self.layer_norm = _layer_norm("LayerNorm", dtype)
        self.dropout = keras.layers.Dropout(config.hidden_dropout_prob, dtype=dtype)

    def build(self, input_shape):
        self.intermediate_dense.build(input_shape)
        self.output_dense.build((*input_shape[:-1], self.config.intermediate_size))
        self.layer_norm.build(input_shape)

    def call(self, x, training=None):
        if (
            training
            and activation(self.config.hidden_act) == "gelu_approximate"
            and self.compute_dtype == "float32"
        ):
            # Same math as the Dense with its activation, in one compiled kernel (fused_gelu.py);
            # training only, so exported graphs keep plain ops; float32 only, where it is faster.
            dense = self.intermediate_dense
            hidden = ops.matmul(x, ops.cast(dense.kernel, x.dtype))
            hidden = bias_gelu(hidden, ops.cast(dense.bias, hidden.dtype))
        else:
            hidden = self.intermediate_dense(x)
        ffn = self.output_dense(hidden)
        return self.layer_norm(x + self.dropout(ffn, training=training))

    def compute_output_shape(self, input_shape):
        return input_shape


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertMaskedLMHead(ConfigLayer):
    """`cls/predictions`: gather, dense H->E with the activation, LayerNorm, tied decoder + bias.

    The decoder is the input word embedding matrix (`embeddings` layer), as in the original.
    """

    def __init__(self, config: AlbertConfig, embeddings: AlbertEmbeddings, **kwargs):
        super().__init__(config, **kwargs)
        self.embeddings = embeddings
        self.dense = _dense(
            config.embedding_size, config, "dense", config.hidden_act, self.dtype_policy
        )
        self.layer_norm = _layer_norm("LayerNorm", self.dtype_policy)

    def build(self, sequence_output_shape, masked_lm_positions_shape=None):
        self.dense.build((None, self.config.hidden_size))
        self.layer_norm.build((None, self.config.embedding_size))
        self.output_bias = self.add_weight(
            name="output_bias", shape=(self.config.vocab_size,), initializer="zeros"
        )

    def call(self, sequence_output, masked_lm_positions):
        positions = ops.cast(masked_lm_positions, "int32")
        x = ops.take_along_axis(sequence_output, ops.expand_dims(positions, -1), axis=1)
        x = self.layer_norm(self.dense(x))
        word_embeddings = ops.cast(self.embeddings.word_embeddings, x.dtype)
        logits = ops.matmul(x, ops.transpose(word_embeddings)) + ops.cast(self.output_bias, x.dtype)
        return ops.cast(logits, "float32")

    def compute_output_shape(self, sequence_output_shape, masked_lm_positions_shape):
        return (*masked_lm_positions_shape, self.config.vocab_size)

    def get_config(self):
        raise TypeError("AlbertMaskedLMHead is rebuilt by AlbertPretrainer, not serialised alone")


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertSentenceOrderHead(ConfigLayer):
    """`cls/seq_relationship`: logits = pooled . output_weights^T + output_bias (2 classes)."""

    def build(self, pooled_shape):
        self.output_weights = self.add_weight(
            name="output_weights",
            shape=(2, self.config.hidden_size),
            initializer=initializer(self.config),
        )
        self.output_bias = self.add_weight(name="output_bias", shape=(2,), initializer="zeros")

    def call(self, pooled_output):
        weights = ops.cast(self.output_weights, pooled_output.dtype)
        logits = ops.matmul(pooled_output, ops.transpose(weights))
        return ops.cast(logits + ops.cast(self.output_bias, logits.dtype), "float32")

    def compute_output_shape(self, pooled_shape):
        return (pooled_shape[0], 2)
