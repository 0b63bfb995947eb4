"""Conversion to and from keras-hub's AlbertBackbone: equal outputs both ways."""

import pathlib

import numpy as np
import pytest

from albert_tf import AlbertConfig, AlbertModel
from albert_tf.checkpoints import load_tf1_checkpoint
from albert_tf.checkpoints.keras_hub import from_keras_hub, to_keras_hub
from tests.tolerances import GOLDEN, SAME_MODEL, assert_close_to_scale
from tests.model_configs import MICRO

# Compares floats against goldens or another form of the model: CI reruns it on other kernels.
pytestmark = pytest.mark.numerics

CHECKPOINTS = pathlib.Path(__file__).parent / "fixtures" / "original_checkpoints"


def keras_hub_inputs(expected):
    return {
        "token_ids": expected["input_ids"],
        "padding_mask": expected["input_mask"],
        "segment_ids": expected["segment_ids"],
    }


@pytest.mark.parametrize("folder", ["albert_tiny_shared", "albert_tiny_grouped"])
def test_to_and_from_keras_hub_keep_outputs(folder):
    backbone = load_tf1_checkpoint(
        CHECKPOINTS / folder, CHECKPOINTS / folder / "albert_config.json"
    ).backbone
    expected = np.load(CHECKPOINTS / folder / "expected.npz")
    inputs = {k: expected[k] for k in ("input_ids", "input_mask", "segment_ids")}
    real = expected["input_mask"].astype(bool)
    ours = backbone(inputs)

    hub = to_keras_hub(backbone)
    theirs = hub(keras_hub_inputs(expected))
    assert_close_to_scale(
        theirs["sequence_output"].numpy()[real], ours["sequence_output"].numpy()[real], SAME_MODEL
    )
    assert_close_to_scale(theirs["pooled_output"], ours["pooled_output"], SAME_MODEL)
    # ... and against the original code's outputs directly.
    assert_close_to_scale(theirs["pooled_output"], expected["pooled_output"], GOLDEN)

    back = from_keras_hub(hub)
    shape_fields = (
        "vocab_size",
        "embedding_size",
        "hidden_size",
        "num_hidden_layers",
        "num_hidden_groups",
        "inner_group_num",
        "num_attention_heads",
        "intermediate_size",
        "max_position_embeddings",
        "type_vocab_size",
    )
    for field in shape_fields:
        assert getattr(back.config, field) == getattr(backbone.config, field), field
    for ours_v, back_v in zip(backbone.weights, back.weights):
        assert ours_v.path == back_v.path
        np.testing.assert_array_equal(ours_v.numpy(), back_v.numpy())


def test_equal_widths_use_an_identity_projection():
    config = AlbertConfig(**dict(MICRO, embedding_size=16))
    model = AlbertModel(config)
    hub = to_keras_hub(model)
    inputs = {
        "input_ids": np.arange(8)[None] % 50,
        "input_mask": np.ones((1, 8), int),
        "segment_ids": np.zeros((1, 8), int),
    }
    theirs = hub(
        {
            "token_ids": inputs["input_ids"],
            "padding_mask": inputs["input_mask"],
            "segment_ids": inputs["segment_ids"],
        }
    )
    assert_close_to_scale(theirs["sequence_output"], model(inputs)["sequence_output"], SAME_MODEL)
    hub.get_layer("embedding_projection").kernel.assign(np.eye(16) * 2)
    with pytest.raises(ValueError, match="not the identity"):
        from_keras_hub(hub)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(sharing="ffn"), "only shares everything"),
        (dict(num_hidden_layers=3, num_hidden_groups=2), "divisible"),
        (dict(hidden_act="relu"), "hard-codes gelu"),
    ],
)
def test_inexpressible_models_are_refused(kwargs, message):
    config = AlbertConfig(**{**MICRO, **kwargs})
    with pytest.raises(ValueError, match=message):
        to_keras_hub(AlbertModel(config))
