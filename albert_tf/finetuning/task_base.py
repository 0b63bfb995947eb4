"""What every fine-tuning task shares: its settings, a lazily loaded tokenizer, and checkpoint
loading through the one task-model loader (`albert_tf.checkpoints.task_heads`)."""

from __future__ import annotations

import keras

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

    def initialize(self, model: keras.Model, checkpoint: str) -> None:
        """Pretrained backbone (TF1 or `.keras`), and the head when the checkpoint holds it."""
        initialize_task_model(model, checkpoint)

    def load(self, model: keras.Model, checkpoint: str) -> None:
        """Every weight, head included, from a TF1-named checkpoint (ours or the original's)."""
        load_task_checkpoint(model, checkpoint)
