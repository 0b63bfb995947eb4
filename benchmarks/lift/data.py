"""The lift study's data: the ablation study's text and vocabulary (`benchmarks.ablations.data`),
unmasked SOP training records (masked afresh each time training reads them) and masked SOP
held-out records (the same masks at every checkpoint), the trivial held-out baselines, and the
GLUE folders it fine-tunes on (train sets sampled; a task shipped without a train set has its dev
set split once, seeded; each train set also split for the learning-rate grid)."""

from __future__ import annotations

import collections
import gzip
import os
import pathlib
import random

from benchmarks.ablations.data import HELD_OUT_SEED_OFFSET, sentence_records
from benchmarks.lift.settings import REPORTED_TASKS, SEEDED_TASKS, LiftSettings

# Ids never masked: padding, [CLS], [SEP] (data prep's vocabularies put them at 0, 2 and 3).
NEVER_MASKED_IDS = (0, 2, 3)


def write_records(s: LiftSettings, spm_model_file: str, text: dict) -> dict:
    """Unmasked SOP records of the training text and masked SOP records of the held-out text."""
    paths = {}
    for split, seed, masking in (
        ("train", s.data_seed, "dynamic"),
        ("heldout", s.data_seed + HELD_OUT_SEED_OFFSET, "static"),
    ):
        path = os.path.join(s.work_dir, "data", f"{split}_sop.tfrecord")
        summary = sentence_records(
            s, text[split]["path"], path, spm_model_file, seed, masking_mode=masking
        )
        paths[split] = {"path": path, "instances": summary["instances"], "masking": masking}
    return paths


def baselines(s: LiftSettings, train_records: str, heldout_records: str) -> dict:
    """What a model that learnt nothing scores on the held-out records: MLM accuracy of always
    the most frequent token of the training text, and SOP accuracy of the majority label over
    the examples the evaluation scores (its first `max_eval_steps` batches)."""
    import numpy as np
    import tensorflow as tf

    def column(path: str, name: str, width: int, limit: int | None = None, dtype=tf.int64):
        spec = {name: tf.io.FixedLenFeature([width], dtype)}
        dataset = tf.data.TFRecordDataset(path)
        dataset = dataset.take(limit) if limit else dataset
        return np.concatenate(
            [tf.io.parse_example(b, spec)[name].numpy() for b in dataset.batch(4096)]
        )

    counts = collections.Counter(column(train_records, "input_ids", s.max_seq_length).ravel())
    for never in NEVER_MASKED_IDS:
        counts.pop(never, None)
    top_id = counts.most_common(1)[0][0]
    masked = column(heldout_records, "masked_lm_ids", s.max_predictions_per_seq)
    width = s.max_predictions_per_seq
    weights = column(heldout_records, "masked_lm_weights", width, dtype=tf.float32) > 0
    scored = s.max_eval_steps * s.eval_batch_size
    labels = column(heldout_records, "next_sentence_labels", 1, scored).ravel()
    share = float(np.mean(labels == 1))
    return {
        "unigram_mlm_accuracy": float(np.mean(masked[weights] == top_id)),
        "sop_majority_accuracy": max(share, 1 - share),
    }


def _rows(path: pathlib.Path, header: bool) -> tuple[list[bytes], list[bytes]]:
    data = path.read_bytes()
    lines = (gzip.decompress(data) if path.suffix == ".gz" else data).splitlines(keepends=True)
    lines = [line if line.endswith(b"\n") else line + b"\n" for line in lines]
    return (lines[:1], lines[1:]) if header else ([], lines)


def _sample(rows: list[bytes], count: int | None, seed: int) -> list[bytes]:
    """`count` of `rows` (all when None or more), seeded, kept in their file order."""
    if count is None or count >= len(rows):
        return list(rows)
    return [rows[i] for i in sorted(random.Random(seed).sample(range(len(rows)), count))]


def _split(rows: list[bytes], held_out: int, seed: int) -> tuple[list[bytes], list[bytes]]:
    """(rest, held out): `held_out` of `rows` (at least one, at most all but one) held out,
    seeded, both in file order."""
    held_out = min(max(1, held_out), len(rows) - 1)
    held = set(random.Random(seed).sample(range(len(rows)), held_out))
    return [r for i, r in enumerate(rows) if i not in held], [rows[i] for i in sorted(held)]


def write_glue(s: LiftSettings) -> dict:
    """`<work_dir>/glue/<Task>/` (the sampled train set, the dev set) and `<work_dir>/glue_grid/
    <Task>/` (the train set split for the learning-rate grid); returns rows per file and where
    each task's evaluation set comes from."""
    from albert_tf.tasks.glue.processors import get_task, task_file

    written = {}
    for name in SEEDED_TASKS + REPORTED_TASKS:
        task = get_task(name)
        head, dev = _rows(pathlib.Path(task_file(task, s.glue_dir, "dev")), task.labelled.header)
        try:  # the GLUE reader's choice of file: plain, else gzipped
            train_file = pathlib.Path(task_file(task, s.glue_dir, "train"))
        except FileNotFoundError:  # GLUE's dev set only: split it once, seeded
            train_rows = s.train_rows[name] or len(dev) // 2
            train, dev = _split(dev, len(dev) - train_rows, s.data_seed)
            evaluation = f"the {len(dev)} GLUE dev rows not sampled for training"
        else:
            _, train = _rows(train_file, task.labelled.header)
            train = _sample(train, s.train_rows[name], s.data_seed)
            evaluation = "GLUE dev set"
        dev = _sample(dev, s.max_eval_rows, s.data_seed)
        held_out = round(len(train) * s.grid_holdout_share)
        grid_train, grid_dev = _split(train, held_out, s.data_seed + 1)
        for root, files in (
            ("glue", {"train.tsv": train, "dev.tsv": dev}),
            ("glue_grid", {"train.tsv": grid_train, "dev.tsv": grid_dev}),
        ):
            folder = pathlib.Path(s.work_dir) / root / task.folder
            folder.mkdir(parents=True, exist_ok=True)
            for file, rows in files.items():
                (folder / file).write_bytes(b"".join(head + rows))
        written[name] = {
            "train_rows": len(train),
            "eval_rows": len(dev),
            "evaluation": evaluation,
            "grid_train_rows": len(grid_train),
            "grid_eval_rows": len(grid_dev),
        }
    return {
        "glue_dir": os.path.join(s.work_dir, "glue"),
        "grid_dir": os.path.join(s.work_dir, "glue_grid"),
        "tasks": written,
    }
