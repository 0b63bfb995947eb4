"""An export version published all or nothing, and what killed exports left cleaned up.

A version is several directories under `output_dir` (TF Serving reads `<name>/<version>/`; also
`<name>_text/<version>/`, `<name>_tflite/<version>/`, ...) and the report
`export_report_<name>_<version>.json`, which lists them: the version's manifest. An export builds
all of it in one hidden staging directory beside them, `.export-<name>-<version>-<random>/`, in its
final layout under `publish/`. Writing the report there is the commit point; each version
directory is then renamed into place whole, and the report last:
- an export stopped before the commit point leaves only its staging directory, which the next
  export of `<name>` into `output_dir` removes;
- one stopped after it (between two renames) leaves a committed staging directory, whose renames
  the next export of `<name>` finishes before anything else, with the same code;
so every version directory a reader (TF Serving) sees is complete, and a reader who finds a report
finds everything it lists. Each cleanup is logged. A rerun of an export stopped after the commit
point thus finds its version whole in place (`published_version`): nothing is left to do.

An export holds a lock (`flock`) on its staging directory while it runs, and on `output_dir`
while it cleans, claims a version or publishes one, so that a live export's staging directory is
never taken for a leftover, nor one version claimed twice. (On a filesystem without `flock` the
export runs unlocked: one export at a time per output directory.)
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import tempfile
from collections.abc import Collection, Iterable, Iterator

from absl import logging

from albert_tf import stopping
from albert_tf.io import json_safe, write_json

PUBLISH = "publish"  # the staging directory's subdirectory holding the version in its final layout
# What flock answers on a filesystem that cannot lock: the export then runs unlocked.
_UNLOCKABLE = (errno.ENOLCK, errno.EOPNOTSUPP, errno.EBADF, errno.EINVAL)


def _lock(fd: int, blocking: bool) -> bool:
    """flock `fd` exclusively; False if another process holds it (non-blocking). Filesystems that
    cannot lock count as locked by us."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    except OSError as e:
        if e.errno not in _UNLOCKABLE:
            raise
    return True


@contextlib.contextmanager
def _locked(directory: str) -> Iterator[None]:
    fd = os.open(directory, os.O_RDONLY)
    try:
        _lock(fd, blocking=True)
        yield
    finally:
        os.close(fd)


def _staging_pattern(name: str) -> re.Pattern:
    # `tempfile.mkdtemp`'s random part has no "-", so a name or version cannot be misread.
    return re.compile(rf"\.export-{re.escape(name)}-(\d+)-[a-z0-9_]+")


def _committed_report(staging: str) -> str | None:
    publish = os.path.join(staging, PUBLISH)
    reports = (
        [f for f in os.listdir(publish) if f.startswith("export_report_")]
        if (os.path.isdir(publish))
        else []
    )
    return os.path.join(publish, reports[0]) if reports else None


def finish_publishing(staging: str, output_dir: str) -> list[str]:
    """Renames every version directory of the committed `staging` into place under `output_dir`
    (those already there from an earlier try are skipped), the report last, then removes
    `staging`; returns the final paths. Raises FileExistsError if a version directory it would
    publish holds something else."""
    publish = os.path.join(staging, PUBLISH)
    report = _committed_report(staging)
    published = []
    for directory in sorted(os.listdir(publish)):
        if os.path.join(publish, directory) == report:
            continue
        for version in os.listdir(os.path.join(publish, directory)):
            source = os.path.join(publish, directory, version)
            target = os.path.join(output_dir, directory, version)
            if os.path.lexists(target):
                raise FileExistsError(
                    f"{target} exists and is not this export's: its version is left committed "
                    f"in {staging}"
                )
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.rename(source, target)
            published.append(target)
    target = os.path.join(output_dir, os.path.basename(report))
    os.rename(report, target)
    shutil.rmtree(staging)
    return [*published, target]


def clean_leftovers(output_dir: str, name: str) -> dict[int, str]:
    """Finishes or removes what stopped exports of `name` left in `output_dir` (see the module
    docstring), logging each; returns {version: staging directory} of exports still running.
    Call under the lock on `output_dir`."""
    running = {}
    pattern = _staging_pattern(name)
    for entry in sorted(os.listdir(output_dir)):
        found = pattern.fullmatch(entry)
        path = os.path.join(output_dir, entry)
        if not found or not os.path.isdir(path):
            continue
        fd = os.open(path, os.O_RDONLY)
        try:
            if not _lock(fd, blocking=False):
                running[int(found.group(1))] = path
                continue
            if _committed_report(path):
                published = finish_publishing(path, output_dir)
                logging.warning(
                    "Finished publishing %s version %s, which a stopped export had committed: %s",
                    name,
                    found.group(1),
                    ", ".join(published),
                )
            else:
                shutil.rmtree(path)
                logging.warning("Removed %s, left by a stopped export", path)
        finally:
            os.close(fd)
    return running


def check_output_paths(output_dir: str, version_directories: list[str], report: str) -> None:
    """Refuses, before any work, output paths of the wrong kind: a file where `output_dir` or a
    version directory's parent must be a directory, a directory where the report goes."""
    existing = os.path.abspath(output_dir)
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise NotADirectoryError(f"{existing} is a file, where output_dir needs a directory")
    for directory in version_directories:
        parent = os.path.dirname(directory)
        if os.path.lexists(parent) and not os.path.isdir(parent):
            raise NotADirectoryError(f"{parent} is a file, where a model directory goes")
    if os.path.isdir(report):
        raise IsADirectoryError(f"{report} is a directory, where the export report goes")


