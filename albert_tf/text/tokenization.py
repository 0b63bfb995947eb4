"""ALBERT text normalisation and SentencePiece tokenization, identical to the original `FullTokenizer`.

The original (google-research/albert `tokenization.py`, SentencePiece path) runs
`preprocess_text(text, lower=do_lower_case)` and then `encode_pieces`, which is plain SentencePiece
encoding plus one rule: a piece ending in "<digit>," is re-encoded without the comma and the comma
appended as its own piece. Tests check preprocessed text, pieces and ids against 420 golden cases.

This module deliberately does not import TensorFlow (data preparation imports it in every worker
process); the in-graph twin lives in `albert_tf.text.tf_tokenization`.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import unicodedata
from collections.abc import Iterable, Sequence

import sentencepiece as spm

from albert_tf.text.pairs import truncate_seq_pair

SPIECE_UNDERLINE = "\u2581"


@functools.cache
def _combining_marks_table() -> dict[int, None]:
    """str.translate table deleting every code point with a non-zero canonical combining class."""
    return {cp: None for cp in range(0x110000) if unicodedata.combining(chr(cp))}


def preprocess_text(text: str, lower: bool = True) -> str:
    """Normalise text exactly like the original `preprocess_text(text, lower=lower)`.

    Collapses all whitespace (Python `str.split`) to single spaces and strips; NFKD-normalises and drops combining marks (accents go even when not lowercasing, as in the
    original); then lowercases if `lower`.
    """
    outputs = " ".join(text.split())
    # No `` / '' -> " rewrite: that is XLNet's (and the ports' that copied it), not ALBERT's.
    if not outputs.isascii():  # NFKD and mark stripping are no-ops on ASCII: skip them for speed.
        outputs = unicodedata.normalize("NFKD", outputs).translate(_combining_marks_table())
    if lower:
        outputs = outputs.lower()
    return outputs


def _is_digit_comma_piece(piece: str) -> bool:
    # The original's test, character for character (str.isdigit also accepts non-ASCII digits).
    return len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit()


@dataclasses.dataclass(frozen=True)
class PackedInputs:
    """One packed model input: `[CLS] A [SEP]` or `[CLS] A [SEP] B [SEP]`, padded with 0."""

    input_ids: list[int]
    input_mask: list[int]
    segment_ids: list[int]


class AlbertTokenizer:
    """`preprocess_text` + SentencePiece, equal to the original `FullTokenizer` with `spm_model_file`.

    Args:
      spm_model_file: path of a SentencePiece model (e.g. `30k-clean.model`).
      do_lower_case: lowercase in `preprocess` (the released English models are uncased).
    """

    def __init__(self, spm_model_file: str | os.PathLike, do_lower_case: bool = True):
        path = os.fspath(spm_model_file)
        try:
            with open(path, "rb") as f:
                proto = f.read()
        except OSError as e:
            raise FileNotFoundError(f"cannot read SentencePiece model {path!r}: {e}") from e
        self._init_from_proto(proto, do_lower_case, source=path)

    @classmethod
    def from_proto(cls, model_proto: bytes, do_lower_case: bool = True) -> "AlbertTokenizer":
        """Builds the tokenizer from serialized SentencePiece model bytes."""
        self = cls.__new__(cls)
        self._init_from_proto(model_proto, do_lower_case, source="<model proto>")
        return self

    def _init_from_proto(self, proto: bytes, do_lower_case: bool, source: str) -> None:
        self.model_proto = bytes(proto)
        self.do_lower_case = do_lower_case
        self.sp_model = spm.SentencePieceProcessor()
        try:
            self.sp_model.LoadFromSerializedProto(self.model_proto)
        except (RuntimeError, OSError) as e:
            raise ValueError(f"{source} is not a valid SentencePiece model: {e}") from e
        if self.sp_model.get_piece_size() == 0:
            raise ValueError(f"{source} is not a valid SentencePiece model: empty vocabulary")
        ids = {
            name: self.sp_model.piece_to_id(piece)
            for name, piece in [
                ("pad", "<pad>"),
                ("cls", "[CLS]"),
                ("sep", "[SEP]"),
                ("mask", "[MASK]"),
            ]
        }
        missing = [name for name, i in ids.items() if i == self.sp_model.unk_id()]
        if missing:
            raise ValueError(f"{source} lacks ALBERT special pieces: {missing}")
        self.pad_id, self.cls_id = ids["pad"], ids["cls"]
        self.sep_id, self.mask_id = ids["sep"], ids["mask"]
        self.unk_id = self.sp_model.unk_id()
        self.comma_id = self.sp_model.piece_to_id(",")
        # Ids whose piece triggers the digit-comma rule; the batch path rewrites only these.
        self._digit_comma_ids = frozenset(
            i for i in range(self.vocab_size) if _is_digit_comma_piece(self.sp_model.id_to_piece(i))
        )
        self._digit_comma_cache: dict[int, list[int]] = {}

    @property
    def vocab_size(self) -> int:
        """Number of pieces in the SentencePiece model (30000 for `30k-clean`)."""
        return self.sp_model.get_piece_size()

    def preprocess(self, text: str) -> str:
        """`preprocess_text(text, lower=do_lower_case)`."""
        return preprocess_text(text, lower=self.do_lower_case)

    def tokenize(self, text: str) -> list[str]:
        """Pieces of `preprocess(text)`, with the original's digit-comma rule."""
        return self._apply_digit_comma_rule(
            self.sp_model.encode(self.preprocess(text), out_type=str)
        )

    def _apply_digit_comma_rule(self, pieces: list[str]) -> list[str]:
        new_pieces = []
        for piece in pieces:
            if _is_digit_comma_piece(piece):
                # The original also strips a leading "▁" from the re-encoded pieces when the piece had
                # none, but it compares str with a bytes constant, so under Python 3 that branch never
                # fires; the golden ids confirm it. We reproduce the Python 3 behaviour.
                new_pieces.extend(
                    self.sp_model.encode(piece[:-1].replace(SPIECE_UNDERLINE, ""), out_type=str)
                )
                new_pieces.append(piece[-1])
            else:
                new_pieces.append(piece)
        return new_pieces

    def convert_tokens_to_ids(self, pieces: Sequence[str]) -> list[int]:
        """Ids of pieces (unknown pieces map to `unk_id`)."""
        return [self.sp_model.piece_to_id(p) for p in pieces]

    def convert_ids_to_tokens(self, ids: Sequence[int]) -> list[str]:
        """Pieces of ids."""
        return [self.sp_model.id_to_piece(int(i)) for i in ids]

    def encode(self, text: str) -> list[int]:
        """Ids of `tokenize(text)`."""
        return self.convert_tokens_to_ids(self.tokenize(text))

    def encode_batch(self, texts: Iterable[str], num_threads: int = -1) -> list[list[int]]:
        """`[encode(t) for t in texts]`, using SentencePiece's multi-threaded batch encoder.

        `num_threads=-1` lets SentencePiece use all cores; pass 1 inside worker processes.
        """
        processed = [self.preprocess(t) for t in texts]
        batch = self.sp_model.encode(processed, out_type=int, num_threads=num_threads)
        rule_ids = self._digit_comma_ids
        for row, ids in enumerate(batch):
            if not rule_ids.isdisjoint(ids):
                batch[row] = [
                    j
                    for i in ids
                    for j in (self._digit_comma_ids_for(i) if i in rule_ids else (i,))
                ]
        return batch

    def _digit_comma_ids_for(self, piece_id: int) -> list[int]:
        # Unknown pieces (id 1) never end in "<digit>,": digits and "," are in the vocabulary, and
        # SentencePiece merges only runs of unknown characters into one piece. So working on ids is exact.
        cached = self._digit_comma_cache.get(piece_id)
        if cached is None:
            piece = self.sp_model.id_to_piece(piece_id)
            cached = self.sp_model.encode(
                piece[:-1].replace(SPIECE_UNDERLINE, ""), out_type=int
            ) + [self.comma_id]
            self._digit_comma_cache[piece_id] = cached
        return cached

    def digit_comma_rewrites(self) -> dict[int, list[int]]:
        """{id of a piece ending in "<digit>,": the ids the digit-comma rule puts in its place}."""
        return {i: list(self._digit_comma_ids_for(i)) for i in sorted(self._digit_comma_ids)}

    def pack(
        self, ids_a: Sequence[int], ids_b: Sequence[int] | None, max_seq_length: int
    ) -> PackedInputs:
        """`[CLS] A [SEP] (B [SEP])`, truncated like the original classifier, padded to `max_seq_length`."""
        ids_a = list(ids_a)
        if ids_b is None:
            if max_seq_length < 2:
                raise ValueError(
                    f"max_seq_length={max_seq_length} leaves no room for [CLS] and [SEP]"
                )
            ids_a = ids_a[: max_seq_length - 2]
            ids, segments = [self.cls_id, *ids_a, self.sep_id], [0] * (len(ids_a) + 2)
        else:
            if max_seq_length < 3:
                raise ValueError(
                    f"max_seq_length={max_seq_length} leaves no room for [CLS] and two [SEP]"
                )
            ids_b = list(ids_b)
            truncate_seq_pair(ids_a, ids_b, max_seq_length - 3)
            ids = [self.cls_id, *ids_a, self.sep_id, *ids_b, self.sep_id]
            segments = [0] * (len(ids_a) + 2) + [1] * (len(ids_b) + 1)
        padding = [0] * (max_seq_length - len(ids))
        return PackedInputs(ids + padding, [1] * len(ids) + padding, segments + padding)

    def encode_pair(self, text_a: str, text_b: str | None, max_seq_length: int) -> PackedInputs:
        """Tokenizes and packs one example (text_b may be None)."""
        return self.pack(
            self.encode(text_a), None if text_b is None else self.encode(text_b), max_seq_length
        )
