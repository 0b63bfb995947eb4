"""What the fine-tuning loop asks of a benchmark.

The loop (`albert_tf.finetuning.loop`) trains, saves a TF1-named checkpoint every N steps, scores
each one on dev, keeps the best, predicts and exports; everything that differs per benchmark
(reading its files, encoding, the model's head, its metrics, its prediction files) sits behind
`Task`, implemented under `albert_tf.tasks`; what it reads of a job's settings is declared once,
in `albert_tf.finetuning.settings.FinetuneSettings`. `Task` and `DevScorer` are structural
protocols: a task satisfies them by having the members. `TaskBase` holds what every task shares:
its settings, a lazily loaded tokenizer, and checkpoint loading through the one task-model loader
(`albert_tf.checkpoints.task_heads`) or from a transformers folder (`albert_tf.checkpoints.hf`).
"""

from __future__ import annotations

from typing import Protocol

import keras
import tensorflow as tf
from absl import logging

from albert_tf.checkpoints.hf import initialize_from_hf, is_hf_folder
from albert_tf.checkpoints.task_heads import initialize_task_model, load_task_checkpoint
from albert_tf.config import AlbertConfig
from albert_tf.finetuning.settings import FinetuneSettings
from albert_tf.text.tokenization import AlbertTokenizer


def initial_weights(settings: FinetuneSettings) -> str | None:
    """What a job starts from: its `init_checkpoint`, else its `hf_model` folder, if any."""
    return settings.init_checkpoint or settings.hf_model


class DevScorer(Protocol):
    """Scores a model on a dev set; higher `selection_metric` is better. `baseline` (optional)
    holds the same metrics of a model that learnt nothing (the majority class, a constant
    prediction, the empty answer): logged and written beside every score."""

    name: str
    selection_metric: str

    def score(self, model: keras.Model) -> dict[str, float]:
        """The metrics of `model` on dev, `selection_metric` among them."""


class Task(Protocol):
    """One benchmark as the loop sees it; `settings` holds the job's settings (a task's
    `FinetuneSettings` dataclass)."""

    name: str
    settings: FinetuneSettings

    def build_model(self, albert_config: AlbertConfig, dtype: str | None = None) -> keras.Model:
        """A freshly initialised model (backbone + this task's head) whose layers compute with
        the Keras dtype policy `dtype` (e.g. "mixed_bfloat16"; None: Keras's global policy)."""

    def initialize(self, model: keras.Model, checkpoint: str) -> bool:
        """Loads a pretrained (backbone only) or fine-tuned checkpoint before training; True when
        the checkpoint held the task's head too (a fine-tuned one)."""

    def load(self, model: keras.Model, checkpoint: str) -> None:
        """Loads a checkpoint holding every weight of `model` (the loop's own, or a release's)."""

    def train_dataset(self) -> tuple[tf.data.Dataset, int]:
        """Endless shuffled training batches as (features, labels), what the model's `fit`
        takes, and the number of examples."""

    def dev_scorer(self) -> DevScorer:
        """The dev set, encoded once, as a scorer."""

    def check_predict_inputs(self) -> None:
        """Raises before training when the prediction inputs are missing."""

    def predict_inputs(self) -> object:
        """Reads and encodes the examples to predict (anything `predict` takes)."""

    def predict(self, model: keras.Model, checkpoint: str, inputs: object) -> dict[str, str]:
        """Writes the predictions of `inputs` into `output_dir`; returns {what: path}."""

    def export(self, model: keras.Model, checkpoint: str, albert_config: AlbertConfig) -> str:
        """Writes the serving bundle into `export_dir`; returns the model file's path."""

    def checkpoint_to_score(self) -> str | None:
        """What a job that does not train scores, predicts and exports: a checkpoint of its
        own, or None for the checkpoints that training wrote into `output_dir`."""


class TaskBase:
    """Base of the `Task` implementations; subclasses add the model, data, scoring and export.

    Args:
        settings: the job's settings (with `spm_model_file` and `do_lower_case`).
        tokenizer: an already loaded tokenizer to share; None loads it on first use.

    Example:
        >>> class MyTask(TaskBase):
        ...     name = "mine"
    """

    def __init__(self, settings, tokenizer: AlbertTokenizer | None = None):
        self.settings = settings
        self._tokenizer = tokenizer

    @property
    def tokenizer(self) -> AlbertTokenizer:
        """The job's tokenizer, loaded on first use."""
        if self._tokenizer is None:
            self._tokenizer = AlbertTokenizer(
                self.settings.spm_model_file, do_lower_case=self.settings.do_lower_case
            )
        return self._tokenizer

    def initialize(self, model: keras.Model, checkpoint: str) -> bool:
        """Pretrained backbone (TF1, `.keras` or a transformers folder), and the head when the
        checkpoint holds it with the task's shapes; returns whether it did."""
        if not is_hf_folder(checkpoint):
            return initialize_task_model(model, checkpoint)
        head_loaded = initialize_from_hf(model, checkpoint)
        logging.info(
            "Initialised the backbone%s from %s",
            " and head" if head_loaded else " (the head: fresh)",
            checkpoint,
        )
        return head_loaded

    def checkpoint_to_score(self) -> str | None:
        """The job's initial weights (`init_checkpoint` or `hf_model`), as the original
        `run_squad*.py` and `run_race.py` predicted from `init_checkpoint`; None without."""
        return initial_weights(self.settings)

    def load(self, model: keras.Model, checkpoint: str) -> None:
        """Every weight, head included, from a TF1-named checkpoint (ours or the original's) or
        a transformers folder."""
        if is_hf_folder(checkpoint):
            initialize_from_hf(model, checkpoint, require_head=True)
        else:
            load_task_checkpoint(model, checkpoint)
