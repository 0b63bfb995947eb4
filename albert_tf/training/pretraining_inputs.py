"""A pretraining run's inputs, checked before any model is built: the train and held-out files,
the masking their records hold (masked by data prep, or unmasked for in-graph masking) against
`--masking`, and their first records (or, with `--skip_corrupt_records`, every record, bad ones
dropped into repaired copies)."""

from __future__ import annotations

import concurrent.futures
import os

from absl import logging

from albert_tf.records import UNMASKED_FEATURE_NAMES
from albert_tf.training import eval_sets, record_checks
from albert_tf.training.input_pipeline import (
    detect_masking,
    feature_spec,
    list_input_files,
    record_masking,
)
from albert_tf.training.pretraining_options import PretrainingOptions, SettingsError


def record_spec(o: PretrainingOptions, masking: str) -> dict:
    """The tf.io spec of the masked ("static") or unmasked ("dynamic") records."""
    if masking == "dynamic":
        return feature_spec(o.max_seq_length, names=UNMASKED_FEATURE_NAMES)
    return feature_spec(o.max_seq_length, o.max_predictions_per_seq)


def _resolve_masking(o: PretrainingOptions, files: list[str], requested: str) -> str:
    """The masking of `files`: what their first record shows, which an explicit `requested`
    masking must agree with; with "dynamic" no file may start with a masked record."""
    try:
        detected = detect_masking(files)
    except ValueError as error:
        if requested != "auto":
            logging.warning("--masking=%s not checked against the records: %s", requested, error)
            return requested
        if not o.skip_corrupt_records:
            record_checks.preflight(files, {})  # a corrupt first record: its one-line error
        raise SettingsError(f"--masking=auto: {error}; give --masking=static or dynamic") from error
    if requested not in ("auto", detected):
        held = "masked" if detected == "static" else "unmasked"
        raise SettingsError(
            f"--masking={requested}, but the records of {files[0]} are {held}: use "
            f"--masking={detected} (or auto)"
        )
    if detected == "dynamic":
        # Masked records would be masked again: check every file's first record, as the preflight does.
        def masked(path):
            try:
                return record_masking(path) == "static"
            except ValueError:  # unreadable: the preflight names it
                return False

        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            static = [p for p, is_masked in zip(files, pool.map(masked, files)) if is_masked]
        if static:
            raise SettingsError(
                f"{static[0]} holds masked records, {files[0]} unmasked ones: one run reads one "
                f"kind ({len(static)} of {len(files)} files are masked)"
            )
    return detected


def checked_inputs(
    o: PretrainingOptions, work_dir: str
) -> tuple[list[str], list[str], dict[str, int], tuple[str | None, str | None]]:
    """Train and held-out eval files, checked before any model is built: the first record of
    each, or with `skip_corrupt_records` every record, repaired copies (under
    `<work_dir>/repaired_records`) replacing files with bad ones. Also the records skipped per
    file and the masking of the train and of the eval records (None for a set not read).
    """
    reads_train = o.do_train or (o.do_eval and not o.eval_input_file)
    train = list_input_files(o.input_file) if reads_train else []
    held_out = (
        list_input_files(eval_sets.all_patterns(o.eval_input_file))
        if o.do_eval and o.eval_input_file
        else []
    )
    train_masking = _resolve_masking(o, train, o.masking) if train else None
    # Held-out records are read as they are: fixed masks keep evaluations comparable whatever
    # the training records hold, so --masking speaks for the training records only.
    eval_masking = _resolve_masking(o, held_out, "auto") if held_out else train_masking
    by_masking: dict[str, list[str]] = {}
    for files, masking in ((train, train_masking), (held_out, eval_masking)):
        if files:
            by_masking.setdefault(masking, []).extend(files)
    replaced, skipped = {}, {}
    for masking, files in by_masking.items():
        files = list(dict.fromkeys(files))
        spec = record_spec(o, masking)
        if not o.skip_corrupt_records:
            record_checks.preflight(files, spec)
            replaced.update(zip(files, files))
            continue
        readable, skipped_here = record_checks.skip_bad_records(
            files, spec, os.path.join(work_dir, "repaired_records")
        )
        replaced.update(zip(files, readable))
        skipped.update(skipped_here)
    return (
        [replaced[p] for p in train],
        [replaced[p] for p in held_out],
        skipped,
        (train_masking, eval_masking),
    )
