"""How every CLI ends when it cannot go on: one line, a non-zero exit status, no traceback.

`_cli.run_task(main)` runs a CLI's main under `stop_on_signals` and `exit_on_failure`, which turn
what stops it into one log line:

  * bad input (a malformed file, a missing path, settings that cannot run, a checkpoint that
    does not fit; `ValueError`, `OSError` and the library's own errors of `EXPECTED_ERRORS`), a
    wrong use of the flags (`app.UsageError`): `Type: message`, exit status 1;
  * a full disk or quota, a file size limit, a read-only file system or a missing permission,
    met by Python or by TensorFlow (which raises its own `ResourceExhaustedError`,
    `PermissionDeniedError`, ... with `path; reason` in the message), and wherever in the chain
    of causes it is: `DiskFull: <path>: no space left on device` and the like, exit status 1;
  * SIGTERM or SIGINT: the job stops by an `Interrupted` exception raised where it is, so that
    everything written under a temporary name is removed on the way out (the library writes
    under hidden names and renames into place): `Interrupted: stopped by SIGTERM`, exit status
    128 + the signal's number, as a shell reports a killed job. A second signal ends the process
    at once, with one line too.

Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import _thread
import contextlib
import errno
import os
import re
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Iterator

from absl import app, logging

from albert_tf import stopping
from albert_tf.output_dirs import remove_own_leftovers
from albert_tf.stopping import Interrupted

# errno -> (label, what ran out or stood in the way).
RESOURCE_ERRORS = {
    errno.ENOSPC: ("DiskFull", "no space left on device"),
    errno.EDQUOT: ("DiskQuotaExceeded", "disk quota exceeded"),
    errno.EFBIG: ("FileTooLarge", "file size limit exceeded"),
    errno.EROFS: ("ReadOnlyFileSystem", "read-only file system"),
    errno.EACCES: ("PermissionDenied", "permission denied"),
    errno.EPERM: ("PermissionDenied", "operation not permitted"),
}
# TensorFlow's file system errors read `<path>; <strerror>`; Python's, as text (an error a
# worker process raised, passed on as a message), `[Errno N] <strerror>: '<path>'`.
_TF_REASON = re.compile(
    r"(?P<path>[^\s;{}]+); (?P<reason>"
    + "|".join(re.escape(os.strerror(code)) for code in RESOURCE_ERRORS)
    + ")"
)
_PYTHON_REASON = re.compile(r"\[Errno (?P<errno>\d+)\] [^:'\n]*(?:: '(?P<path>[^'\n]+)')?")
# (module, class) of the library's errors that report bad input or an unusable setting; a module
# not imported cannot have raised its error, so none of them is imported here.
EXPECTED_ERRORS = (
    ("albert_tf.training.callbacks", "NonFiniteLossError"),
    ("albert_tf.training.distribution", "TPUUnavailableError"),
    ("albert_tf.export.pipeline", "ParityError"),
    ("data_prep.corpus", "InputError"),
    ("data_prep.writer", "OutputError"),
    ("data_prep.pipeline", "MissingExtraError"),
)
# TensorFlow's errors that name a file that is missing, cut or corrupt, or a service not there.
TENSORFLOW_INPUT_ERRORS = ("NotFoundError", "DataLossError", "UnavailableError")
# TensorFlow's sharded checkpoint writes go to `<prefix>_temp/part-...` first and leave it
# behind when a write fails.
_CHECKPOINT_STAGING = re.compile(r"(?P<prefix>.+)_temp(?:/part-[^/]*)?")


def stop_on_signals(signums=(signal.SIGTERM, signal.SIGINT)) -> None:
    """From now on the first of `signums` stops the job: the one `stopping.run_stoppably` runs
    (see there), or else the main thread, by raising `Interrupted` where it is; a second one
    ends the process at once, saying so.

    Python drops an exception raised where nothing can catch it (a fork hook, a `__del__`),
    reporting it to `sys.unraisablehook`; from there it is raised again a moment later, in the
    job's thread or the main thread, so that it stops the job from wherever that is next."""
    received: list[int] = []  # the signal that is stopping the job
    redelivered: list[int] = []  # that signal, delivered again after Python dropped it

    def handler(signum, frame):
        if redelivered:
            raise Interrupted(redelivered.pop())
        if received:
            end_at_once(f"stopped at once by a second {signal.Signals(signum).name}", signum)
        received.append(signum)
        if stopping.job_thread() is not None:
            stopping.ask_to_stop(signum)
            return
        raise Interrupted(signum)

    previous_hook = sys.unraisablehook

    def unraisable(args) -> None:
        if not isinstance(args.exc_value, Interrupted):
            previous_hook(args)
        elif (job := stopping.job_thread()) is not None:
            again = stopping.interrupted_by(args.exc_value.signum)
            threading.Timer(0.05, stopping.raise_in_thread, (job, again)).start()
        else:
            # A moment later: the main thread must have left the place that dropped it.
            redelivered.append(args.exc_value.signum)
            threading.Timer(0.05, _thread.interrupt_main, (redelivered[-1],)).start()

    sys.unraisablehook = unraisable
    for signum in signums:
        signal.signal(signum, handler)


def end_at_once(reason: str, signum: int, notes: list[str] | tuple[str, ...] = ()) -> None:
    """Ends the process now, whatever its threads are doing: the one line `Interrupted: <reason>
    (<notes>)` and status 128 + `signum`. What this process was writing is under temporary names,
    which are removed first from the output directories it holds (else the next run would)."""
    notes = list(notes)
    with contextlib.suppress(Exception):
        if removed := remove_own_leftovers():
            notes.append(f"removed {removed} temporary file(s) or folder(s) it was writing")
    logging.error("Interrupted: %s", f"{reason} ({'; '.join(notes)})" if notes else reason)
    logging.flush()
    _flush_and_exit(128 + signum)


