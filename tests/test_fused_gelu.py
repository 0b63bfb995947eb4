"""The compiled bias + GELU of the training path equals the plain ops, values and gradients."""

import numpy as np
import pytest
import tensorflow as tf

from albert_tf import AlbertConfig, AlbertPretrainer
from albert_tf.modeling import layers
from albert_tf.modeling.fused_gelu import bias_gelu
from tests.gradient_helpers import count_calls, value_and_gradients
from tests.test_model import TINY, gradient_step, pretraining_batch
from tests.tolerances import FEW_OPS, GRADIENTS, SAME_MODEL, assert_close_to_scale

# Compares floats against goldens or another form of the model: CI reruns it on other kernels.
pytestmark = pytest.mark.numerics


def plain_bias_gelu(x, bias):
    return tf.nn.gelu(x + bias, approximate=True)


# float32: 16 ulps (a few elementwise ops, tanh); bfloat16: 2^-8 is one bfloat16 ulp at 1, and the
# two paths round at different steps, so a few bfloat16 ulps.
@pytest.mark.parametrize("dtype, tolerance", [("float32", FEW_OPS), ("bfloat16", 2e-2)])
def test_bias_gelu_matches_plain_ops(dtype, tolerance):
    rng = np.random.default_rng(0)
    x, bias, dy = (
        tf.constant(rng.normal(0, 2, shape), dtype) for shape in ((3, 5, 64), (64,), (3, 5, 64))
    )
    fused = value_and_gradients(bias_gelu, [x, bias], dy)
    plain = value_and_gradients(plain_bias_gelu, [x, bias], dy)
    for name, got, want in zip(("value", "d x", "d bias"), fused, plain):
        assert got.dtype == want.dtype, name
        got, want = (np.asarray(tf.cast(t, "float32")) for t in (got, want))
        assert_close_to_scale(got, want, tolerance, err_msg=name)


def gradients(model, features, training, jit_compile=False):
    step = gradient_step(model, training, jit_compile)
    outputs, grads = step({k: tf.constant(v) for k, v in features.items()})
    return outputs, [tf.convert_to_tensor(g) for g in grads]


@pytest.mark.parametrize(
    "jit_compile", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["graph", "xla"]
)
def test_training_path_equals_inference_path(jit_compile, monkeypatch):
    # No dropout, so training=True (fused GELU, hand-written LayerNorm gradient) and
    # training=False (Dense + activation, Keras's LayerNorm) compute the same function: outputs
    # and every variable's gradient agree.
    model = AlbertPretrainer(AlbertConfig(**TINY))
    features = pretraining_batch(model.config)
    calls = count_calls(monkeypatch, layers, "bias_gelu")
    fused_outputs, fused_grads = gradients(model, features, True, jit_compile)
    assert len(calls) == model.config.num_hidden_layers  # one FFN per layer (all shared)
    plain_outputs, plain_grads = gradients(model, features, False)
    assert len(calls) == model.config.num_hidden_layers
    for name in plain_outputs:
        assert_close_to_scale(fused_outputs[name], plain_outputs[name], SAME_MODEL, err_msg=name)
    # Gradients are far below 1 here, so each is measured against its own largest entry, floored
    # at 1e-3 of the whole gradient's: some are zero up to cancellation round-off (~1e-13).
    whole = max(float(tf.reduce_max(tf.abs(g))) for g in plain_grads)
    for variable, got, want in zip(model.trainable_variables, fused_grads, plain_grads):
        scale = max(float(tf.reduce_max(tf.abs(want))), 1e-3 * whole)
        np.testing.assert_allclose(got, want, rtol=0, atol=GRADIENTS * scale, err_msg=variable.path)


@pytest.mark.half_precision
def test_mixed_precision_training_keeps_the_plain_ops(monkeypatch):
    # XLA:CPU's bfloat16 elementwise code is slower than TF's: the fused kernel is float32 only.
    model = AlbertPretrainer(AlbertConfig(**TINY), dtype="mixed_bfloat16")
    calls = count_calls(monkeypatch, layers, "bias_gelu")
    outputs, grads = gradients(model, pretraining_batch(model.config), True)
    assert not calls
    assert all(np.isfinite(g.numpy()).all() for g in grads)
