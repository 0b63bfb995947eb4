"""Training a fine-tuning task on the shared training harness (`albert_tf.training.harness`).

`prepare` does what must come first (the checks a resume needs, the seed); the loop then builds
the task's training batches and hands them to `train`.

Training uses the original AdamW (or LAMB) and schedule, saving `model.ckpt-<step>` every
`save_checkpoints_steps` and at the last step, its optimizer state just before it
(`albert_tf.finetuning.resume`); with an evaluator each checkpoint is scored on dev as soon as it
is saved. Running the same job again in the same `output_dir` resumes from its last checkpoint.
Progress lines, TensorBoard scalars (`<output_dir>/logs/train`) and the stop on a non-finite loss
are the harness's, as for pretraining; the model is built with the job's `mixed_precision`
as its dtype policy.

Under MultiWorkerMirroredStrategy every worker trains and restores from the chief's `output_dir`
(a filesystem all workers share, as for pretraining); only the chief writes checkpoints and
scores them, on a local copy of the model so that no other worker has to join its predictions.
A task's training-feature cache may be built by every worker at once: its bytes are the same on
each and each file is written atomically, so the last rename wins with identical content.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import keras
import tensorflow as tf
from absl import logging

from albert_tf.checkpoints.tf1 import save_tf1_checkpoint
from albert_tf.config import AlbertConfig
from albert_tf.finetuning import resume
from albert_tf.finetuning.selection import CHECKPOINT_PREFIX, CheckpointEvaluator
from albert_tf.finetuning.settings import FinetuneSettings
from albert_tf.finetuning.task import Task, initial_weights
from albert_tf.training.distribution import is_chief, is_multi_worker
from albert_tf.training.harness import Schedule, compile_model, dtype_policy, train as harness_train
from albert_tf.training.harness import resume as resume_run


def model_dtype(settings: FinetuneSettings) -> str:
    """The Keras dtype policy of the job's models: its `mixed_precision`."""
    return dtype_policy(settings.mixed_precision)


class TaskCheckpoints:
    """The fine-tuning checkpoint format (a `harness.CheckpointFormat`): the optimizer's state
    (`resume.OptimizerState`), then, on the chief, `model.ckpt-<step>` under the original TF1
    names, scored at once by the evaluator — on `scoring_model`, with the trained weights copied
    in, when one is given.

    Args:
      task: the job (its settings, and `load` for a resume).
      model: the compiled model being trained.
      resumed: (step, prefix) of the checkpoint to resume from (`resume.resume_point`), or None.
      evaluator: scores each checkpoint (None: no scoring).
      save_dir: where the optimizer state is saved (a non-chief worker's scratch directory).
      chief: whether this worker writes the checkpoints.
      scoring_model: a model outside the strategy to score on (multi-worker jobs).
    """

    def __init__(
        self,
        task: Task,
        model: keras.Model,
        resumed: tuple[int, str] | None,
        evaluator: CheckpointEvaluator | None,
        save_dir: str,
        chief: bool = True,
        scoring_model: keras.Model | None = None,
    ):
        self.task, self.model, self.resumed = task, model, resumed
        self.evaluator, self.chief, self.scoring_model = evaluator, chief, scoring_model
        self.output_dir = task.settings.output_dir
        self.optimizer_state = resume.OptimizerState(model.optimizer, self.output_dir, save_dir)
        self.saved: list[tuple[int, str]] = []
        self._last_step: int | None = None
        self._latest: str | None = None

    def restore(self) -> int:
        if self.resumed is None:
            return 0
        done, prefix = self.resumed
        self.task.load(self.model, prefix)
        self.optimizer_state.restore(done)
        logging.info("Resuming %s from %s (step %d)", self.task.name, prefix, done)
        if self.evaluator is not None:
            self.evaluator.restore(done)
            if done not in self.evaluator.steps:  # saved, then stopped before its evaluation
                self._score(done, prefix)
        self._last_step, self._latest = done, prefix
        return done

    def save(self, step: int) -> str | None:
        if step == self._last_step:
            return None
        # The optimizer's state first: a model.ckpt-<step> always has its state beside it.
        self.optimizer_state.save(step)
        self._last_step = step
        if not self.chief:
            return None
        prefix = save_tf1_checkpoint(
            self.model,
            os.path.join(self.output_dir, f"{CHECKPOINT_PREFIX}-{step}"),
            global_step=step,
        )
        self.saved.append((step, prefix))
        self._latest = prefix
        if self.evaluator is not None:
            self._score(step, prefix)
        return prefix

    def latest(self) -> str | None:
        return self._latest

    def _score(self, step: int, prefix: str) -> None:
        model = self.model
        if self.scoring_model is not None:
            self.scoring_model.set_weights(model.get_weights())
            model = self.scoring_model
        self.evaluator.evaluate(model, step, prefix)


