"""The pretraining TFRecord schema, tf.train.Example bytes and TFRecord framing, without TensorFlow.

The schema is the original's 8 features: which are [max_seq_length] long, which
[max_predictions_per_seq] long, which float, and the label. The training input's tf.io spec, the
record checks and the export's readers take it from here, so it is written down once.

Importing TensorFlow costs seconds of process start, which is most of the budget of a whole data-prep
job, so the protobuf wire format and the TFRecord framing are written here by hand. Both are small and
frozen formats; tests check the bytes against `tf.train.Example` and `tf.io.parse_single_example`.

TFRecord framing: uint64 length (little endian), uint32 masked CRC32C of those 8 bytes, the data,
uint32 masked CRC32C of the data. `scan_records` reads it back, locating corrupt or cut records (and
stepping over them on request) for the training and export readers as well.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterator, Sequence
from typing import BinaryIO

import google_crc32c

# Features of length max_seq_length, of length max_predictions_per_seq (doubled by the original's
# `do_permutation`), and the sentence-order label (one value; the name is the original's NSP one).
SEQ_FEATURES = ("input_ids", "input_mask", "segment_ids", "token_boundary")
PRED_FEATURES = ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights")
LABEL_FEATURE = "next_sentence_labels"
# Schema order of the original `write_instance_to_example_files` (dtype int64 unless listed in FLOAT_FEATURES).
FEATURE_NAMES = (*SEQ_FEATURES, *PRED_FEATURES, LABEL_FEATURE)
FLOAT_FEATURES = frozenset({"masked_lm_weights"})
# Unmasked SOP instances, masked afresh each time training reads them (`masking=dynamic`): the
# sequence features hold the original ids, and `token_boundary` (the start-piece flag, 1 for
# [CLS]/[SEP]) is all the masker needs; a record without `masked_lm_positions` is one of these.
UNMASKED_FEATURE_NAMES = (*SEQ_FEATURES, LABEL_FEATURE)
# How a reader takes pretraining records: "static" (masked: FEATURE_NAMES), "dynamic" (unmasked:
# UNMASKED_FEATURE_NAMES, masked as they are read) or "auto" (as the first record is).
MASKING_MODES = ("auto", "static", "dynamic")
# The order in which the original file holds the map entries on disk (the TF1 C++ protobuf map order).
# We write the same order so that equal values give byte-identical records.
WIRE_ORDER = (
    "next_sentence_labels",
    "masked_lm_ids",
    "segment_ids",
    "masked_lm_positions",
    "input_ids",
    "input_mask",
    "masked_lm_weights",
    "token_boundary",
)

_CRC_MASK_DELTA = 0xA282EAD8
_FLOAT_ONE = struct.pack("<f", 1.0)
_FLOAT_ZERO = struct.pack("<f", 0.0)


def feature_lengths(
    max_seq_length: int,
    max_predictions_per_seq: int | None = None,
    names: Sequence[str] = FEATURE_NAMES,
) -> dict[str, int]:
    """{name: number of values in a record} of the features `names`, in that order.

    `max_predictions_per_seq` is needed only when `names` holds one of `PRED_FEATURES`.
    """
    lengths = {}
    for name in names:
        if name in SEQ_FEATURES:
            lengths[name] = max_seq_length
        elif name in PRED_FEATURES:
            if max_predictions_per_seq is None:
                raise ValueError(f"the length of {name} is max_predictions_per_seq: give it")
            lengths[name] = max_predictions_per_seq
        elif name == LABEL_FEATURE:
            lengths[name] = 1
        else:
            raise KeyError(f"{name!r} is not a feature of the pretraining schema {FEATURE_NAMES}")
    return lengths


def varint(value: int) -> bytes:
    """Protobuf base-128 varint of a non-negative int (negative int64 as its 64-bit two's complement)."""
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC32C: rotate right by 15 and add a constant."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _CRC_MASK_DELTA) & 0xFFFFFFFF


def frame_record(data: bytes) -> bytes:
    """One TFRecord: length, CRC of the length, data, CRC of the data."""
    header = struct.pack("<Q", len(data))
    return b"".join(
        (
            header,
            struct.pack("<I", masked_crc32c(header)),
            data,
            struct.pack("<I", masked_crc32c(data)),
        )
    )


class RecordError(ValueError):
    """A TFRecord file or Example that cannot be decoded; the message names the file and record."""


@dataclasses.dataclass(frozen=True)
class Record:
    """A record whose framing and both CRCs check out: its index, byte offset and data."""

    index: int
    offset: int
    data: bytes


@dataclasses.dataclass(frozen=True)
class BadRecord:
    """A record that cannot be read: file, index (records counted so far), byte offset, problem."""

    path: str
    index: int
    offset: int
    problem: str

    def __str__(self) -> str:
        return f"{self.path}: record {self.index}: {self.problem} (byte offset {self.offset})"


TRUNCATED_HEADER = "truncated header: the file ends inside a record"
TRUNCATED_DATA = "truncated data: the file ends inside the record"
BAD_LENGTH_CRC = "bad length CRC: header checksum mismatch"
BAD_DATA_CRC = "bad data CRC: data checksum mismatch"
_RESYNC_WINDOW = 1 << 20


def _header_ok(header: bytes) -> bool:
    return struct.unpack_from("<I", header, 8)[0] == masked_crc32c(header[:8])


def _read_record(
    f: BinaryIO, path: str, index: int, offset: int
) -> tuple[Record | BadRecord | None, int]:
    """The record at `offset` (where `f` is; None at the end of the file) and the offset after it
    (-1 when none can be found from here)."""
    header = f.read(12)
    if not header:
        return None, -1
    if len(header) < 12:
        return BadRecord(path, index, offset, TRUNCATED_HEADER), -1
    if not _header_ok(header):
        return BadRecord(path, index, offset, BAD_LENGTH_CRC), -1
    (length,) = struct.unpack_from("<Q", header)
    body = f.read(length + 4)
    if len(body) < length + 4:
        return BadRecord(path, index, offset, TRUNCATED_DATA), -1
    end = offset + 16 + length
    if struct.unpack_from("<I", body, length)[0] != masked_crc32c(body[:length]):
        return BadRecord(path, index, offset, BAD_DATA_CRC), end
    return Record(index, offset, body[:length]), end


def _next_whole_record(f: BinaryIO, start: int) -> int:
    """The first offset from `start` holding a whole record with valid CRCs (-1: none)."""
    while True:
        f.seek(start)
        window = f.read(_RESYNC_WINDOW + 11)
        for i in range(len(window) - 11):
            if _header_ok(window[i : i + 12]):
                f.seek(start + i)
                if isinstance(_read_record(f, "", 0, start + i)[0], Record):
                    return start + i
        if len(window) < _RESYNC_WINDOW + 11:
            return -1
        start += _RESYNC_WINDOW


def scan_records(f: BinaryIO, path: str, resync: bool = False) -> Iterator[Record | BadRecord]:
    """The records of a TFRecord file open at its start (`path` names it in messages), checking
    both CRCs.

    A record that cannot be read is yielded as a `BadRecord`. Without `resync` the scan stops
    there. With it the scan goes on: after a bad data CRC at the next record (the length was
    checked by its own CRC), after a bad length CRC at the next offset holding a whole record with
    valid CRCs; a file cut inside its last record ends the scan. Indices after a resync count the
    unreadable stretch as one record.
    """
    index = offset = 0
    while True:
        item, end = _read_record(f, path, index, offset)
        if item is None:
            return
        yield item
        if isinstance(item, BadRecord):
            if not resync:
                return
            if item.problem == BAD_LENGTH_CRC:
                end = _next_whole_record(f, offset + 1)
                if end >= 0:
                    f.seek(end)
            if end < 0:
                return
        index, offset = index + 1, end


def read_tfrecords(path: str) -> Iterator[bytes]:
    """Yields the records of a TFRecord file, checking both CRCs of every record."""
    with open(path, "rb") as f:
        for item in scan_records(f, path):
            if isinstance(item, BadRecord):
                raise RecordError(str(item))
            yield item.data


def iter_framed_records(f: BinaryIO) -> Iterator[bytes]:
    """Framed records (header, data, CRC) of a file we wrote ourselves, as they are, without checking."""
    while True:
        header = f.read(12)
        if not header:
            return
        (length,) = struct.unpack("<Q", header[:8])
        yield header + f.read(length + 4)


def _length_delimited(field_tag: int, payload: bytes) -> bytes:
    return b"".join((bytes((field_tag,)), varint(len(payload)), payload))


def _feature_entry(name: str, packed_values: bytes, is_float: bool) -> bytes:
    """A `map<string, Feature>` entry wrapped as field 1 of `Features`."""
    value_list = _length_delimited(0x0A, packed_values)  # Int64List/FloatList.value, packed
    feature = _length_delimited(
        0x12 if is_float else 0x1A, value_list
    )  # float_list=2 / int64_list=3
    entry = _length_delimited(0x0A, name.encode()) + _length_delimited(0x12, feature)
    return _length_delimited(0x0A, entry)


def encode_example(features: dict[str, Sequence[int] | Sequence[float]]) -> bytes:
    """Generic Example bytes: each feature int64 (or float for names in FLOAT_FEATURES), in WIRE_ORDER
    for known names, then the rest in the given order."""
    names = [n for n in WIRE_ORDER if n in features] + [n for n in features if n not in WIRE_ORDER]
    entries = []
    for name in names:
        values = features[name]
        if name in FLOAT_FEATURES:
            packed = struct.pack(f"<{len(values)}f", *values)
        else:
            packed = b"".join(varint(int(v)) for v in values)
        entries.append(_feature_entry(name, packed, name in FLOAT_FEATURES))
    return _length_delimited(0x0A, b"".join(entries))


class PretrainingExampleEncoder:
    """Fast Example bytes for one pretraining instance, padded to the fixed shapes of the schema.

    Args:
      max_seq_length: length of input_ids / input_mask / segment_ids / token_boundary.
      num_predictions: length of the masked_lm_* arrays (max_predictions_per_seq, doubled with
        do_permutation as in the original); unused for the unmasked schema.
      max_id: largest id or position that will be encoded (sizes a varint lookup table).
      names: the schema written: `FEATURE_NAMES` (masked instances) or `UNMASKED_FEATURE_NAMES`.

    Example:
      encoder = PretrainingExampleEncoder(128, 20, max_id=30000)
      data = encoder.encode([2, 10, 3, 11, 3], 3, [1, 1, 1, 1, 1], [1], [10], sop_label=0)
    """

    def __init__(
        self,
        max_seq_length: int,
        num_predictions: int,
        max_id: int,
        names: Sequence[str] = FEATURE_NAMES,
    ):
        if set(names) not in (set(FEATURE_NAMES), set(UNMASKED_FEATURE_NAMES)):
            raise ValueError(f"names must be {FEATURE_NAMES} or {UNMASKED_FEATURE_NAMES}")
        self.max_seq_length = max_seq_length
        self.num_predictions = num_predictions
        self.masked = PRED_FEATURES[0] in names
        self._wire_order = tuple(n for n in WIRE_ORDER if n in names)
        self._varints = [varint(i) for i in range(max(max_id, max_seq_length) + 1)]
        # Everything before a feature's packed values depends only on (name, payload length): cache it.
        self._prefixes: dict[tuple[str, int], bytes] = {}

    def _prefix(self, name: str, payload_length: int) -> bytes:
        key = (name, payload_length)
        prefix = self._prefixes.get(key)
        if prefix is None:
            entry = _feature_entry(name, b"\x00" * payload_length, name in FLOAT_FEATURES)
            prefix = self._prefixes[key] = entry[: len(entry) - payload_length]
        return prefix

    def encode(
        self,
        input_ids: Sequence[int],
        num_segment_a: int,
        token_boundary: Sequence[int],
        masked_positions: Sequence[int],
        masked_label_ids: Sequence[int],
        sop_label: int,
    ) -> bytes:
        """Example bytes.

        Args:
          input_ids: the real tokens `[CLS] A [SEP] B [SEP]` after masking (unpadded).
          num_segment_a: number of leading positions with segment id 0 (`len(A) + 2`).
          token_boundary: 0/1 per real token.
          masked_positions, masked_label_ids: the predictions, sorted by position (unpadded);
            empty for the unmasked schema.
          sop_label: 1 for swapped or random-document B, 0 for natural order.
        """
        length = len(input_ids)
        pad = self.max_seq_length - length
        if pad < 0:
            raise ValueError(f"{length} tokens exceed max_seq_length={self.max_seq_length}")
        table = self._varints
        zeros = b"\x00" * pad
        payloads = {  # 0 and 1 are one-byte varints
            "next_sentence_labels": b"\x01" if sop_label else b"\x00",
            "segment_ids": b"\x00" * num_segment_a + b"\x01" * (length - num_segment_a) + zeros,
            "input_ids": b"".join([table[v] for v in input_ids]) + zeros,
            "input_mask": b"\x01" * length + zeros,
            "token_boundary": bytes(token_boundary) + zeros,
        }
        num_pred = len(masked_positions)
        if self.masked:
            pred_pad = self.num_predictions - num_pred
            if pred_pad < 0:
                raise ValueError(f"{num_pred} predictions exceed {self.num_predictions}")
            pred_zeros = b"\x00" * pred_pad
            payloads["masked_lm_ids"] = b"".join([table[v] for v in masked_label_ids]) + pred_zeros
            payloads["masked_lm_positions"] = (
                b"".join([table[v] for v in masked_positions]) + pred_zeros
            )
            payloads["masked_lm_weights"] = _FLOAT_ONE * num_pred + _FLOAT_ZERO * pred_pad
        elif num_pred:
            raise ValueError("the unmasked schema holds no predictions")
        prefix = self._prefix
        body = b"".join(
            [
                part
                for name in self._wire_order
                for part in (prefix(name, len(payloads[name])), payloads[name])
            ]
        )
        return (
            b"\n" + table[len(body)] + body
            if len(body) < len(table)
            else _length_delimited(0x0A, body)
        )


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes) -> Iterator[tuple[int, int, bytes | int]]:
    """(field number, wire type, payload) of a protobuf message; payload is bytes for wire type 2."""
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        field, wire = key >> 3, key & 7
        if wire == 2:
            size, pos = _read_varint(data, pos)
            yield field, wire, data[pos : pos + size]
            pos += size
        elif wire == 0:
            value, pos = _read_varint(data, pos)
            yield field, wire, value
        elif wire == 5:
            yield field, wire, data[pos : pos + 4]
            pos += 4
        elif wire == 1:
            yield field, wire, data[pos : pos + 8]
            pos += 8
        else:
            raise RecordError(f"unsupported protobuf wire type {wire}")


