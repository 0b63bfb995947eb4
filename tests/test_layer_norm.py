"""The hand-written LayerNorm gradient equals autodiff of Keras's LayerNorm; inference is Keras's."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from albert_tf import AlbertConfig, AlbertPretrainer
from albert_tf.modeling import layer_norm
from albert_tf.modeling.layer_norm import AlbertLayerNorm, layer_norm_with_gradient
from tests.gradient_helpers import count_calls, value_and_gradients
from tests.test_model import TINY, gradient_step, pretraining_batch
from tests.tolerances import FEW_OPS, FLOAT32_EPS, assert_close_to_scale

# Compares floats against goldens or another form of the model: CI reruns it on other kernels.
pytestmark = pytest.mark.numerics


@pytest.mark.parametrize("shape", [(3, 5, 64), (7, 32)], ids=["rank3", "rank2"])
@pytest.mark.parametrize("jit_compile", [False, True], ids=["graph", "xla"])
def test_gradient_equals_autodiff_of_keras_layer_norm(shape, jit_compile):
    rng = np.random.default_rng(0)
    # An offset mean and uneven scales: the two-pass variance and the mean terms all matter.
    x = tf.constant(rng.normal(3.0, 2.0, shape) * rng.uniform(0.5, 4.0, shape[-1:]), "float32")
    gamma = tf.constant(rng.normal(1.0, 0.3, shape[-1:]), "float32")
    beta = tf.constant(rng.normal(0.0, 0.3, shape[-1:]), "float32")
    dy = tf.constant(rng.normal(0.0, 1.0, shape), "float32")

    def keras_layer_norm(x, gamma, beta):
        return keras.ops.layer_normalization(x, gamma, beta, epsilon=1e-12)

    def hand_written(x, gamma, beta):
        return layer_norm_with_gradient(x, gamma, beta, 1e-12)

    got = tf.function(
        lambda: value_and_gradients(hand_written, [x, gamma, beta], dy), jit_compile=jit_compile
    )()
    want = value_and_gradients(keras_layer_norm, [x, gamma, beta], dy)
    for name, g, w in zip(("value", "d x", "d gamma", "d beta"), got, want):
        w = w.numpy()
        assert_close_to_scale(g.numpy(), w, 16 * FLOAT32_EPS, err_msg=name)


def test_layer_runs_the_hand_written_gradient_in_training_only(monkeypatch):
    layer = AlbertLayerNorm(epsilon=1e-12, name="LayerNorm")
    x = tf.constant(np.random.default_rng(1).normal(size=(2, 4, 8)), "float32")
    calls = count_calls(monkeypatch, layer_norm, "layer_norm_with_gradient")
    inference = layer(x, training=False)
    assert not calls
    training = layer(x, training=True)
    assert len(calls) == 1
    assert_close_to_scale(training, inference, FEW_OPS)
    assert [v.path for v in layer.weights] == ["LayerNorm/gamma", "LayerNorm/beta"]


def test_only_the_last_axis_is_supported():
    with pytest.raises(ValueError, match="last axis"):
        AlbertLayerNorm(axis=1)


@pytest.mark.half_precision
def test_every_layer_norm_of_the_model_trains_through_it_and_mixed_precision_works(monkeypatch):
    calls = count_calls(monkeypatch, layer_norm, "layer_norm_with_gradient")
    model = AlbertPretrainer(AlbertConfig(**TINY), dtype="mixed_bfloat16")
    features = {k: tf.constant(v) for k, v in pretraining_batch(model.config).items()}
    outputs, grads = gradient_step(model)(features)
    # Embeddings, the MLM head, and attention + FFN of each (shared) layer.
    assert len(calls) == 2 + 2 * model.config.num_hidden_layers
    assert outputs["sequence_output"].dtype == tf.bfloat16
    assert all(np.isfinite(tf.convert_to_tensor(g).numpy()).all() for g in grads)
