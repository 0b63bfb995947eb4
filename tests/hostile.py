"""A hostile machine for the CLIs' hard-failure tests: a file system that fills, a directory that
cannot be written, a signal sent to a running job; and the one-line ending every CLI must show.

The full disk is a real tmpfs of a few hundred KB, mounted in a user and mount namespace of its
own (`unshare -rm`, no root needed where the kernel lets users have namespaces), so the writes
fail with ENOSPC exactly as on a full disk. Where namespaces are not allowed the stand-in is
RLIMIT_FSIZE: the same write calls fail, with EFBIG instead of ENOSPC, once a file reaches the
size (the CLIs report both the same way, as what ran out and where).

The directory that cannot be written is mode 0555; a test run as root (which ignores file
modes) runs the command without the capabilities that let root ignore them, so the writes fail
with EACCES as for any user.
"""

from __future__ import annotations

import ctypes
import functools
import os
import pathlib
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence

REPO = pathlib.Path(__file__).resolve().parents[1]
# The lines of a CLI's one-line ending: `HH:MM:SS ERROR <label>: <message>`.
ERROR_LINE = re.compile(r"^\d\d:\d\d:\d\d ERROR (.*)$", re.MULTILINE)
_PR_CAPBSET_DROP = 24
_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH, _CAP_FOWNER = 1, 2, 3

# unshare's script: mount a tmpfs of size $2 at $1, run the command, keep what it wrote in $3
# (the mount, and all on it, ends with the namespace).
_ON_TMPFS = (
    'mount="$1"; mount -t tmpfs -o "size=$2" tmpfs "$mount" || exit 97; shift 3; "$@"; '
    'status=$?; cp -a "$mount/." "$KEEP/"; exit $status'
)


@functools.cache
def tmpfs_available() -> bool:
    """Whether this machine lets a test mount a tmpfs in a namespace of its own."""
    probe = tempfile.mkdtemp(prefix="tmpfs-probe-")
    try:
        found = subprocess.run(
            ["unshare", "-rm", "mount", "-t", "tmpfs", "-o", "size=4k", "tmpfs", probe],
            capture_output=True,
            timeout=30,
        )
        return found.returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        os.rmdir(probe)


def full_disk_labels() -> tuple[str, ...]:
    """The labels a CLI's error line starts with when the stand-in fills up."""
    return ("DiskFull",) if tmpfs_available() else ("FileTooLarge",)


def run_on_small_filesystem(
    command: Sequence[str], mount: pathlib.Path, size: int, keep: pathlib.Path, timeout=600
) -> subprocess.CompletedProcess:
    """Runs `command` with a file system of `size` bytes at `mount` (an empty directory that
    exists); afterwards `keep` holds a copy of what the command left on it."""
    mount.mkdir(parents=True, exist_ok=True)
    keep.mkdir(parents=True, exist_ok=True)
    if tmpfs_available():
        unshare = ["unshare", "-rm", "sh", "-c", _ON_TMPFS, "sh", str(mount), str(size), "x"]
        return run([*unshare, *command], timeout, KEEP=str(keep))

    def limit_file_size():
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))

    result = run(command, timeout, preexec_fn=limit_file_size)
    shutil.copytree(mount, keep, dirs_exist_ok=True)
    return result


def run(
    command: Sequence[str], timeout=600, preexec_fn=None, **environ
) -> subprocess.CompletedProcess:
    """Runs `command` as a user's shell would (with `environ` added to the environment)."""
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env={**_environment(), **environ},
        preexec_fn=preexec_fn,
    )


def _without_root_overrides() -> None:
    # Root reads and writes whatever the file modes say; without these capabilities (dropped from
    # the bounding set, so the exec'd command never gets them) it is held to them as any user.
    if os.geteuid() == 0:
        libc = ctypes.CDLL(None, use_errno=True)
        for capability in (_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH, _CAP_FOWNER):
            if libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


