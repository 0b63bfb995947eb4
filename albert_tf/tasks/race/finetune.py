"""RACE fine-tuning as the original `run_race.py`, on the task-agnostic loop.

`RaceFinetuneTask` is what the loop (`albert_tf.finetuning.loop`) needs from RACE: an
`AlbertMultipleChoice`, the questions of `<data_dir>/RACE/<split>/{middle,high}/all.txt` packed
as the original (cached as TFRecords: `train_file`, `eval_file`, `predict_file`), dev accuracy
(overall, middle, high) and loss with the best checkpoint kept by `eval_accuracy`, the original's
`predict_results.txt` (the test split's metrics) plus each question's answer, and a `.keras`
export. The job's settings (`RaceConfig`, `RECIPES`) are in `albert_tf.tasks.race.config`,
importable from here too.

Deliberate differences, none changing the maths: training questions are shuffled (seeded) before
they are written, where the original read middle school then high school through a 100-question
buffer.
"""

from __future__ import annotations

import hashlib
import os
import random

import numpy as np
import tensorflow as tf
from absl import logging

from albert_tf.config import AlbertConfig
from albert_tf.finetuning.task import TaskBase
from albert_tf.finetuning.bundle import write_serving_bundle
from albert_tf.io import write_text
from albert_tf.modeling.heads.multiple_choice import AlbertMultipleChoice
from albert_tf.tasks.race import inputs as race_inputs
from albert_tf.tasks.race.config import RECIPES, RaceConfig
from albert_tf.tasks.race.inputs import EncodedRaceSplit, RaceDevScorer
from albert_tf.tasks.race.examples import LABELS, LEVELS, read_race_examples
from albert_tf.tasks.race.features import convert_race_example
from albert_tf.tasks.race.metrics import race_metrics

__all__ = ["RECIPES", "RaceConfig", "RaceFinetuneTask"]


