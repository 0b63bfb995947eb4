"""What every fine-tuning task shares: its settings, a lazily loaded tokenizer, and checkpoint
loading through the one task-model loader (`albert_tf.checkpoints.task_heads`), or from a
transformers folder (`albert_tf.checkpoints.hf`)."""

from __future__ import annotations

import keras
from absl import logging

from albert_tf.checkpoints.hf import initialize_from_hf, is_hf_folder
from albert_tf.checkpoints.task_heads import initialize_task_model, load_task_checkpoint
from albert_tf.text.tokenization import AlbertTokenizer


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

    def load(self, model: keras.Model, checkpoint: str) -> None:
        """Every weight, head included, from a TF1-named checkpoint (ours or the original's) or
        a transformers folder."""
        if is_hf_folder(checkpoint):
            initialize_from_hf(model, checkpoint, require_head=True)
        else:
            load_task_checkpoint(model, checkpoint)
