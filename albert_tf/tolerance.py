"""Float comparisons stated relative to the size of what they compare.

The same float32 graph gives results that differ in the last bits from CPU to CPU: oneDNN picks
AVX-512/AMX or AVX2 kernels by machine, Eigen runs instead with oneDNN off, XNNPACK runs TFLite, and
each sums dot products in its own order. That round-off grows with the size of the values summed, so
a fixed absolute limit is either too tight for outputs of magnitude ~10 (a correct artifact refused)
or too loose for outputs near 0. Every limit in the project is `relative * max(1, max |reference|)`;
the floor of 1 keeps outputs near zero from demanding round-off finer than float32's resolution at 1.

Example:
    >>> np.max(np.abs(candidate - reference)) <= scaled_limit(reference, 128 * FLOAT32_EPS)
"""

from __future__ import annotations

import numpy as np

FLOAT32_EPS = float(np.finfo(np.float32).eps)  # 2**-23 ~ 1.19e-7: one ulp at 1.0


def output_scale(reference) -> float:
    """max(1, max |reference|): the unit that a comparison's round-off is measured in."""
    reference = np.asarray(reference, dtype=np.float64)
    return max(1.0, float(np.max(np.abs(reference), initial=0.0)))


def scaled_limit(reference, relative: float) -> float:
    """The absolute limit `relative * output_scale(reference)`."""
    return relative * output_scale(reference)
