"""One job at a time per output directory, and nothing left behind by a killed one.

`lock_output_dir` holds an exclusive `flock` on the directory itself while a job writes there. A
second job that starts on it is refused at once with `OutputInUseError`, whose message names the
directory and, when this machine knows it, the holder's pid and command. The operating system
drops the lock when the holding process ends, however it ends: a killed job never leaves a stale
lock, and no lock file is added to the directory. Where the filesystem cannot lock (some network
filesystems) or the path is not local (`gs://`), the job goes on after a warning.

`remove_leftovers` deletes what a killed earlier run left in the folders a job is about to write:
the hidden temporaries of `albert_tf.io`'s writers and of TensorFlow's checkpoint writers (see
`is_leftover`), with one log line giving their number and size. Only while holding the lock: a
live job's temporaries look the same, so where the directory could not be locked they stay (a
warning says how many). `claim_output_dir` does both.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import socket
import threading
from collections.abc import Callable, Iterable, Iterator

from absl import logging

from albert_tf.io import TEMPORARY_NAME

try:
    import fcntl
except ImportError:  # not POSIX: no flock
    fcntl = None

# What TensorFlow's checkpoint writers leave when killed mid-save, matched whole (the writers'
# own temporaries; nothing else is named so in a checkpoint folder):
TF_CHECKPOINT_LEFTOVERS = (
    # tf.train.Checkpoint / CheckpointManager write `PREFIX-N`'s shards into `PREFIX-N_temp/`
    # and merge them into `PREFIX-N.index` / `.data-*` (functional_saver's "_temp/part" suffix).
    re.compile(r".+-\d+_temp"),
    # CheckpointManager's `checkpoint` state file, written under this name, then renamed
    # (file_io.atomic_write_string_to_file).
    re.compile(r"checkpoint\.tmp[0-9a-f]{32}"),
    # An index or data file of a checkpoint before its rename (tensor_bundle's BundleWriter).
    re.compile(r".+\.tempstate\d+"),
)


def is_leftover(name: str) -> bool:
    """Whether a file or folder `name` is a temporary that only a killed writer leaves: an
    `albert_tf.io` temporary (`.NAME.tmp-HOST-PID-XXXXXXXX`) or a TensorFlow checkpoint
    writer's (`TF_CHECKPOINT_LEFTOVERS`)."""
    return any(p.fullmatch(name) for p in (TEMPORARY_NAME, *TF_CHECKPOINT_LEFTOVERS))


class OutputInUseError(OSError):
    """Another live job holds the output directory; the message names it and the holder."""


# This process's locks: {(st_dev, st_ino): [descriptor, depth]}. A process may claim a directory
# it already holds (SQuAD fine-tuning holds its output_dir, then its training loop claims it):
# flock would refuse it, as the second descriptor is another open file.
_held: dict[tuple[int, int], list[int]] = {}
_held_paths: dict[tuple[int, int], str] = {}  # the path each was locked under
_held_guard = threading.Lock()


def _close_in_child() -> None:
    # A forked child (a multiprocessing worker) gets copies of the lock descriptors; closed there,
    # the lock still ends with the process that took it, not with its longest-lived child. (The
    # guard is new too: another thread may have held it at the fork.)
    global _held_guard
    _held_guard = threading.Lock()
    for fd, _ in _held.values():
        with contextlib.suppress(OSError):
            os.close(fd)
    _held.clear()
    _held_paths.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_in_child)


@contextlib.contextmanager
def lock_output_dir(directory: str | os.PathLike) -> Iterator[bool]:
    """Holds `directory` (created if missing) for this job until the block ends; yields whether
    it is locked (False where it cannot be: a remote path, a filesystem without flock).

    Raises `OutputInUseError` at once when another process holds it. A directory this call created
    is removed again if the block leaves it empty (a job refused by its settings leaves nothing).

    Example:
        with lock_output_dir("out/mrpc"):
            ...  # train, write checkpoints
    """
    directory = os.fspath(directory)
    if "://" in directory or fcntl is None:
        logging.warning(
            "%s cannot be locked here: make sure no other job writes there at the same time",
            directory,
        )
        yield False
        return
    created = not os.path.isdir(directory)
    os.makedirs(directory, exist_ok=True)
    key = _acquire(directory)
    try:
        yield key is not None
    finally:
        if key is not None:
            _release(key, directory if created else None)


