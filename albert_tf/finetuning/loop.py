"""The task-agnostic fine-tuning loop: train, score every checkpoint, keep the best, predict.

Training uses Keras `fit` with the original AdamW (or LAMB) and schedule, saving a TF1-named
checkpoint `model.ckpt-<step>` every `save_checkpoints_steps` and at the last step; with an
evaluator each is scored on dev as soon as it is saved (`selection`: final and best checkpoint
in `eval_results.json`, best copied to `model.ckpt-best`). Prediction and export use the best
checkpoint when there is one. What differs per benchmark comes from a `Task`.

Running the same job again in the same `output_dir` resumes from its last `model.ckpt-<step>`
(`albert_tf.finetuning.resume`): weights, optimizer moments and step, the batches continuing
where they stopped. The job's settings may also name a `mixed_precision` ("none", "bf16",
"fp16", as pretraining); `run` takes a tf.distribute strategy.

Deliberate differences from the original scripts, none changing the maths: no checkpoint at
step 0; after a resume the dropout masks are not those an uninterrupted run would have drawn.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
import zipfile

import keras
import tensorflow as tf
from absl import logging

from albert_tf.checkpoints.tf1 import resolve_checkpoint_prefix, save_tf1_checkpoint
from albert_tf.config import AlbertConfig
from albert_tf.finetuning import resume
from albert_tf.finetuning.selection import (
    BEST_CHECKPOINT,
    CHECKPOINT_PREFIX,
    CheckpointEvaluator,
    list_checkpoints,
)
from albert_tf.finetuning.task import LoopSettings, Task
from albert_tf.training.optimization import create_optimizer
from albert_tf.training.pretraining import MIXED_PRECISION_POLICIES


def resolve_albert_config(config: LoopSettings) -> AlbertConfig:
    """The model config: `albert_config_file`, else the one inside a `.keras` init checkpoint,
    else `albert_config.json` beside a TF1 init checkpoint (release layout) or in `output_dir`."""
    candidates = []
    if config.albert_config_file:
        albert_config = AlbertConfig.from_json_file(config.albert_config_file)
    elif config.init_checkpoint and config.init_checkpoint.endswith(".keras"):
        with zipfile.ZipFile(config.init_checkpoint) as archive:
            albert_config = AlbertConfig.from_dict(
                json.loads(archive.read("config.json"))["config"]["albert_config"]
            )
    else:
        if config.init_checkpoint:
            base = config.init_checkpoint
            candidates.append(
                os.path.join(
                    base if os.path.isdir(base) else os.path.dirname(base), "albert_config.json"
                )
            )
        candidates.append(os.path.join(config.output_dir, "albert_config.json"))
        found = [c for c in candidates if os.path.isfile(c)]
        if not found:
            raise ValueError(f"no model config: pass albert_config_file (looked for {candidates})")
        albert_config = AlbertConfig.from_json_file(found[0])
    if config.max_seq_length > albert_config.max_position_embeddings:
        raise ValueError(
            f"Cannot use sequence length {config.max_seq_length} because the ALBERT "
            f"model was only trained up to {albert_config.max_position_embeddings}"
        )
    return albert_config


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


def checkpoint_step(path: str) -> int:
    """The `global_step` a TF1 checkpoint holds; 0 for one without (or a `.keras` file)."""
    if str(path).endswith(".keras"):
        return 0
    reader = tf.train.load_checkpoint(resolve_checkpoint_prefix(path))
    return int(reader.get_tensor("global_step")) if reader.has_tensor("global_step") else 0


class _CheckpointEveryN(keras.callbacks.Callback):
    """Ends training at `train_step`; at each epoch end (= every N steps) saves the optimizer's
    state, then the TF1 checkpoint, then evaluates it."""

    def __init__(
        self,
        config: LoopSettings,
        evaluator: CheckpointEvaluator | None,
        optimizer_state: resume.OptimizerState,
        start_step: int,
    ):
        super().__init__()
        self.config, self.evaluator = config, evaluator
        self.optimizer_state = optimizer_state
        self.saved: list[tuple[int, str]] = []
        self._start, self._start_step = time.time(), start_step

    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
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
        step = int(self.model.optimizer.iterations.numpy())
        # The optimizer's state first: a model.ckpt-<step> always has its state beside it.
        self.optimizer_state.save(step)
        prefix = save_tf1_checkpoint(
            self.model,
            os.path.join(self.config.output_dir, f"{CHECKPOINT_PREFIX}-{step}"),
            global_step=step,
        )
        self.saved.append((step, prefix))
        if self.evaluator is not None:
            self.evaluator.evaluate(self.model, step, prefix)


def train(
    task: Task,
    albert_config: AlbertConfig,
    evaluator: CheckpointEvaluator | None = None,
    strategy: tf.distribute.Strategy | None = None,
) -> list[tuple[int, str]]:
    """Fine-tunes from `init_checkpoint` (random init without one), or resumes from the last
    checkpoint in `output_dir`; returns the checkpoints saved by this call.

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
    resumed = resume.resume_point(task)
    os.makedirs(config.output_dir, exist_ok=True)
    albert_config.to_json_file(os.path.join(config.output_dir, "albert_config.json"))
    with precision_policy(config):
        keras.utils.set_random_seed(config.seed)
        dataset, num_examples = task.train_dataset()
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
        optimizer_state = resume.OptimizerState(model.optimizer, config.output_dir)
        done = 0
        if resumed is not None:
            done, prefix = resumed
            task.load(model, prefix)
            optimizer_state.restore(done)
            logging.info("Resuming %s from %s (step %d)", task.name, prefix, done)
            if evaluator is not None:
                evaluator.restore(done)
                if done not in evaluator.steps:  # saved, then stopped before its evaluation
                    evaluator.evaluate(model, done, prefix)
            dataset = dataset.skip(done)  # the batches an uninterrupted run would take next
        elif config.init_checkpoint:
            task.initialize(model, config.init_checkpoint)
        else:
            logging.warning("No init_checkpoint: fine-tuning a randomly initialised model")
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
            replicas,
            config.learning_rate,
            config.warmup_step,
        )
        callback = _CheckpointEveryN(config, evaluator, optimizer_state, done)
        # One epoch per checkpoint interval; the callback stops the last one at `train_step`.
        model.fit(
            dataset,
            epochs=math.ceil(config.train_step / config.save_checkpoints_steps),
            initial_epoch=done // config.save_checkpoints_steps,
            steps_per_epoch=config.save_checkpoints_steps,
            callbacks=[callback],
            shuffle=False,
            verbose=0,
        )
    return callback.saved


