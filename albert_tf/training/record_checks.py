"""Pretraining TFRecords checked against the flags: a cheap preflight, repaired copies without the
corrupt records, and one-line diagnoses of tf.data failures (file, record, byte offset, problem).

The framing is read by `albert_tf.records.scan_records` (TensorFlow-free, shared with the data
job); files are opened through `tf.io.gfile`, so every path training can read can be checked.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import os
import re
from collections.abc import Iterator, Sequence

import tensorflow as tf
from absl import logging
from google.protobuf.message import DecodeError

from albert_tf import records
from albert_tf.io import atomic_file

SKIP_HINT = "; --skip_corrupt_records skips and counts such records"
# tf.data's own messages: a parse error names the record (`input_pipeline.parse`), a framing
# error only a byte offset (of the record, or of its data: 12 bytes further).
_NAMED_RECORD = re.compile(r"Name: (.+?) \(record (\d+)\), Key: ([^\n]*)")
_AT_OFFSET = re.compile(r"(?:corrupted|truncated) record at (\d+)")
_PREFLIGHT_THREADS = 16  # file opens and first reads wait on storage, not on the CPU


class CorruptRecordError(ValueError):
    """An input record that cannot be read or does not fit the flags: one line naming the file,
    the record and what is wrong."""


def fit_problem(data: bytes, spec: dict[str, tf.io.FixedLenFeature]) -> str | None:
    """Why a record would not parse under `spec` (see `input_pipeline.feature_spec`), or None."""
    try:
        features = tf.train.Example.FromString(data).features.feature
    except DecodeError:
        return "not a tf.train.Example"
    for name, feature in spec.items():
        kind = "float_list" if feature.dtype == tf.float32 else "int64_list"
        if name not in features or features[name].WhichOneof("kind") != kind:
            return f"feature {name} is missing or not an {kind}"
        got, want = len(getattr(features[name], kind).value), feature.shape[0]
        if got == want:
            continue
        if name in records.SEQ_FEATURES:
            return f"records have seq length {got} ({name}), --max_seq_length is {want}"
        if name == records.LABEL_FEATURE:
            return f"feature {name} has {got} values, expected 1"
        return f"records have {got} masked positions ({name}), --max_predictions_per_seq is {want}"
    return None


def check_file(
    path: str, spec: dict, resync: bool = False
) -> Iterator[records.Record | records.BadRecord]:
    """The records of `path` as `records.scan_records` yields them, with those that do not fit
    `spec` turned into `BadRecord`s."""
    with tf.io.gfile.GFile(path, "rb") as f:
        for item in records.scan_records(f, path, resync):
            if isinstance(item, records.Record) and (problem := fit_problem(item.data, spec)):
                item = records.BadRecord(path, item.index, item.offset, problem)
            yield item


def error(bad: records.BadRecord, hint: bool = True) -> CorruptRecordError:
    """The one-line error of `bad`, suggesting `--skip_corrupt_records` if `hint`."""
    return CorruptRecordError(str(bad) + (SKIP_HINT if hint else ""))


def _first_bad(path: str, spec: dict) -> records.BadRecord | None:
    first = next(check_file(path, spec), None)
    return first if isinstance(first, records.BadRecord) else None


def preflight(files: Sequence[str], spec: dict) -> None:
    """Reads the first record of each file only, several files at a time (cheap for thousands of
    files, also remote ones): a corrupt one, or one whose feature lengths do not fit the flags,
    raises `CorruptRecordError` naming the file."""
    with concurrent.futures.ThreadPoolExecutor(_PREFLIGHT_THREADS) as pool:
        bad = [b for b in pool.map(lambda path: _first_bad(path, spec), files) if b]
    if bad:
        # A first record of another length means flags that do not fit the data: skipping
        # would drop every record.
        raise error(bad[0], hint="--max_" not in bad[0].problem)


def skip_bad_records(
    files: Sequence[str], spec: dict, directory: str
) -> tuple[list[str], dict[str, int]]:
    """Scans every record; each file holding bad ones (corrupt, cut, or not fitting `spec`) is
    replaced by a copy of its good records in `directory`, written atomically (the file itself is
    never modified). Returns the files to read and the records skipped per file.

    A file with no usable record raises: its lengths most likely do not fit the flags.
    """
    readable, skipped = [], {}
    for path in files:
        bad = [
            item
            for item in check_file(path, spec, resync=True)
            if isinstance(item, records.BadRecord)
        ]
        if not bad:
            readable.append(path)
            continue
        name = f"{hashlib.sha1(path.encode()).hexdigest()[:8]}-{os.path.basename(path)}"
        copy = os.path.join(directory, name)
        os.makedirs(directory, exist_ok=True)
        with atomic_file(copy) as out:
            usable = 0
            for item in check_file(path, spec, resync=True):
                if isinstance(item, records.Record):
                    out.write(records.frame_record(item.data))
                    usable += 1
            if not usable:
                raise CorruptRecordError(f"{bad[0]}; no record of the file is usable")
        first = bad[0]
        logging.warning(
            "%s: skipped %d corrupt record(s) (first: record %d at byte %d: %s); "
            "reading the repaired copy %s",
            path,
            len(bad),
            first.index,
            first.offset,
            first.problem,
            copy,
        )
        readable.append(copy)
        skipped[path] = len(bad)
    if skipped:
        logging.warning(
            "skipped %d corrupt record(s) in %d of %d input file(s)",
            sum(skipped.values()),
            len(skipped),
            len(files),
        )
    return readable, skipped


def diagnose(
    failure: tf.errors.OpError, files: Sequence[str], spec: dict, hint: bool = True
) -> CorruptRecordError | None:
    """The one-line error for a tf.data failure reading `files`: the first bad record of the file
    the failure names, else of the files it may lie in; None when no record is to blame."""
    named = _NAMED_RECORD.search(failure.message)
    at = _AT_OFFSET.search(failure.message)
    if named:
        candidates = [named.group(1)]
    elif at:
        candidates = [p for p in files if tf.io.gfile.stat(p).length > int(at.group(1)) - 12]
    elif isinstance(failure, tf.errors.DataLossError) or "IteratorGetNext" in failure.message:
        candidates = list(files)
    else:
        return None
    logging.info("locating the bad record in %d input file(s)", len(candidates))
    for path in candidates:
        bad = next((i for i in check_file(path, spec) if isinstance(i, records.BadRecord)), None)
        if bad is not None:
            return error(bad, hint)
    if named:  # a problem `fit_problem` does not know: TF's own words for the named record
        return CorruptRecordError(
            f"{named.group(1)}: record {named.group(2)}: "
            f"{named.group(3).strip()}" + (SKIP_HINT if hint else "")
        )
    return None