def run_with_read_only(
    command: Sequence[str], directory: pathlib.Path, timeout=600
) -> subprocess.CompletedProcess:
    """Runs `command` while `directory` (which exists) cannot be written."""
    mode = directory.stat().st_mode
    directory.chmod(0o555)
    try:
        return run(command, timeout, preexec_fn=_without_root_overrides)
    finally:
        directory.chmod(mode)


def interrupt_when(
    command: Sequence[str],
    ready: Callable[[], bool],
    signum: int,
    log: pathlib.Path,
    whole_group: bool = False,
    timeout: float = 600,
    then: tuple[float, int] | None = None,
) -> tuple[int, str, int]:
    """Starts `command` in a session of its own, sends `signum` once `ready()` holds (to the
    whole process group with `whole_group`, as a terminal's Ctrl-C does), and with `then`
    (seconds, signal) that signal that much later if the command still runs, and returns its
    exit status, its output and its session. Fails if the command ends first."""
    with open(log, "wb") as output:  # a file, not a pipe: a full pipe would stall the job
        job = subprocess.Popen(
            command,
            cwd=REPO,
            env=_environment(),
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + timeout
        while not ready():
            assert job.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "never ready: " + log.read_text()[-3000:]
            time.sleep(0.05)
        (os.killpg if whole_group else os.kill)(job.pid, signum)
        if then is not None:
            try:
                job.wait(timeout=then[0])
            except subprocess.TimeoutExpired:
                (os.killpg if whole_group else os.kill)(job.pid, then[1])
        status = job.wait(timeout=timeout)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    return status, log.read_text(), job.pid


def _environment() -> dict[str, str]:
    # As a user's shell would run it: without the TF_CPP_MIN_LOG_LEVEL the test session sets.
    environ = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    return {**environ, "PYTHONPATH": str(REPO)}


def python(*args: str) -> list[str]:
    """A command line running this Python."""
    return [sys.executable, *args]


def assert_one_line_ending(output: str, *expected: str) -> str:
    """The output ends in exactly one error line, which holds every string of `expected`, and
    holds no traceback; returns that line."""
    assert "Traceback" not in output, output[-5000:]
    errors = ERROR_LINE.findall(output)
    assert len(errors) == 1, output[-5000:]
    assert output.rstrip().endswith(errors[0]), output[-3000:]
    for text in expected:
        assert text in errors[0], (text, errors[0])
    return errors[0]


_PF_EXITING = 0x4  # task flag: the process has begun to exit
_SIGKILL_BIT = 1 << (signal.SIGKILL - 1)


def _sigkill_pending(status: str) -> bool:
    """Whether /proc/<pid>/status shows SIGKILL pending for the thread or the whole process."""
    for line in status.splitlines():
        name, _, mask = line.partition(":")
        if name in ("SigPnd", "ShdPnd") and int(mask, 16) & _SIGKILL_BIT:
            return True
    return False


def live_processes_in_session(session: int) -> list[str]:
    """The command lines of a session's processes that have not exited, from /proc: a job
    started by `interrupt_when` and every process it started, whatever their process group.

    Left out, as they run no more code of their own and can write nothing more: zombies; a
    process the kernel is already ending (PF_EXITING in its flags, or SIGKILL pending: a signal
    sent to a process runs on its next trip through the kernel, which may be a few milliseconds
    after its parent was reaped); and one whose command line reads empty (a user process's command
    line is read from its memory, which the kernel tears down on the way out)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
            fields = stat.rpartition(")")[2].split()
            state, sid, flags = fields[0], int(fields[3]), int(fields[6])
            if sid != session or state == "Z" or flags & _PF_EXITING:
                continue
            if _sigkill_pending(pathlib.Path(f"/proc/{pid}/status").read_text()):
                continue
            command_line = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().decode()
            if command_line:
                found.append(command_line)
        except (OSError, ValueError, IndexError):
            continue
    return found


def hidden_files(directory: pathlib.Path) -> list[str]:
    """Names under `directory` that start with a dot: unfinished writes."""
    return sorted(str(p.relative_to(directory)) for p in directory.rglob(".*"))