def _build(task: Task, albert_config: AlbertConfig, strategy: tf.distribute.Strategy | None):
    with (strategy or tf.distribute.get_strategy()).scope():
        return task.build_model(albert_config)


def evaluate_checkpoints(
    task: Task,
    albert_config: AlbertConfig,
    evaluator: CheckpointEvaluator,
    strategy: tf.distribute.Strategy | None = None,
) -> dict:
    """Scores every `model.ckpt-<step>` in `output_dir` (the original's `--do_eval` loop)."""
    output_dir = task.settings.output_dir
    found = list_checkpoints(output_dir)
    if not found:
        raise FileNotFoundError(
            f"no {CHECKPOINT_PREFIX}-<step> checkpoints in "
            f"{output_dir} to evaluate; train first (do_train)"
        )
    model = _build(task, albert_config, strategy)
    for step, prefix in found:
        task.load(model, prefix)
        evaluator.evaluate(model, step, prefix)
    return evaluator.write()


def inference_checkpoint(config: LoopSettings) -> str:
    """`model.ckpt-best` if evaluated, else the last checkpoint, else the init_checkpoint."""
    best = os.path.join(config.output_dir, BEST_CHECKPOINT)
    if os.path.exists(best + ".index"):
        return best
    found = list_checkpoints(config.output_dir)
    if found:
        return found[-1][1]
    if config.init_checkpoint:
        return config.init_checkpoint
    raise FileNotFoundError(f"no checkpoint in {config.output_dir} and no init_checkpoint")


def load_for_inference(
    task: Task,
    albert_config: AlbertConfig,
    strategy: tf.distribute.Strategy | None = None,
    checkpoint: str | None = None,
) -> tuple[keras.Model, str]:
    """A model holding `checkpoint`'s weights (default: the `inference_checkpoint`), and that
    checkpoint's path."""
    path = checkpoint or inference_checkpoint(task.settings)
    model = _build(task, albert_config, strategy)
    task.load(model, path)
    return model, path


def run(
    task: Task,
    do_train: bool,
    do_eval: bool,
    do_predict: bool,
    strategy: tf.distribute.Strategy | None = None,
    checkpoint: str | None = None,
) -> dict:
    """The original scripts' main(): train, then evaluate all checkpoints, then predict; then
    export (when `export_dir` is set).

    With `checkpoint` (no training), that checkpoint alone is scored, predicted and exported
    instead of those of `output_dir`: it is neither copied to `model.ckpt-best` nor deleted.
    """
    config = task.settings
    if not (do_train or do_eval or do_predict or config.export_dir):
        raise ValueError("At least one of do_train, do_eval, do_predict or export_dir must be set")
    if checkpoint and do_train:
        raise ValueError("checkpoint names what to score or predict without training")
    albert_config = resolve_albert_config(config)
    if do_predict:
        task.check_predict_inputs()  # fail before hours of training
    with precision_policy(config):
        if checkpoint:
            return _run_one_checkpoint(
                task, albert_config, checkpoint, do_eval, do_predict, strategy
            )
        summary: dict = {}
        evaluator = None
        if do_eval:
            evaluator = CheckpointEvaluator(
                task.dev_scorer(), config.output_dir, config.keep_all_checkpoints
            )
        if do_train:
            saved = train(task, albert_config, evaluator, strategy)
            summary["checkpoints"] = [p for _, p in saved]
            if evaluator is not None:
                summary["eval"] = evaluator.write()
        elif do_eval:
            summary["eval"] = evaluate_checkpoints(task, albert_config, evaluator, strategy)
        if do_predict:
            inputs = task.predict_inputs()  # bad rows are reported before a missing checkpoint
            model, path = load_for_inference(task, albert_config, strategy)
            summary["predictions"] = task.predict(model, path, inputs)
        if config.export_dir:
            model, path = load_for_inference(task, albert_config, strategy)
            summary["export"] = task.export(model, path, albert_config)
        return summary


def _run_one_checkpoint(
    task: Task,
    albert_config: AlbertConfig,
    checkpoint: str,
    do_eval: bool,
    do_predict: bool,
    strategy: tf.distribute.Strategy | None,
) -> dict:
    config = task.settings
    summary: dict = {}
    inputs = task.predict_inputs() if do_predict else None
    model, path = load_for_inference(task, albert_config, strategy, checkpoint)
    if do_eval:
        os.makedirs(config.output_dir, exist_ok=True)
        evaluator = CheckpointEvaluator(task.dev_scorer(), config.output_dir, copy_best=False)
        evaluator.evaluate(model, checkpoint_step(path), path)
        summary["eval"] = evaluator.write()
    if do_predict:
        summary["predictions"] = task.predict(model, path, inputs)
    if config.export_dir:
        summary["export"] = task.export(model, path, albert_config)
    return summary
