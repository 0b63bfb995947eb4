"""SQuAD windows on disk and as batches: the original's `train_feature_file` and
`predict_feature_file` (TFRecords, the original's schema, so files it wrote are read too) and
`predict_feature_left_file` (what post-processing needs beside the model's outputs, as JSON).

A cache is reused only when it was built from the same file with the same settings
(`cache_settings`, kept in `<train_feature_file>.json` and inside the left file); a cache without
that record (one the original wrote) is reused as it is, as the original did, with a warning.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import tensorflow as tf
from absl import logging

from albert_tf.io import atomic_file, atomic_path, refuse_unknown_keys, write_json
from albert_tf.tasks.squad.features import SquadFeature

INPUT_NAMES = ("input_ids", "input_mask", "segment_ids", "p_mask")
LABEL_NAMES = ("start_positions", "end_positions", "is_impossible")
# Windows of one question are adjacent in the file and questions were shuffled before they were
# written (as the original pre-shuffles them), so a modest buffer mixes enough.
SHUFFLE_BUFFER = 1000
_LEFT_FIELDS = ("unique_id", "example_index", "doc_span_index", "paragraph_len")
# The keys of what `write_cache_settings` and `write_left_file` write: anything else in them is
# no file of ours, or one edited by hand.
CACHE_INFO_KEYS = ("settings", "num_features")
LEFT_FILE_KEYS = ("settings", "features")


def file_digest(path: str) -> str:
    """sha256 of a file's bytes (identifies a SQuAD file or a SentencePiece model)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def cache_settings(source: str, spm_model_file: str, **settings) -> dict:
    """What decides a cache's windows: the source file's and the SentencePiece model's digests
    and the given settings (lengths, lowercasing, ...)."""
    return {
        "source": os.path.abspath(source),
        "source_sha256": file_digest(source),
        "spm_model_sha256": file_digest(spm_model_file),
        **settings,
    }


def settings_differences(found: dict, wanted: dict) -> list[str]:
    """'name: found vs wanted' for every setting that differs (the source path may move),
    including one recorded that is no setting here: windows built under it may differ."""
    return [
        f"{key}: {found.get(key)!r} vs {value!r}"
        for key, value in wanted.items()
        if key != "source" and found.get(key) != value
    ] + [
        f"{key}: {value!r} vs no such setting" for key, value in found.items() if key not in wanted
    ]


def _example(feature: SquadFeature, is_training: bool) -> bytes:
    def ints(values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))

    fields = {"unique_ids": ints([feature.unique_id])}
    fields.update((name, ints(getattr(feature, name))) for name in INPUT_NAMES)
    if is_training:
        fields["start_positions"] = ints([feature.start_position])
        fields["end_positions"] = ints([feature.end_position])
        fields["is_impossible"] = ints([int(feature.is_impossible)])
    return tf.train.Example(features=tf.train.Features(feature=fields)).SerializeToString()


def write_feature_records(
    path: str, features: Iterable[SquadFeature], is_training: bool
) -> list[int]:
    """Writes the windows as TFRecords in the original's schema (`unique_ids`, `input_ids`,
    `input_mask`, `segment_ids`, `p_mask`, and when training `start_positions`, `end_positions`,
    `is_impossible`), atomically; returns their unique ids."""
    unique_ids = []
    with atomic_path(path) as staging, tf.io.TFRecordWriter(staging) as writer:
        for feature in features:
            writer.write(_example(feature, is_training))
            unique_ids.append(feature.unique_id)
    return unique_ids


def record_spec(seq_length: int, is_training: bool) -> dict:
    """tf.io spec of the records (the original writes `p_mask` for v1.1 too)."""
    spec = {"unique_ids": tf.io.FixedLenFeature([], tf.int64)}
    for name in INPUT_NAMES:
        spec[name] = tf.io.FixedLenFeature([seq_length], tf.int64)
    if is_training:
        for name in LABEL_NAMES:
            spec[name] = tf.io.FixedLenFeature([], tf.int64)
    return spec


def _parse(spec: dict, drop: Sequence[str] = ()):
    def parse(records):
        parsed = tf.io.parse_example(records, spec)
        return {k: tf.cast(v, tf.int32) for k, v in parsed.items() if k not in drop}

    return parse


def train_dataset(
    path: str, seq_length: int, batch_size: int, seed: int, teacher_forcing: bool = False
) -> tf.data.Dataset:
    """Endless shuffled training batches (remainder dropped, as the original) as (features, labels):
    the model inputs, and a dict of `LABEL_NAMES`. `teacher_forcing` (SQuAD v2's training graph
    feeds the gold start to the end head) puts `start_positions` among the features too."""
    features = (*INPUT_NAMES, "start_positions") if teacher_forcing else INPUT_NAMES

    def split(batch):
        return {k: batch[k] for k in features}, {k: batch[k] for k in LABEL_NAMES}

    dataset = tf.data.TFRecordDataset(path).repeat().shuffle(SHUFFLE_BUFFER, seed=seed)
    return (
        dataset.batch(batch_size, drop_remainder=True)
        .map(_parse(record_spec(seq_length, True), drop=("unique_ids",)))
        .map(split)
        .prefetch(tf.data.AUTOTUNE)
    )


def predict_dataset(
    path: str, seq_length: int, batch_size: int, num_records: int
) -> tf.data.Dataset:
    """The `num_records` windows of `path` in file order, batched: `unique_ids` and the model
    inputs (the count lets Keras know where the data ends)."""
    return (
        tf.data.TFRecordDataset(path)
        .apply(tf.data.experimental.assert_cardinality(num_records))
        .batch(batch_size)
        .map(_parse(record_spec(seq_length, False)))
        .prefetch(tf.data.AUTOTUNE)
    )


