"""Keras callbacks of a training run (`albert_tf.training.harness`): the step count, checkpoints,
progress with ETA, summaries, stop rules."""

from __future__ import annotations

import math
import time

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from albert_tf import stopping


class NonFiniteLossError(RuntimeError):
    """The training loss became NaN or infinite."""


class StepCounter(keras.callbacks.Callback):
    """The steps trained (the original's `global_step`): the micro-batches taken from the data
    since training began, over the micro-batches per step, added to the step it began at.

    Counted from the epoch and batch Keras reports rather than from the optimizer's `iterations`:
    under fp16 loss scaling a step whose gradients overflow is skipped by the optimizer (its
    `iterations` stay) although its batches were taken, so checkpoint names, the end of training
    and where a resume reads on follow the batches. Put it first among the callbacks: the others
    read `step`. (Without fp16 overflows both counts agree.)

    Args:
      start_step: the step training begins (or resumes) at.
      micro_batches_per_epoch: the `steps_per_epoch` given to `fit`.
      micro_batches_per_step: the gradient accumulation steps.

    Example:
      counter = StepCounter(done, save_steps * accumulation, accumulation)
      model.fit(..., callbacks=[counter, StopAtStep(num_train_steps, counter)])
    """

    def __init__(self, start_step: int, micro_batches_per_epoch: int, micro_batches_per_step: int):
        super().__init__()
        self.step = start_step
        self._start_step = start_step
        self._per_epoch, self._per_step = micro_batches_per_epoch, micro_batches_per_step
        self._first_epoch: int | None = None

    def on_epoch_begin(self, epoch, logs=None):
        if self._first_epoch is None:
            self._first_epoch = epoch
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        # With steps_per_execution > 1 Keras reports the last batch of each execution.
        taken = (self._epoch - self._first_epoch) * self._per_epoch + batch + 1
        self.step = self._start_step + taken // self._per_step


class CheckpointSaver(keras.callbacks.Callback):
    """Saves a checkpoint numbered by the step at the end of every epoch (an epoch is
    `save_checkpoints_steps` steps), unless the weights stopped being finite.

    Args:
      checkpoints: the run's `harness.CheckpointFormat` (its `save(step)` and `latest()`).
      counter: the run's step counter.
    """

    def __init__(self, checkpoints, counter: StepCounter):
        super().__init__()
        self.checkpoints, self.counter = checkpoints, counter

    def on_epoch_end(self, epoch, logs=None):
        self.save()

    def save(self) -> str | None:
        step = self.counter.step
        # A diverged update can make weights inf while the loss of that step was still finite:
        # never let such weights replace the last good checkpoint.
        if not all(bool(tf.reduce_all(tf.math.is_finite(v.value))) for v in self.model.weights):
            raise NonFiniteLossError(
                f"weights became non-finite at step {step}; not saving. The last good checkpoint "
                f"is {self.checkpoints.latest() or '(none saved yet)'}"
            )
        with stopping.uninterruptible():  # a signal stops the run after the save, not in it
            path = self.checkpoints.save(step)
        if path:
            logging.info("saved checkpoint %s", path)
        return path


class StopAtStep(keras.callbacks.Callback):
    """Stops `fit` once `counter` reaches `num_train_steps`."""

    def __init__(self, num_train_steps: int, counter: StepCounter):
        super().__init__()
        self.num_train_steps, self.counter = num_train_steps, counter

    def on_train_batch_end(self, batch, logs=None):
        if self.counter.step >= self.num_train_steps:
            self.model.stop_training = True