def _acquire(directory: str) -> tuple[int, int] | None:
    """Locks `directory`; its (st_dev, st_ino), or None where the filesystem cannot lock."""
    while True:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        status = os.fstat(fd)
        key = (status.st_dev, status.st_ino)
        with _held_guard:
            if key in _held:
                os.close(fd)
                _held[key][1] += 1
                return key
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise OutputInUseError(
                    f"{directory} is in use by another job ({_holder(status)}): wait for it to "
                    "end, or write elsewhere"
                ) from None
            except OSError as error:  # e.g. a network filesystem without flock
                os.close(fd)
                logging.warning(
                    "cannot lock %s (%s): make sure no other job writes there at the same time",
                    directory,
                    error.strerror or error,
                )
                return None
            # Locked, but maybe a directory that was just removed (by a job that created it and
            # left it empty) and not the one now at `directory`: then lock that one.
            try:
                current = os.stat(directory)
            except FileNotFoundError:
                os.makedirs(directory, exist_ok=True)
                current = None
            if current is not None and (current.st_dev, current.st_ino) == key:
                _held[key] = [fd, 1]
                _held_paths[key] = directory
                return key
            os.close(fd)


def _release(key: tuple[int, int], created: str | None) -> None:
    with _held_guard:
        entry = _held[key]
        entry[1] -= 1
        if entry[1]:
            return
        del _held[key]
        del _held_paths[key]
        if created is not None:
            with contextlib.suppress(OSError):  # not empty: the job wrote there
                os.rmdir(created)
        os.close(entry[0])


def _holder(status: os.stat_result) -> str:
    """'pid N on HOST: COMMAND' of the process holding a flock on this file, from /proc/locks
    (Linux, this machine only); 'pid unknown' when not found."""
    wanted = f"{os.major(status.st_dev):02x}:{os.minor(status.st_dev):02x}:{status.st_ino}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return "pid unknown"
    for line in lines:
        # "1: FLOCK  ADVISORY  WRITE 1234 fe:00:56789 0 EOF"; "1: -> FLOCK ..." waits for it.
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == wanted:
            pid = fields[4]
            if not pid.isdigit() or pid == "0":  # in a pid namespace this one cannot see
                break
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    command = shell_command(f.read())
            except OSError:
                command = ""
            if len(command) > 120:
                command = command[:117] + "..."
            return f"pid {pid} on {socket.gethostname()}" + (f": {command}" if command else "")
    return "pid unknown"


def shell_command(cmdline: bytes) -> str:
    """A command line as /proc/PID/cmdline holds it (each argument ended by a NUL) written as a
    shell shows it: arguments joined by spaces, each quoted where a shell would need it, and
    control characters (a newline, a tab) as `$'...'` escapes, so that it stays one printable
    line."""
    # A process that rewrote its title may end in several NULs or none: trailing ones end it.
    arguments = cmdline.rstrip(b"\0")
    words = arguments.split(b"\0") if arguments else []
    return " ".join(_shell_word(word.decode(errors="surrogateescape")) for word in words)


_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r", "\\": "\\\\", "'": "\\'"}


def _shell_word(word: str) -> str:
    if word.isprintable():
        return shlex.quote(word)
    # bash's ANSI-C quoting: the bytes that were not UTF-8 (decoded as surrogates) as \xHH.
    escaped = []
    for char in word:
        code = ord(char)
        if char in _ESCAPES:
            escaped.append(_ESCAPES[char])
        elif 0xDC80 <= code <= 0xDCFF:
            escaped.append(f"\\x{code - 0xDC00:02x}")
        elif char.isprintable():
            escaped.append(char)
        elif code < 0x100:
            escaped.append(f"\\x{code:02x}")
        elif code < 0x10000:
            escaped.append(f"\\u{code:04x}")
        else:
            escaped.append(f"\\U{code:08x}")
    return "$'" + "".join(escaped) + "'"


def find_leftovers(
    directory: str | os.PathLike, matches: Callable[[str], bool] = is_leftover
) -> list[str]:
    """Paths of the entries of `directory` (not below) whose names `matches`; [] when missing."""
    try:
        with os.scandir(directory) as entries:
            return sorted(entry.path for entry in entries if matches(entry.name))
    except (FileNotFoundError, NotADirectoryError):
        return []


def remove_leftovers(paths: Iterable[str]) -> tuple[int, int]:
    """Deletes these files and folders (a killed run's leftovers) and logs one line naming how
    many and how many bytes; returns (count, bytes). What cannot be deleted is logged and left."""
    count = size = 0
    removed = []
    for path in paths:
        nbytes = disk_size(path)
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.remove(path)
        except FileNotFoundError:
            continue
        except OSError as error:  # the job can still run: its own files have other names
            logging.warning("cannot remove %s, left by a killed run: %s", path, error)
            continue
        count, size = count + 1, size + nbytes
        removed.append(path)
    if count:
        logging.warning(describe_removed(count, size, removed))
    return count, size


