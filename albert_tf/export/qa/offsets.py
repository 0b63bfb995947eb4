"""In-graph SQuAD context pieces with their characters in the ORIGINAL context.

The Python path (`albert_tf.tasks.squad.features.tokenize_paragraph`) tokenizes a context and maps
each piece back to context characters through a banded LCS between the context and the pieces'
text. Here the same offsets are computed without a DP, from what the normalisation does to each
character:

- `preprocess_text` is per character except for whitespace: a run of `str.isspace` characters
  becomes one space (none at either end), every other character its NFKD-without-marks, lowered
  expansion (0, 1 or more characters). So each character of the normalised text N has a known
  owner in the context.
- SentencePiece (the classic op, which reports each piece's surface in N) tiles N; a piece's text
  is matched to its surface right-aligned (its leading "▁" stands for the space before it, or for
  nothing at the very start), which is where SentencePiece's own normalizer (zero-width characters
  dropped or read as spaces) lets the two differ.
- The pieces the model sees are `FastSentencepieceTokenizer`'s (equal to the `sentencepiece`
  library's, see `albert_tf.text.tf_tokenization`), laid over the same piece text by length, plus
  the digit-comma rule, whose re-encoded pieces add one unmatched "▁" where the piece had none.
- A piece character counts as matched, as the LCS would match it, when it equals what its owner
  normalises to on its own (`alignment.normalize_char`): owners expanding to several characters
  match nothing. Where the LCS could pair a piece's leading "▁" with several space-like context
  characters (a whitespace run, accents that normalise to a space), its tie-breaking takes the
  earliest, after the previous piece's surface (for the first piece, a leading whitespace run
  first).
- Unmatched characters are resolved exactly as the original's `convert_index` does.

This equals the LCS's piece offsets on every context of the SQuAD v1.1 and v2.0 dev sets (2,067
distinct contexts) and of the repo's fixtures (tests/test_export_qa.py). It can differ on text
made to confuse it: where a character expanding to several (a ligature, "™", "½") sits right
before the letters it expands to ("ﬁf", "ﬂl"), the LCS pairs those letters with the expansion's
copies instead; on contexts salted with such characters at random, 4-5 % get a piece offset off by
one to three characters. A context whose matched characters cover less than 80 % of it is one the
Python path skips (`aligned` is False there).
"""

from __future__ import annotations

import functools
import sys

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from albert_tf.export.qa.ragged_rows import convert_index, first_at_or_after, row_cumsum, row_totals
from albert_tf.tasks.squad.alignment import MIN_MATCH_FRACTION

# The per-code-point table behind the layer's own `normalize`, so that lengths agree with it.
from albert_tf.text.tf_tokenization import AlbertPreprocessingLayer, _char_mapping
from albert_tf.text.tokenization import SPIECE_UNDERLINE

_SPACE = ord(" ")
_SIGMA, _SMALL_SIGMA = 0x3A3, 0x3C3


@functools.cache
def whitespace_code_points() -> tuple[int, ...]:
    """The code points `str.isspace` (hence `str.split` and `str.strip`) treats as whitespace."""
    return tuple(cp for cp in range(sys.maxunicode + 1) if chr(cp).isspace())


def _dense_table(keys, values, default_identity: bool, fill=None) -> np.ndarray:
    size = max(keys, default=0) + 1
    table = np.arange(size, dtype=np.int32) if default_identity else np.full(size, fill, np.int32)
    table[np.asarray(keys, np.int64)] = values
    return table


class _Lookup:
    """Per code point value from a dense table; code points past it take `beyond` (or themselves)."""

    def __init__(self, table: np.ndarray, beyond: int | None):
        self.table = tf.constant(table)
        self.size = len(table)
        self.beyond = beyond

    def __call__(self, code_points: tf.Tensor) -> tf.Tensor:
        inside = (code_points >= 0) & (code_points < self.size)
        found = tf.gather(self.table, tf.clip_by_value(code_points, 0, self.size - 1))
        other = code_points if self.beyond is None else tf.fill(tf.shape(code_points), self.beyond)
        return tf.where(inside, found, other)


