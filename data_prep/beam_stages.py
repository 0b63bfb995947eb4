"""What the Beam runner's workers run: reading files into pools, pools into keyed records, records
into shards, and the job's totals (the pipeline itself is `beam_runner`'s).

Each worker holds one pool (about `batch_chars` of text and its records) while processing, and one
shard, sorted in memory, while writing; nothing here accumulates across pools or shards. Files go
through Beam's filesystems (local paths, gs://, ...).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import gzip
import itertools
import os
import pickle
import tempfile
from collections.abc import Iterator, Sequence
from typing import BinaryIO

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

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


def write_bytes(data: bytes, path: str) -> None:
    """Writes `data` to `path` through Beam's filesystems."""
    with FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
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
    """(file number, path) -> the file's pools; its skips to the "skips" output.

    Args:
      config: the job.

    Example:
      files | beam.ParDo(ReadPools(config)).with_outputs("skips", main="pools")
    """

    def __init__(self, config: DataPrepConfig):
        self.config = config

    def setup(self):
        _return_large_frees_to_the_os()

    def process(self, item):
        file_number, path = item
        skips = corpus.SkipLog()
        yield from read_file_pools(file_number, path, self.config, skips, open_input)
        for entry in skips.entries():
            yield beam.pvalue.TaggedOutput("skips", ("skips", entry))


@beam.typehints.with_output_types(tuple[int, list[tuple[bytes, bytes]]])
class ProcessPools(beam.DoFn):
    """pool -> (shard, [(sort key, framed record)]) per shard its records fall into; the pool's
    statistics to the "stats" output.

    A record's sort key is `derive_seed(random_seed, "shuffle", pool key, position in the pool)`
    and its shard that key modulo `num_shards`.

    Args:
      config: the job.
      num_shards: the number of output shards.

    Example:
      pools | beam.ParDo(ProcessPools(config, 8)).with_outputs("stats", main="records")
    """

    def __init__(self, config: DataPrepConfig, num_shards: int):
        self.config, self.num_shards = config, num_shards

    def setup(self):
        _return_large_frees_to_the_os()
        # Once per worker: the SentencePiece model and the tables built from it.
        self.processor = PoolProcessor(_localized(self.config), encode_threads=1)

    def process(self, pool):
        stats = Stats()
        seed = self.config.random_seed
        by_shard: dict[int, list[tuple[bytes, bytes]]] = {}
        for position, record in enumerate(self.processor.instance_records(pool, stats)):
            key = derive_seed(seed, "shuffle", pool.key, position)
            # As 16 big-endian bytes: Beam's int coder stops at 64 bits; bytes sort as the ints do.
            by_shard.setdefault(key % self.num_shards, []).append((key.to_bytes(16, "big"), record))
        # One element per (pool, shard) rather than per record: Beam's cost is per element.
        yield from by_shard.items()
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
    """(shard, batches of (sort key, record)) -> the shard's records in key order, written to
    `temps[shard]`; yields ("shards", (shard, record count)).

    Args:
      temps: the shards' temporary paths, in shard order.

    Example:
      records | beam.GroupByKey() | beam.ParDo(WriteShard([".a.tmp", ".b.tmp"]))
    """

    def __init__(self, temps: Sequence[str]):
        self.temps = list(temps)

    def setup(self):
        _return_large_frees_to_the_os()

    def process(self, item):
        shard, batches = item
        keyed = sorted(itertools.chain.from_iterable(batches), key=lambda pair: pair[0])
        with FileSystems.create(
            self.temps[shard], compression_type=CompressionTypes.UNCOMPRESSED
        ) as f:
            for _, record in keyed:  # not joined first: that would hold the shard twice
                f.write(record)
        yield "shards", (shard, len(keyed))


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