def remove_own_leftovers() -> int:
    """Removes, anywhere under the output directories this process holds, the temporaries of
    its own writers (`albert_tf.io`'s, named with its pid) and TensorFlow's checkpoint writers'
    (only a writer of the holder writes there), without a log line: for a process that ends
    without unwinding. Returns how many it removed."""
    me = (socket.gethostname(), str(os.getpid()))

    def own(name: str) -> bool:
        writer = TEMPORARY_NAME.fullmatch(name)
        if writer is not None:
            return (writer["host"], writer["pid"]) == me
        return any(p.fullmatch(name) for p in TF_CHECKPOINT_LEFTOVERS)

    removed = 0
    for directory in list(_held_paths.values()):
        for folder, subfolders, files in os.walk(directory):
            for name in (*subfolders, *files):
                if own(name):
                    path = os.path.join(folder, name)
                    with contextlib.suppress(OSError):
                        if os.path.isdir(path):
                            shutil.rmtree(path)
                        else:
                            os.remove(path)
                        removed += 1
            subfolders[:] = [n for n in subfolders if not own(n)]
    return removed


def describe_removed(count: int, nbytes: int, paths: list[str]) -> str:
    """The log line for `count` leftovers of `nbytes` bytes removed (the first few named)."""
    named = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
    return (
        f"removed {count} file(s) or folder(s) that a killed earlier run left "
        f"({_human(nbytes)}): {named}"
    )


def disk_size(path: str) -> int:
    """Bytes of a file, or of every file under a directory (what cannot be read counts 0)."""
    if not os.path.isdir(path) or os.path.islink(path):
        with contextlib.suppress(OSError):
            return os.lstat(path).st_size
        return 0
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def _human(nbytes: int) -> str:
    if nbytes < 1000:
        return f"{nbytes} bytes"
    for unit in ("KB", "MB", "GB"):
        nbytes /= 1000
        if nbytes < 1000 or unit == "GB":
            break
    return f"{nbytes:.1f} {unit}"


@contextlib.contextmanager
def claim_output_dir(
    directory: str | os.PathLike,
    subfolders: Iterable[str] = (),
    writes: bool = True,
    other_writers: bool = False,
) -> Iterator[None]:
    """`lock_output_dir(directory)` for the block, then `remove_leftovers` of what a killed run
    left in `directory` and in its `subfolders`. With `writes=False` (a multi-worker job's other
    workers) nothing is locked or removed. Temporaries of a live process on this host are never
    removed; with `other_writers` (the job's other workers write there too, e.g. the SQuAD
    feature caches) neither are those written from another host, which cannot be checked.

    Example:
        with claim_output_dir(o.output_dir, ("checkpoints",), writes=is_chief(strategy)):
            ...  # the job
    """
    directory = os.fspath(directory)
    if not writes or not directory:
        yield
        return
    with lock_output_dir(directory) as locked:
        if "://" not in directory:
            folders = [directory, *(os.path.join(directory, s) for s in subfolders)]
            found = [
                p
                for folder in folders
                for p in find_leftovers(folder)
                if not _maybe_being_written(os.path.basename(p), other_writers)
            ]
            if locked:
                remove_leftovers(found)
            else:
                keep_unclaimed_leftovers(found)
        yield


def _maybe_being_written(name: str, other_hosts_write: bool) -> bool:
    """Whether the temporary `name` may belong to a live writer: another process that runs on
    this host, or (with `other_hosts_write`) one on another host. This process has no write
    under way while it claims a directory: a temporary with its pid is a killed run's whose pid
    came round again (a restarted container's)."""
    writer = TEMPORARY_NAME.fullmatch(name)
    if writer is None:
        return False
    if writer["host"] != socket.gethostname():
        return other_hosts_write
    if int(writer["pid"]) == os.getpid():
        return False
    try:
        os.kill(int(writer["pid"]), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):  # alive under another user / not a pid here
        return True
    return True


def keep_unclaimed_leftovers(paths: list[str]) -> None:
    """Warns that `paths`, which look like a killed run's temporaries, stay: in a directory that
    could not be locked they may be a live job's."""
    if paths:
        logging.warning(
            "kept %d hidden file(s) or folder(s) that look left by a killed run (e.g. %s): "
            "without a lock they may be another job's; remove them once no job writes there",
            len(paths),
            paths[0],
        )
