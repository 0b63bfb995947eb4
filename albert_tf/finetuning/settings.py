"""The settings every fine-tuning task shares (the original scripts' flags of the same names and
defaults): a task's settings dataclass adds its own to `FinetuneSettings`. No TensorFlow: the CLIs
define their flags from here."""

from __future__ import annotations

import dataclasses

from albert_tf.settings import MIXED_PRECISIONS, OPTIMIZERS, setting


@dataclasses.dataclass(kw_only=True)
class FinetuneSettings:
    """What `run_classifier.py`, `run_squad_v*.py` and `run_race.py` all have, keyword-only (a
    task's own fields come first, its required ones positional).

    Args:
      albert_config_file, init_checkpoint, ...: the original flags of the same names.

    Example:
      @dataclasses.dataclass
      class MyTaskConfig(FinetuneSettings):
          output_dir: str = setting(help="Where results go.", path=OUTPUT_DIR)
    """

    albert_config_file: str | None = setting(
        None,
        "albert_config.json of the model. Optional when --init_checkpoint is a .keras file or a "
        "TF1 checkpoint with albert_config.json beside it, or for scoring an --output_dir that "
        "training wrote.",
    )
    init_checkpoint: str | None = setting(
        None,
        "Initial weights: an original TF1 checkpoint (prefix or directory; pretraining or "
        "fine-tuned), ours (TF1 export), or one of our .keras files. The task's head is loaded "
        "too when it has the task's shape.",
    )
    do_lower_case: bool = setting(
        True, "Lowercase the text (the released English models are uncased)."
    )
    train_batch_size: int = setting(32, "Batch size for training.")
    predict_batch_size: int = setting(8, "Batch size for prediction.")
    optimizer: str = setting("adamw", "The original optimizers.", choices=OPTIMIZERS)
    keep_all_checkpoints: bool = setting(
        False,
        "Keep every checkpoint; by default those neither the best nor the last are deleted, as "
        "the original did.",
    )
    jit_compile: bool = setting(False, "XLA-compile training.")
    mixed_precision: str = setting("none", "Compute precision.", choices=MIXED_PRECISIONS)
    seed: int = setting(12345, "Seed of initialisation, dropout and shuffling.", flag="random_seed")
    log_every_steps: int = setting(50, "Log loss and learning rate every this many steps.")
