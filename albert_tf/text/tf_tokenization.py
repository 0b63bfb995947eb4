"""In-graph twin of `albert_tf.text.tokenization`: text -> packed ALBERT inputs inside TensorFlow graphs.

`AlbertPreprocessingLayer` reproduces `AlbertTokenizer.encode` (`preprocess_text` + SentencePiece +
the digit-comma rule) and `AlbertTokenizer.pack` with TensorFlow and tensorflow-text ops, so it runs in
`tf.data.Dataset.map`, under `tf.function` and inside an exported SavedModel.

How each step stays exact:
- Whitespace collapse uses a regex class of exactly the characters Python's `str.split()` splits on
  (RE2's `\\s` would miss e.g. U+001C and U+3000).
- NFKD + dropping combining marks + lowercasing is, per code point, a fixed mapping (the only
  reordering NFKD does is among combining marks, which are all dropped), so it is applied as a table
  built from Python's own `unicodedata`/`str.lower` at construction. This matches `preprocess_text`
  on every code point of the running Python, where tf-text's ICU `normalize_utf8` and
  `tf.strings.lower` differ on ~160 code points (newer/older Unicode versions; `lower` also stops at NUL).
- Python lowercases a capital sigma to final `ς` by context; a regex with Python's cased/case-ignorable
  classes reproduces that.
- SentencePiece runs as `tensorflow_text.FastSentencepieceTokenizer`, not the classic
  `SentencepieceTokenizer` op: it breaks near-ties like the `sentencepiece` library far more often
  (see below), it is about 2x faster, and it is the variant TFLite can convert.
- The digit-comma rule depends only on the piece, so it is a table from rule piece ids to their
  re-encoded ids (built with `AlbertTokenizer`).
- Pair truncation uses `tensorflow_text.RoundRobinTrimmer`, whose allocation equals the original
  `_truncate_seq_pair` (pop from the longer side, B on ties).

Measured: equal ids on the 420 golden cases and on 378k real texts (all corpora, GLUE fields, SQuAD).
Known differences:
- Invalid UTF-8 bytes (impossible in a Python `str`) become U+FFFD here.
- SentencePiece near-ties: where two segmentations score equal up to float rounding (e.g. "888" as
  8|88 or 88|8 right after an unknown character), FastSentencepieceTokenizer may pick the other one:
  7 of 30,000 random 0-300-char strings of mixed scripts (the classic op: 44); none in real text.
- The Unicode tables come from the Python that builds the layer; a layer built under another Python
  version follows that version's Unicode data for newly assigned characters.
"""

from __future__ import annotations

import base64
import functools
import unicodedata

import keras
import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from albert_tf.text.tokenization import AlbertTokenizer

_SEPARATOR = "\0"  # A starter (combining class 0) that no code point's NFKD contains.
_SIGMA = "\u03a3"


@functools.cache
def _assigned_code_points() -> list[int]:
    """Code points Python's unicodedata knows; all others map to themselves and have no case."""
    return [cp for cp in range(0x110000) if unicodedata.category(chr(cp)) not in ("Cn", "Co", "Cs")]


def _regex_class(code_points, negate: bool = False) -> str:
    """A compact RE2 character class of the given code points."""
    cps, parts, i = sorted(code_points), [], 0
    while i < len(cps):
        j = i
        while j + 1 < len(cps) and cps[j + 1] == cps[j] + 1:
            j += 1
        parts.append(f"\\x{{{cps[i]:x}}}" + (f"-\\x{{{cps[j]:x}}}" if j > i else ""))
        i = j + 1
    return ("[^" if negate else "[") + "".join(parts) + "]"