class TrainingMonitor(keras.callbacks.Callback):
    """Progress line with ETA, TensorBoard scalars, and the non-finite-loss stop.

    Scalars: the model's metrics over the steps since the last report (the loss; pretraining's
    MLM/SOP loss and accuracy, a classifier's accuracy, ...), learning rate, gradient norm (before
    clipping, when the optimizer reports it) and examples/s, every `log_every_steps` steps of
    `counter`. The line shows the loss and `shown_metrics` ({log name: label}).
    """

    def __init__(
        self,
        counter: StepCounter,
        num_train_steps: int,
        examples_per_step: int,
        log_every_steps: int,
        summary_dir: str | None,
        last_checkpoint=lambda: None,
        shown_metrics: dict[str, str] | None = None,
    ):
        super().__init__()
        self.counter = counter
        self.num_train_steps = num_train_steps
        self.examples_per_step = examples_per_step
        self.log_every_steps = max(1, log_every_steps)
        self.writer = tf.summary.create_file_writer(summary_dir) if summary_dir else None
        self.last_checkpoint = last_checkpoint
        self.shown_metrics = dict(shown_metrics or {})
        self.history: list[dict] = []  # the scalars of every report, for callers and tests

    def on_train_begin(self, logs=None):
        self._start_time = self._last_time = time.perf_counter()
        self._start_step = self._last_step = self.counter.step

    def on_train_batch_end(self, batch, logs=None):
        logs = logs or {}
        step = self.counter.step
        loss = float(logs.get("loss", 0.0))
        if not math.isfinite(loss):
            raise NonFiniteLossError(
                f"training loss became {loss} at step {step}; stopping. The last good "
                f"checkpoint is {self.last_checkpoint() or '(none saved yet)'}; lower the "
                f"learning rate or use --mixed_precision=none and resume from it."
            )
        if step - self._last_step >= self.log_every_steps or step >= self.num_train_steps:
            self._report(step, logs)

    def _report(self, step: int, logs: dict) -> None:
        now = time.perf_counter()
        examples_per_second = (
            (step - self._last_step) * self.examples_per_step / max(now - self._last_time, 1e-9)
        )
        steps_per_second = (step - self._start_step) / max(now - self._start_time, 1e-9)
        remaining = (self.num_train_steps - step) / max(steps_per_second, 1e-9)
        optimizer = self.model.optimizer
        learning_rate = float(
            optimizer.learning_rate.numpy()
            if hasattr(optimizer.learning_rate, "numpy")
            else optimizer.learning_rate
        )
        scalars = {k: float(v) for k, v in logs.items() if np.ndim(v) == 0}
        scalars.update(learning_rate=learning_rate, examples_per_second=examples_per_second)
        gradient_norm = getattr(optimizer, "gradient_norm", None)
        if gradient_norm is not None:
            scalars["gradient_norm"] = float(gradient_norm.numpy())
        self.history.append({"step": step, **scalars})
        if self.writer is not None:
            with self.writer.as_default(step=step):
                for name, value in scalars.items():
                    tf.summary.scalar(name, value)
            self.writer.flush()
        done = min(step / self.num_train_steps, 1.0)
        bar = "#" * int(done * 24) + "." * (24 - int(done * 24))
        shown = "".join(
            f"  {label} {scalars[name]:.4f}"
            for name, label in self.shown_metrics.items()
            if name in scalars
        )
        logging.info(
            "[%s] %5.1f%% step %d/%d  loss %.4f%s  lr %.3g  %.1f ex/s  ETA %s",
            bar,
            100 * done,
            step,
            self.num_train_steps,
            scalars.get("loss", float("nan")),
            shown,
            learning_rate,
            examples_per_second,
            _duration(remaining),
        )
        self._last_time, self._last_step = now, step
        # Keras's metrics are means since the epoch began, and an epoch here is a checkpoint
        # interval: left alone, a loss that turns back up mid-interval barely moves the curve
        # until the next checkpoint. Reset, each report covers its own steps only.
        self.model.reset_metrics()


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return (
        f"{seconds // 3600}h{seconds // 60 % 60:02d}m{seconds % 60:02d}s"
        if seconds >= 3600
        else f"{seconds // 60}m{seconds % 60:02d}s"
    )
