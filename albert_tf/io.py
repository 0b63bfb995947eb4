"""Files written atomically: results JSON (NaN as null), and any file through `atomic_file`.

A reader (or a rerun after a crash) sees either the previous file or the complete new one, never
a partial one: content goes to a temporary name in the target's directory and is renamed onto the
target only when complete (a rename within one directory is atomic).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Iterator
from typing import IO


def json_safe(value):
    """`value` with non-finite floats replaced by None (NaN is not valid JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def write_json(path: str, value) -> None:
    """Writes JSON to a temporary name, then renames it into place."""
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(json_safe(value), f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(path + ".tmp", path)


def replace_synced(temp: str, path: str) -> None:
    """Syncs the closed file `temp` to disk, then renames it onto `path` (same directory), so
    that after a crash `path` holds either its old content or all of the new."""
    with open(temp, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(temp, path)


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "wb", temp: str | None = None,
                **open_kwargs) -> Iterator[IO]:
    """Opens a temporary file beside `path` (`temp`, else a hidden `.NAME.tmp-PID`); leaving the
    block normally syncs it and renames it onto `path`, leaving it by an exception deletes it (and
    `path` keeps what it held)."""
    path = os.fspath(path)
    if temp is None:
        directory, name = os.path.split(os.path.abspath(path))
        temp = os.path.join(directory, f".{name}.tmp-{os.getpid()}")
    try:
        with open(temp, mode, **open_kwargs) as f:
            yield f
        replace_synced(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temp)
        raise