@functools.cache
def _char_mapping(lower: bool) -> tuple[list[int], list[list[int]]]:
    """(keys, rows): code points that NFKD + mark dropping (+ lower) change, and their output.

    With `lower`, capital sigma is left as is: its lowercase depends on context (see `_final_sigma_regex`).
    """
    chars = [
        chr(cp) for cp in _assigned_code_points() if cp != ord(_SEPARATOR)
    ]  # NUL maps to itself.
    # One call on a separator-joined string is several times faster than a call per code point.
    outputs = unicodedata.normalize("NFKD", _SEPARATOR.join(chars))
    outputs = outputs.translate({ord(c): None for c in chars if unicodedata.combining(c)}).split(
        _SEPARATOR
    )
    assert len(outputs) == len(chars)
    if lower:
        lowered = _SEPARATOR.join(outputs).lower().split(_SEPARATOR)
        # str.lower is per character except for sigma (and İ, which NFKD already decomposed).
        outputs = [
            low if _SIGMA not in out else "".join(ch if ch == _SIGMA else ch.lower() for ch in out)
            for out, low in zip(outputs, lowered)
        ]
    changed = [
        (ord(char), [ord(c) for c in out]) for char, out in zip(chars, outputs) if out != char
    ]
    return [k for k, _ in changed], [row for _, row in changed]


@functools.cache
def _sigma_classes() -> tuple[frozenset[int], frozenset[int]]:
    """(cased, case_ignorable) code points as Python's `str.lower` uses them for the final sigma.

    Read off `str.lower` itself: Σ lowers to ς exactly when it is preceded (skipping case-ignorables)
    by a cased char and not followed (likewise) by one.
    """
    chars = [
        chr(cp) for cp in _assigned_code_points() if cp != 0x130
    ]  # İ lowers to 2 chars; it is cased.
    probe = "".join(f"\u03b1{c}{_SIGMA}\0" for c in chars).lower()[2::4]
    cased_or_ignorable = {ord(c) for c, low in zip(chars, probe) if low == "\u03c2"} | {0x130}
    probe = "".join(f"{c}{_SIGMA}\0" for c in chars).lower()[1::3]
    cased_not_ignorable = {ord(c) for c, low in zip(chars, probe) if low == "\u03c2"} | {0x130}
    ignorable = cased_or_ignorable - cased_not_ignorable
    # A char can be both (e.g. U+0345); Python skips it as case-ignorable, so "cased" here excludes it.
    return frozenset(cased_not_ignorable), frozenset(ignorable)


@functools.cache
def _final_sigma_regex() -> str:
    """RE2 pattern for Python's Final_Sigma context: cased (case-ignorable)* Σ !((case-ignorable)* cased).

    Runs after the per-code-point lowercasing, with Σ kept: lowercasing never moves a char between
    the two classes (checked in tests), so the context reads the same on the lowered string.
    """
    cased, ignorable = _sigma_classes()
    ignorable_class = _regex_class(ignorable)
    return (
        f"({_regex_class(cased)}{ignorable_class}*){_SIGMA}"
        f"({ignorable_class}*(?:{_regex_class(cased | ignorable, negate=True)}|$))"
    )


@functools.cache
def _whitespace_regex() -> str:
    return _regex_class([cp for cp in _assigned_code_points() if chr(cp).isspace()]) + "+"


