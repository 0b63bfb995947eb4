"""RACE questions as TFRecords in the original's schema (`run_race.py`'s `train_file`,
`eval_file`, `predict_file`), as batches of [batch, 4, max_seq_length] model inputs, and a split
as the fine-tuning loop's dev set.

Each record holds one question: `input_ids`, `input_mask`, `segment_ids` (its four packed
choices, concatenated: 4 x max_seq_length), `label_ids` and `is_real_example`, so files the
original wrote are read too. A cache is reused only when it was built with the same settings
(`<file>.json` beside it records them); one without that record is reused as it is, as the
original did, with a warning.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Iterable

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from albert_tf.finetuning.progress import predict_with_progress
from albert_tf.io import atomic_path, refuse_unknown_keys, write_json
from albert_tf.tasks.race.examples import RaceExample
from albert_tf.tasks.race.features import RaceFeature
from albert_tf.tasks.race.metrics import race_metrics

NUM_CHOICES = 4
INPUT_NAMES = ("input_ids", "input_mask", "segment_ids")
# Questions are shuffled before they are written; the buffer only mixes neighbouring ones.
SHUFFLE_BUFFER = 1000
SELECTION_METRIC = "eval_accuracy"  # the original's `key_name`
# The keys `cached_race_records` writes beside a cache: anything else is no file of ours.
CACHE_INFO_KEYS = ("settings", "num_records")


def _example(feature: RaceFeature) -> bytes:
    def ints(values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))

    fields = {name: ints(v for row in getattr(feature, name) for v in row) for name in INPUT_NAMES}
    fields["label_ids"] = ints([feature.label_id])
    fields["is_real_example"] = ints([1])
    return tf.train.Example(features=tf.train.Features(feature=fields)).SerializeToString()


def write_race_records(path: str, features: Iterable[RaceFeature]) -> int:
    """Writes the questions as TFRecords (atomically); returns how many."""
    count = 0
    with atomic_path(path) as staging, tf.io.TFRecordWriter(staging) as writer:
        for feature in features:
            writer.write(_example(feature))
            count += 1
    return count


def _parse(seq_length: int):
    spec = {
        name: tf.io.FixedLenFeature([NUM_CHOICES * seq_length], tf.int64) for name in INPUT_NAMES
    }
    spec["label_ids"] = tf.io.FixedLenFeature([], tf.int64)

    def parse(records):
        parsed = tf.io.parse_example(records, spec)
        features = {
            name: tf.reshape(tf.cast(parsed[name], tf.int32), [-1, NUM_CHOICES, seq_length])
            for name in INPUT_NAMES
        }
        return features, tf.cast(parsed["label_ids"], tf.int32)

    return parse


def race_dataset(
    path: str,
    seq_length: int,
    batch_size: int,
    training: bool,
    seed: int = 0,
    num_records: int | None = None,
) -> tf.data.Dataset:
    """Batches of (features `input_ids`, `input_mask`, `segment_ids` [B, 4, L], `label_ids`
    [B]), as `fit` and `predict` take them.

    Training: endless, shuffled (seeded), remainder dropped, as the original. Otherwise in file
    order, the last batch smaller; `num_records` lets Keras know where the data ends.
    """
    dataset = tf.data.TFRecordDataset(path)
    if training:
        dataset = dataset.repeat().shuffle(SHUFFLE_BUFFER, seed=seed)
    elif num_records is not None:
        dataset = dataset.apply(tf.data.experimental.assert_cardinality(num_records))
    return (
        dataset.batch(batch_size, drop_remainder=training)
        .map(_parse(seq_length))
        .prefetch(tf.data.AUTOTUNE)
    )


def count_records(path: str) -> int:
    """The number of records in a TFRecord file."""
    return int(tf.data.TFRecordDataset(path).reduce(0, lambda n, _: n + 1))


def cached_race_records(
    path: str, settings: dict, build: Callable[[], Iterable[RaceFeature]], what: str
) -> int:
    """Makes `path` hold the questions of `settings` (reused, or written from `build()` with the
    settings beside it); returns how many it holds."""
    info = path + ".json"
    if os.path.exists(path):
        found = None
        if os.path.isfile(info):
            with open(info, encoding="utf-8") as f:
                content = json.load(f)
            refuse_unknown_keys(content, CACHE_INFO_KEYS, info)
            found = content.get("settings")
        if found is None:
            logging.warning("Reusing %s %s as it is: no record of its settings", what, path)
            return count_records(path)
        differences = [
            f"{key}: {found.get(key)!r} vs {value!r}"
            for key, value in settings.items()
            if found.get(key) != value
        ]
        # A setting recorded that is none here: the questions built under it may differ.
        differences += [
            f"{key}: {v!r} vs no such setting" for key, v in found.items() if key not in settings
        ]
        if not differences:
            logging.info("Reusing %s %s", what, path)
            return count_records(path)
        logging.warning("Rebuilding %s %s (%s)", what, path, "; ".join(differences))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    count = write_race_records(path, build())
    write_json(info, {"settings": settings, "num_records": count})
    logging.info("Wrote %d questions to %s", count, path)
    return count


@dataclasses.dataclass
class EncodedRaceSplit:
    """A split's questions and their TFRecord cache.

    Args:
      examples: the questions, middle school first.
      record_file: their packed inputs.

    Example:
      split = task.encode("dev")
      len(split.examples)
    """

    examples: list[RaceExample]
    record_file: str

    @property
    def example_ids(self) -> list[str]:
        """Each question's article id (its level: middle or high)."""
        return [e.example_id for e in self.examples]

    @property
    def label_ids(self) -> np.ndarray:
        """Each question's gold option, 0-3."""
        return np.array([e.label for e in self.examples], np.int32)


@dataclasses.dataclass
class RaceDevScorer:
    """A RACE split and its metrics, for `CheckpointEvaluator`.

    Args:
      name: "race".
      split: the encoded questions.
      dataset: their batches, in file order.

    Example:
      scorer = RaceDevScorer("race", dev, dev_batches)
      scorer.score(model)["eval_accuracy"]
    """

    name: str
    split: EncodedRaceSplit
    dataset: tf.data.Dataset
    selection_metric: str = SELECTION_METRIC

    @property
    def baseline(self) -> dict[str, float]:
        """The metrics of always choosing the option most often right in this split."""
        labels = np.asarray(self.split.label_ids).reshape(-1).astype(np.int64)
        logits = np.zeros((len(labels), 4))
        logits[:, np.bincount(labels, minlength=4).argmax()] = 1.0
        metrics = race_metrics(self.split.example_ids, labels, logits)
        return {k: v for k, v in metrics.items() if "loss" not in k}

    def logits(self, model: keras.Model, what: str | None = None) -> np.ndarray:
        """Inference-mode option logits [N, 4]; `what` names the split in the progress lines
        (default: "<name> dev")."""
        what = what or f"{self.name} dev"
        outputs = predict_with_progress(
            model, self.dataset, what, len(self.split.examples), "questions"
        )
        return np.asarray(outputs["logits"])

    def score(self, model: keras.Model) -> dict[str, float]:
        """eval_accuracy, eval_loss, and accuracy per level (`race_metrics`)."""
        return race_metrics(self.split.example_ids, self.split.label_ids, self.logits(model))
