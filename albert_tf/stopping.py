"""Stopping a job from outside it: a signal asks, the job stops at its next safe point.

A CLI runs its job in a thread of its own (`run_stoppably`) so that the main thread, which alone
runs Python's signal handlers, is always free to take a signal, even while the job sits inside
one long TensorFlow call (a device loop of many steps, an XLA compile, a TFLite conversion).
`request_stop` then:

  * runs the stop hooks the job registered (`on_stop_request`): a training loop's ends its device
    loop after the step under way (`training.harness`), so the job leaves TensorFlow soon;
  * raises `Interrupted` in the job's thread, where it next runs Python, so that every `finally`
    and temporary-file cleanup on the way out runs; inside an `uninterruptible` block (a
    checkpoint being written) only when the block ends.

`run_stoppably` waits `grace_seconds` for the job to stop so; a job still inside one TensorFlow
call by then is dropped where it is (after any `uninterruptible` block ends), which is as safe as
a kill: every writer writes under a temporary name and renames into place. What the job
registered with `on_drop` (removing a staging directory) runs first.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")

# How long a job may take to reach its next safe point after the first signal before it is
# dropped: a training step of a small or base model, or the rest of a device loop cut short.
# A model whose one step takes longer can be given more in the environment.
GRACE_SECONDS = float(os.environ.get("ALBERT_TF_STOP_GRACE_SECONDS", 5.0))


class Interrupted(BaseException):
    """SIGTERM or SIGINT arrived: raised in the job where it is. A `BaseException`, as
    `KeyboardInterrupt`, so that `except Exception` blocks let it through."""

    signum: int = signal.SIGTERM

    def __init__(self, signum: int | None = None):
        if signum is not None:
            self.signum = signum
        super().__init__(f"stopped by {signal.Signals(self.signum).name}")


@functools.cache
def interrupted_by(signum: int) -> type[Interrupted]:
    """The `Interrupted` subclass for `signum`: raised in another thread, an exception is built
    from its class with no arguments, so the class carries the signal."""
    name = signal.Signals(signum).name
    return type(f"Interrupted{name.title()}", (Interrupted,), {"signum": signum})


class _State:
    def __init__(self):
        self.guard = threading.Lock()
        self.hooks: list[Callable[[], None]] = []
        self.undo: list[Callable[[], str | None]] = []  # `on_drop`'s
        self.asked: int | None = None  # a signal's number, set by its handler (which takes no lock)
        self.signum: int | None = None  # the stop request, once acted on
        self.job: int | None = None  # the job thread's ident, while `run_stoppably` runs one
        self.critical = 0  # depth of `uninterruptible` blocks in the job
        self.deferred = False  # an Interrupted waits for the `uninterruptible` block to end
        self.calm = threading.Condition(self.guard)  # notified when no block is open


_state = _State()


def reset() -> None:
    """Forgets a stop request, for a process that runs one job after another."""
    global _state
    _state = _State()


def stop_requested() -> bool:
    """Whether a stop was asked for."""
    return _state.signum is not None


def on_stop_request(hook: Callable[[], None]) -> Callable[[], None]:
    """Runs `hook()` (from the signal's thread) when a stop is asked for, at once if one was;
    returns the function that unregisters it."""
    with _state.guard:
        _state.hooks.append(hook)
        asked = _state.signum is not None
    if asked:
        hook()

    def unregister() -> None:
        with _state.guard, contextlib.suppress(ValueError):
            _state.hooks.remove(hook)

    return unregister


def on_drop(undo: Callable[[], str | None]) -> Callable[[], None]:
    """Runs `undo()` (from the main thread) if the job is dropped before it stops by itself;
    what it returns is said in the job's last line. Returns the function that unregisters it."""
    with _state.guard:
        _state.undo.append(undo)

    def unregister() -> None:
        with _state.guard, contextlib.suppress(ValueError):
            _state.undo.remove(undo)

    return unregister


@contextlib.contextmanager
def uninterruptible() -> Iterator[None]:
    """A block that a stop request never cuts: its `Interrupted` is raised when it ends (for a
    write that must finish or not start, such as a checkpoint's)."""
    with _state.guard:
        _state.critical += 1
    deferred = False
    try:
        yield
    finally:
        with _state.guard:
            _state.critical -= 1
            if not _state.critical:
                deferred, _state.deferred = _state.deferred, False
                _state.calm.notify_all()
    if deferred:
        raise interrupted_by(_state.signum)()


def ask_to_stop(signum: int) -> None:
    """Asks the job `run_stoppably` runs to stop; safe in a signal handler (it takes no lock:
    the waiting main thread acts on it within a tenth of a second)."""
    if _state.asked is None:
        _state.asked = signum


def request_stop(signum: int) -> None:
    """Asks the running job to stop (see the module's docstring), now; the first request
    counts."""
    with _state.guard:
        if _state.signum is not None:
            return
        _state.signum = signum
        hooks = list(_state.hooks)
    for hook in hooks:
        hook()
    with _state.guard:
        if _state.critical:
            _state.deferred = True
        elif _state.job is not None:
            raise_in_thread(_state.job, interrupted_by(signum))


def raise_in_thread(ident: int, error: type[BaseException]) -> None:
    """Raises `error` in the thread `ident` the next time it runs Python."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(error))


def _quietly(undo: Callable[[], str | None]) -> str | None:
    try:
        return undo()
    except Exception as error:  # the process ends next: say what could not be undone
        return f"{getattr(undo, '__qualname__', undo)} failed: {error}"


def job_thread() -> int | None:
    """The ident of the job thread `run_stoppably` runs, if one runs."""
    return _state.job


def run_stoppably(
    job: Callable[[], T],
    on_dropped: Callable[[int, list[str]], None],
    grace_seconds: float = GRACE_SECONDS,
) -> T:
    """Returns `job()`, run in a thread of its own while this (the main) thread waits, free to
    take signals; what the job raises is raised here. When the job has not ended `grace_seconds`
    after a stop request (and no `uninterruptible` block is open), the `on_drop` functions run
    and `on_dropped(signum, what they said)` is called, which must end the process."""
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["value"] = job()
        except BaseException as error:  # handed to the main thread, which raises it
            outcome["error"] = error

    thread = threading.Thread(target=run, name="job", daemon=True)
    with _state.guard:
        thread.start()
        _state.job = thread.ident
    try:
        deadline = None
        while thread.is_alive():
            thread.join(0.1)
            if _state.asked is not None and _state.signum is None:
                request_stop(_state.asked)
            if deadline is None and _state.signum is not None:
                deadline = time.monotonic() + grace_seconds
            if deadline is not None and time.monotonic() > deadline and thread.is_alive():
                with _state.guard:
                    _state.calm.wait_for(lambda: not _state.critical)
                    undo = list(_state.undo)
                on_dropped(_state.signum, [note for note in map(_quietly, undo) if note])
    finally:
        with _state.guard:
            _state.job = None
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
