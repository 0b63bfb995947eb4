"""Examples that exports are verified and calibrated on: real text, pretraining TFRecords, or ids.

Every export is checked against the Keras model on these (`albert_tf.export`), and full-integer
TFLite is calibrated on them. All arrays are numpy, at one fixed `max_seq_length`:
`input_ids`, `input_mask`, `segment_ids` int32 [N, T]; `masked_lm_positions` int32 [N, P] and
`masked_lm_weights` float32 [N, P] (1.0 for a real prediction, 0.0 for padding).
"""

from __future__ import annotations

import itertools
import os
import re

import numpy as np

from albert_tf import records
from albert_tf.text.tokenization import AlbertTokenizer

# `x.tfrecord`, `x.tfrecords`, `x.record`, `x.tfr`, also sharded: `x.tfrecord-00000-of-00004`.
TFRECORD_NAME = re.compile(r"\.(tfrecords?|record|tfr)(-\d+-of-\d+)?$")
MASKED_LM_PROB = 0.15  # the original pretraining rate, so MLM is checked where it is trained
Examples = dict[str, np.ndarray]
Texts = list[tuple[str, str | None]]


def empty_examples(max_seq_length: int, max_predictions: int) -> Examples:
    return {
        "input_ids": np.zeros((0, max_seq_length), np.int32),
        "input_mask": np.zeros((0, max_seq_length), np.int32),
        "segment_ids": np.zeros((0, max_seq_length), np.int32),
        "masked_lm_positions": np.zeros((0, max_predictions), np.int32),
        "masked_lm_weights": np.zeros((0, max_predictions), np.float32),
    }


def take(examples: Examples, index) -> Examples:
    """The examples at `index` (a slice or an index array)."""
    return {k: v[index] for k, v in examples.items()}


def num_examples(examples: Examples) -> int:
    return len(examples["input_ids"])


def _mask_positions(
    input_ids: np.ndarray,
    special: np.ndarray,
    max_predictions: int,
    mask_id: int,
    rng: np.random.Generator,
):
    """Replace ~15% of the non-special tokens of each row by [MASK]; their positions, sorted."""
    positions = np.zeros((len(input_ids), max_predictions), np.int32)
    weights = np.zeros((len(input_ids), max_predictions), np.float32)
    for row in range(len(input_ids)):
        candidates = np.flatnonzero(~special[row])
        count = min(
            max_predictions, max(1, round(len(candidates) * MASKED_LM_PROB)), len(candidates)
        )
        chosen = np.sort(rng.choice(candidates, count, replace=False))
        input_ids[row, chosen] = mask_id
        positions[row, :count] = chosen
        weights[row, :count] = 1.0
    return positions, weights


