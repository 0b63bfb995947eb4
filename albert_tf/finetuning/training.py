"""Training a fine-tuning task: Keras `fit`, a TF1-named checkpoint every N steps, each scored.

Training uses the original AdamW (or LAMB) and schedule, saving `model.ckpt-<step>` every
`save_checkpoints_steps` and at the last step, its optimizer state just before it
(`albert_tf.finetuning.resume`); with an evaluator each checkpoint is scored on dev as soon as it
is saved. Running the same job again in the same `output_dir` resumes from its last checkpoint.

Under MultiWorkerMirroredStrategy every worker trains and restores from the chief's `output_dir`
(a filesystem all workers share, as for pretraining); only the chief writes checkpoints and
scores them, on a local copy of the model so that no other worker has to join its predictions.
A task's training-feature cache may be built by every worker at once: its bytes are the same on
each and each file is written atomically, so the last rename wins with identical content.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import tempfile
import time

import keras
import tensorflow as tf
from absl import logging

from albert_tf.checkpoints.tf1 import save_tf1_checkpoint
from albert_tf.config import AlbertConfig
from albert_tf.finetuning import resume
from albert_tf.finetuning.selection import CHECKPOINT_PREFIX, CheckpointEvaluator
from albert_tf.finetuning.task import LoopSettings, Task
from albert_tf.training.callbacks import StepCounter
from albert_tf.training.distribution import check_same_on_every_worker, is_chief, is_multi_worker
from albert_tf.training.optimization import create_optimizer
from albert_tf.training.pretraining_options import MIXED_PRECISION_POLICIES


@contextlib.contextmanager
def precision_policy(config: LoopSettings):
    """Keras's dtype policy set to the job's `mixed_precision` (default "none") inside."""
    name = getattr(config, "mixed_precision", "none")
    if name not in MIXED_PRECISION_POLICIES:
        raise ValueError(
            f"mixed_precision must be one of {sorted(MIXED_PRECISION_POLICIES)}, got {name!r}"
        )
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(MIXED_PRECISION_POLICIES[name])
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


class _CheckpointEveryN(keras.callbacks.Callback):
    """Ends training at `train_step`; at each epoch end (= every N steps) saves the optimizer's
    state, then (on the chief) the TF1 checkpoint, then evaluates it — on `scoring_model`, with
    the trained weights copied in, when one is given. Steps are `counter`'s (batches taken, so
    an fp16 update skipped for overflowing still counts), which must come first in `fit`.
    """

    def __init__(
        self,
        config: LoopSettings,
        evaluator: CheckpointEvaluator | None,
        optimizer_state: resume.OptimizerState,
        counter: StepCounter,
        chief: bool = True,
        scoring_model: keras.Model | None = None,
    ):
        super().__init__()
        self.config, self.evaluator = config, evaluator
        self.optimizer_state, self.counter = optimizer_state, counter
        self.chief, self.scoring_model = chief, scoring_model
        self.saved: list[tuple[int, str]] = []
        self._start, self._start_step = time.time(), counter.step

    def on_train_batch_end(self, batch, logs=None):
        step = self.counter.step
        if step % self.config.log_every_steps == 0 or step == self.config.train_step:
            rate = (step - self._start_step) / max(time.time() - self._start, 1e-9)
            logging.info(
                "step %d/%d loss %.4f (mean since last checkpoint) lr %.3g, %.2f steps/s",
                step,
                self.config.train_step,
                float(logs.get("loss", math.nan)),
                float(self.model.optimizer.learning_rate),
                rate,
            )
        if step >= self.config.train_step:
            self.model.stop_training = True

    def on_epoch_end(self, epoch, logs=None):
        step = self.counter.step
        # The optimizer's state first: a model.ckpt-<step> always has its state beside it.
        self.optimizer_state.save(step)
        if not self.chief:
            return
        prefix = save_tf1_checkpoint(
            self.model,
            os.path.join(self.config.output_dir, f"{CHECKPOINT_PREFIX}-{step}"),
            global_step=step,
        )
        self.saved.append((step, prefix))
        if self.evaluator is not None:
            _score(self.evaluator, self.model, self.scoring_model, step, prefix)


def _score(evaluator, model, scoring_model, step: int, prefix: str) -> None:
    if scoring_model is not None:
        scoring_model.set_weights(model.get_weights())
        model = scoring_model
    evaluator.evaluate(model, step, prefix)


def train(
    task: Task,
    albert_config: AlbertConfig,
    evaluator: CheckpointEvaluator | None = None,
    strategy: tf.distribute.Strategy | None = None,
) -> list[tuple[int, str]]:
    """Fine-tunes from `init_checkpoint` (random init without one), or resumes from the last
    checkpoint in `output_dir`; returns the checkpoints saved by this call (none on a
    multi-worker job's other workers, which save only their optimizer state, into scratch).

    With an evaluator, each checkpoint is scored right after it is saved (the original ran a
    separate eval job that polled the checkpoints); a resumed run takes up the earlier scores.
    """
    config = task.settings
    strategy = strategy or tf.distribute.get_strategy()
    replicas = strategy.num_replicas_in_sync
    if config.train_batch_size % replicas:
        raise ValueError(
            f"train_batch_size={config.train_batch_size} must divide evenly over {replicas} replicas"
        )
    chief = is_chief(strategy)
    # The other workers save too (a checkpoint write may join collectives) but into scratch.
    save_dir = config.output_dir if chief else tempfile.mkdtemp(prefix="albert_worker_")
    try:
        return _train(task, albert_config, evaluator if chief else None, strategy, save_dir, chief)
    finally:
        if not chief:
            shutil.rmtree(save_dir, ignore_errors=True)


def _train(task, albert_config, evaluator, strategy, save_dir, chief) -> list[tuple[int, str]]:
    config = task.settings
    resumed = resume.resume_point(task)
    check_same_on_every_worker(
        strategy,
        resumed[0] if resumed else 0,
        f"the step to resume from: every worker must see the chief's output_dir {config.output_dir}",
    )
    if chief:
        os.makedirs(config.output_dir, exist_ok=True)
        albert_config.to_json_file(os.path.join(config.output_dir, "albert_config.json"))
    with precision_policy(config):
        keras.utils.set_random_seed(config.seed)
        dataset, num_examples = task.train_dataset()
        if is_multi_worker(strategy):
            # A task's records are usually one file: each worker reads it all and keeps its
            # part of every global batch, so the batches are those of one device.
            options = tf.data.Options()
            options.experimental_distribute.auto_shard_policy = (
                tf.data.experimental.AutoShardPolicy.DATA
            )
            dataset = dataset.with_options(options)
        with strategy.scope():
            model = task.build_model(albert_config)
            model.compile(
                optimizer=create_optimizer(
                    config.learning_rate,
                    config.train_step,
                    config.warmup_step,
                    optimizer=config.optimizer,
                ),
                jit_compile=config.jit_compile,
            )
            model.optimizer.build(model.trainable_variables)
        # Scoring on a model outside the strategy: its predictions need no other worker.
        scoring_model = None
        if evaluator is not None and is_multi_worker(strategy):
            scoring_model = task.build_model(albert_config)
        optimizer_state = resume.OptimizerState(model.optimizer, config.output_dir, save_dir)
        done = 0
        if resumed is not None:
            done, prefix = resumed
            task.load(model, prefix)
            optimizer_state.restore(done)
            logging.info("Resuming %s from %s (step %d)", task.name, prefix, done)
            if evaluator is not None:
                evaluator.restore(done)
                if done not in evaluator.steps:  # saved, then stopped before its evaluation
                    _score(evaluator, model, scoring_model, done, prefix)
            dataset = dataset.skip(done)  # the batches an uninterrupted run would take next
        elif config.init_checkpoint:
            task.initialize(model, config.init_checkpoint)
        else:
            logging.warning("No init_checkpoint: fine-tuning a randomly initialised model")
        if chief:
            resume.record_settings(task)
        if done >= config.train_step:
            logging.info("Already at step %d of %d: nothing to train", done, config.train_step)
            return []
        logging.info(
            "Training %s: %d examples, steps %d..%d, batch %d over %d replica(s), lr %g, warmup %d",
            task.name,
            num_examples,
            done,
            config.train_step,
            config.train_batch_size,
            strategy.num_replicas_in_sync,
            config.learning_rate,
            config.warmup_step,
        )
        counter = StepCounter(done, config.save_checkpoints_steps, 1)
        callback = _CheckpointEveryN(
            config, evaluator, optimizer_state, counter, chief, scoring_model
        )
        # One epoch per checkpoint interval; the callback stops the last one at `train_step`.
        model.fit(
            dataset,
            epochs=math.ceil(config.train_step / config.save_checkpoints_steps),
            initial_epoch=done // config.save_checkpoints_steps,
            steps_per_epoch=config.save_checkpoints_steps,
            callbacks=[counter, callback],
            shuffle=False,
            verbose=0,
        )
    return callback.saved
