"""Files written atomically: results JSON (NaN as null), text, and any file or directory.

A reader (or a rerun after a crash) sees either the previous file or the complete new one, never
a partial one: content goes to a temporary name in the target's directory and is renamed onto the
target only when complete (a rename within one directory is atomic).
"""

from __future__ import annotations

import contextlib
import difflib
import glob as _glob
import json
import math
import os
import re
import shutil
import socket
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import IO


def _local_glob(pattern: str) -> list[str]:
    return _glob.glob(pattern)


def json_safe(value):
    """`value` with non-finite floats replaced by None (NaN is not valid JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def refuse_unknown_keys(values, known, where: str) -> None:
    """ValueError naming the first key of `values` (a JSON object read back) that is not among
    `known`, with the nearest known key suggested: a misspelt setting must not fall back to its
    default unseen. `where` names the file (or the object) in the message; a value that is no
    JSON object at all is refused too."""
    if not isinstance(values, dict):
        raise ValueError(f"{where}: not a JSON object")
    for key in values:
        if key not in known:
            nearest = difflib.get_close_matches(str(key), sorted(known), n=1, cutoff=0.6)
            hint = f" (did you mean {nearest[0]!r}?)" if nearest else ""
            raise ValueError(f"{where}: unknown key {key!r}{hint}")


def write_json(path: str | os.PathLike, value, sort_keys: bool = True) -> None:
    """Writes `value` as indented JSON (NaN and infinities as null), atomically; keys sorted
    unless `sort_keys=False` keeps the dicts' own order."""
    with atomic_file(path, "w", encoding="utf-8") as f:
        json.dump(json_safe(value), f, indent=2, sort_keys=sort_keys, allow_nan=False)
        f.write("\n")


def write_text(path: str | os.PathLike, text: str) -> None:
    """Writes `text` (UTF-8) atomically."""
    with atomic_file(path, "w", encoding="utf-8") as f:
        f.write(text)


def replace_synced(temp: str, path: str) -> None:
    """Syncs the closed file `temp` to disk, then renames it onto `path` (same directory), so
    that after a crash `path` holds either its old content or all of the new."""
    with open(temp, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(temp, path)


@contextlib.contextmanager
def naming_failed_writes(path: str | os.PathLike) -> Iterator[None]:
    """An OSError raised inside that names no file (a `write` or `close` that failed: a full
    disk, a file size limit) is raised again naming `path`, so that the message says where."""
    try:
        yield
    except OSError as error:
        if error.filename is not None or error.errno is None:
            raise
        raise OSError(error.errno, error.strerror, os.fspath(path)) from error


def _temp_name(name: str) -> str:
    # Unique across processes and hosts: workers on a shared filesystem (containers often share a
    # PID) may write the same file at once, each to its own temporary name.
    return f".{name}.tmp-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


# Every name `_temp_name` makes (with an extension after it, as `atomic_path` adds), matched
# whole: what a writer killed before its rename leaves behind; `host` and `pid` name the writer.
TEMPORARY_NAME = re.compile(r"\..+\.tmp-(?P<host>.+)-(?P<pid>\d+)-[0-9a-f]{8}(\.[A-Za-z0-9]+)?")


def make_temporary_dir(path: str | os.PathLike) -> str:
    """Creates and returns a new hidden directory beside `path`, named as `atomic_file` names its
    temporary files (so `TEMPORARY_NAME` recognises it), for a writer that stages several files
    there before moving them into place."""
    directory, name = os.path.split(os.path.abspath(os.fspath(path)))
    os.makedirs(directory, exist_ok=True)
    staging = os.path.join(directory, _temp_name(name))
    os.mkdir(staging)
    return staging


@contextlib.contextmanager
def atomic_file(
    path: str | os.PathLike, mode: str = "wb", temp: str | None = None, **open_kwargs
) -> Iterator[IO]:
    """Opens a temporary file beside `path` (`temp`, else a hidden `_temp_name`); leaving the
    block normally syncs it and renames it onto `path`, leaving it by an exception deletes it (and
    `path` keeps what it held)."""
    path = os.fspath(path)
    if temp is None:
        directory, name = os.path.split(os.path.abspath(path))
        temp = os.path.join(directory, _temp_name(name))
    try:
        with naming_failed_writes(path):
            with open(temp, mode, **open_kwargs) as f:
                yield f
            replace_synced(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temp)
        raise


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = "") -> Iterator[str]:
    """Yields a temporary name beside `path` for a library that writes by name (Keras `save`,
    a SavedModel directory, `shutil.copyfile`); leaving the block normally renames it onto
    `path`, leaving it by an exception removes it. `suffix` keeps an extension a writer requires
    (`.keras`). A directory replaces an existing directory of the same name."""
    path = os.fspath(path)
    directory, name = os.path.split(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    temp = os.path.join(directory, _temp_name(name) + suffix)
    try:
        with naming_failed_writes(path):
            yield temp
            if os.path.isdir(temp):
                if os.path.isdir(path):
                    shutil.rmtree(path)
                os.replace(temp, path)
            else:
                replace_synced(temp, path)
    except BaseException:
        if os.path.isdir(temp):
            shutil.rmtree(temp, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.remove(temp)
        raise


def expand_patterns(
    patterns: str | Sequence[str],
    glob: Callable[[str], Iterable[str]] = _local_glob,
    keep_repeats: bool = False,
) -> list[str]:
    """Files named by globs: a comma-separated string (the original scripts' `input_file`) or a
    list. Each pattern's matches are sorted, directories dropped, patterns in the order given;
    a file two patterns name is listed once unless `keep_repeats` (the original data prep reads
    it twice). `glob` is the file system's (`tf.io.gfile.glob` for `gs://`; local by default).

    Raises `FileNotFoundError` naming every pattern that matches no file (saying so when it
    names directories only), since a typo among good patterns would otherwise drop data silently;
    `ValueError` when no pattern is given.
    """
    if isinstance(patterns, str):
        patterns = patterns.split(",")
    patterns = [p.strip() for p in patterns if p.strip()]
    if not patterns:
        raise ValueError("no input files given")
    files, unmatched = [], []
    for pattern in patterns:
        found = sorted(glob(pattern))
        matches = [m for m in found if not os.path.isdir(m)]
        if matches:
            files.extend(matches)
        elif found == [pattern]:
            unmatched.append(
                f"input file {pattern!r} is a directory; give the files in it, e.g. "
                f"{os.path.join(pattern, '*')!r}"
            )
        elif found:
            unmatched.append(f"input file not found: {pattern!r} matches directories only")
        else:
            unmatched.append(f"input file not found: {pattern!r} matches no file")
    if unmatched:
        raise FileNotFoundError("; ".join(unmatched))
    return files if keep_repeats else list(dict.fromkeys(files))