def _read_text_lines(path: str) -> list[list[str]]:
    """Documents (lists of non-empty lines) of a text file in the original corpus format."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as e:
        raise ValueError(
            f"{path}: not UTF-8 text ({e}); a TFRecord file must be named "
            f"*.tfrecord (or .tfrecords, .record, .tfr, optionally -NNNNN-of-NNNNN)"
        ) from None
    documents, current = [], []
    for line in text.splitlines():
        if line.strip():
            current.append(line.strip())
        elif current:
            documents.append(current)
            current = []
    if current:
        documents.append(current)
    if not documents:
        raise ValueError(f"{path}: no text (every line is blank)")
    return documents


def examples_from_text(
    path: str,
    tokenizer: AlbertTokenizer,
    max_seq_length: int,
    max_predictions: int,
    limit: int,
    seed: int,
) -> tuple[Examples, Texts]:
    """Up to `limit` examples from a text file (one sentence a line, blank lines between documents).

    Each line is packed with the next line of its document as segment B (single when it is the
    last), so both segments are exercised; over-long pairs are truncated as `AlbertTokenizer.pack`.
    Lines are drawn with a seeded generator; ~15% of each example's tokens become [MASK].
    Returns the examples and their (text_a, text_b or None) pairs.
    """
    rng = np.random.default_rng(seed)
    pairs = [
        (doc[i], doc[i + 1] if i + 1 < len(doc) else None)
        for doc in _read_text_lines(path)
        for i in range(len(doc))
    ]
    chosen = rng.permutation(len(pairs))[:limit]
    packed = [tokenizer.encode_pair(*pairs[i], max_seq_length) for i in chosen]
    examples = {
        key: np.array([getattr(p, key) for p in packed], np.int32).reshape(-1, max_seq_length)
        for key in ("input_ids", "input_mask", "segment_ids")
    }
    ids = examples["input_ids"]
    special = np.isin(ids, [tokenizer.cls_id, tokenizer.sep_id]) | (examples["input_mask"] == 0)
    examples["masked_lm_positions"], examples["masked_lm_weights"] = _mask_positions(
        ids, special, max_predictions, tokenizer.mask_id, rng
    )
    return examples, [pairs[i] for i in chosen]


def _pad_to(values: np.ndarray, length: int, what: str) -> np.ndarray:
    if len(values) > length:
        raise ValueError(f"{what} has length {len(values)}, more than {length}")
    return np.pad(values, (0, length - len(values)))


def examples_from_tfrecords(
    path: str, max_seq_length: int, max_predictions: int, limit: int
) -> Examples:
    """The first `limit` records of a pretraining TFRecord file in the original schema.

    Sequences shorter than `max_seq_length` are padded; longer ones are an error naming the
    record (re-create the data at this length). Records without MLM features get none. A corrupt
    or cut record is a `CorruptRecordError` naming the record and its byte offset: examples are
    never silently dropped from a verification or calibration set.
    """
    import tensorflow as tf  # only this reader needs TensorFlow
    from google.protobuf.message import DecodeError

    from albert_tf.training.record_checks import CorruptRecordError

    rows = {k: [] for k in empty_examples(1, 1)}
    ids_keys = [k for k in rows if k in records.SEQ_FEATURES]  # the model's id inputs

    def values(features, key):
        kind = "float_list" if key in records.FLOAT_FEATURES else "int64_list"
        return getattr(features[key], kind).value

    with tf.io.gfile.GFile(path, "rb") as f:  # any path TensorFlow reads, gs:// included
        for item in itertools.islice(records.scan_records(f, path), limit):
            if isinstance(item, records.BadRecord):
                raise CorruptRecordError(
                    f"{path}: corrupt TFRecord file: record {item.index}: "
                    f"{item.problem} (byte offset {item.offset})"
                )
            where = f"{path}: record {item.index}"
            try:
                features = tf.train.Example.FromString(item.data).features.feature
            except DecodeError:
                raise CorruptRecordError(
                    f"{where}: not a tf.train.Example (byte offset {item.offset})"
                ) from None
            missing = [k for k in ids_keys if k not in features]
            if missing:
                raise ValueError(f"{where} lacks features {missing} of the pretraining schema")
            for key in ids_keys:
                rows[key].append(
                    _pad_to(
                        np.array(values(features, key), np.int64), max_seq_length, f"{where} {key}"
                    )
                )
            positions = np.array(
                values(features, "masked_lm_positions")
                if "masked_lm_positions" in features
                else [],
                np.int64,
            )
            weights = np.array(
                values(features, "masked_lm_weights")
                if "masked_lm_weights" in features
                else np.ones(len(positions)),
                np.float32,
            )
            keep = weights[:max_predictions] > 0  # zero weights pad the original's records
            rows["masked_lm_positions"].append(
                _pad_to(positions[:max_predictions] * keep, max_predictions, where)
            )
            rows["masked_lm_weights"].append(
                _pad_to(weights[:max_predictions] * keep, max_predictions, where)
            )
    if not rows["input_ids"]:
        raise ValueError(f"{path}: no records")
    examples = {k: np.stack(v) for k, v in rows.items()}
    return {
        k: v.astype(np.float32 if k in records.FLOAT_FEATURES else np.int32)
        for k, v in examples.items()
    }


def random_examples(
    vocab_size: int,
    max_seq_length: int,
    max_predictions: int,
    count: int,
    seed: int,
    special_ids: tuple[int, int, int] = (2, 3, 4),
) -> Examples:
    """Seeded random-token examples of random lengths and segment splits (no data given).

    `special_ids` are ([CLS], [SEP], [MASK]) ids: those of the ALBERT vocabulary by default.
    """
    rng = np.random.default_rng(seed)
    cls_id, sep_id, mask_id = special_ids
    shape = (count, max_seq_length)
    ids = rng.integers(5 if vocab_size > 5 else 0, vocab_size, shape).astype(np.int32)
    lengths = rng.integers(min(3, max_seq_length), max_seq_length + 1, count)
    position = np.arange(max_seq_length)
    mask = (position[None] < lengths[:, None]).astype(np.int32)
    split = rng.integers(1, np.maximum(lengths - 1, 2))
    segments = ((position[None] > split[:, None]) & mask.astype(bool)).astype(np.int32)
    if vocab_size > max(special_ids):
        ids[:, 0] = cls_id
        ids[np.arange(count), lengths - 1] = sep_id
    ids *= mask
    special = (mask == 0) | (position[None] == 0) | (position[None] == lengths[:, None] - 1)
    positions, weights = _mask_positions(
        ids, special, max_predictions, mask_id if vocab_size > mask_id else 0, rng
    )
    return {
        "input_ids": ids,
        "input_mask": mask,
        "segment_ids": segments,
        "masked_lm_positions": positions,
        "masked_lm_weights": weights,
    }


def load_examples(
    path: str,
    tokenizer: AlbertTokenizer | None,
    max_seq_length: int,
    max_predictions: int,
    limit: int,
    seed: int,
) -> tuple[Examples, Texts]:
    """Examples from `path`, TFRecords (by name, see `TFRECORD_NAME`) or text (needs
    `tokenizer`), and their texts (none for TFRecords)."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"representative data not found: {path}")
    if TFRECORD_NAME.search(path):
        return examples_from_tfrecords(path, max_seq_length, max_predictions, limit), []
    if tokenizer is None:
        raise ValueError(
            f"{path} is text: tokenizing it needs a SentencePiece model (--spm_model_file)"
        )
    return examples_from_text(path, tokenizer, max_seq_length, max_predictions, limit, seed)
