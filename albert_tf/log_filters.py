"""A log filter by where a record comes from, shared by the CLIs (TensorFlow's INFO lines) and
the Beam runner (Beam's plumbing)."""

from __future__ import annotations

import functools
import importlib.util
import logging
import os

# A run logs from a few hundred source files at most: each is resolved once, not on every record.
_real_path = functools.lru_cache(maxsize=1024)(os.path.realpath)


class PackageRecordsBelow(logging.Filter):
    """Drops the records that `package`'s own files log below `level`. The package is found
    without importing it; one that is not installed drops nothing."""

    def __init__(self, package: str, level: int = logging.WARNING):
        super().__init__()
        spec = importlib.util.find_spec(package)
        locations = (spec.submodule_search_locations or []) if spec else []
        self._prefixes = tuple(os.path.join(os.path.realpath(d), "") for d in locations)
        self.level = level

    def covers(self, path: str) -> bool:
        """Whether `path` is one of the package's files."""
        return bool(self._prefixes) and _real_path(path).startswith(self._prefixes)

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= self.level or not self.covers(record.pathname)
