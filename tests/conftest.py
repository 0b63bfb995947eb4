"""Shared test setup: quiet TF, fixture paths, each test isolated from the ones before it, and the
tests over 30 s listed at the end with the CPU they used, what the host stole and how long the
machine waited for its disk meanwhile.
(No test sets Keras's global dtype policy: models take their precision as `dtype=`.)"""

import gc
import glob
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pathlib
import signal
import threading
import time

import pytest
from absl import logging as absl_logging

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
ORIGINAL_CHECKPOINTS = FIXTURES / "original_checkpoints"
REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]


def child_processes() -> set[int]:
    """The pids of this process's children that are still running, zombies excepted (read from
    Linux's /proc; elsewhere none is found)."""
    children = set()
    for path in glob.glob(f"/proc/{os.getpid()}/task/*/children"):
        try:
            with open(path) as f:
                children.update(int(pid) for pid in f.read().split())
        except OSError:  # the thread ended since the listing
            pass
    running = set()
    for pid in children:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                    running.add(pid)
        except OSError:
            pass
    return running


def os_threads() -> int:
    """How many threads this process runs, TensorFlow's native ones included (Linux's /proc;
    0 elsewhere)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 0


def command_of(pid: int) -> str:
    """The command line of process `pid`, for the message that names it."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:200]
    except OSError:
        return "?"


@pytest.fixture(autouse=True)
def _isolated_process_state():
    """Restores what a test may change for the whole process (environment, working directory,
    absl's verbosity, which the TFLite converter lowers), frees what the test left in reference
    cycles when it left threads running, and fails a test that leaves a child process running,
    which would eat the cores of the tests after it."""
    environ, cwd = dict(os.environ), os.getcwd()
    verbosity = absl_logging.get_verbosity()
    before, threads = child_processes(), os_threads()
    yield
    if os_threads() > threads:
        # Threads left behind are those of tf.data iterators still held by reference cycles.
        # Freed by a later test's garbage collection, an iterator's destructor joins its threads
        # with the GIL held, and that test stood idle for 30-190 s. Collected here, the test
        # that left them pays at once (~1 s, ~40 tests of the fast tier).
        gc.collect()
    absl_logging.set_verbosity(verbosity)
    os.chdir(cwd)
    if dict(os.environ) != environ:
        os.environ.clear()
        os.environ.update(environ)
    left = child_processes() - before
    deadline = time.monotonic() + 5
    while left and time.monotonic() < deadline:  # a child may be on its way out
        time.sleep(0.05)
        left &= child_processes()
    if left:
        commands = {pid: command_of(pid) for pid in left}
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        pytest.fail(f"the test left child processes running (killed): {commands}")


# Tests whose wall time passes this are listed at the end of the run with what the process and
# the machine did meanwhile: a test that takes seconds alone has taken minutes inside the suite.
STALL_SECONDS = 30
_stalls: list[str] = []


def _cpu_seconds() -> float:
    """This process's CPU time, every thread's, its waited-for children's included."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def _steal_seconds() -> float:
    """CPU time the hypervisor gave other guests (Linux's /proc/stat; 0 elsewhere)."""
    try:
        with open("/proc/stat") as f:
            return int(f.readline().split()[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def _io_stall_seconds() -> float:
    """Time every task on the machine stood waiting for the disk at once (Linux's pressure stall
    information, "full"; 0 where there is none): an fsync waiting behind other writes, say."""
    try:
        with open("/proc/pressure/io") as f:
            full = next(line for line in f if line.startswith("full"))
        return int(full.rsplit("total=", 1)[1]) / 1e6
    except (OSError, StopIteration, ValueError):
        return 0.0


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    wall, cpu, steal = time.monotonic(), _cpu_seconds(), _steal_seconds()
    io_stall = _io_stall_seconds()
    threads, all_threads = threading.active_count(), os_threads()
    yield
    took = time.monotonic() - wall
    if took > STALL_SECONDS:
        _stalls.append(
            f"{item.nodeid}: {took:.0f} s wall, {_cpu_seconds() - cpu:.0f} s CPU of this process "
            f"(children waited for included), {_steal_seconds() - steal:.0f} s stolen by the "
            f"host, {_io_stall_seconds() - io_stall:.0f} s with every task waiting for the disk, "
            f"Python threads {threads} -> {threading.active_count()}, "
            f"all threads {all_threads} -> {os_threads()}"
        )


def pytest_terminal_summary(terminalreporter):
    if _stalls:
        terminalreporter.section(f"tests over {STALL_SECONDS} s (setup, call and teardown)")
        for line in _stalls:
            terminalreporter.write_line(line)
