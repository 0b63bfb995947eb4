"""The one training harness of pretraining (`albert_tf.training.pretraining`) and fine-tuning
(`albert_tf.finetuning.training`): precision, strategy, compile, resume, `fit`, checkpoints.

A run builds and compiles its model under the strategy (`compile_model`: the original LAMB /
AdamW with its schedule, its dtype policy passed to the model by the caller), resumes from its
checkpoint format (`resume`: the step and the weights and optimizer state saved with it), then
`train`s from that step: Keras `fit` with one epoch per checkpoint interval, steps counted as
batches taken (`callbacks.StepCounter`), a checkpoint every `save_checkpoints_steps` and at the
end, progress lines, TensorBoard scalars and the non-finite-loss stop (`callbacks`). The data
source is asked for the batches from the step resumed at, so a resume reads on where the data
stopped. How checkpoints are written is the run's own: a `CheckpointFormat`.

A stop request (`albert_tf.stopping`: a signal) ends the batches, so a device loop of many steps
(`steps_per_execution`) ends after the step under way rather than after all of them; a checkpoint
being written is finished first.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Mapping
from typing import Protocol

import keras
import tensorflow as tf
from absl import logging

from albert_tf import stopping
from albert_tf.training.callbacks import CheckpointSaver, StepCounter, StopAtStep, TrainingMonitor
from albert_tf.training.distribution import check_same_on_every_worker
from albert_tf.training.optimization import create_optimizer

# `mixed_precision` settings (the CLIs' `--mixed_precision`) and the Keras dtype policy of each.
MIXED_PRECISION_POLICIES = {"none": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}


def dtype_policy(mixed_precision: str | None) -> str:
    """The Keras dtype policy a model is built with for a `mixed_precision` setting (None:
    "none"); ValueError naming the choices for another."""
    name = mixed_precision or "none"
    if name not in MIXED_PRECISION_POLICIES:
        raise ValueError(
            f"mixed_precision must be one of {sorted(MIXED_PRECISION_POLICIES)}, got {name!r}"
        )
    return MIXED_PRECISION_POLICIES[name]


class CheckpointFormat(Protocol):
    """How a run saves and restores what it needs to resume (weights, optimizer, step)."""

    def restore(self) -> int:
        """Loads the last checkpoint, if any; returns its step (0: none, a fresh start)."""

    def save(self, step: int) -> str | None:
        """Saves the state at `step`; returns what was written (None: already saved)."""

    def latest(self) -> str | None:
        """The last checkpoint saved or restored (for messages), or None."""


class TrainStateCheckpoints:
    """Weights, optimizer slots and step as tf.train checkpoints `<dir>/checkpoints/ckpt-<step>`.

    `CheckpointManager` writes the files first and the `checkpoint` state file last (by rename),
    so a killed run never points at a partial save.

    Args:
      model: the compiled model (its optimizer built).
      save_dir: the run's directory to save into.
      restore_dir: the directory restored from (default: `save_dir`): every worker of a
        multi-worker job restores the chief's checkpoints and saves into its own scratch one.
      max_to_keep: checkpoints kept.

    Example:
      checkpoints = TrainStateCheckpoints(model, "runs/base", max_to_keep=5)
      step = resume(checkpoints, strategy, "the step to resume from")
    """

    def __init__(self, model, save_dir: str, restore_dir: str | None = None, max_to_keep=5):
        self._checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
        self._manager = tf.train.CheckpointManager(
            self._checkpoint, os.path.join(save_dir, "checkpoints"), max_to_keep=max_to_keep
        )
        self._restore_dir = os.path.join(restore_dir or save_dir, "checkpoints")
        self._latest: str | None = None

    def restore(self) -> int:
        self._latest = tf.train.latest_checkpoint(self._restore_dir)
        if not self._latest:
            return 0
        step = int(self._latest.rsplit("-", 1)[1])  # numbered by the steps trained
        self._checkpoint.restore(self._latest).assert_existing_objects_matched()
        logging.info("Resuming from %s at step %d", self._latest, step)
        return step

    def save(self, step: int) -> str | None:
        latest = self._manager.latest_checkpoint
        if latest and latest.endswith(f"-{step}"):
            return None
        self._latest = self._manager.save(checkpoint_number=step)
        return self._latest

    def latest(self) -> str | None:
        return self._manager.latest_checkpoint or self._latest


@dataclasses.dataclass
class Schedule:
    """How far a run trains and how often it saves and reports.

    Args:
      num_train_steps: the step training ends at.
      save_checkpoints_steps: steps between checkpoints (one Keras epoch).
      examples_per_step: the global batch of one step (for examples/s).
      log_every_steps: steps between progress lines and TensorBoard scalars.
      micro_batches_per_step: batches taken per step (gradient accumulation).
      shown_metrics: {log name: short label} of the metrics on the progress line, after the loss.
    """

    num_train_steps: int
    save_checkpoints_steps: int
    examples_per_step: int
    log_every_steps: int = 100
    micro_batches_per_step: int = 1
    shown_metrics: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, settings, num_train_steps: int, **fields) -> Schedule:
        """The schedule of a run's settings, which pretraining and fine-tuning name alike (the
        original flags `save_checkpoints_steps`, `train_batch_size`, and our `log_every_steps`
        and, when it has them, `gradient_accumulation_steps`); other `fields` as given."""
        return cls(
            num_train_steps,
            settings.save_checkpoints_steps,
            settings.train_batch_size,
            settings.log_every_steps,
            getattr(settings, "gradient_accumulation_steps", 1),
            **fields,
        )


def compile_model(
    build_model: Callable[[], keras.Model],
    strategy: tf.distribute.Strategy,
    *,
    jit_compile: bool | None,
    steps_per_execution: int = 1,
    **optimizer_settings,
) -> keras.Model:
    """`build_model()` under `strategy`, compiled with `create_optimizer(**optimizer_settings)`
    (the original LAMB / AdamW and schedule; under a "mixed_float16" model Keras wraps it in
    dynamic loss scaling) and its optimizer built, so a checkpoint can restore its slots."""
    with strategy.scope():
        model = build_model()
        model.compile(
            optimizer=create_optimizer(**optimizer_settings),
            jit_compile=jit_compile,
            steps_per_execution=steps_per_execution,
        )
        model.optimizer.build(model.trainable_variables)
    return model


def resume(checkpoints: CheckpointFormat, strategy: tf.distribute.Strategy, what: str) -> int:
    """Restores the last checkpoint; returns its step, the same on every worker (ValueError,
    with `what` in its message, when workers would resume from different steps)."""
    step = checkpoints.restore()
    check_same_on_every_worker(strategy, step, what)
    return step


def train(
    model: keras.Model,
    make_dataset: Callable[[int, Callable[[tf.data.Dataset], tf.data.Dataset]], object],
    start_step: int,
    schedule: Schedule,
    checkpoints: CheckpointFormat,
    summary_dir: str | None = None,
) -> tuple[list[dict], int]:
    """Trains from `start_step` to `schedule.num_train_steps` on `make_dataset(start_step,
    until_stop)` (the batches from that step on, each tf.data.Dataset of them, per replica where
    the source builds one per replica, passed through `until_stop`, which ends it once a stop is
    requested), saving through `checkpoints` every `save_checkpoints_steps` and at the end;
    returns the progress reports (step, loss, learning rate, ...) and the step reached. Stops
    with `callbacks.NonFiniteLossError` when the loss or the weights to be saved stop being
    finite."""
    s = schedule
    if start_step >= s.num_train_steps:
        logging.info("Already at step %d of %d: nothing to train", start_step, s.num_train_steps)
        return [], start_step
    micro_batches_per_epoch = s.save_checkpoints_steps * s.micro_batches_per_step
    counter = StepCounter(start_step, micro_batches_per_epoch, s.micro_batches_per_step)
    saver = CheckpointSaver(checkpoints, counter)
    monitor = TrainingMonitor(
        counter,
        s.num_train_steps,
        s.examples_per_step,
        s.log_every_steps,
        summary_dir,
        last_checkpoint=checkpoints.latest,
        shown_metrics=s.shown_metrics,
    )
    stop = tf.Variable(stopping.stop_requested(), trainable=False, name="stop_requested")
    forget_stop_hook = stopping.on_stop_request(lambda: stop.assign(True))

    def until_stop(dataset: tf.data.Dataset) -> tf.data.Dataset:
        # Read as each batch is taken (the last transformation, after any prefetch), so the
        # loop ends after the step under way.
        return dataset.take_while(lambda *_: tf.logical_not(stop))

    try:
        # shuffle=False: the data is shuffled by the input pipeline; Keras ignores `shuffle` for
        # a dataset and only warns that it does.
        model.fit(
            make_dataset(start_step, until_stop),
            epochs=math.ceil(s.num_train_steps / s.save_checkpoints_steps),
            initial_epoch=start_step // s.save_checkpoints_steps,
            steps_per_epoch=micro_batches_per_epoch,
            callbacks=[counter, monitor, StopAtStep(s.num_train_steps, counter), saver],
            verbose=0,
            shuffle=False,
        )
    finally:
        forget_stop_hook()
    saver.save()  # the last, possibly partial, interval
    return monitor.history, counter.step
