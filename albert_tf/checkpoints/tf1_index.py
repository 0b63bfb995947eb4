"""The data files a TF1 checkpoint's `.index` names, checked before any tensor is read.

TensorFlow's reader finds a missing or cut data file only when it reads a tensor from it, and then
raises an untyped `OpError` or an `IndexError` that names no file. The `.index` says it all up
front: it is a table of sorted (key, value) records in the LevelDB table layout, uncompressed,
whose empty key holds a `BundleHeaderProto` (the number of data shards) and every other key a
`BundleEntryProto` (the shard, offset and size of one tensor's bytes). Reading it costs a few
kilobytes; comparing the data files' sizes with it is exact.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator

import tensorflow as tf
from google.protobuf.message import DecodeError
from tensorflow.core.protobuf import tensor_bundle_pb2

# A table ends in a 48-byte footer: the handles (varint offset, varint size) of its meta-index
# and index blocks, padding, then this number (little-endian).
_TABLE_MAGIC = 0xDB4775248B80FB57
_FOOTER_BYTES = 48
# Every block is followed by its compression type (1 byte) and a checksum (4 bytes).
_BLOCK_TRAILER_BYTES = 5
_UNCOMPRESSED = 0


class _Unreadable(Exception):
    """The index is not a table this module can read; the message says why."""


class _Compressed(Exception):
    """A block of the index is compressed, which TensorFlow's bundle writer never does."""


def data_file(prefix: str, shard: int, num_shards: int) -> str:
    """The path of data shard `shard` of `num_shards` of the checkpoint at `prefix`."""
    return f"{prefix}.data-{shard:05d}-of-{num_shards:05d}"


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data):
            raise _Unreadable("a number runs past the end of its block")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise _Unreadable("a malformed number")


def _block(table: bytes, handle: bytes, pos: int = 0) -> tuple[bytes, int]:
    """The contents of the block whose handle starts at `handle[pos]`, and the position after
    that handle."""
    offset, pos = _varint(handle, pos)
    size, pos = _varint(handle, pos)
    end = offset + size
    if end + _BLOCK_TRAILER_BYTES > len(table) - _FOOTER_BYTES:
        raise _Unreadable("a block runs past the end of the file")
    if table[end] != _UNCOMPRESSED:
        raise _Compressed
    return table[offset:end], pos


def _records(block: bytes) -> Iterator[tuple[bytes, bytes]]:
    """(key, value) of every record of a block; keys share a prefix with the one before."""
    if len(block) < 4:
        raise _Unreadable("a block too short to hold its restart count")
    (restarts,) = struct.unpack_from("<I", block, len(block) - 4)
    end = len(block) - 4 - 4 * restarts
    if end < 0:
        raise _Unreadable("a block's restart count exceeds its size")
    key, pos = b"", 0
    while pos < end:
        shared, pos = _varint(block, pos)
        unshared, pos = _varint(block, pos)
        length, pos = _varint(block, pos)
        if shared > len(key) or pos + unshared + length > end:
            raise _Unreadable("a record runs past its block")
        key = key[:shared] + block[pos : pos + unshared]
        pos += unshared
        yield key, block[pos : pos + length]
        pos += length


def _extents(table: bytes) -> tuple[int, dict[int, int]]:
    """(number of shards, {shard: end of the last tensor bytes the index places in it})."""
    if len(table) < _FOOTER_BYTES:
        raise _Unreadable(f"{len(table)} bytes, too short to be one")
    (magic,) = struct.unpack_from("<Q", table, len(table) - 8)
    if magic != _TABLE_MAGIC:
        raise _Unreadable("it does not end in the table's magic number")
    footer = table[-_FOOTER_BYTES:]
    _, pos = _varint(footer, _varint(footer, 0)[1])  # the meta-index handle: unused
    index, _ = _block(table, footer, pos)
    header, ends = None, {}
    for _, handle in _records(index):
        for key, value in _records(_block(table, handle)[0]):
            try:
                if key == b"":
                    header = tensor_bundle_pb2.BundleHeaderProto.FromString(value)
                    continue
                entry = tensor_bundle_pb2.BundleEntryProto.FromString(value)
            except DecodeError as error:
                raise _Unreadable(f"the record of {key!r} does not decode: {error}") from None
            ends[entry.shard_id] = max(ends.get(entry.shard_id, 0), entry.offset + entry.size)
    if header is None:
        raise _Unreadable("it has no header record")
    if ends and max(ends) >= header.num_shards:
        raise _Unreadable(f"a tensor lies in shard {max(ends)} of {header.num_shards}")
    return header.num_shards, ends


def check_data_files(prefix: str) -> None:
    """Raises ValueError naming the file when the `.index` of the TF1 checkpoint at `prefix`
    cannot be read, or when a data file it names is missing or shorter than the tensor bytes it
    places there. An index with compressed blocks (which TensorFlow does not write) is left to
    TensorFlow's reader."""
    index_path = f"{prefix}.index"
    with tf.io.gfile.GFile(index_path, "rb") as file:
        table = file.read()
    try:
        num_shards, ends = _extents(table)
    except _Compressed:
        return
    except _Unreadable as error:
        raise ValueError(f"{index_path}: not a readable TF1 checkpoint index ({error})") from None
    files = [data_file(prefix, shard, num_shards) for shard in range(num_shards)]
    missing = [path for path in files if not tf.io.gfile.exists(path)]
    if missing:
        named = f"the .index names {num_shards} shard{'s' * (num_shards != 1)}"
        if len(missing) > 1 and len(missing) == num_shards:
            named += ", and none of them exists"  # the .index alone
        raise ValueError(
            f"{prefix}: checkpoint data file {os.path.basename(missing[0])} is missing ({named})"
        )
    for shard, path in enumerate(files):
        size = tf.io.gfile.stat(path).length
        if size < ends.get(shard, 0):
            raise ValueError(
                f"{prefix}: checkpoint data file {os.path.basename(path)} is truncated: {size} "
                f"bytes, where the .index places tensor bytes up to byte {ends[shard]}"
            )
