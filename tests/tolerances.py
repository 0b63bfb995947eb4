"""Float tolerances of the tests, each relative to the size of what it compares.

Each constant is a bound per unit of `albert_tf.tolerance.output_scale` (max(1, max |expected|)),
so the same test passes whichever kernels a CPU picks (oneDNN AVX-512/AMX or AVX2, Eigen) and still
fails on a real defect, which moves outputs by orders of magnitude more.
"""

import numpy as np

from albert_tf.tolerance import FLOAT32_EPS, scaled_limit

# Model outputs against the original code's goldens: written by TF1 kernels on another machine,
# through up to 4 layers of width <= 64 with LayerNorm and tanh. 2e-5 (~170 ulps) is the bound the
# goldens' README promises; readings across oneDNN and Eigen kernels stay below ~4e-6.
GOLDEN = 2e-5

# One model in two forms on one machine (eager vs traced or XLA, reloaded vs in memory, padded vs
# not, two equivalent formulations): grappler and XLA fuse and re-associate sums, which costs a few
# to ~20 ulps at the scale; 128 ulps keeps headroom.
SAME_MODEL = 128 * FLOAT32_EPS

# A handful of elementwise ops or one softmax against a float32 numpy reference: TF's tanh, exp and
# log are a few ulps from numpy's.
FEW_OPS = 16 * FLOAT32_EPS


def assert_close_to_scale(actual, expected, relative, err_msg=""):
    """|actual - expected| <= relative * max(1, max |expected|), element-wise."""
    expected = np.asarray(expected)
    np.testing.assert_allclose(
        np.asarray(actual), expected, rtol=0, atol=scaled_limit(expected, relative), err_msg=err_msg
    )


# Weights after a few optimizer updates computed two ways (one replica vs several, whose gradients
# are summed in another order): each update carries its gradient's round-off times the learning
# rate, and LAMB's trust ratio divides by norms that carry it too; ~170 ulps of the scale holds it.
TRAINING_STEPS = 2e-5

# One model's gradients by two formulations (hand-written LayerNorm/GELU gradients vs autodiff),
# per unit of each gradient's largest entry: backprop sums over batch and positions in another
# order at every layer.
GRADIENTS = 2e-5