def _ragged_rows(rows: list[list[int]]) -> tf.RaggedTensor:
    """A constant int32 ragged [len(rows), (k)] (`tf.ragged.constant` is slow on 30k rows)."""
    values = np.fromiter((v for row in rows for v in row), np.int32)
    return tf.RaggedTensor.from_row_lengths(values, np.array([len(r) for r in rows], np.int64))


class ContextPieces:
    """Context strings -> the model's piece ids and each piece's first and last context character.

    Equal to `tokenize_paragraph(context, tokenizer)`'s `piece_ids`, `tok_start_to_orig_index`,
    `tok_end_to_orig_index` (character offsets count code points, as Python `str` indices do).

    Args:
        preprocessing: the `AlbertPreprocessingLayer` of the model (its SentencePiece model and
            `do_lower_case`).

    Example:
        >>> pieces = ContextPieces(AlbertPreprocessingLayer.from_file("30k-clean.model"))
        >>> out = pieces(tf.constant(["Rollo did."]))
        >>> out["start_char"].to_list(), out["end_char"].to_list()  # ▁roll, o, ▁did, .
        ([[0, 4, 5, 9]], [[3, 4, 8, 9]])
    """

    def __init__(self, preprocessing: AlbertPreprocessingLayer):
        self.preprocessing = preprocessing
        tokenizer = preprocessing.tokenizer
        lower = preprocessing.do_lower_case
        self.unk_id = tokenizer.unk_id
        self._fast = tf_text.FastSentencepieceTokenizer(preprocessing.model_proto)
        self.sentencepiece_with_offsets = tf_text.SentencepieceTokenizer(preprocessing.model_proto)
        keys, rows = _char_mapping(lower)
        # What each code point normalises to on its own: one code point, or -1 (none or several).
        singles = [row[0] if len(row) == 1 else -1 for row in rows]
        if lower:  # the table keeps Σ for the context-dependent final sigma; alone it is σ
            keys, singles = [*keys, _SIGMA], [*singles, _SMALL_SIGMA]
            rows = [*rows, [_SMALL_SIGMA]]
        self._single = _Lookup(_dense_table(keys, singles, default_identity=True), None)
        self._length = _Lookup(_dense_table(keys, [len(r) for r in rows], False, fill=1), 1)
        self._is_space = _Lookup(_dense_table(whitespace_code_points(), 1, False, fill=0), 0)
        vocab = tokenizer.convert_ids_to_tokens(range(tokenizer.vocab_size))
        piece_codes = [[ord(c) for c in p.replace(SPIECE_UNDERLINE, " ")] for p in vocab]
        self._piece_codes = _ragged_rows(piece_codes)
        self._piece_length = tf.constant([len(c) for c in piece_codes], tf.int64)
        rewrites = tokenizer.digit_comma_rewrites()
        for piece_id, new_ids in rewrites.items():
            piece = vocab[piece_id]
            expected = SPIECE_UNDERLINE + piece.lstrip(SPIECE_UNDERLINE)
            if "".join(vocab[i] for i in new_ids) != expected:
                raise ValueError(
                    f"digit-comma piece {piece!r} re-encodes as {[vocab[i] for i in new_ids]}, "
                    f"not {expected!r}"
                )
        self._rewritten = _ragged_rows([rewrites.get(i, [i]) for i in range(len(vocab))])
        self._is_rule = tf.constant([i in rewrites for i in range(len(vocab))])
        # A re-encoded piece starts with SentencePiece's "▁" even where the piece had none.
        self._adds_space = tf.constant(
            [i in rewrites and not vocab[i].startswith(SPIECE_UNDERLINE) for i in range(len(vocab))]
        )

    def __call__(self, contexts: tf.Tensor) -> dict[str, tf.Tensor]:
        """`contexts` string [B] -> `ids`, `start_char`, `end_char` int32 ragged [B, (pieces)];
        `aligned` bool [B] (False where the Python path skips the context: too little matched);
        `num_chars` int32 [B] (the context's length in code points); `codes` int32 and
        `is_space` bool ragged [B, (chars)] (its code points, and which are `str.isspace`)."""
        codes = tf.strings.unicode_decode(contexts, "UTF-8", errors="replace")
        num_chars = codes.row_lengths()
        is_space = self._is_space(codes.flat_values) > 0
        owners, leading_owner = self._owners_in_normalised(codes, is_space)
        normalised = self.preprocessing.normalize(contexts)
        n_codes, n_bytes = tf.strings.unicode_decode_with_offsets(
            normalised, "UTF-8", errors="replace"
        )
        consistent = tf.equal(n_codes.row_lengths(), owners["owner"].row_lengths())

        classic_ids, start_bytes, end_bytes = self.sentencepiece_with_offsets.tokenize_with_offsets(
            normalised
        )
        classic_ids = tf.cast(classic_ids, tf.int32)
        surface = self._surfaces(normalised, n_codes, n_bytes, classic_ids, start_bytes, end_bytes)
        text_map, text_splits = self._piece_text_map(
            classic_ids, surface, n_codes, owners, leading_owner, consistent
        )
        fast_ids = tf.cast(self._fast.tokenize(normalised), tf.int32)
        final = self._final_pieces(fast_ids, classic_ids, surface, text_map, text_splits)
        ids, chartok, chartok_splits = final["ids"], final["chartok"], final["chartok_splits"]
        piece_rows = ids.value_rowids()
        starts = row_cumsum(final["lengths"], ids.row_splits, exclusive=True)
        starts += tf.gather(chartok_splits, piece_rows)
        ends = starts + final["lengths"] - 1
        start_char = convert_index(chartok, chartok_splits, starts, piece_rows, num_chars, True)
        end_char = convert_index(chartok, chartok_splits, ends, piece_rows, num_chars, False)
        matched = row_totals(tf.cast(chartok >= 0, tf.int64), chartok_splits)
        enough = tf.cast(matched, tf.float64) >= MIN_MATCH_FRACTION * tf.cast(num_chars, tf.float64)
        return {
            "ids": ids,
            "start_char": ids.with_flat_values(tf.cast(start_char, tf.int32)),
            "end_char": ids.with_flat_values(tf.cast(end_char, tf.int32)),
            "aligned": final["ok"] & consistent & (matched > 0) & enough,
            "num_chars": tf.cast(num_chars, tf.int32),
            "codes": codes,
            "is_space": codes.with_flat_values(is_space),
        }

    def _owners_in_normalised(self, codes: tf.RaggedTensor, is_space: tf.Tensor):
        """Per character of the normalised text: the context character (row-local index) it can
        match, or -1, and the code point it must be to match; per row, the character the leading
        "▁" can match (the first space-like one of a leading whitespace run), or -1."""
        flat, splits = codes.flat_values, codes.row_splits
        rows = codes.value_rowids()
        index = tf.range(tf.size(flat, out_type=tf.int64))
        position = index - tf.gather(splits, rows)
        single = self._single(flat)
        non_space = tf.cast(~is_space, tf.int64)
        seen = row_cumsum(non_space, splits, exclusive=False)
        total = tf.gather(row_totals(non_space, splits), rows)
        previous_space = tf.concat([[False], is_space[:-1]], 0) & (position > 0)
        run_start = is_space & ~previous_space
        interior = (seen > 0) & (seen < total)
        lengths = tf.where(
            is_space, tf.cast(run_start & interior, tf.int64), tf.cast(self._length(flat), tf.int64)
        )
        # A collapsed run matches through its first character that normalises to a space.
        run = tf.cumsum(tf.cast(run_start, tf.int64)) - 1
        num_runs = tf.reduce_sum(tf.cast(run_start, tf.int64))
        big = tf.constant(np.iinfo(np.int64).max, tf.int64)
        candidate = tf.where(is_space & tf.equal(single, _SPACE), position, big)
        first_space = tf.math.unsorted_segment_min(
            tf.boolean_mask(candidate, is_space), tf.boolean_mask(run, is_space), num_runs
        )
        # The trailing `big` keeps the gather in range when no context has whitespace.
        run_match = tf.gather(tf.concat([first_space, [big]], 0), tf.maximum(run, 0))
        run_match = tf.where(run_match == big, tf.constant(-1, tf.int64), run_match)
        owner = tf.where(
            is_space, run_match, tf.where(tf.equal(lengths, 1), position, tf.constant(-1, tf.int64))
        )
        code = tf.where(is_space, tf.fill(tf.shape(single), _SPACE), single)
        owner = tf.where(code < 0, tf.constant(-1, tf.int64), owner)
        normalised_lengths = row_totals(lengths, splits)
        owners = {
            "owner": tf.RaggedTensor.from_row_lengths(
                tf.repeat(owner, lengths), normalised_lengths
            ),
            "code": tf.RaggedTensor.from_row_lengths(tf.repeat(code, lengths), normalised_lengths),
        }
        starts_with_space = tf.gather(
            tf.concat([is_space, [False]], 0), tf.minimum(splits[:-1], tf.size(flat, tf.int64))
        ) & (codes.row_lengths() > 0)
        leading = tf.gather(
            tf.concat([run_match, [-1]], 0), tf.minimum(splits[:-1], tf.size(flat, tf.int64))
        )
        return owners, tf.where(starts_with_space, leading, tf.constant(-1, tf.int64))

    def _surfaces(self, normalised, n_codes, n_bytes, classic_ids, start_bytes, end_bytes):
        """Each classic piece's surface [start, end) in normalised-text characters (row-local)."""
        byte_lengths = tf.cast(tf.strings.length(normalised, unit="BYTE"), tf.int64)
        byte_base = tf.concat([[0], tf.cumsum(byte_lengths)], 0)
        char_starts = n_bytes.flat_values + tf.gather(byte_base, n_codes.value_rowids())
        rows = classic_ids.value_rowids()
        char_base = tf.gather(n_codes.row_splits, rows)
        return {
            key: tf.searchsorted(
                char_starts,
                tf.cast(offsets.flat_values, tf.int64) + tf.gather(byte_base, rows),
                out_type=tf.int64,
            )
            - char_base
            for key, offsets in (("start", start_bytes), ("end", end_bytes))
        }

    def _piece_text_map(self, classic_ids, surface, n_codes, owners, leading_owner, consistent):
        """Per character of the pieces' text (before the digit-comma rule), the context character
        it matches or -1; and the text's row splits."""
        ids = classic_ids.flat_values
        rows = classic_ids.value_rowids()
        is_unk = tf.equal(ids, self.unk_id)
        lengths = tf.where(
            is_unk, surface["end"] - surface["start"], tf.gather(self._piece_length, ids)
        )
        text_splits = tf.concat([[0], tf.cumsum(row_totals(lengths, classic_ids.row_splits))], 0)
        piece_start = row_cumsum(lengths, classic_ids.row_splits, exclusive=True)
        chars = tf.ragged.range(lengths)
        piece = chars.value_rowids()
        r = chars.flat_values
        row = tf.gather(rows, piece)
        n_base = tf.gather(n_codes.row_splits, row)
        last = tf.size(n_codes.flat_values, tf.int64) - 1
        from_table = tf.gather(
            self._piece_codes.flat_values,
            tf.gather(self._piece_codes.row_splits, tf.gather(ids, piece)) + r,
        )
        n_index = tf.gather(surface["start"], piece) + r
        from_surface = tf.gather(n_codes.flat_values, tf.clip_by_value(n_base + n_index, 0, last))
        text = tf.where(tf.gather(is_unk, piece), from_surface, from_table)
        # Right-aligned on the surface: the last characters of both correspond.
        target = tf.gather(surface["end"], piece) - (tf.gather(lengths, piece) - r)
        inside = (target >= tf.gather(surface["start"], piece)) & tf.gather(consistent, row)
        flat_target = tf.clip_by_value(n_base + target, 0, tf.maximum(last, 0))
        owner = tf.where(inside, tf.gather(owners["owner"].flat_values, flat_target), -1)
        code = tf.where(inside, tf.gather(owners["code"].flat_values, flat_target), -1)
        # A piece's leading "▁" is matched, as the LCS breaks ties, with the earliest space-like
        # character after the previous piece's surface (a leading whitespace run first).
        first_piece = tf.equal(piece_start, 0)
        previous_end = tf.where(
            first_piece, tf.zeros_like(piece_start), tf.concat([[0], surface["end"][:-1]], 0)
        )
        leading_space = tf.equal(r, 0) & tf.equal(text, _SPACE)
        earliest = first_at_or_after(
            (owners["owner"].flat_values >= 0) & tf.equal(owners["code"].flat_values, _SPACE),
            n_base + tf.gather(previous_end, piece),
            n_base + target,
        )
        spaced = tf.where(
            earliest >= 0, tf.gather(owners["owner"].flat_values, tf.maximum(earliest, 0)), -1
        )
        before_all = tf.where(tf.gather(first_piece, piece), tf.gather(leading_owner, row), -1)
        spaced = tf.where(before_all >= 0, before_all, spaced)
        owner = tf.where(leading_space & tf.gather(consistent, row), spaced, owner)
        code = tf.where(leading_space, _SPACE, code)
        return tf.where((owner >= 0) & tf.equal(text, code), owner, -1), text_splits

    def _final_pieces(self, fast_ids, classic_ids, surface, text_map, text_splits):
        """The digit-comma-rewritten fast pieces over the pieces' text: their ids, lengths, the
        per-character match of their text, its row splits, and whether the rows agree."""
        ids = fast_ids.flat_values
        rows = fast_ids.value_rowids()
        is_unk = tf.equal(ids, self.unk_id)
        classic_unk = tf.equal(classic_ids.flat_values, self.unk_id)
        unk_lengths = tf.boolean_mask(surface["end"] - surface["start"], classic_unk)
        unk_counts = row_totals(tf.cast(classic_unk, tf.int64), classic_ids.row_splits)
        fast_unk_counts = row_totals(tf.cast(is_unk, tf.int64), fast_ids.row_splits)
        unk_base = tf.concat([[0], tf.cumsum(unk_counts)], 0)
        unk_rank = row_cumsum(tf.cast(is_unk, tf.int64), fast_ids.row_splits, exclusive=True)
        unk_index = tf.clip_by_value(
            tf.gather(unk_base, rows) + unk_rank,
            0,
            tf.maximum(tf.size(unk_lengths, tf.int64) - 1, 0),
        )
        unk_length = tf.gather(tf.concat([unk_lengths, [0]], 0), unk_index)
        lengths = tf.where(is_unk, unk_length, tf.gather(self._piece_length, ids))
        text_lengths = text_splits[1:] - text_splits[:-1]
        ok = tf.equal(row_totals(lengths, fast_ids.row_splits), text_lengths) & tf.equal(
            unk_counts, fast_unk_counts
        )
        start = row_cumsum(lengths, fast_ids.row_splits, exclusive=True)
        start = tf.gather(text_splits, rows) + start
        chars = tf.ragged.range(start, start + lengths)
        last = tf.maximum(tf.size(text_map, tf.int64) - 1, 0)
        mapped = chars.with_flat_values(
            tf.gather(tf.concat([text_map, [-1]], 0), tf.clip_by_value(chars.flat_values, 0, last))
        )
        adds_space = tf.gather(self._adds_space, ids)
        extra = tf.RaggedTensor.from_row_lengths(
            tf.fill([tf.reduce_sum(tf.cast(adds_space, tf.int64))], tf.constant(-1, tf.int64)),
            tf.cast(adds_space, tf.int64),
        )
        per_piece = tf.concat([extra, mapped], axis=1)
        piece_chars = per_piece.row_lengths()
        chartok_splits = tf.concat(
            [[0], tf.cumsum(row_totals(piece_chars, fast_ids.row_splits))], 0
        )
        rewritten = tf.gather(self._rewritten, ids)
        is_rule = tf.repeat(tf.gather(self._is_rule, ids), rewritten.row_lengths())
        new_ids = rewritten.flat_values
        new_lengths = tf.where(
            is_rule,
            tf.gather(self._piece_length, new_ids),
            tf.repeat(lengths, rewritten.row_lengths()),
        )
        final_ids = tf.RaggedTensor.from_row_lengths(
            new_ids, row_totals(rewritten.row_lengths(), fast_ids.row_splits)
        )
        return {
            "ids": final_ids,
            "lengths": new_lengths,
            "chartok": per_piece.flat_values,
            "chartok_splits": chartok_splits,
            "ok": ok,
        }