def _decode_int64s(payload: bytes) -> list[int]:
    values, pos = [], 0
    while pos < len(payload):
        value, pos = _read_varint(payload, pos)
        values.append(value - (1 << 64) if value >= 1 << 63 else value)
    return values


def decode_example(data: bytes) -> dict[str, list[int] | list[float]]:
    """Feature name -> values of an Example (int64 and float lists, packed or not), in wire order."""
    features: dict[str, list] = {}
    try:
        for field, _, features_msg in _fields(data):
            if field != 1:
                continue
            for _, _, entry in _fields(features_msg):
                name, values = "", []
                for entry_field, _, payload in _fields(entry):
                    if entry_field == 1:
                        name = payload.decode()
                    elif entry_field == 2:
                        for kind, _, value_list in _fields(payload):
                            for _, wire, chunk in _fields(value_list):
                                if kind == 2:  # FloatList
                                    values.extend(
                                        struct.unpack(f"<{len(chunk) // 4}f", chunk)
                                        if wire == 2
                                        else struct.unpack("<f", chunk)
                                    )
                                elif kind == 3:  # Int64List
                                    values.extend(
                                        _decode_int64s(chunk)
                                        if wire == 2
                                        else [chunk - (1 << 64) if chunk >= 1 << 63 else chunk]
                                    )
                                else:
                                    raise RecordError(
                                        "bytes_list features are not part of this schema"
                                    )
                features[name] = values
    except (IndexError, UnicodeDecodeError, struct.error) as e:
        raise RecordError(f"malformed tf.train.Example: {e}") from e
    return features
