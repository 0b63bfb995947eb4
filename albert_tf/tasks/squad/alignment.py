"""Character alignment of a SQuAD context with its SentencePiece pieces, as the original computes it.

The pieces are normalised text (lowercased, accents and extra whitespace gone), so answers, which
index the context by character, are mapped through a longest common subsequence between the
context's characters and the pieces' characters ("▁" read as a space). The DP is banded: row `i`
(context character) only visits columns `j` (piece character) in `[i - d, i + d)` with
`d = |n - m| + 5`, retried once with `d` doubled when the match covers at most 80 % of the context.
Cells outside the band read as 0, and ties break as the original's, so the traceback (and every
answer offset derived from it) is the original's.

`fast_alignment` normalises each character once, computes the band row by row with bit
operations (a row is a few machine words) and rebuilds the back-pointers only along the traceback.
Its yardstick, the algorithm written plainly cell by cell as the original runs it, is
`benchmarks/squad_alignment_reference.py` (the tests and the features benchmark compare the two).
"""

from __future__ import annotations

import dataclasses
import functools
import unicodedata
from collections.abc import Sequence

import numpy as np

from albert_tf.text.tokenization import SPIECE_UNDERLINE

# The match must cover more than this fraction of the context's characters.
MIN_MATCH_FRACTION = 0.8
# The band's half-width is |n - m| plus this.
BAND_MARGIN = 5


@dataclasses.dataclass(frozen=True)
class CharAlignment:
    """Matched characters between a context (length n) and its pieces' text (length m).

    Args:
        orig_to_chartok_index: per context character, its piece character, or None.
        chartok_to_orig_index: per piece character, its context character, or None.
        match_length: the LCS length of the last pass.

    Example:
        >>> a = fast_alignment("Ab", " ab", do_lower_case=True)
        >>> a.orig_to_chartok_index, a.chartok_to_orig_index
        ([1, 2], [None, 0, 1])
    """

    orig_to_chartok_index: list[int | None]
    chartok_to_orig_index: list[int | None]
    match_length: int

    def is_mismatch(self) -> bool:
        """True when the original gives up on the paragraph (too little text matched)."""
        n = len(self.orig_to_chartok_index)
        return (
            all(v is None for v in self.orig_to_chartok_index)
            or self.match_length < MIN_MATCH_FRACTION * n
        )


def pieces_text(pieces: Sequence[str]) -> str:
    """The pieces' characters, concatenated, with "▁" read as a space."""
    return "".join(pieces).replace(SPIECE_UNDERLINE, " ")


@functools.lru_cache(maxsize=65536)
def normalize_char(char: str, lower: bool) -> str:
    """One context character as it appears in the pieces (may be "" or several characters)."""
    # The original's `preprocess_text(char, lower, remove_space=False)`: whitespace is kept as is.
    text = unicodedata.normalize("NFKD", char)
    text = "".join(c for c in text if not unicodedata.combining(c))
    return text.lower() if lower else text


def checked_lengths(paragraph_text: str, tok_cat_text: str) -> tuple[int, int]:
    """(n, m), the lengths of the context and of its pieces' text; ValueError if either is 0."""
    if not paragraph_text or not tok_cat_text:
        raise ValueError("cannot align an empty context or empty pieces")
    return len(paragraph_text), len(tok_cat_text)


def _context_codes(paragraph_text: str, lower: bool) -> np.ndarray:
    """Per context character, the code point of `normalize_char` (-1 if it is not one character)."""
    if paragraph_text.isascii():  # NFKD and mark stripping leave ASCII as it is
        text = paragraph_text.lower() if lower else paragraph_text
        return np.frombuffer(text.encode("ascii"), dtype=np.uint8).astype(np.int64)
    raw = np.frombuffer(paragraph_text.encode("utf-32-le"), dtype=np.uint32)
    distinct, inverse = np.unique(raw, return_inverse=True)
    normalized = [normalize_char(chr(c), lower) for c in distinct.tolist()]
    codes = np.array([ord(c) if len(c) == 1 else -1 for c in normalized], dtype=np.int64)
    return codes[inverse.reshape(-1)]


def _band_match_masks(codes_a: np.ndarray, b: str, d: int) -> list[int]:
    """Per context character i, bit k set where it equals piece character j = i - d + k."""
    n, m, width = len(codes_a), len(b), 2 * d
    padded_b = np.full(d + max(m, n + d), -2, dtype=np.int64)  # -2: no character, never equal
    padded_b[d : d + m] = np.frombuffer(b.encode("utf-32-le"), dtype=np.uint32)
    windows = np.lib.stride_tricks.sliding_window_view(padded_b, width)[:n]
    equal = windows == codes_a[:, None]
    if width <= 62:
        return (equal.astype(np.int64) @ (np.int64(1) << np.arange(width, dtype=np.int64))).tolist()
    packed = np.packbits(equal, axis=1, bitorder="little")
    return [int.from_bytes(row.tobytes(), "little") for row in packed]


