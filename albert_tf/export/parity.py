"""How closely an exported artifact must reproduce the Keras model, and the figures that say so.

`ParityThresholds` holds the numbers; `RelativeDiffLimit` and `Int8Limit` are the two kinds of gate,
one of which each export format names (`formats.REGISTRY`). No TensorFlow: the format registry,
which `pipelines/export.py --help` reads, is built on this module.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from albert_tf.tolerance import FLOAT32_EPS


@dataclasses.dataclass(frozen=True)
class ParityThresholds:
    """What an export must meet against the Keras model to be written.

    SavedModels and the float TFLite variants are held to a max abs diff on every output, per unit
    of that output's scale (`limit * max(1, max |output|)`, see `albert_tf.tolerance`); the int8
    variants to top-1 agreement and to the cosine of every example, on the outputs the head's
    `ParityKeys` name (pretrainer: MLM predictions at real masked positions and the pooled output;
    classifier: the probabilities for both).

    Why each limit:
    - SavedModel, 128 float32 ulps: the traced graph runs the same float32 math as the Keras model,
      but grappler's rewrites and the CPU's kernel choice re-associate sums; readings reach ~11 ulps
      of the scale (MLM logits of ~9 off by 1.1e-5), while any wrong weight or op is off by >1e-3.
    - TFLite fp32, 1e-4 (~840 ulps): XNNPACK's kernels approximate exp/tanh and block the matmuls
      differently from TF's.
    - TFLite fp16, 1e-2: fp16 weights carry a relative rounding error of 2^-11, so an output's error
      grows with its magnitude (0.017-0.027 on the original code's checkpoints' logits of ~9, which
      simulating the rounding in Keras reproduces: 0.023).

    Args:
        saved_model_relative_diff: SavedModel limit per unit of output scale.
        fp32_relative_diff: `tflite_fp32` limit per unit of output scale.
        fp16_relative_diff: `tflite_fp16` limit per unit of output scale.
        int8_min_top1_agreement: least share of equal argmax predictions for int8 variants.
        int8_min_cosine: least cosine of any example's `ParityKeys.cosine` output.

    Example:
        >>> ParityThresholds(fp32_relative_diff=2e-4)
    """

    saved_model_relative_diff: float = 128 * FLOAT32_EPS
    fp32_relative_diff: float = 1e-4
    fp16_relative_diff: float = 1e-2
    int8_min_top1_agreement: float = 0.95
    int8_min_cosine: float = 0.99


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = a.reshape(len(a), -1).astype(np.float64), b.reshape(len(b), -1).astype(np.float64)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return np.sum(a * b, axis=1) / np.maximum(norms, 1e-30)


def parity_figures(
    reference: dict[str, np.ndarray],
    candidate: dict[str, np.ndarray],
    masked_lm_weights: np.ndarray,
    keys=None,
) -> dict[str, float]:
    """`max_abs_diff/<output>` and `max_abs/<output>` (its scale) for each output, plus
    `top1_agreement` and `min_cosine`, `mean_cosine` where `reference` has the outputs `keys` (a
    `heads.ParityKeys`) name (None: those of the registered head whose parity outputs `reference`
    has, if any)."""
    missing = sorted(set(reference) - set(candidate))
    if missing:
        raise KeyError(f"exported outputs lack {missing}; they have {sorted(candidate)}")
    figures = {
        f"max_abs_diff/{k}": float(np.max(np.abs(candidate[k] - reference[k]), initial=0.0))
        for k in reference
    }
    figures |= {f"max_abs/{k}": float(np.max(np.abs(v), initial=0.0)) for k, v in reference.items()}
    if keys is None:
        # Imported here: the head registry needs TensorFlow, the limits above do not.
        from albert_tf.export.heads.kinds import parity_keys_of

        keys = parity_keys_of(reference)
    if keys is None:
        return figures
    if keys.top1 in reference:
        agree = reference[keys.top1].argmax(-1) == candidate[keys.top1].argmax(-1)
        if keys.top1_at_masked_positions:
            agree = agree[masked_lm_weights > 0]
        figures["top1_agreement"] = float(agree.mean())
    if keys.cosine in reference:
        cosines = _cosines(reference[keys.cosine], candidate[keys.cosine])
        figures["min_cosine"], figures["mean_cosine"] = float(cosines.min()), float(cosines.mean())
    return figures


def merge_figures(figures_list: list[dict[str, float]]) -> dict[str, float]:
    """The worst of each figure over several signatures (largest diff, smallest agreement)."""
    merged = {}
    for figures in figures_list:
        for key, value in figures.items():
            worst = max if key.startswith(("max_abs_diff/", "max_abs/")) else min
            merged[key] = value if key not in merged else worst(merged[key], value)
    return merged


@dataclasses.dataclass(frozen=True)
class RelativeDiffLimit:
    """Every output within `ParityThresholds.<threshold>` per unit of its scale (max(1, max |output|)).

    Args:
        threshold: the `ParityThresholds` field that holds the limit (`fp16_relative_diff`, ...).

    Example:
        >>> RelativeDiffLimit("fp32_relative_diff").failures(figures, ParityThresholds())
    """

    threshold: str

    def __post_init__(self):
        if self.threshold not in {f.name for f in dataclasses.fields(ParityThresholds)}:
            raise ValueError(f"{self.threshold!r} is no field of ParityThresholds")

    def failures(self, figures: dict[str, float], thresholds: ParityThresholds) -> list[str]:
        """Why `figures` (of `parity_figures`) fail this limit; empty if they pass."""
        limit = getattr(thresholds, self.threshold)
        failures = []
        for key, value in figures.items():
            if not key.startswith("max_abs_diff/"):
                continue
            output = key.split("/", 1)[1]
            scale = max(1.0, figures.get(f"max_abs/{output}", 1.0))
            if not value <= limit * scale:  # NaN fails
                why = f" ({limit:g} x output scale {scale:.3g})" if scale > 1.0 else ""
                failures.append(f"{output} max abs diff {value:.3g} > {limit * scale:.3g}{why}")
        return failures


@dataclasses.dataclass(frozen=True)
class Int8Limit:
    """Top-1 agreement and every example's cosine on the head's `ParityKeys` outputs, at least
    `ParityThresholds.int8_min_top1_agreement` and `int8_min_cosine`.

    Example:
        >>> Int8Limit().failures(figures, ParityThresholds())
    """

    def failures(self, figures: dict[str, float], thresholds: ParityThresholds) -> list[str]:
        """Why `figures` (of `parity_figures`) fail this limit; empty if they pass."""
        failures = []
        if not figures["top1_agreement"] >= thresholds.int8_min_top1_agreement:  # NaN fails
            failures.append(
                f"top-1 agreement {figures['top1_agreement']:.4f} < "
                f"{thresholds.int8_min_top1_agreement}"
            )
        if not figures["min_cosine"] >= thresholds.int8_min_cosine:
            failures.append(
                f"min cosine {figures['min_cosine']:.5f} < {thresholds.int8_min_cosine}"
            )
        return failures
