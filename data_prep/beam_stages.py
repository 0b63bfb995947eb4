"""What the Beam runner's workers run: reading files into pools, pools into keyed records, records
into shards, and the job's totals (the pipeline itself is `beam_runner`'s).

Pools and records travel through files, not through the runner: a pool is written to a spill file
whose name is all that is shuffled, and a pool's records go to one records file, grouped by shard,
of which only (shard, file, offset, length) slices go on. So the runner moves a few small elements
per pool, whatever the corpus, and each record crosses the filesystem once each way. Each worker
holds one pool (about `batch_chars` of text and its records) while processing, and one shard,
sorted in memory, while writing; nothing here accumulates across pools or shards. Files go through
Beam's filesystems (local paths, gs://, ...); every spill file's name starts with the run's
`spill_prefix`, and the launcher deletes them all when the job ends. A retried call writes new
files under new names, so an attempt never reads another's half-written file.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import errno
import gzip
import json
import os
import pickle
import struct
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from typing import BinaryIO

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from albert_tf.io import naming_failed_writes
from data_prep import corpus
from data_prep.stats import Stats
from data_prep.units import DataPrepConfig, PoolProcessor, derive_seed, read_file_pools


@contextlib.contextmanager
def open_input(path: str) -> Iterator[BinaryIO]:
    """A file through Beam's filesystems, gunzipped when its name ends in .gz (as the local runner
    reads it; Beam's own decompressing reader cannot bound a line's length)."""
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as raw:
        if path.endswith(".gz"):
            with gzip.GzipFile(fileobj=raw, mode="rb") as f:
                yield f
        else:
            yield raw


# Writes that no retry can make succeed: a full disk or quota, a file size limit, a read-only or
# forbidden place. A stage that meets one records it (`record_unwritable`) and drops its element
# instead of failing, which Beam would retry and log with a traceback in every worker; the
# launcher raises the first one recorded once the job has ended (`beam_runner`).
UNWRITABLE = frozenset(
    (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM)
)
WRITE_FAILURES = ("data_prep", "write_failures")  # the metric's namespace and name


def record_unwritable(error: OSError) -> None:
    """Records `error` (errno, reason, path) in the `WRITE_FAILURES` metric when it is one of
    `UNWRITABLE`; raises it again otherwise."""
    if error.errno not in UNWRITABLE:
        raise error
    failure = json.dumps([error.errno, error.strerror, error.filename])
    Metrics.string_set(*WRITE_FAILURES).add(failure)


def write_totals(totals: bytes, path: str) -> None:
    """Writes the job's totals for the launcher (an unwritable place recorded, not raised)."""
    try:
        write_bytes(totals, path)
    except OSError as error:
        record_unwritable(error)


def write_bytes(data: bytes, path: str) -> None:
    """Writes `data` to `path` through Beam's filesystems."""
    with (
        naming_failed_writes(path),
        FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED) as f,
    ):
        f.write(data)


def read_bytes(path: str) -> bytes:
    """The whole content of `path` through Beam's filesystems."""
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        return f.read()


_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number


def _return_large_frees_to_the_os() -> None:
    """Fixes glibc's mmap threshold at its default, 128 KiB (nothing happens without glibc).

    A worker receives and sends data in messages of 10 MB and more. By default glibc raises the
    threshold to the size of such a buffer once it is freed, so later ones come from the heap,
    whose fragments it keeps: the worker's RSS then grows with the corpus.
    """
    with contextlib.suppress(OSError, AttributeError):  # no C library, or no mallopt in it
        ctypes.CDLL(None).mallopt(_M_MMAP_THRESHOLD, 128 * 1024)


class ReadPools(beam.DoFn):
    """(file number, path) -> the names of spill files, one pool in each; the file's skips to the
    "skips" output.

    Args:
      config: the job.
      spill_prefix: the start of every spill file's name.

    Example:
      files | beam.ParDo(ReadPools(config, ".out.beam-1")).with_outputs("skips", main="pools")
    """

    def __init__(self, config: DataPrepConfig, spill_prefix: str):
        self.config, self.spill_prefix = config, spill_prefix

    def setup(self):
        _return_large_frees_to_the_os()

    def process(self, item):
        file_number, path = item
        skips = corpus.SkipLog()
        for pool in read_file_pools(file_number, path, self.config, skips, open_input):
            name = _spill_name(self.spill_prefix, "pool", pool.key)
            try:
                write_bytes(pickle.dumps(pool, protocol=pickle.HIGHEST_PROTOCOL), name)
            except OSError as error:
                record_unwritable(error)
                return
            yield name
        for entry in skips.entries():
            yield beam.pvalue.TaggedOutput("skips", ("skips", entry))


def _spill_name(prefix: str, kind: str, pool_key: tuple[int, int]) -> str:
    """A new name per call: an attempt Beam retries never meets a file another attempt writes."""
    return f"{prefix}.{kind}-{pool_key[0]}-{pool_key[1]}-{uuid.uuid4().hex[:8]}"


# A slice: the records of one pool that fall into one shard, as (records file, offset, length).
Slice = tuple[str, int, int]


