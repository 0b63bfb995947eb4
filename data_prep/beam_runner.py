"""The Beam runner: the same job on Apache Beam (locally on the FnApiRunner; Dataflow, Flink, Spark).

    files --Reshuffle--> ReadPools (one file per call, Beam filesystems: local paths, gs://, ...)
          --Reshuffle--> ProcessPools (the shared `units.PoolProcessor`, SentencePiece loaded once
                         per worker in `setup`) -> (shard, [(sort key, framed record)]) per pool
          --GroupByKey--> WriteShard (records sorted by key, written under a hidden temporary name)
    skips + statistics + shard counts --CombineGlobally--> totals, read back by the launcher, which
    then renames the shards into place and writes the summary.

Every record's sort key is `derive_seed(random_seed, "shuffle", pool key, position in the pool)`:
the shard is the key modulo the number of shards and a shard is its records in key order, a full
shuffle fixed by the seed. So the files depend on neither the runner, the worker count nor the
bundles; they hold the same multiset of records as the local runner's (whose bounded shuffle
buffer orders them differently). A shard is sorted in one worker's memory: choose
`--num_output_shards` so that a shard stays at a few hundred MB.

Workers import neither TensorFlow nor Keras: records are framed by the TF-free encoder. Importing
this module needs Apache Beam (`pip install -r requirements-beam.txt`); the CLI says so when it is
missing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import itertools
import json
import math
import os
import pickle
import shlex
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import BinaryIO

import apache_beam as beam
from absl import logging
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from data_prep import corpus, writer
from data_prep.stats import Stats
from data_prep.summary import job_summary
from data_prep.units import DataPrepConfig, PoolProcessor, derive_seed, read_file_pools


def run(
    config: DataPrepConfig,
    beam_runner: str = "FnApiRunner",
    pipeline_args: str | Sequence[str] = "",
) -> dict:
    """Runs the job on Beam and returns the summary (also written beside the outputs).

    Args:
      config: the job; `num_workers` is the FnApiRunner's worker processes (other runners size
        their workers with their own pipeline options).
      beam_runner: one of `pipeline.BEAM_RUNNERS`, always named: Beam's own default runner would fetch a
        binary from the internet.
      pipeline_args: further Beam pipeline options, e.g. "--project=p --region=r
        --temp_location=gs://b/tmp".

    Raises corpus.InputError / writer.OutputError as the local runner does; on any failure no
    output is left under its final name.
    """
    started = time.monotonic()
    paths = expand_inputs(config.input_file)
    check_readable(paths)
    outputs = writer.shard_paths(config.output_file, config.num_output_shards)
    run_id = uuid.uuid4().hex[:12]
    temps = [_hidden(path, f"beam-{run_id}") for path in outputs]
    totals_path = _hidden(outputs[0], f"beam-{run_id}.totals.json")
    try:
        with beam.Pipeline(options=_options(beam_runner, pipeline_args, config)) as p:
            read = (
                p
                | "Files" >> beam.Create(list(enumerate(paths)))
                | "SpreadFiles" >> beam.Reshuffle()
                | "ReadPools" >> beam.ParDo(_ReadPools(config)).with_outputs("skips", main="pools")
            )
            processed = (
                read.pools
                | "SpreadPools" >> beam.Reshuffle()
                | "ProcessPools"
                >> beam.ParDo(_ProcessPools(config, len(outputs))).with_outputs(
                    "stats", main="records"
                )
            )
            written = (
                processed.records
                | "GroupByShard" >> beam.GroupByKey()
                | "WriteShards" >> beam.ParDo(_WriteShard(temps))
            )
            _ = (
                (read.skips, processed.stats, written)
                | "AllTotals" >> beam.Flatten()
                | "CombineTotals" >> beam.CombineGlobally(_TotalsFn())
                | "WriteTotals" >> beam.Map(_write_bytes, totals_path)
            )
        totals = pickle.loads(_read_bytes(totals_path))
        for shard, temp in enumerate(temps):
            if shard not in totals["shards"]:  # no record fell into this shard
                _write_bytes(b"", temp)
        FileSystems.rename(temps, outputs)
    except BaseException:
        _delete_quietly(temps)
        raise
    finally:
        _delete_quietly([totals_path])
    stats = totals["stats"]
    skips = corpus.SkipLog()
    # In the order the local runner meets them: file by file, line by line, whole-file ones last.
    skips.merge(sorted(totals["skips"], key=lambda e: _skip_order(paths, e)))
    counts = [totals["shards"].get(i, 0) for i in range(len(outputs))]
    elapsed = time.monotonic() - started
    summary = job_summary(config, paths, outputs, counts, stats, skips, elapsed, "beam")
    summary["settings"]["beam_runner"] = beam_runner
    _write_summary(config.summary_path(), summary)
    logging.info(
        "wrote %d instances to %d file(s) in %.1fs on Beam (%s)",
        stats.instances,
        len(outputs),
        elapsed,
        beam_runner,
    )
    return summary


def _skip_order(paths: Sequence[str], entry: dict) -> tuple[int, float]:
    return paths.index(entry["file"]), (entry["first_lines"] or [math.inf])[0]


def expand_inputs(patterns: str | Sequence[str]) -> list[str]:
    """Files of comma-separated globs through Beam's filesystems: each glob's matches sorted, in
    pattern order, repeats kept (as the local runner); InputError names every empty pattern."""

    if isinstance(patterns, str):
        patterns = [p.strip() for p in patterns.split(",") if p.strip()]
    paths, empty = [], []
    for pattern in patterns:
        try:
            found = sorted(m.path for m in FileSystems.match([pattern])[0].metadata_list)
        except Exception:  # Beam raises BeamIOError for a missing literal path
            found = []
        (paths.extend(found) if found else empty.append(pattern))
    if empty:
        raise corpus.InputError(f"no input file matches: {', '.join(empty)}")
    return paths


def check_readable(paths: Sequence[str]) -> None:
    """Opens and reads a byte of every file; InputError names the first that fails."""
    for path in dict.fromkeys(paths):
        try:
            with _open(path) as f:
                f.read(1)
        except Exception as e:
            raise corpus.InputError(f"cannot read input file {path}: {e}") from e


@contextlib.contextmanager
def _open(path: str) -> Iterator[BinaryIO]:
    """A file through Beam's filesystems, gunzipped when its name ends in .gz (as the local runner
    reads it; Beam's own decompressing reader cannot bound a line's length)."""
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as raw:
        if path.endswith(".gz"):
            with gzip.GzipFile(fileobj=raw, mode="rb") as f:
                yield f
        else:
            yield raw


def _hidden(path: str, suffix: str) -> str:
    """A name beside `path` that no reader of the outputs picks up."""

    directory, name = FileSystems.split(path)
    return FileSystems.join(directory, f".{name}.{suffix}")


def _write_bytes(data: bytes | str, path: str) -> None:

    with FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        f.write(data.encode() if isinstance(data, str) else data)


def _read_bytes(path: str) -> bytes:

    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        return f.read()


def _delete_quietly(paths: Sequence[str]) -> None:
    for path in paths:
        try:
            if FileSystems.exists(path):
                FileSystems.delete([path])
        except Exception as e:  # the original error matters more than a leftover hidden file
            logging.warning("could not delete %s: %s", path, e)


def _write_summary(path: str, summary: dict) -> None:
    """Locally through the shared atomic writer; elsewhere written hidden, then renamed."""

    from data_prep.summary import write_summary

    if "://" not in path:
        write_summary(path, summary)
        return
    temp = _hidden(path, f"{uuid.uuid4().hex[:12]}.tmp")
    _write_bytes(json.dumps(summary, indent=2), temp)
    FileSystems.rename([temp], [path])


def _options(beam_runner: str, pipeline_args: str | Sequence[str], config: DataPrepConfig):

    args = shlex.split(pipeline_args) if isinstance(pipeline_args, str) else list(pipeline_args)
    extra = {}
    if beam_runner == "FnApiRunner":
        # Worker processes on this machine; one worker runs in this process.
        extra = dict(
            direct_num_workers=config.num_workers,
            direct_running_mode="multi_processing" if config.num_workers > 1 else "in_memory",
        )
        beam_runner = "apache_beam.runners.portability.fn_api_runner.FnApiRunner"
    return PipelineOptions(args, runner=beam_runner, **extra)


class _ReadPools(beam.DoFn):
    """(file number, path) -> the file's pools; its skips to the "skips" output."""

    def __init__(self, config: DataPrepConfig):
        self.config = config

    def process(self, item):
        file_number, path = item
        skips = corpus.SkipLog()
        yield from read_file_pools(file_number, path, self.config, skips, _open)
        for entry in skips.entries():
            yield beam.pvalue.TaggedOutput("skips", ("skips", entry))


@beam.typehints.with_output_types(tuple[int, list[tuple[bytes, bytes]]])
class _ProcessPools(beam.DoFn):
    """pool -> (shard, [(sort key, framed record)]) per shard its records fall into; the pool's
    statistics to the "stats" output."""

    def __init__(self, config: DataPrepConfig, num_shards: int):
        self.config, self.num_shards = config, num_shards

    def setup(self):
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
        f.write(_read_bytes(config.spm_model_file))
    return dataclasses.replace(config, spm_model_file=local)


class _WriteShard(beam.DoFn):
    """(shard, batches of (sort key, record)) -> the shard, in key order, under its temporary
    name."""

    def __init__(self, temps: Sequence[str]):
        self.temps = list(temps)

    def process(self, item):
        shard, batches = item
        keyed = sorted(itertools.chain.from_iterable(batches), key=lambda pair: pair[0])
        _write_bytes(b"".join(record for _, record in keyed), self.temps[shard])
        yield "shards", (shard, len(keyed))


class _TotalsFn(beam.CombineFn):
    """Skips, statistics and shard counts of the whole job."""

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