def _flush_and_exit(status: int) -> None:
    # `os._exit`, not `sys.exit`: the interpreter's teardown waits for TensorFlow's threads and
    # runs with the default signal actions back in place, so a signal then would kill the
    # process without its one line.
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status)


def drop_the_job(signum: int, notes: list[str]) -> None:
    """`stopping.run_stoppably`'s end for a job that did not stop in time."""
    dropped = (
        "the work under way was dropped: it did not reach a safe point within "
        f"{stopping.GRACE_SECONDS:g} s"
    )
    end_at_once(f"stopped by {signal.Signals(signum).name}", signum, [dropped, *notes])


def _chain(error: BaseException) -> Iterator[BaseException]:
    """`error` and the errors it was raised from or while handling, nearest first."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def resource_error(error: BaseException) -> tuple[str, str, str] | None:
    """(label, path, what ran out) when `error` or one of its causes is a full disk, a
    read-only file system or a missing permission; None otherwise."""
    for cause in _chain(error):
        if isinstance(cause, OSError) and cause.errno in RESOURCE_ERRORS:
            label, what = RESOURCE_ERRORS[cause.errno]
            path = os.fsdecode(cause.filename) if cause.filename is not None else None
            return label, path, what
        text = str(cause)
        if found := _TF_REASON.search(text):
            code = next(c for c in RESOURCE_ERRORS if os.strerror(c) == found["reason"])
            return RESOURCE_ERRORS[code][0], found["path"], RESOURCE_ERRORS[code][1]
        named = [m for m in _PYTHON_REASON.finditer(text) if int(m["errno"]) in RESOURCE_ERRORS]
        if named:  # the one that names its file, if one does
            found = max(named, key=lambda m: m["path"] is not None)
            label, what = RESOURCE_ERRORS[int(found["errno"])]
            return label, found["path"], what
    return None


def checkpoint_staging(path: str | None) -> tuple[str, str] | None:
    """(checkpoint prefix, staging directory) when `path` lies in the directory where
    TensorFlow stages a checkpoint (`ckpt-5_temp/part-...` for `ckpt-5`)."""
    staging = _CHECKPOINT_STAGING.fullmatch(path or "")
    return (staging["prefix"], f"{staging['prefix']}_temp") if staging else None


def remove_checkpoint_staging(path: str | None) -> None:
    """Removes the staging directory of a checkpoint whose write failed at `path`, which
    TensorFlow leaves behind (only one that holds nothing but its `part-` files)."""
    if found := checkpoint_staging(path):
        directory = found[1]
        if os.path.isdir(directory) and all(n.startswith("part-") for n in os.listdir(directory)):
            shutil.rmtree(directory, ignore_errors=True)


def _expected(error: BaseException) -> bool:
    if isinstance(error, (ValueError, OSError, app.UsageError)):
        return True
    for module, name in EXPECTED_ERRORS:
        if module in sys.modules and isinstance(error, getattr(sys.modules[module], name)):
            return True
    tf = sys.modules.get("tensorflow")
    return bool(
        tf is not None
        and isinstance(error, tf.errors.OpError)
        and type(error).__name__ in TENSORFLOW_INPUT_ERRORS
    )


def describe(error: BaseException, bad_input: str | None = None) -> tuple[str, int] | None:
    """(one line, exit status) for an error that ends a job without a traceback; None for one
    that is a bug. Notes the library added to `error` (what became of a job's temporary files)
    follow in parentheses. `bad_input` labels bad input in place of the error's type (the export
    CLI's `export failed: ...`)."""
    line, status = _line(error, bad_input) or (None, None)
    if line is None:
        return None
    if notes := getattr(error, "__notes__", None):
        line = f"{line} ({'; '.join(' '.join(str(n).split()) for n in notes)})"
    return line, status


def _line(error: BaseException, bad_input: str | None) -> tuple[str, int] | None:
    # A stop raised inside a library's context manager can come out as another error raised
    # while it propagated (TensorFlow's graph stack finding itself unbalanced, say): the stop is
    # still what ended the job.
    stop = next((e for e in _chain(error) if isinstance(e, (Interrupted, KeyboardInterrupt))), None)
    if stop is not None:
        signum = getattr(stop, "signum", signal.SIGINT)
        return f"Interrupted: stopped by {signal.Signals(signum).name}", 128 + signum
    if found := resource_error(error):
        label, path, what = found
        if staging := checkpoint_staging(path):
            path = f"{staging[0]} (checkpoint)"
        return f"{label}: {path or '(file not named)'}: {what}", 1
    if _expected(error):
        message = " ".join(str(error).split())
        if type(error).__module__.startswith("tensorflow"):
            message = re.sub(r"^\{\{function_node [^}]*\}\} ", "", message)
        return f"{bad_input or type(error).__name__}: {message}", 1
    return None


def exit_on_failure(job: Callable[[], object], bad_input: str | None = None):
    """Runs `job()`; what `describe` knows is logged as one line and exits with its status."""
    try:
        return job()
    except BaseException as error:
        if isinstance(error, SystemExit) or (found := describe(error, bad_input)) is None:
            raise
        line, status = found
        if resource := resource_error(error):
            remove_checkpoint_staging(resource[1])
        logging.error("%s", line)
        logging.flush()
        sys.exit(status)


def end_process(ending: SystemExit) -> None:
    """Ends the process with `ending`'s status: at once, past the interpreter's teardown, when
    the job was interrupted (a second signal must still find this module's handler, which the
    teardown takes away); as Python ends it otherwise."""
    status = ending.code if isinstance(ending.code, int) else None
    if status is not None and status > 128 and stopping.stop_requested():
        _flush_and_exit(status)
    raise ending