def _digest(paths: list[str]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


class RaceFinetuneTask(TaskBase):
    """One RACE job as the fine-tuning loop sees it (`albert_tf.finetuning.task.Task`).

    Args:
      settings: the job's `RaceConfig`.
      tokenizer: the SentencePiece tokenizer; built from `settings` when not given.

    Example:
      task = RaceFinetuneTask(RaceConfig("data", "out/race", "30k-clean.model"))
      albert_tf.finetuning.loop.run(task, do_train=True, do_eval=True, do_predict=False)
    """

    name = "race"

    def build_model(
        self, albert_config: AlbertConfig, dtype: str | None = None
    ) -> AlbertMultipleChoice:
        """A fresh `AlbertMultipleChoice` (4 choices, the job's `dropout_prob`) in `dtype`."""
        return AlbertMultipleChoice(
            albert_config,
            dropout_prob=self.settings.dropout_prob,
            seed=self.settings.seed,
            dtype=dtype,
        )

    def _split_files(self, split: str) -> list[str]:
        c = self.settings
        levels = [
            lv
            for lv in LEVELS
            if not (c.high_only and lv == "middle" or c.middle_only and lv == "high")
        ]
        return [os.path.join(c.data_dir, "RACE", split, level, "all.txt") for level in levels]

    def encode(self, split: str) -> EncodedRaceSplit:
        """A split's questions, with their packed inputs cached as TFRecords."""
        c = self.settings
        examples = read_race_examples(
            c.data_dir, split, c.middle_only, c.high_only, c.do_lower_case
        )
        if not examples:
            raise ValueError(f"{c.data_dir}/RACE/{split}: no questions")
        in_file_order = list(examples)
        if split == "train":
            random.Random(c.seed).shuffle(examples)
        settings = {
            "data_sha256": _digest(self._split_files(split)),
            "spm_model_sha256": _digest([c.spm_model_file]),
            "do_lower_case": c.do_lower_case,
            "max_seq_length": c.max_seq_length,
            "max_qa_length": c.max_qa_length,
            "middle_only": c.middle_only,
            "high_only": c.high_only,
            **({"shuffle_seed": c.seed} if split == "train" else {}),
        }
        path = c.cache_file(split)
        count = race_inputs.cached_race_records(
            path,
            settings,
            lambda: (
                convert_race_example(e, self.tokenizer, c.max_seq_length, c.max_qa_length)
                for e in examples
            ),
            f"{split} features",
        )
        if count != len(examples):
            raise ValueError(
                f"{path} holds {count} questions, {c.data_dir}/RACE/{split} {len(examples)}; "
                "delete it to rebuild it"
            )
        return EncodedRaceSplit(examples if split == "train" else in_file_order, path)

    def _batches(self, split: EncodedRaceSplit, batch_size: int) -> tf.data.Dataset:
        return race_inputs.race_dataset(
            split.record_file,
            self.settings.max_seq_length,
            batch_size,
            training=False,
            num_records=len(split.examples),
        )

    def train_dataset(self) -> tuple[tf.data.Dataset, int]:
        """Shuffled, repeated training batches and the number of training questions."""
        c = self.settings
        train = self.encode("train")
        dataset = race_inputs.race_dataset(
            train.record_file, c.max_seq_length, c.train_batch_size, training=True, seed=c.seed
        )
        return dataset, len(train.examples)

    def dev_scorer(self) -> RaceDevScorer:
        """The dev split, encoded once, as a scorer."""
        dev = self.encode("dev")
        return RaceDevScorer(self.name, dev, self._batches(dev, self.settings.eval_batch_size))

    def check_predict_inputs(self) -> None:
        """Raises when a test split's file is missing."""
        for path in self._split_files("test"):
            if not os.path.isfile(path):
                raise FileNotFoundError(f"RACE test file not found: {path}")

    def predict_inputs(self) -> EncodedRaceSplit:
        """The test split, encoded."""
        return self.encode("test")

    def predict(
        self, model: AlbertMultipleChoice, checkpoint: str, inputs: EncodedRaceSplit
    ) -> dict[str, str]:
        """Writes the original's `predict_results.txt` (the test split's metrics, key = value)
        and `test_predictions.tsv` (index, article id, answer A-D, gold, probabilities)."""
        c = self.settings
        scorer = RaceDevScorer(self.name, inputs, self._batches(inputs, c.predict_batch_size))
        logits = scorer.logits(model, f"{self.name} test")
        metrics = race_metrics(inputs.example_ids, inputs.label_ids, logits)
        shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
        probabilities = shifted / shifted.sum(axis=-1, keepdims=True)
        paths = {
            "results": os.path.join(c.output_dir, "predict_results.txt"),
            "predictions": os.path.join(c.output_dir, "test_predictions.tsv"),
        }
        write_text(
            paths["results"],
            "".join(f"{key} = {metrics[key]}\n" for key in sorted(metrics))
            + f"checkpoint = {checkpoint}\n",
        )
        rows = ["index\texample_id\tprediction\tlabel\t" + "\t".join(f"prob_{x}" for x in LABELS)]
        for i, (example, p) in enumerate(zip(inputs.examples, probabilities)):
            rows.append(
                f"{i}\t{example.example_id}\t{LABELS[int(p.argmax())]}\t{LABELS[example.label]}\t"
                + "\t".join(str(float(x)) for x in p)
            )
        write_text(paths["predictions"], "\n".join(rows) + "\n")
        logging.info("Test metrics of %s: %s", checkpoint, metrics)
        return paths

    def export(
        self, model: AlbertMultipleChoice, checkpoint: str, albert_config: AlbertConfig
    ) -> str:
        """Saves `race.keras` (+ config, SentencePiece model, `race_info.json`) to `export_dir`."""
        c = self.settings
        info = {
            "labels": list(LABELS),
            "inputs": {
                name: "int32 [batch, 4, seq_length]"
                for name in ("input_ids", "input_mask", "segment_ids")
            },
            "outputs": {"logits": "float32 [batch, 4]", "probabilities": "float32 [batch, 4]"},
            "max_seq_length": c.max_seq_length,
            "max_qa_length": c.max_qa_length,
            "do_lower_case": c.do_lower_case,
        }
        return write_serving_bundle(
            c.export_dir,
            model,
            "race.keras",
            albert_config,
            c.spm_model_file,
            "race_info.json",
            info,
            checkpoint,
        )
