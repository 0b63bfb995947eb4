"""Resuming an interrupted fine-tuning run from its last `model.ckpt-<step>`.

Each `model.ckpt-<step>` holds the model's weights under the original TF1 names; the optimizer's
state at that step (AdamW/LAMB moments and the step counter) is saved just before it, as a
tf.train checkpoint `train_state/optimizer-<step>`. Running the same job again in the same
`output_dir` loads both and trains on from that step. `train_state/settings.json` records the
settings that shape the trajectory; a run with other settings is refused rather than silently
mixed with the old one.
"""

from __future__ import annotations

import json
import os

import keras
import tensorflow as tf
from absl import logging

from albert_tf.finetuning.selection import CHECKPOINT_PREFIX, list_checkpoints
from albert_tf.finetuning.task import Task
from albert_tf.io import refuse_unknown_keys, write_json

TRAIN_STATE_DIR = "train_state"
SETTINGS_FILE = "settings.json"
OPTIMIZER_PREFIX = "optimizer"
# The settings a resumed run must share with the run it continues (they decide the schedule, the
# batches and the optimizer's variables).
RESUME_SETTINGS = (
    "train_step",
    "warmup_step",
    "learning_rate",
    "train_batch_size",
    "optimizer",
    "max_seq_length",
    "seed",
    "mixed_precision",
)


def run_settings(task: Task) -> dict:
    """The task's name and its `RESUME_SETTINGS` (`mixed_precision` defaults to "none")."""
    settings = {"task": task.name}
    for name in RESUME_SETTINGS:
        default = "none" if name == "mixed_precision" else None
        settings[name] = getattr(task.settings, name, default)
    return settings


def resume_point(task: Task) -> tuple[int, str] | None:
    """(step, prefix) of the last `model.ckpt-<step>` in `output_dir` to train on from, or None
    when there is none.

    Raises FileExistsError when the checkpoints there were not written by a run of this job with
    the same settings (`train_state/settings.json`): resuming them would mix two trajectories.
    """
    output_dir = task.settings.output_dir
    found = list_checkpoints(output_dir)
    if not found:
        return None
    path = os.path.join(output_dir, TRAIN_STATE_DIR, SETTINGS_FILE)
    if not os.path.isfile(path):
        raise FileExistsError(
            f"{output_dir} already holds {CHECKPOINT_PREFIX}-* checkpoints that no resumable "
            f"run wrote (no {TRAIN_STATE_DIR}/{SETTINGS_FILE}); use a new output_dir"
        )
    with open(path, encoding="utf-8") as f:
        previous = json.load(f)
    current = run_settings(task)
    refuse_unknown_keys(previous, current, path)
    differences = [
        f"{name} {previous.get(name)!r} then, {value!r} now"
        for name, value in current.items()
        if previous.get(name) != value
    ]
    if differences:
        raise FileExistsError(
            f"{output_dir} already holds {CHECKPOINT_PREFIX}-* checkpoints of a run with other "
            f"settings ({'; '.join(differences)}); rerun with the same settings to resume it, or "
            "use a new output_dir"
        )
    return found[-1]


def record_settings(task: Task) -> None:
    """Writes `train_state/settings.json` for a later `resume_point` check."""
    directory = os.path.join(task.settings.output_dir, TRAIN_STATE_DIR)
    os.makedirs(directory, exist_ok=True)
    write_json(os.path.join(directory, SETTINGS_FILE), run_settings(task))


class OptimizerState:
    """The optimizer's variables saved as `train_state/optimizer-<step>` (the last two kept).

    Args:
      optimizer: the compiled model's optimizer, built (its slots exist).
      output_dir: the run's output directory (restored from).
      save_dir: where `save` writes, when not `output_dir` (a multi-worker job's other workers
        restore from the chief's `output_dir` but save into a scratch directory).

    Example:
      state = OptimizerState(model.optimizer, "out/squad")
      state.save(1000)            # before model.ckpt-1000 is written
      state.restore(1000)         # True: moments and step are those of step 1000
    """

    def __init__(self, optimizer, output_dir: str, save_dir: str | None = None):
        self.optimizer = optimizer
        self.directory = os.path.join(output_dir, TRAIN_STATE_DIR)
        self._checkpoint = tf.train.Checkpoint(optimizer=optimizer)
        # Two, so that a crash between this save and the model's leaves the state of the model's
        # last checkpoint in place.
        self._manager = tf.train.CheckpointManager(
            self._checkpoint,
            os.path.join(save_dir or output_dir, TRAIN_STATE_DIR),
            max_to_keep=2,
            checkpoint_name=OPTIMIZER_PREFIX,
        )

    def save(self, step: int) -> str:
        """Saves the optimizer's variables as of `step`; returns the prefix."""
        return self._manager.save(checkpoint_number=step)

    def restore(self, step: int) -> bool:
        """Loads the state saved at `step`; without one, sets the step counter only (the moments
        start again from zero), logs it and returns False."""
        prefix = os.path.join(self.directory, f"{OPTIMIZER_PREFIX}-{step}")
        if tf.io.gfile.exists(prefix + ".index"):
            self._checkpoint.restore(prefix).assert_existing_objects_matched()
            restored = int(self.optimizer.iterations.numpy())
            # Under loss scaling the optimizer skips the steps whose gradients overflowed.
            skips_steps = isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer)
            if restored > step or (restored != step and not skips_steps):
                raise ValueError(f"{prefix} holds step {restored}, expected {step}")
            return True
        logging.warning(
            "No optimizer state %s: resuming at step %d with the optimizer moments reset",
            prefix,
            step,
        )
        self.optimizer.iterations.assign(step)
        return False
