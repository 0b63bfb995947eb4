"""Helpers shared by the tests of hand-written gradients (fused GELU, LayerNorm)."""

import tensorflow as tf


def value_and_gradients(fn, inputs, output_gradient):
    """[fn(*inputs), d/d input for each input], given the output's gradient."""
    with tf.GradientTape() as tape:
        tape.watch(inputs)
        y = fn(*inputs)
    return [y, *tape.gradient(y, inputs, output_gradients=output_gradient)]


def count_calls(monkeypatch, module, name) -> list:
    """Wraps `module.name` so that each call appends to the returned list."""
    calls, function = [], getattr(module, name)
    monkeypatch.setattr(module, name, lambda *args: calls.append(1) or function(*args))
    return calls
