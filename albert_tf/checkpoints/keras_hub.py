"""Conversion to and from `keras_hub.models.AlbertBackbone` (weights mapped by variable path).

keras-hub's ALBERT can express only part of ours: full sharing, `num_hidden_layers` divisible by
`num_hidden_groups` (its routing then equals the original's), one dropout rate, the tanh GELU. Its
attention kernels are [H, N, D] / [N, D, H] where ours (and the original) are [H, H]: plain reshapes.
"""

from __future__ import annotations

import keras_hub
import numpy as np

from albert_tf.checkpoints.tf1 import rename
from albert_tf.config import AlbertConfig
from albert_tf.modeling.model import AlbertModel

# (regex on our backbone's variable path, keras-hub path), first match wins.
_RULES: tuple[tuple[str, str], ...] = (
    (r"^embeddings/word_embeddings$", "token_embedding/embeddings"),
    (r"^embeddings/position_embeddings$", "position_embedding/embeddings"),
    (r"^embeddings/token_type_embeddings$", "segment_embedding/embeddings"),
    (r"^embeddings/LayerNorm/(gamma|beta)$", r"embeddings_layer_norm/\1"),
    (r"^embedding_hidden_mapping_in/(kernel|bias)$", r"embedding_projection/\1"),
    (
        r"^group_(\d+)_inner_group_(\d+)_attention/(query|key|value)/(kernel|bias)$",
        r"group_\1_inner_layer_\2/self_attention_layer/\3/\4",
    ),
    (
        r"^group_(\d+)_inner_group_(\d+)_attention/output_dense/(kernel|bias)$",
        r"group_\1_inner_layer_\2/self_attention_layer/attention_output/\3",
    ),
    (
        r"^group_(\d+)_inner_group_(\d+)_attention/LayerNorm/(gamma|beta)$",
        r"group_\1_inner_layer_\2/self_attention_layer_norm/\3",
    ),
    (
        r"^group_(\d+)_inner_group_(\d+)_ffn/intermediate_dense/(kernel|bias)$",
        r"group_\1_inner_layer_\2/feedforward_intermediate_dense/\3",
    ),
    (
        r"^group_(\d+)_inner_group_(\d+)_ffn/output_dense/(kernel|bias)$",
        r"group_\1_inner_layer_\2/feedforward_output_dense/\3",
    ),
    (
        r"^group_(\d+)_inner_group_(\d+)_ffn/LayerNorm/(gamma|beta)$",
        r"group_\1_inner_layer_\2/feedforward_layer_norm/\3",
    ),
    (r"^pooler/(kernel|bias)$", r"pooled_dense/\1"),
)


def keras_hub_path(path: str) -> str:
    """The keras-hub `AlbertBackbone` variable path of one of our backbone variable paths."""
    return rename(path, _RULES, "keras-hub")


def _check_expressible(config: AlbertConfig) -> None:
    if config.sharing != "all":
        raise ValueError(
            f"keras-hub's AlbertBackbone only shares everything; sharing="
            f"{config.sharing!r} cannot be converted"
        )
    if config.num_hidden_layers % config.num_hidden_groups:
        raise ValueError("keras-hub needs num_hidden_layers divisible by num_hidden_groups")
    if config.hidden_act != "gelu":
        raise ValueError(f"keras-hub's AlbertBackbone hard-codes gelu; got {config.hidden_act!r}")
    if config.attention_probs_dropout_prob != config.hidden_dropout_prob:
        raise ValueError(
            "keras-hub's AlbertBackbone has one dropout rate; the config has two different ones"
        )


def keras_hub_backbone(c: AlbertConfig) -> keras_hub.models.AlbertBackbone:
    """A freshly initialised `keras_hub.models.AlbertBackbone` of the same shape as config `c`."""
    _check_expressible(c)
    return keras_hub.models.AlbertBackbone(
        vocabulary_size=c.vocab_size,
        num_layers=c.num_hidden_layers,
        num_heads=c.num_attention_heads,
        embedding_dim=c.embedding_size,
        hidden_dim=c.hidden_size,
        intermediate_dim=c.intermediate_size,
        num_groups=c.num_hidden_groups,
        num_inner_repetitions=c.inner_group_num,
        dropout=c.hidden_dropout_prob,
        max_sequence_length=c.max_position_embeddings,
        num_segments=c.type_vocab_size,
    )


def to_keras_hub(model: AlbertModel) -> keras_hub.models.AlbertBackbone:
    """A `keras_hub.models.AlbertBackbone` with `model`'s weights (inputs renamed by keras-hub:
    `token_ids`, `padding_mask`, `segment_ids`)."""
    c = model.config
    backbone = keras_hub_backbone(c)
    targets = {v.path: v for v in backbone.weights}
    assigned = set()
    for variable in model.weights:
        target = targets[keras_hub_path(variable.path)]
        target.assign(np.reshape(variable.numpy(), target.shape))
        assigned.add(target.path)
    if c.embedding_size == c.hidden_size:  # keras-hub always projects; make it the identity
        targets["embedding_projection/kernel"].assign(np.eye(c.hidden_size))
        targets["embedding_projection/bias"].assign(np.zeros(c.hidden_size))
        assigned |= {"embedding_projection/kernel", "embedding_projection/bias"}
    missing = sorted(set(targets) - assigned)
    if missing:
        raise AssertionError(f"keras-hub variables left unassigned: {missing}")
    return backbone


def from_keras_hub(backbone: keras_hub.models.AlbertBackbone) -> AlbertModel:
    """An `AlbertModel` with the weights of a keras-hub `AlbertBackbone`."""
    config = AlbertConfig(
        vocab_size=backbone.vocabulary_size,
        embedding_size=backbone.embedding_dim,
        hidden_size=backbone.hidden_dim,
        num_hidden_layers=backbone.num_layers,
        num_hidden_groups=backbone.num_groups,
        num_attention_heads=backbone.num_heads,
        intermediate_size=backbone.intermediate_dim,
        inner_group_num=backbone.num_inner_repetitions,
        hidden_dropout_prob=backbone.dropout,
        attention_probs_dropout_prob=backbone.dropout,
        max_position_embeddings=backbone.max_sequence_length,
        type_vocab_size=backbone.num_segments,
    )
    model = AlbertModel(config)
    sources = {v.path: v.numpy() for v in backbone.weights}
    if config.embedding_size == config.hidden_size:
        # We (and the original) have no projection when E == H: only the identity converts.
        if not (
            np.array_equal(sources["embedding_projection/kernel"], np.eye(config.hidden_size))
            and not sources["embedding_projection/bias"].any()
        ):
            raise ValueError(
                "embedding_dim == hidden_dim but keras-hub's embedding_projection is "
                "not the identity; the original architecture cannot express it"
            )
    for variable in model.weights:
        variable.assign(np.reshape(sources[keras_hub_path(variable.path)], variable.shape))
    return model
