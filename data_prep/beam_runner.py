"""The Beam runner: the same job on Apache Beam (locally on the FnApiRunner; Dataflow, Flink, Spark).

    files --Create, reshuffled--> ReadPools (one file per call, Beam filesystems: local, gs://, ...;
                                 each pool to a spill file) -> spill file names
          --Reshuffle--> ProcessPools (the shared `units.PoolProcessor`, SentencePiece loaded once
                         per worker in `setup`; a pool's keyed records to one records file)
                         -> (shard, slice of a records file) per pool and shard
          --GroupByKey--> WriteShard (its slices' records sorted by key, written under a hidden
                          temporary name)
    skips + statistics + shard counts --CombineGlobally--> totals, read back by the launcher, which
    then renames the shards into place, writes the summary and deletes the spill files. (The
    steps: `beam_stages`.)

Every record's sort key is `derive_seed(random_seed, "shuffle", pool key, position in the pool)`:
the shard is the key modulo the number of shards and a shard is its records in key order, a full
shuffle fixed by the seed. So the files depend on neither the runner, the worker count nor the
bundles; they hold the same multiset of records as the local runner's (whose bounded shuffle
buffer orders them differently). A shard is sorted in one worker's memory: choose
`--num_output_shards` so that a shard stays at a few hundred MB.

A run killed before its final renames leaves nothing under a final name, only hidden
`.NAME.beam-RUNID[...]` files, which the next run of either runner into the same outputs deletes
(`writer.is_leftover`); while a run writes into local directories, it holds them
(`writer.claim_outputs`), and a second job into them is refused. Only file names,
slices and statistics go through the runner's shuffle (pools and records go through spill files
beside the outputs, which hold about the corpus's text and its records until the job ends), so no
process's memory grows with the corpus: a worker holds one pool or one shard, the launcher names.

Workers import neither TensorFlow nor Keras: records are framed by the TF-free encoder. Importing
this module needs Apache Beam (`pip install -r requirements-beam.txt`); the CLI says so when it is
missing.
"""

from __future__ import annotations

import json
import math
import pickle
import time
import uuid
from collections.abc import Sequence

import apache_beam as beam
from absl import logging
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics.metric import MetricsFilter

