"""The local runner: the whole job on one machine, pools processed in worker processes.

Pools (`units.read_pools`) go to forked workers; their records come back in key order into a
shuffle buffer seeded from the run seed, then round-robin into the shards. Since a pool's records
depend only on the seed and its documents (`units`), the shards are byte-identical for any
`num_workers` (other flags, `batch_chars` and `shuffle_buffer_size` included, change them).

Bounded memory: the main process holds the shuffle buffer and the text of at most `2 * num_workers`
pools (about `batch_chars` characters each); a worker holds one pool and its tokens, and streams
records to a hidden spill file beside the outputs that the main process reads back in order. Nothing
grows with the corpus or with `dupe_factor`. The original's shuffles of all documents and of all
instances of all passes become this one bounded shuffle buffer.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import multiprocessing
import os
import random
import signal
import time
from collections.abc import Callable, Iterable, Iterator

from absl import logging

from albert_tf import records
from albert_tf.io import naming_failed_writes
from data_prep import corpus, writer
from data_prep.stats import Stats
from data_prep.summary import job_summary, write_summary
from data_prep.units import DataPrepConfig, DocumentPool, PoolProcessor, derive_seed, read_pools

_WORKER: PoolProcessor | None = None
_PR_SET_PDEATHSIG = 1  # prctl(2)


def _process_in_worker(spill_path: str, pool: DocumentPool) -> Stats:
    # Records go to a spill file rather than back through the result pipe, so a pool never sits in
    # memory whole, whatever dupe_factor is.
    assert _WORKER is not None
    stats = Stats()
    with naming_failed_writes(spill_path), open(spill_path, "wb", buffering=1 << 20) as f:
        for record in _WORKER.instance_records(pool, stats):
            f.write(record)
    return stats


def _leave_signals_to_the_parent(parent: int) -> None:
    # A worker dies quietly on SIGTERM (the pool's terminate() sends it) and ignores SIGINT (a
    # Ctrl-C reaches the whole process group): the main process alone decides how the job
    # ends, and a worker never prints a traceback of its own for a signal.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # And it dies with the main process, however that ends (kill -9 included), rather than go on
    # writing its spill file and print a broken-pipe traceback for results nobody reads. Linux
    # sends the signal when the thread that started the worker ends: the one running the pool.
    with contextlib.suppress(AttributeError, OSError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # it ended before the request above
        os._exit(1)


def run(config: DataPrepConfig) -> dict:
    """Runs the job and returns the summary (also written as JSON beside the outputs).

    Raises corpus.InputError / writer.OutputError for fatal input or output problems (another
    job writing into an output's directory among them), before any output is renamed into place.
    What killed runs left under the outputs' names is removed first (`writer.claim_outputs`).
    """
    started = time.monotonic()
    paths = corpus.expand_inputs(config.input_file)
    corpus.check_readable(paths)
    outputs = writer.shard_paths(config.output_file, config.num_output_shards)
    summary_path = config.summary_path()
    with writer.claim_outputs(outputs, summary_path):
        return _run(config, paths, outputs, summary_path, started)


def _run(
    config: DataPrepConfig, paths: list[str], outputs: list[str], summary_path: str, started: float
) -> dict:
    global _WORKER
    skips = corpus.SkipLog()
    stats = Stats()
    threads = max(1, (os.cpu_count() or 1) // config.num_workers)
    if config.masking_mode == "dynamic":
        logging.info(
            "masking=dynamic: writing unmasked instances (%s) for masking during training; "
            "masked_lm_prob, max_predictions_per_seq, ngram, favor_shorter_ngram, "
            "do_whole_word_mask and do_permutation are not used here, only recorded for the "
            'trainer under "masking" in %s',
            ", ".join(records.UNMASKED_FEATURE_NAMES),
            summary_path,
        )
    # Built before forking so workers inherit the loaded model instead of each loading it.
    _WORKER = PoolProcessor(config, encode_threads=threads)
    buffer = writer.ShuffleBuffer(
        config.shuffle_buffer_size, random.Random(derive_seed(config.random_seed, "shuffle"))
    )
    progress = _Progress()
    try:
        with writer.ShardedWriter(outputs) as out:

            def consume(pool_records: Iterator[bytes]) -> None:
                for record in pool_records:
                    evicted = buffer.push(record)
                    if evicted is not None:
                        out.write(evicted)
                progress.update(stats)

            pools = read_pools(paths, config, skips)
            if config.num_workers == 1:
                for pool in pools:
                    consume(_WORKER.instance_records(pool, stats))
            else:
                spill_prefix = writer.temporary_path(outputs[0])
                _run_in_workers(config.num_workers, pools, spill_prefix, stats, consume)
            for record in buffer.drain():
                out.write(record)
            out.commit()
    finally:
        _WORKER = None  # the forked workers have their copy; release the model here
    elapsed = time.monotonic() - started
    summary = job_summary(config, paths, outputs, out.counts, stats, skips, elapsed, "local")
    write_summary(summary_path, summary)
    logging.info(
        "wrote %d instances to %d file(s) in %.1fs; summary %s",
        stats.instances,
        len(outputs),
        summary["elapsed_seconds"],
        summary_path,
    )
    return summary


def _run_in_workers(
    num_workers: int,
    pools: Iterable[DocumentPool],
    spill_prefix: str,
    stats: Stats,
    consume: Callable[[Iterator[bytes]], None],
) -> None:
    """Pools go to worker processes, at most 2 per worker in flight; results are consumed in key
    order, so the output does not depend on which worker ran what."""
    pending: collections.deque = collections.deque()
    try:
        with multiprocessing.get_context("fork").Pool(
            num_workers, initializer=_leave_signals_to_the_parent, initargs=(os.getpid(),)
        ) as workers:

            def finish_oldest() -> None:
                spill, result = pending[0]
                stats.merge(result.get())
                with open(spill, "rb") as f:
                    consume(records.iter_framed_records(f))
                pending.popleft()
                os.remove(spill)

            for pool in pools:
                spill = writer.spill_path(spill_prefix, pool.key)
                pending.append((spill, workers.apply_async(_process_in_worker, (spill, pool))))
                while len(pending) >= 2 * num_workers:
                    finish_oldest()
            while pending:
                finish_oldest()
    finally:
        for spill, _ in pending:  # after a failure: the pool is terminated, its files go
            try:
                os.remove(spill)
            except OSError:
                pass


class _Progress:
    """A progress line every few seconds."""

    def __init__(self, every_seconds: float = 5.0):
        self.start = self.last = time.monotonic()
        self.every = every_seconds

    def update(self, stats: Stats) -> None:
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            logging.info(
                "%d documents, %d instances, %.0f instances/s",
                stats.documents,
                stats.instances,
                stats.instances / max(now - self.start, 1e-9),
            )