class _ExpansionTable:
    """In-graph map from non-negative ints to int sequences; ints not in the table map to themselves."""

    def __init__(self, keys, rows):
        self.max_key = max(keys, default=0)
        # A dense slot array makes the lookup one gather (2-3x faster than searchsorted on code points).
        slot = np.full(self.max_key + 1, -1, np.int16 if len(keys) < 2**15 else np.int32)
        slot[np.asarray(keys, np.int64)] = np.arange(len(keys))
        self.empty = not keys
        self.slot = tf.constant(slot)
        self.splits = tf.constant(np.cumsum([0] + [len(r) for r in rows]), tf.int32)
        self.values = tf.constant(
            [v for r in rows for v in r], tf.int32, shape=[sum(map(len, rows))]
        )

    def expand(self, rt: tf.RaggedTensor) -> tf.RaggedTensor:
        """Replaces each value of a ragged [B, (n)] int32 tensor by its row; keeps the batch rows."""
        if self.empty:
            return rt
        flat = rt.flat_values
        slot = tf.cast(tf.gather(self.slot, tf.clip_by_value(flat, 0, self.max_key)), tf.int32)
        hit_rows = tf.where((slot >= 0) & (flat <= self.max_key) & (flat >= 0))[:, 0]
        hit_slots = tf.gather(slot, hit_rows)
        hit_starts = tf.gather(self.splits, hit_slots)
        hit_lengths = tf.gather(self.splits, hit_slots + 1) - hit_starts
        lengths = tf.tensor_scatter_nd_update(tf.ones_like(flat), hit_rows[:, None], hit_lengths)
        # Copy every value, then overwrite the (few) hits' output positions with their rows.
        out = tf.repeat(flat, lengths)
        out_starts = tf.gather(tf.cumsum(lengths, exclusive=True), hit_rows)
        positions = tf.ragged.range(out_starts, out_starts + hit_lengths)
        rows = tf.ragged.range(hit_starts, hit_starts + hit_lengths)
        out = tf.tensor_scatter_nd_update(
            out, positions.flat_values[:, None], tf.gather(self.values, rows.flat_values)
        )
        ends = tf.cumsum(tf.cast(lengths, rt.row_splits.dtype))
        row_splits = tf.gather(tf.concat([[0], ends], axis=0), rt.row_splits)
        return tf.RaggedTensor.from_row_splits(out, row_splits, validate=False)


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertPreprocessingLayer(keras.layers.Layer):
    """Strings -> `input_ids`, `input_mask`, `segment_ids` (int32 [B, max_seq_length]), in-graph.

    Call with a string tensor [B] (or a scalar, giving [max_seq_length] outputs, for `Dataset.map`
    before batching) to pack `[CLS] A [SEP]`, or with a tuple `(a, b)` for `[CLS] A [SEP] B [SEP]`.
    Ids equal `AlbertTokenizer.pack(encode(a), encode(b), max_seq_length)`.

    Args:
      model_proto: serialized SentencePiece model (bytes, or base64 str as stored in `get_config`).
        It travels inside the layer and any SavedModel built from it; no file path is kept.
      max_seq_length: packed length.
      do_lower_case: as `AlbertTokenizer`.
    """

    def __init__(
        self,
        model_proto: bytes | str,
        max_seq_length: int = 512,
        do_lower_case: bool = True,
        **kwargs,
    ):
        kwargs.setdefault("name", "albert_preprocessing")
        kwargs.setdefault("trainable", False)
        super().__init__(**kwargs)
        if isinstance(model_proto, str):
            model_proto = base64.b64decode(model_proto)
        self.model_proto = bytes(model_proto)
        self.max_seq_length = int(max_seq_length)
        self.do_lower_case = bool(do_lower_case)
        if self.max_seq_length < 3:
            raise ValueError(
                f"max_seq_length={max_seq_length} leaves no room for [CLS] and two [SEP]"
            )
        self.tokenizer = AlbertTokenizer.from_proto(
            self.model_proto, do_lower_case=self.do_lower_case
        )
        self._sentencepiece = tf_text.FastSentencepieceTokenizer(self.model_proto)
        self._char_table = _ExpansionTable(*_char_mapping(self.do_lower_case))
        rewrites = self.tokenizer.digit_comma_rewrites()
        self._rule_table = _ExpansionTable(list(rewrites), list(rewrites.values()))
        self.built = True

    @classmethod
    def from_file(cls, spm_model_file: str, **kwargs) -> "AlbertPreprocessingLayer":
        """Builds the layer from a SentencePiece model file (its bytes are embedded)."""
        return cls(AlbertTokenizer(spm_model_file).model_proto, **kwargs)

    def normalize(self, texts: tf.Tensor) -> tf.Tensor:
        """`preprocess_text(text, lower=do_lower_case)` on a string tensor of any shape."""
        texts = tf.strings.regex_replace(texts, _whitespace_regex(), " ")
        texts = tf.strings.regex_replace(texts, "^ | $", "")
        shape, texts = tf.shape(texts), tf.reshape(texts, [-1])
        # Fast path: on ASCII text NFKD and mark dropping are no-ops and lowercasing is A-Z -> a-z.
        is_ascii = tf.strings.regex_full_match(texts, "[\\x00-\\x7f]*")
        ascii_rows = tf.cast(tf.where(is_ascii)[:, 0], tf.int32)
        other_rows = tf.cast(tf.where(~is_ascii)[:, 0], tf.int32)
        ascii_texts = tf.gather(texts, ascii_rows)
        if self.do_lower_case:
            ascii_texts = tf.strings.lower(ascii_texts)  # No encoding given: ASCII letters only.
        return tf.reshape(
            tf.dynamic_stitch(
                [ascii_rows, other_rows],
                [ascii_texts, self._normalize_unicode(tf.gather(texts, other_rows))],
            ),
            shape,
        )

    def _normalize_unicode(self, texts: tf.Tensor) -> tf.Tensor:
        """NFKD, drop combining marks, lowercase: per code point via the table, then the final sigma."""
        chars = tf.strings.unicode_decode(texts, "UTF-8", errors="replace")
        texts = tf.strings.unicode_encode(self._char_table.expand(chars), "UTF-8")
        if self.do_lower_case:  # Σ was left uppercase by the table; lowercase it by context.
            texts = tf.strings.regex_replace(texts, _final_sigma_regex(), "\\1\u03c2\\2")
            texts = tf.strings.regex_replace(texts, _SIGMA, "\u03c3")
        return texts

    def tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """Ids of `AlbertTokenizer.encode` for a string tensor [B]: int32 ragged [B, (tokens)]."""
        ids = self._sentencepiece.tokenize(self.normalize(texts))
        return self._rule_table.expand(ids)

    def call(self, inputs):
        single = not isinstance(inputs, (tuple, list))
        segments = [tf.convert_to_tensor(x, tf.string) for x in ([inputs] if single else inputs)]
        if len(segments) not in (1, 2):
            raise ValueError(f"expected one or two text inputs, got {len(segments)}")
        scalar = segments[0].shape.rank == 0
        segments = [tf.reshape(s, [-1]) for s in segments]
        tokens = [self.tokenize(s) for s in segments]
        budget = self.max_seq_length - 1 - len(tokens)
        tokens = tf_text.RoundRobinTrimmer(budget).trim(tokens)
        ids, segment_ids = tf_text.combine_segments(
            tokens,
            start_of_sequence_id=self.tokenizer.cls_id,
            end_of_segment_id=self.tokenizer.sep_id,
        )
        input_ids, input_mask = tf_text.pad_model_inputs(
            ids, self.max_seq_length, pad_value=self.tokenizer.pad_id
        )
        segment_ids, _ = tf_text.pad_model_inputs(segment_ids, self.max_seq_length, pad_value=0)
        outputs = {"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids}
        outputs = {k: tf.cast(v, tf.int32) for k, v in outputs.items()}
        return {k: v[0] for k, v in outputs.items()} if scalar else outputs

    def compute_output_spec(self, inputs):
        first = inputs if not isinstance(inputs, (tuple, list)) else inputs[0]
        shape = (
            (self.max_seq_length,)
            if len(first.shape) == 0
            else (first.shape[0], self.max_seq_length)
        )
        # One KerasTensor per output: a shared one would make a functional model return one tensor thrice.
        return {
            key: keras.KerasTensor(shape, dtype="int32")
            for key in ("input_ids", "input_mask", "segment_ids")
        }

    def get_config(self):
        config = super().get_config()
        config.update(
            model_proto=base64.b64encode(self.model_proto).decode("ascii"),
            max_seq_length=self.max_seq_length,
            do_lower_case=self.do_lower_case,
        )
        return config