@beam.typehints.with_output_types(tuple[int, Slice])
class ProcessPools(beam.DoFn):
    """pool spill file -> the pool's records in one records file, grouped by shard; yields
    (shard, slice) per shard they fall into, the pool's statistics to the "stats" output.

    A record's sort key is `derive_seed(random_seed, "shuffle", pool key, position in the pool)`
    and its shard that key modulo `num_shards`; in the records file each record follows its key
    as 16 big-endian bytes.

    Args:
      config: the job.
      num_shards: the number of output shards.
      spill_prefix: the start of every spill file's name.

    Example:
      pools | beam.ParDo(ProcessPools(config, 8, ".out.beam-1")).with_outputs("stats", main="slices")
    """

    def __init__(self, config: DataPrepConfig, num_shards: int, spill_prefix: str):
        self.config, self.num_shards, self.spill_prefix = config, num_shards, spill_prefix

    def setup(self):
        _return_large_frees_to_the_os()
        # Once per worker: the SentencePiece model and the tables built from it.
        self.processor = PoolProcessor(_localized(self.config), encode_threads=1)

    def process(self, pool_file):
        pool = pickle.loads(read_bytes(pool_file))
        stats = Stats()
        seed = self.config.random_seed
        by_shard: dict[int, list[bytes]] = {}
        for position, record in enumerate(self.processor.instance_records(pool, stats)):
            key = derive_seed(seed, "shuffle", pool.key, position)
            by_shard.setdefault(key % self.num_shards, []).append(key.to_bytes(16, "big") + record)
        name = _spill_name(self.spill_prefix, "records", pool.key)
        slices, offset = [], 0
        try:
            with (
                naming_failed_writes(name),
                FileSystems.create(name, compression_type=CompressionTypes.UNCOMPRESSED) as f,
            ):
                for shard in sorted(by_shard):
                    data = b"".join(by_shard.pop(shard))
                    f.write(data)
                    slices.append((shard, (name, offset, len(data))))
                    offset += len(data)
        except OSError as error:
            record_unwritable(error)
            return
        yield from slices
        yield beam.pvalue.TaggedOutput("stats", ("stats", stats))


def _localized(config: DataPrepConfig) -> DataPrepConfig:
    """The config, with a SentencePiece model on a remote filesystem copied to a local file."""
    if "://" not in config.spm_model_file:
        return config
    fd, local = tempfile.mkstemp(suffix=".model")
    with os.fdopen(fd, "wb") as f:
        f.write(read_bytes(config.spm_model_file))
    return dataclasses.replace(config, spm_model_file=local)


class WriteShard(beam.DoFn):
    """(shard, its slices) -> the shard's records in key order, written to `temps[shard]`; yields
    ("shards", (shard, record count)).

    Args:
      temps: the shards' temporary paths, in shard order.

    Example:
      slices | beam.GroupByKey() | beam.ParDo(WriteShard([".a.tmp", ".b.tmp"]))
    """

    def __init__(self, temps: Sequence[str]):
        self.temps = list(temps)

    def setup(self):
        _return_large_frees_to_the_os()

    def process(self, item):
        shard, slices = item
        keyed: list[tuple[bytes, bytes]] = []
        for name, offset, length in slices:
            keyed.extend(_keyed_records(_read_range(name, offset, length)))
        keyed.sort(key=lambda pair: pair[0])
        temp = self.temps[shard]
        try:
            with (
                naming_failed_writes(temp),
                FileSystems.create(temp, compression_type=CompressionTypes.UNCOMPRESSED) as f,
            ):
                for _, record in keyed:  # not joined first: that would hold the shard twice
                    f.write(record)
        except OSError as error:
            record_unwritable(error)
            return
        yield "shards", (shard, len(keyed))


def _read_range(path: str, offset: int, length: int) -> bytes:
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        f.seek(offset)
        data = f.read(length)
    if len(data) != length:
        raise OSError(f"{path}: {len(data)} bytes at offset {offset}, {length} expected")
    return data


def _keyed_records(data: bytes) -> Iterator[tuple[bytes, bytes]]:
    """(16-byte key, framed record) pairs of a slice; a framed record is its 8-byte length, a
    4-byte CRC, the data and a 4-byte CRC."""
    position = 0
    while position < len(data):
        (length,) = struct.unpack_from("<Q", data, position + 16)
        end = position + 16 + 12 + length + 4
        yield data[position : position + 16], data[position + 16 : end]
        position = end


class TotalsFn(beam.CombineFn):
    """("skips", entry), ("stats", Stats) and ("shards", (shard, count)) items -> the job's skips,
    statistics and shard counts, pickled.

    Example:
      (skips, stats, shard_counts) | beam.Flatten() | beam.CombineGlobally(TotalsFn())
    """

    def create_accumulator(self):
        return {"skips": [], "stats": Stats(), "shards": {}}

    def add_input(self, totals, item):
        kind, value = item
        if kind == "skips":
            totals["skips"].append(value)
        elif kind == "stats":
            totals["stats"].merge(value)
        else:
            shard, count = value
            totals["shards"][shard] = count
        return totals

    def merge_accumulators(self, accumulators):
        merged = self.create_accumulator()
        for totals in accumulators:
            merged["skips"].extend(totals["skips"])
            merged["stats"].merge(totals["stats"])
            merged["shards"].update(totals["shards"])
        return merged

    def extract_output(self, totals):
        return pickle.dumps(totals)