def record_unique_ids(path: str) -> np.ndarray:
    """The `unique_ids` of a feature file, in order."""
    spec = {"unique_ids": tf.io.FixedLenFeature([], tf.int64)}
    batches = tf.data.TFRecordDataset(path).batch(4096).map(lambda r: tf.io.parse_example(r, spec))
    found = [b["unique_ids"].numpy() for b in batches]
    return np.concatenate(found) if found else np.zeros([0], np.int64)


def write_left_file(path: str, settings: dict, features: Sequence[SquadFeature]) -> None:
    """Writes what post-processing reads of each window (not the model inputs, which are in the
    feature file): ids, character offsets, max-context flags and the unpadded pieces."""
    rows = []
    for f in features:
        row = {name: getattr(f, name) for name in _LEFT_FIELDS}
        row["tok_start_to_orig_index"] = f.tok_start_to_orig_index
        row["tok_end_to_orig_index"] = f.tok_end_to_orig_index
        row["token_is_max_context"] = [[k, v] for k, v in f.token_is_max_context.items()]
        row["tokens"] = f.tokens[: f.paragraph_len]
        rows.append(row)
    # Compact: indented, the per-piece offset lists would make it several times larger.
    with atomic_file(path, "w", encoding="utf-8") as f:
        json.dump({"settings": settings, "features": rows}, f, separators=(",", ":"))


def read_left_file(path: str, seq_length: int) -> tuple[dict | None, list[SquadFeature]]:
    """(settings, windows) of a left file; the windows' model-input lists are left empty. A file
    that is not ours (the original's pickle) raises ValueError naming it."""
    try:
        with open(path, encoding="utf-8") as f:
            content = json.load(f)
        rows = content["features"]
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise ValueError(
            f"{path}: not a predict_feature_left_file written here (JSON with the windows); "
            "delete it (and predict_feature_file) to rebuild both"
        ) from e
    refuse_unknown_keys(content, LEFT_FILE_KEYS, path)
    features = []
    for row in rows:
        tokens = row["tokens"] + ["<pad>"] * (seq_length - len(row["tokens"]))
        features.append(
            SquadFeature(
                **{name: row[name] for name in _LEFT_FIELDS},
                tok_start_to_orig_index=row["tok_start_to_orig_index"],
                tok_end_to_orig_index=row["tok_end_to_orig_index"],
                token_is_max_context={int(k): bool(v) for k, v in row["token_is_max_context"]},
                tokens=tokens,
                input_ids=[],
                input_mask=[],
                segment_ids=[],
                p_mask=[],
            )
        )
    return content.get("settings"), features


def read_cache_settings(path: str) -> dict | None:
    """The settings recorded beside a training feature file, or None."""
    info = path + ".json"
    if not os.path.isfile(info):
        return None
    with open(info, encoding="utf-8") as f:
        content = json.load(f)
    refuse_unknown_keys(content, CACHE_INFO_KEYS, info)
    return content.get("settings")


def write_cache_settings(path: str, settings: dict, num_features: int) -> None:
    """Records the settings (and window count) of a training feature file beside it."""
    write_json(path + ".json", {"settings": settings, "num_features": num_features})


def reuse_or_rebuild(path: str, found: dict | None, wanted: dict, what: str) -> bool:
    """Whether an existing cache `path` can be reused: yes when its settings match or it has no
    record of them (logged); no (logged, to be rebuilt) when they differ."""
    if found is None:
        logging.warning(
            "Reusing %s %s as it is: no record of the settings it was built with", what, path
        )
        return True
    differences = settings_differences(found, wanted)
    if differences:
        logging.warning(
            "Rebuilding %s %s: built with other settings (%s)", what, path, "; ".join(differences)
        )
        return False
    logging.info("Reusing %s %s", what, path)
    return True


def cached_train_records(
    path: str, settings: dict, build: Callable[[], Iterable[SquadFeature]]
) -> int:
    """Makes `path` hold the training windows of `settings` (reused, or written from `build()`
    with the settings beside); returns the number of windows."""
    found = read_cache_settings(path) if os.path.exists(path) else None
    if os.path.exists(path) and reuse_or_rebuild(path, found, settings, "train_feature_file"):
        return len(record_unique_ids(path))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    count = len(write_feature_records(path, build(), is_training=True))
    write_cache_settings(path, settings, count)
    logging.info("Wrote %d training windows to %s", count, path)
    return count


def cached_predict_windows(
    record_file: str,
    left_file: str,
    settings: dict,
    seq_length: int,
    build: Callable[[], list[SquadFeature]],
) -> list[SquadFeature]:
    """The predict windows of `settings`: from `record_file` + `left_file` when both hold them,
    else from `build()`, then written to both."""
    if os.path.exists(record_file) and os.path.exists(left_file):
        found, cached = read_left_file(left_file, seq_length)
        if reuse_or_rebuild(left_file, found, settings, "predict features"):
            if list(record_unique_ids(record_file)) == [f.unique_id for f in cached]:
                return cached
            logging.warning("Rebuilding %s and %s: their windows differ", record_file, left_file)
    features = build()
    for path in (record_file, left_file):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    write_feature_records(record_file, features, is_training=False)
    write_left_file(left_file, settings, features)
    return features