def _band_rows(match_masks: list[int], d: int) -> tuple[list[int], list[int]]:
    """The banded LCS table, one row per context character, as (increments, bases).

    Row i covers piece characters j = i - d + k, k < 2d. Bit k of `increments[i]` is set where
    f[i, j] = f[i, j - 1] + 1, and `bases[i]` is f just left of the band, so
    f[i, j] = bases[i] + popcount(increments[i] & (2^(k+1) - 1)).

    This is the bit-parallel LCS recurrence (row vector V of "no increment" bits,
    V' = (V + U) | (V - U) with U = V & matches) confined to the band, which yields the
    original's band values exactly: its out-of-band zeros are never the maximum that a cell
    takes (left of the band f only grows from above; right of it the row is flat).
    """
    full = (1 << (2 * d)) - 1
    top = 1 << (2 * d - 1)
    no_increment = full  # the row above row 0: all zeros (its shift below keeps it so)
    base = 0
    increments, bases = [], []
    for match in match_masks:
        # Shift the band one column right: the column that leaves adds its increment to the base;
        # the column that enters continues the row flat.
        base += (no_increment & 1) ^ 1
        no_increment = (no_increment >> 1) | top
        u = no_increment & match
        if u:
            no_increment = ((no_increment + u) | (no_increment - u)) & full
        increments.append(full ^ no_increment)
        bases.append(base)
    return increments, bases


def fast_alignment(paragraph_text: str, tok_cat_text: str, do_lower_case: bool) -> CharAlignment:
    """The original's banded LCS alignment, computed on the band with bit operations.

    Args:
        paragraph_text: the context as written (n characters).
        tok_cat_text: `pieces_text` of its pieces (m characters).
        do_lower_case: whether the pieces were lowercased.
    """
    n, m = checked_lengths(paragraph_text, tok_cat_text)
    codes = _context_codes(paragraph_text, do_lower_case)
    d = abs(n - m) + BAND_MARGIN
    for attempt in range(2):
        match_masks = _band_match_masks(codes, tok_cat_text, d)
        increments, bases = _band_rows(match_masks, d)
        last = increments[n - 1] & ((2 << (m - n + d)) - 1)
        match_length = bases[n - 1] + last.bit_count()
        if attempt or match_length > MIN_MATCH_FRACTION * n:
            break
        d *= 2  # one retry with a band twice as wide

    width = 2 * d
    orig_to_chartok: list[int | None] = [None] * n
    chartok_to_orig: list[int | None] = [None] * m
    i, j = n - 1, m - 1
    # Back-pointers as the original sets them: 0 (up) by default, 1 (left) if strictly larger,
    # 2 (diagonal) on a match if strictly larger still; cells outside the band read 0. Row 0
    # has no "up", and a row-0 cell that neither grew from the left nor matched has no
    # back-pointer: the traceback stops there, as it stops on leaving the band.
    while i >= 0 and j >= 0:
        k = j - i + d
        if not 0 <= k < width:
            break
        row = increments[i]
        left = bases[i] + (row & ((1 << k) - 1)).bit_count() if k else 0
        matched = match_masks[i] >> k & 1
        if i == 0:
            if left > 0:
                step = 1
            elif matched:
                step = 2
            else:
                break
        else:
            above = increments[i - 1]
            if k + 1 < width:
                up = bases[i - 1] + (above & ((4 << k) - 1)).bit_count()
                diagonal = up - (above >> (k + 1) & 1)
            else:
                up = 0
                diagonal = bases[i - 1] + above.bit_count()
            best, step = up, 0
            if left > best:
                best, step = left, 1
            if matched and diagonal + 1 > best:
                step = 2
        if step == 2:
            orig_to_chartok[i], chartok_to_orig[j] = j, i
            i, j = i - 1, j - 1
        elif step == 1:
            j -= 1
        else:
            i -= 1
    return CharAlignment(orig_to_chartok, chartok_to_orig, match_length)


def convert_index(
    index: Sequence[int | None], pos: int, m: int | None = None, is_start: bool = True
) -> int:
    """Maps `pos` through an alignment `index`, filling an unmatched position as the original.

    An unmatched position takes its nearest matched neighbours' values: a start goes just after
    the one before, an end just before the one after, each clamped to what the neighbours allow
    (and to `m - 1` when `m`, the target's length, is given and nothing follows).

    Example:
        >>> convert_index([0, None, 3], 1), convert_index([0, None, 3], 1, is_start=False)
        (1, 2)
    """
    if index[pos] is not None:
        return index[pos]
    n = len(index)
    rear = pos
    while rear < n - 1 and index[rear] is None:
        rear += 1
    front = pos
    while front > 0 and index[front] is None:
        front -= 1
    before, after = index[front], index[rear]
    if before is None and after is None:
        raise ValueError("the alignment matched no character")
    if before is None:
        if after >= 1:
            return 0 if is_start else after - 1
        return after
    if after is None:
        if m is not None and before < m - 1:
            return before + 1 if is_start else m - 1
        return before
    if after > before + 1:
        return before + 1 if is_start else after - 1
    return after if is_start else before
