"""The original's SQuAD character alignment written plainly, cell by cell, as the original runs it:
both characters normalised at every cell, a dense float32 table, a dict of back-pointers. The
yardstick for `albert_tf.tasks.squad.alignment.fast_alignment`: `tests/test_squad_features.py`
holds the two equal, and `benchmarks/squad_features.py` times the original's cost with it.
"""

from __future__ import annotations

import numpy as np

from albert_tf.tasks.squad.alignment import (
    BAND_MARGIN,
    MIN_MATCH_FRACTION,
    CharAlignment,
    checked_lengths,
    normalize_char,
)

# The original's smallest DP table side (it reuses one table, grown on demand).
MIN_TABLE_SIZE = 1024


def reference_alignment(
    paragraph_text: str, tok_cat_text: str, do_lower_case: bool
) -> CharAlignment:
    """The original's banded LCS, cell by cell; slow, the yardstick for `fast_alignment`.

    Args:
        paragraph_text: the context as written (n characters).
        tok_cat_text: `pieces_text` of its pieces (m characters).
        do_lower_case: whether the pieces were lowercased.
    """
    n, m = checked_lengths(paragraph_text, tok_cat_text)
    f = np.zeros((max(n, MIN_TABLE_SIZE), max(m, MIN_TABLE_SIZE)), dtype=np.float32)
    g: dict[tuple[int, int], int] = {}

    def run(max_dist: int) -> None:
        f.fill(0)
        g.clear()
        for i in range(n):
            for j in range(i - max_dist, i + max_dist):
                if j >= m or j < 0:
                    continue
                if i > 0:
                    g[(i, j)] = 0
                    f[i, j] = f[i - 1, j]
                if j > 0 and f[i, j - 1] > f[i, j]:
                    g[(i, j)] = 1
                    f[i, j] = f[i, j - 1]
                f_prev = f[i - 1, j - 1] if i > 0 and j > 0 else 0
                same = (
                    normalize_char.__wrapped__(paragraph_text[i], do_lower_case) == tok_cat_text[j]
                )
                if same and f_prev + 1 > f[i, j]:
                    g[(i, j)] = 2
                    f[i, j] = f_prev + 1

    max_dist = abs(n - m) + BAND_MARGIN
    for _ in range(2):
        run(max_dist)
        # A Python float threshold: the original compared a float32 scalar with a Python float,
        # which NumPy 1 evaluated in float64.
        if float(f[n - 1, m - 1]) > MIN_MATCH_FRACTION * n:
            break
        max_dist *= 2

    orig_to_chartok: list[int | None] = [None] * n
    chartok_to_orig: list[int | None] = [None] * m
    i, j = n - 1, m - 1
    while i >= 0 and j >= 0 and (i, j) in g:
        if g[(i, j)] == 2:
            orig_to_chartok[i], chartok_to_orig[j] = j, i
            i, j = i - 1, j - 1
        elif g[(i, j)] == 1:
            j -= 1
        else:
            i -= 1
    return CharAlignment(orig_to_chartok, chartok_to_orig, int(f[n - 1, m - 1]))