from albert_tf.output_dirs import describe_removed
from data_prep import beam_logs, beam_workers, corpus, writer
from data_prep.beam_stages import (
    WRITE_FAILURES,
    ProcessPools,
    ReadPools,
    TotalsFn,
    WriteShard,
    open_input,
    read_bytes,
    write_bytes,
    write_totals,
)
from data_prep.summary import job_summary
from data_prep.units import DataPrepConfig


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

    Raises corpus.InputError / writer.OutputError as the local runner does (`writer.claim_outputs`
    locks local output directories); on any failure no output is left under its final name.
    """
    started = time.monotonic()
    paths = expand_inputs(config.input_file)
    check_readable(paths)
    outputs = writer.shard_paths(config.output_file, config.num_output_shards)
    summary_path = config.summary_path()
    with writer.claim_outputs(outputs, summary_path, remove=False):
        _delete_leftovers([*outputs, summary_path])
        return _run(config, beam_runner, pipeline_args, paths, outputs, summary_path, started)


def _run(
    config: DataPrepConfig,
    beam_runner: str,
    pipeline_args: str | Sequence[str],
    paths: list[str],
    outputs: list[str],
    summary_path: str,
    started: float,
) -> dict:
    run_id = uuid.uuid4().hex[:12]
    temps = [_hidden(path, f"beam-{run_id}") for path in outputs]
    spill_prefix = temps[0]  # the run's other hidden files are named after the first shard's
    try:
        with beam_logs.quiet_local_job(beam_runner):
            totals = _run_pipeline(config, beam_runner, pipeline_args, paths, spill_prefix, temps)
        for shard, temp in enumerate(temps):
            if shard not in totals["shards"]:  # no record fell into this shard
                write_bytes(b"", temp)
        FileSystems.rename(temps, outputs)
    except BaseException:
        _delete_quietly(temps)
        raise
    finally:
        _delete_spill_files(spill_prefix)
    stats = totals["stats"]
    skips = corpus.SkipLog()
    # In the order the local runner meets them: file by file, line by line, whole-file ones last.
    skips.merge(sorted(totals["skips"], key=lambda e: _skip_order(paths, e)))
    counts = [totals["shards"].get(i, 0) for i in range(len(outputs))]
    elapsed = time.monotonic() - started
    summary = job_summary(config, paths, outputs, counts, stats, skips, elapsed, "beam")
    summary["settings"]["beam_runner"] = beam_runner
    _write_summary(summary_path, summary)
    logging.info(
        "wrote %d instances to %d file(s) in %.1fs on Beam (%s)",
        stats.instances,
        len(outputs),
        elapsed,
        beam_runner,
    )
    return summary


def _run_pipeline(
    config: DataPrepConfig,
    beam_runner: str,
    pipeline_args: str | Sequence[str],
    paths: list[str],
    spill_prefix: str,
    temps: list[str],
) -> dict:
    """Builds and runs the pipeline; returns its totals (skips, statistics, shard counts)."""
    totals_path = f"{spill_prefix}.totals.json"
    runner, options = beam_workers.runner_and_options(
        beam_runner, pipeline_args, config.num_workers
    )
    p = beam.Pipeline(runner=runner, options=options)
    read = (
        p
        # Create reshuffles two or more elements itself: the files spread over the workers.
        | "Files" >> beam.Create(list(enumerate(paths)), reshuffle=True)
        | "ReadPools"
        >> beam.ParDo(ReadPools(config, spill_prefix)).with_outputs("skips", main="pools")
    )
    processed = (
        read.pools
        | "SpreadPools" >> beam.Reshuffle()
        | "ProcessPools"
        >> beam.ParDo(ProcessPools(config, len(temps), spill_prefix)).with_outputs(
            "stats", main="slices"
        )
    )
    written = (
        processed.slices
        | "GroupByShard" >> beam.GroupByKey()
        | "WriteShards" >> beam.ParDo(WriteShard(temps))
    )
    _ = (
        (read.skips, processed.stats, written)
        | "AllTotals" >> beam.Flatten()
        # Never empty (a file gives pools or a skip), so no default value is needed.
        | "CombineTotals" >> beam.CombineGlobally(TotalsFn()).without_defaults()
        | "WriteTotals" >> beam.Map(write_totals, totals_path)
    )
    with beam_logs.quiet_worker_threads():
        result = p.run()
        result.wait_until_finish()
    _raise_write_failure(result)
    return pickle.loads(read_bytes(totals_path))


def _raise_write_failure(result) -> None:
    """Raises, as an OSError naming the path, the first write a stage could not do
    (`beam_stages.record_unwritable`), if any."""
    query = MetricsFilter().with_namespace(WRITE_FAILURES[0]).with_name(WRITE_FAILURES[1])
    failures = set()
    for metric in result.metrics().query(query)["string_sets"]:
        failures |= set(metric.committed or metric.attempted or ())
    if failures:
        code, reason, path = json.loads(min(failures))
        raise OSError(code, reason, path)


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
            with open_input(path) as f:
                f.read(1)
        except Exception as e:
            raise corpus.InputError(f"cannot read input file {path}: {e}") from e


def _hidden(path: str, suffix: str) -> str:
    """A name beside `path` that no reader of the outputs picks up."""

    directory, name = FileSystems.split(path)
    return FileSystems.join(directory, f".{name}.{suffix}")


def _delete_leftovers(paths: Sequence[str]) -> None:
    """Deletes the hidden files that killed runs of either runner left under the names of `paths`
    (`writer.is_leftover`; a run that ends, even by an exception, deletes its own), with one log
    line giving their number and size; one listing per directory."""
    try:
        found = []
        for directory, names in writer.names_by_directory(paths, FileSystems.split).items():
            match = FileSystems.match([FileSystems.join(directory, ".*")])[0]
            for m in match.metadata_list:
                parent, name = FileSystems.split(m.path)
                if parent == directory and writer.is_leftover(name, names):  # not in subfolders
                    found.append(m)
        if found:
            FileSystems.delete([m.path for m in found])
            logging.warning(
                describe_removed(
                    len(found), sum(m.size_in_bytes for m in found), [m.path for m in found]
                )
            )
    except Exception as e:  # the run goes on: its own files are under other names
        logging.warning("could not delete the files an interrupted run left: %s", e)


def _delete_spill_files(spill_prefix: str) -> None:
    """Deletes the run's pool and records files and its totals (its shards have their own names)."""
    try:
        found = [m.path for m in FileSystems.match([f"{spill_prefix}.*"])[0].metadata_list]
        if found:
            FileSystems.delete(found)
    except Exception as e:  # the job's outcome matters more; the next run deletes them
        logging.warning("could not delete the run's spill files %s.*: %s", spill_prefix, e)


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
    temp = _hidden(path, f"beam-{uuid.uuid4().hex[:12]}")  # a leftover the next run deletes
    write_bytes(json.dumps(summary, indent=2).encode(), temp)
    FileSystems.rename([temp], [path])
