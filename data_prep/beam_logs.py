"""What of Apache Beam's own logging reaches the user of a Beam job.

On this machine (the FnApiRunner) Beam logs its plumbing: ports, type hints, state caches, and
every worker's start-up and teardown, which a worker sends to the launcher over Beam's logging
service, one line of protobuf text each. Inside `quiet_local_job`:

- Beam's records below WARNING are left out, unless debug logging is on (`--verbosity=1`);
- a worker's record is logged again as the record it was (level, message, source file, time),
  so that a warning of ours in a worker reads as it does in the launcher;
- of a worker's records from Beam itself, only warnings are kept (a bundle that makes no
  progress, a large element): not its start-up notes, nor the errors of a bundle that failed or
  was cut off as the job ended, which the error that ends the job explains.

On another runner (Dataflow, Flink, Spark) Beam's INFO lines say where the job is and are kept.
Nothing here imports Beam at import time, so that `quiet_import` can wrap Beam's own import.
"""

from __future__ import annotations

import contextlib
import logging as std_logging
import os
import threading
from collections.abc import Iterator

from absl import logging

from albert_tf.log_filters import PackageRecordsBelow

# Where the FnApiRunner's launcher logs what its workers sent, as 'Worker: <LogEntry text>'.
RELAY_LOGGER = "apache_beam.runners.portability.local_job_service"


def _worth_relaying_from_beam(path: str, level: int) -> bool:
    """A warning from a worker's Beam code (a bundle that makes no progress, a large element),
    but not one from its start-up (`sdk_worker_main`); nor an error, which comes from a bundle
    that failed or was cut off by the job's end, which the job's own error explains."""
    start_up = os.path.basename(path) == "sdk_worker_main.py"
    return std_logging.WARNING <= level < std_logging.ERROR and not start_up


class _WorkerRecords(std_logging.Filter):
    """On the relay logger: turns a relayed worker record back into that record, and drops the
    ones from the worker's Beam code that say nothing to the user."""

    def __init__(self):
        super().__init__()
        from apache_beam.portability.api import beam_fn_api_pb2
        from apache_beam.runners.worker.log_handler import LOGENTRY_TO_LOG_LEVEL_MAP

        self._entry_type = beam_fn_api_pb2.LogEntry
        self._levels = LOGENTRY_TO_LOG_LEVEL_MAP
        self._beam = PackageRecordsBelow("apache_beam")

    def filter(self, record: std_logging.LogRecord) -> bool:
        from google.protobuf import text_format

        text = record.getMessage()
        if not text.startswith("Worker: "):
            return True
        try:  # the relay put the entry's fields on one line; text format reads it all the same
            entry = text_format.Parse(text[len("Worker: ") :], self._entry_type())
        except text_format.ParseError:
            return True
        path, _, line = entry.log_location.rpartition(":")
        level = self._levels.get(entry.severity, std_logging.INFO)
        if self._beam.covers(path) and not _worth_relaying_from_beam(path, level):
            return False
        record.msg, record.args = entry.message, ()
        record.levelno = level
        record.levelname = std_logging.getLevelName(record.levelno)
        record.pathname, record.lineno = path, int(line) if line.isdigit() else 0
        record.filename = os.path.basename(path)
        record.created = entry.timestamp.seconds + entry.timestamp.nanos / 1e9
        return True


@contextlib.contextmanager
def _filtering(handler_filter: std_logging.Filter) -> Iterator[None]:
    handlers = list(std_logging.getLogger().handlers)
    for handler in handlers:
        handler.addFilter(handler_filter)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(handler_filter)


@contextlib.contextmanager
def quiet_import() -> Iterator[None]:
    """Around Beam's first import: what it logs below ERROR is about optional Google Cloud
    clients, which a job reading and writing files does without (kept with debug logging on)."""
    if logging.level_debug():
        yield
        return
    with _filtering(PackageRecordsBelow("apache_beam", std_logging.ERROR)):
        yield


@contextlib.contextmanager
def quiet_local_job(beam_runner: str) -> Iterator[None]:
    """Around building and running a job: on the FnApiRunner, Beam's plumbing and its workers'
    start-up and teardown left out, its workers' other records logged as they were (see the
    module docstring); on other runners, or with debug logging on, everything as Beam logs it."""
    if beam_runner != "FnApiRunner" or logging.level_debug():
        yield
        return
    relay = std_logging.getLogger(RELAY_LOGGER)
    worker_records = _WorkerRecords()
    relay.addFilter(worker_records)
    try:
        with _filtering(PackageRecordsBelow("apache_beam")):
            yield
    finally:
        relay.removeFilter(worker_records)


@contextlib.contextmanager
def quiet_worker_threads() -> Iterator[None]:
    """Inside, and after an error leaves it, an error in one of Beam's threads (a worker that
    exits as the job is torn down) is one debug line instead of a traceback: the error that ends
    the job says why. A job that succeeds gets the previous hook back."""
    previous = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        name = args.thread.name if args.thread else "?"
        logging.debug("Beam thread %s: %s: %s", name, args.exc_type.__name__, args.exc_value)

    threading.excepthook = hook
    yield
    threading.excepthook = previous