class VersionTaken(FileExistsError):
    """A final path of the version exists: an export of this version that got past its commit
    point left it (`published_version` tells), or it is another's."""


def _refuse_taken(name: str, version: int, paths: list[str], running: dict[int, str]) -> None:
    if version in running:
        raise FileExistsError(
            f"another export of {name} version {version} is running ({running[version]}): "
            "choose another version"
        )
    taken = [p for p in paths if os.path.lexists(p)]
    if taken:
        raise VersionTaken(f"already exported (choose another version): {taken}")


def published_version(
    report_path: str, expected: dict, places: dict[str, str], formats: Iterable[Collection[str]]
) -> dict | None:
    """The report at `report_path` when it is that of a version this export would publish, all
    of it in place; None otherwise.

    Such a report holds each of `expected`'s fields with its value (what names the export: the
    model, its config, the lengths), records only artifacts of `places` ({key: final path}),
    each verified and at its place, and at least one of each requested format's artifact keys
    (`formats`). As the report is published last, it is there only beside everything it lists:
    an export stopped after its commit point leaves such a version (once `clean_leftovers`
    finished its renames); a foreign or different version, or one with a refused artifact,
    does not match."""
    try:
        with open(report_path, encoding="utf-8") as f:
            report = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(report, dict) or not isinstance(report.get("artifacts"), dict):
        return None
    # Compared as the report stores them (tuples as lists, non-finite floats as null).
    expected = json.loads(json.dumps(json_safe(expected)))
    if any(report.get(field) != value for field, value in expected.items()):
        return None
    recorded = report["artifacts"]
    for key, record in recorded.items():
        if key not in places or not isinstance(record, dict) or record.get("failures"):
            return None
        if not os.path.exists(places[key]):
            return None
    if not all(set(keys) & set(recorded) for keys in formats):
        return None
    return report


class Staging:
    """One export's locked staging directory (see the module docstring).

    Args:
        output_dir: where the version is published.
        name: the model name.
        version: the version.
        final_paths: the version directories and the report it will publish: it is refused if
            any exists, or if another export of this version runs.

    Example:
        >>> staging = Staging(out, "albert", 1, ["out/albert/1", "out/export_report_albert_1.json"])
        >>> staging.stage("out/albert/1", built_saved_model)
        >>> staging.commit(report, "out/export_report_albert_1.json")
    """

    def __init__(self, output_dir: str, name: str, version: int, final_paths: list[str]):
        self.output_dir, self.committed, self._created = output_dir, False, []
        created = not os.path.isdir(output_dir)
        os.makedirs(output_dir, exist_ok=True)
        self._created_output_dir = created
        self.path, self._fd = None, None
        try:
            with _locked(output_dir):
                running = clean_leftovers(output_dir, name)
                _refuse_taken(name, version, final_paths, running)
                self.path = tempfile.mkdtemp(prefix=f".export-{name}-{version}-", dir=output_dir)
                self._fd = os.open(self.path, os.O_RDONLY)
                _lock(self._fd, blocking=True)
        except BaseException:
            if self._fd is not None:
                os.close(self._fd)
            if self.path is not None:
                shutil.rmtree(self.path, ignore_errors=True)
            self._remove_created_output_dir()
            raise
        self.publish = os.path.join(self.path, PUBLISH)
        # A job dropped mid-way (a signal during a long conversion) is cleaned up as a failed one.
        self._forget_on_drop = stopping.on_drop(self.abandon)

    def stage(self, final_path: str, built: str) -> None:
        """Moves `built` (under the staging directory) to where `final_path` is in `publish/`."""
        target = os.path.join(self.publish, os.path.relpath(final_path, self.output_dir))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.rename(built, target)

    def commit(self, report: dict, report_path: str) -> list[str]:
        """Makes the version directories' parents, writes `report` into `publish/` (the commit
        point) and publishes the version (under the lock on `output_dir`); returns the final
        paths."""
        os.makedirs(self.publish, exist_ok=True)
        for directory in os.listdir(self.publish):  # a full disk fails here, before the commit
            parent = os.path.join(self.output_dir, directory)
            if not os.path.isdir(parent):
                os.makedirs(parent)
                self._created.append(parent)
        write_json(os.path.join(self.publish, os.path.basename(report_path)), report)
        self.committed = True
        with _locked(self.output_dir):
            return finish_publishing(self.path, self.output_dir)

    def abandon(self) -> str:
        """After an error: removes an uncommitted staging directory, or finishes publishing a
        committed one (left for the next export if that fails too). Returns what it did."""
        if not self.committed:
            shutil.rmtree(self.path, ignore_errors=True)
            for parent in self._created:
                with contextlib.suppress(OSError):
                    os.rmdir(parent)
            self._remove_created_output_dir()
            return f"nothing was written under a final name in {self.output_dir}"
        try:
            with _locked(self.output_dir):
                finish_publishing(self.path, self.output_dir)
        except OSError as e:
            return (
                f"the version was complete in {self.path}, but publishing it failed ({e}); the "
                "next export of this model into the directory finishes it"
            )
        return f"the version was complete and is published in {self.output_dir}"

    def close(self) -> None:
        """Releases the staging directory's lock."""
        self._forget_on_drop()
        os.close(self._fd)

    def _remove_created_output_dir(self) -> None:
        if self._created_output_dir:
            with contextlib.suppress(OSError):
                os.rmdir(self.output_dir)  # only if empty