def prepare(
    task: Task, albert_config: AlbertConfig, strategy: tf.distribute.Strategy | None = None
) -> tuple[int, str] | None:
    """What comes before a task's training batches are built: the batch size checked against
    the replicas, a resume with other settings refused (`resume.resume_point`), the model config
    written beside the checkpoints (on the chief) and the job's seed set. Returns the checkpoint
    to resume from, as (step, prefix), or None."""
    config = task.settings
    strategy = strategy or tf.distribute.get_strategy()
    replicas = strategy.num_replicas_in_sync
    if config.train_batch_size % replicas:
        raise ValueError(
            f"train_batch_size={config.train_batch_size} must divide evenly over {replicas} replicas"
        )
    resumed = resume.resume_point(task)  # other settings than the run's: refused before any work
    if is_chief(strategy):
        os.makedirs(config.output_dir, exist_ok=True)
        albert_config.to_json_file(os.path.join(config.output_dir, "albert_config.json"))
    keras.utils.set_random_seed(config.seed)
    return resumed


def train(
    task: Task,
    albert_config: AlbertConfig,
    batches: tf.data.Dataset,
    num_examples: int,
    resumed: tuple[int, str] | None,
    evaluator: CheckpointEvaluator | None = None,
    strategy: tf.distribute.Strategy | None = None,
) -> list[tuple[int, str]]:
    """Fine-tunes on `batches` (endless, of `num_examples` examples; built after `prepare`)
    from `init_checkpoint` or `hf_model` (random init without), or from `resumed`; returns the
    checkpoints saved by this call (none on a multi-worker job's other workers, which save only
    their optimizer state, into scratch).

    With an evaluator, each checkpoint is scored right after it is saved (the original ran a
    separate eval job that polled the checkpoints); a resumed run takes up the earlier scores.
    """
    config = task.settings
    strategy = strategy or tf.distribute.get_strategy()
    chief = is_chief(strategy)
    # The other workers save too (a checkpoint write may join collectives) but into scratch.
    save_dir = config.output_dir if chief else tempfile.mkdtemp(prefix="albert_worker_")
    try:
        evaluator = evaluator if chief else None
        return _train(
            task, albert_config, batches, num_examples, resumed, evaluator, strategy, save_dir
        )
    finally:
        if not chief:
            shutil.rmtree(save_dir, ignore_errors=True)


def _train(
    task, albert_config, dataset, num_examples, resumed, evaluator, strategy, save_dir
) -> list[tuple[int, str]]:
    config = task.settings
    chief = is_chief(strategy)
    dtype = model_dtype(config)
    if is_multi_worker(strategy):
        # A task's records are usually one file: each worker reads it all and keeps its part of
        # every global batch, so the batches are those of one device.
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.DATA
        )
        dataset = dataset.with_options(options)
    model = compile_model(
        lambda: task.build_model(albert_config, dtype),
        strategy,
        jit_compile=config.jit_compile,
        init_lr=config.learning_rate,
        num_train_steps=config.train_step,
        num_warmup_steps=config.warmup_step,
        optimizer=config.optimizer,
    )
    # Scoring on a model outside the strategy: its predictions need no other worker.
    scoring_model = None
    if evaluator is not None and is_multi_worker(strategy):
        scoring_model = task.build_model(albert_config, dtype)
    checkpoints = TaskCheckpoints(task, model, resumed, evaluator, save_dir, chief, scoring_model)
    done = resume_run(
        checkpoints,
        strategy,
        f"the step to resume from: every worker must see the chief's output_dir {config.output_dir}",
    )
    if not done:
        if initial_weights(config):
            task.initialize(model, initial_weights(config))
        else:
            logging.warning(
                "No init_checkpoint or hf_model: fine-tuning a randomly initialised model"
            )
    if chief:
        resume.record_settings(task)
    if done < config.train_step:
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
    schedule = Schedule.of(config, config.train_step, shown_metrics={"accuracy": "acc"})
    summary_dir = os.path.join(config.output_dir, "logs", "train") if chief else None
    # The batches an uninterrupted run would take next.
    harness_train(
        model,
        lambda step, until_stop: until_stop(dataset.skip(step)),
        done,
        schedule,
        checkpoints,
        summary_dir,
    )
    return checkpoints.saved
