"""Bounded shuffle buffer and sharded TFRecord output written under temporary names, renamed when complete.

An interrupted run leaves only hidden `.NAME.incomplete-PID` files (removed on any clean failure), never a
file under a final name; files from an earlier run keep their content until the new ones replace them.
`claim_outputs` holds the outputs' directories for one job and removes what killed runs (of either
runner) left under the outputs' names.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import re
from collections.abc import Collection, Iterator, Sequence

from albert_tf.io import TEMPORARY_NAME, replace_synced
from albert_tf.output_dirs import (
    OutputInUseError,
    find_leftovers,
    keep_unclaimed_leftovers,
    lock_output_dir,
    remove_leftovers,
)

# The hidden files a run writes beside its outputs, named after an output (matched whole): the local
# runner's shards and spill files (`.NAME.incomplete-PID`, `.NAME.incomplete-PID.pool-F-N`) and the
# Beam runner's (`.NAME.beam-RUNID`; beside the first shard, `.NAME.beam-RUNID.totals.json` and
# spill files `.NAME.beam-RUNID.pool-F-N-XXXXXXXX`, `.NAME.beam-RUNID.records-F-N-XXXXXXXX`).
_RUN_FILE = re.compile(
    r"\.(?P<output>.+)\.(?:incomplete-\d+(?:\.pool-\d+-\d+)?"
    r"|beam-[0-9a-f]{12}(?:\.totals\.json|\.(?:pool|records)-\d+-\d+-[0-9a-f]{8})?)"
)


class OutputError(Exception):
    """The output location cannot be written; names the path."""


def shard_paths(output_files: str | Sequence[str], num_shards: int) -> list[str]:
    """Final output paths: the comma-separated `output_files` as given (the original's round-robin list),
    or, for one file and `num_shards > 1`, `FILE-00000-of-0000N` ..."""
    if isinstance(output_files, str):
        output_files = [p.strip() for p in output_files.split(",") if p.strip()]
    if not output_files:
        raise OutputError("no output file given")
    if num_shards < 1:
        raise ValueError(f"num_output_shards must be >= 1, got {num_shards}")
    if num_shards == 1:
        return list(output_files)
    if len(output_files) != 1:
        raise ValueError(
            "give either several comma-separated output files or --num_output_shards, not both"
        )
    return [f"{output_files[0]}-{i:05d}-of-{num_shards:05d}" for i in range(num_shards)]


def temporary_path(path: str) -> str:
    """Hidden, clearly unfinished name in the same directory (so the final rename is atomic)."""
    directory, name = os.path.split(os.path.abspath(path))
    return os.path.join(directory, f".{name}.incomplete-{os.getpid()}")


def spill_path(prefix: str, pool_key: tuple[int, int]) -> str:
    """The local runner's spill file of a pool, beside the shard `temporary_path` `prefix`."""
    return f"{prefix}.pool-{pool_key[0]}-{pool_key[1]}"


def is_leftover(name: str, names: Collection[str]) -> bool:
    """Whether the file `name`, in a directory where a run writes the files `names` (shards and
    summary), is one that a run writes under a hidden name and only a killed run leaves: a
    shard or spill file of either runner, or the summary's temporary (`albert_tf.io`)."""
    match = _RUN_FILE.fullmatch(name)
    if match:
        return match.group("output") in names
    return bool(TEMPORARY_NAME.fullmatch(name)) and any(
        name.startswith(f".{output}.tmp-") for output in names
    )


def names_by_directory(paths: Sequence[str], split=os.path.split) -> dict[str, set[str]]:
    """{directory: names of `paths` in it}; `split` is the filesystem's (local by default)."""
    groups: dict[str, set[str]] = {}
    for path in paths:
        directory, name = split(path if "://" in path else os.path.abspath(path))
        groups.setdefault(directory, set()).add(name)
    return groups


@contextlib.contextmanager
def claim_outputs(outputs: Sequence[str], summary: str, remove: bool = True) -> Iterator[None]:
    """Holds the directories of `outputs` for this job (`albert_tf.output_dirs.lock_output_dir`;
    OutputError naming the directory and the other job while another job holds one), then
    removes the hidden files that killed runs left under the names of `outputs` and `summary`
    (`remove=False`: the caller removes them, on a filesystem of its own).

    The lock is per directory: two jobs into one directory, even under other names, are refused.
    """
    with contextlib.ExitStack() as stack:
        unlocked = set()
        for directory in sorted(names_by_directory(outputs)):
            try:
                if not stack.enter_context(lock_output_dir(directory)):
                    unlocked.add(directory)
            except OutputInUseError as e:
                raise OutputError(str(e)) from e
            except OSError as e:
                message = f"cannot write output {e.filename or directory}: {e.strerror or e}"
                raise OutputError(message) from e
        if remove:
            found, kept = [], []
            for directory, names in names_by_directory([*outputs, summary]).items():
                if "://" not in directory:
                    leftovers = find_leftovers(
                        directory, functools.partial(is_leftover, names=names)
                    )
                    (kept if directory in unlocked else found).extend(leftovers)
            remove_leftovers(found)
            keep_unclaimed_leftovers(kept)
        yield


class ShardedWriter:
    """Writes framed records round-robin over shards, as the original's writer list does.

    Use as a context manager: leaving it by an exception deletes the temporary files; `commit()` renames
    them to their final names.
    """

    def __init__(self, paths: Sequence[str], buffer_bytes: int = 1 << 20):
        if len(set(map(os.path.abspath, paths))) != len(paths):
            raise OutputError(f"output files repeat: {list(paths)}")
        self.paths = list(paths)
        self.counts = [0] * len(paths)
        self._temps: list[str] = []
        self._files = []
        self._next = 0
        try:
            for path in self.paths:
                directory = os.path.dirname(os.path.abspath(path))
                os.makedirs(directory, exist_ok=True)
                temp = temporary_path(path)
                self._files.append(open(temp, "wb", buffering=buffer_bytes))
                self._temps.append(temp)
        except OSError as e:
            self.abort()
            raise OutputError(f"cannot write output {e.filename or path}: {e.strerror or e}") from e

    def write(self, framed_record: bytes) -> None:
        """Appends one framed record to the next shard."""
        try:
            self._files[self._next].write(framed_record)
        except OSError as e:  # a failed write (a full disk) names no file: name the output
            raise OSError(e.errno, e.strerror, self.paths[self._next]) from e
        self.counts[self._next] += 1
        self._next = (self._next + 1) % len(self._files)

    def commit(self) -> None:
        """Closes, syncs and renames every shard to its final name."""
        path = self.paths[0]
        try:
            for f, path in zip(self._files, self.paths):
                f.close()
            for temp, path in zip(self._temps, self.paths):
                replace_synced(temp, path)
        except OSError as e:
            self.abort()
            raise OutputError(f"cannot finish output {path}: {e.strerror or e}") from OSError(
                e.errno, e.strerror, path
            )
        self._temps = []

    def abort(self) -> None:
        """Closes and deletes the temporary files (finished outputs are left alone)."""
        for f in self._files:
            try:
                f.close()
            except OSError:
                pass
        for temp in self._temps:
            try:
                os.remove(temp)
            except OSError:
                pass
        self._temps = []

    def __enter__(self) -> "ShardedWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()


class ShuffleBuffer:
    """Bounded shuffle: holds up to `size` items; each new item evicts a uniformly chosen one.

    Stands in for the original's shuffle of all instances of all passes, which needs the whole output in
    memory. `size=0` passes items through in order.
    """

    def __init__(self, size: int, rng: random.Random):
        if size < 0:
            raise ValueError(f"shuffle buffer size must be >= 0, got {size}")
        self.size = size
        self._rng = rng
        self._items: list[bytes] = []

    def push(self, item: bytes) -> bytes | None:
        """Adds an item; returns the one evicted (None while the buffer fills)."""
        if len(self._items) < self.size:
            self._items.append(item)
            return None
        if not self._items:
            return item
        j = self._rng.randrange(len(self._items))
        out, self._items[j] = self._items[j], item
        return out

    def drain(self) -> Iterator[bytes]:
        """The remaining items in random order."""
        items, self._items = self._items, []
        self._rng.shuffle(items)
        yield from items
