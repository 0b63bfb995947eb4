"""The n-gram length distribution of the original whole-word masking, shared by data prep's
masker and the in-graph one so that both draw n from the same float thresholds."""

from __future__ import annotations


def ngram_cumulative(ngram: int, favor_shorter_ngram: bool = True) -> list[float]:
    """Cumulative p(n) for n = 1..ngram with p(n) ∝ 1/n (reversed unless favor_shorter_ngram).

    Example:
      >>> ngram_cumulative(3)  # p = 6/11, 3/11, 2/11
      [0.5454545454545455, 0.8181818181818183, 1.0]
    """
    weights = [1.0 / n for n in range(1, ngram + 1)]
    if not favor_shorter_ngram:
        weights.reverse()
    total, acc, cumulative = sum(weights), 0.0, []
    for w in weights:
        acc += w / total
        cumulative.append(acc)
    cumulative[-1] = 1.0
    return cumulative
