"""Bias add + the original's tanh-GELU as one XLA-compiled kernel each way, for training.

In a train step that is not XLA-compiled (the fp32 and bf16 CPU default uses oneDNN's matmuls,
which are faster there than XLA's), TensorFlow runs `gelu(x @ W + b)` and its gradient as ~20
separate elementwise kernels, each a pass over the [tokens, intermediate] tensor: the largest
activation of the model. Compiled, each direction is one pass: ALBERT-base's gradient step went
from 1.35x to 1.20x the time of its matmuls alone (benchmarks/matmul_reference.MatmulSkeleton).
Inside a step that is compiled anyway (TPU, `--jit_compile`) XLA inlines these functions, so the
math is the same there. The FFN uses it for float32 only: with bfloat16, XLA:CPU's elementwise
code made the whole step ~9% slower than TF's own kernels.

The backward keeps only the pre-activation, as plain autodiff would, and recomputes tanh inside
its one pass. Values equal the plain ops to float rounding (XLA's tanh is its own polynomial).
"""

import tensorflow as tf


def _bias_gelu(x, bias):
    return tf.nn.gelu(x + bias, approximate=True)


# reduce_retracing: one trace for every batch shape (XLA still compiles and caches per shape).
_forward = tf.function(_bias_gelu, jit_compile=True, reduce_retracing=True)


@tf.function(jit_compile=True, reduce_retracing=True)
def _backward(x, bias, output_gradient):
    with tf.GradientTape() as tape:
        tape.watch([x, bias])
        y = _bias_gelu(x, bias)
    return tape.gradient(y, [x, bias], output_gradients=output_gradient)


@tf.custom_gradient
def bias_gelu(x: tf.Tensor, bias: tf.Tensor) -> tf.Tensor:
    """`gelu(x + bias)` (tanh form, as the original's `gelu`), bias broadcast over the last axis."""
    return _forward(x, bias), lambda output_gradient: _backward(x, bias, output_gradient)
