"""Checks every fine-tuning job's settings share (no TensorFlow: the CLIs check flags first)."""

from __future__ import annotations

from collections.abc import Iterable

# The sizes every task's settings hold for the loop; each must be > 0.
LOOP_SIZES = (
    "max_seq_length",
    "train_batch_size",
    "predict_batch_size",
    "save_checkpoints_steps",
    "log_every_steps",
)


def check_positive(settings: object, names: Iterable[str]) -> None:
    """Raises ValueError naming the first setting of `names` that is not > 0."""
    for name in names:
        if getattr(settings, name) <= 0:
            raise ValueError(f"{name} must be > 0, got {getattr(settings, name)}")


def check_warmup(warmup_step: int, train_step: int) -> None:
    """Raises ValueError unless 0 <= warmup_step <= train_step."""
    if not 0 <= warmup_step <= train_step:
        raise ValueError(f"warmup_step must be in [0, train_step={train_step}], got {warmup_step}")
