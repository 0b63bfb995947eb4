"""The task-agnostic fine-tuning loop: train, score every checkpoint, keep the best, predict.

Training (`albert_tf.finetuning.training`) saves a TF1-named checkpoint `model.ckpt-<step>` every
`save_checkpoints_steps`; with an evaluator each is scored on dev as soon as it is saved
(`selection`: final and best checkpoint in `eval_results.json`, best copied to `model.ckpt-best`).
Prediction and export use the best checkpoint when there is one. What differs per benchmark
comes from a `Task`. Running the same job again in the same `output_dir` resumes it
(`albert_tf.finetuning.resume`). The job's `mixed_precision` ("none", "bf16", "fp16", as
pretraining) is every model's dtype policy.
`run` takes a tf.distribute strategy — under a multi-worker one all workers train and the chief
alone scores, predicts and exports, on one of its devices.

Deliberate differences from the original scripts, none changing the maths: no checkpoint at
step 0; after a resume the dropout masks are not those an uninterrupted run would have drawn.
"""

from __future__ import annotations

import os

import keras
import tensorflow as tf
from absl import logging

from albert_tf.checkpoints.hf import is_hf_folder
from albert_tf.checkpoints.tf1 import open_tf1_checkpoint
from albert_tf.config import AlbertConfig
from albert_tf.finetuning.selection import (
    BEST_CHECKPOINT,
    CHECKPOINT_PREFIX,
    CheckpointEvaluator,
    list_checkpoints,
)
from albert_tf.finetuning.new_output_dir import emptied_unless_checkpointed
from albert_tf.finetuning.resume import TRAIN_STATE_DIR
from albert_tf.finetuning.settings import FinetuneSettings, resolve_albert_config
from albert_tf.finetuning.task import Task, initial_weights
from albert_tf.finetuning.training import model_dtype, prepare, train
from albert_tf.output_dirs import claim_output_dir
from albert_tf.training.distribution import is_chief, is_multi_worker

__all__ = [
    "checkpoint_step",
    "evaluate_checkpoints",
    "inference_checkpoint",
    "initial_weights",
    "load_for_inference",
    "model_dtype",
    "run",
]


def checkpoint_step(path: str) -> int:
    """The `global_step` a TF1 checkpoint holds; 0 for one without (or a `.keras` file, or a
    transformers folder)."""
    if str(path).endswith(".keras") or is_hf_folder(path):
        return 0
    _, reader = open_tf1_checkpoint(path)
    return int(reader.get_tensor("global_step")) if reader.has_tensor("global_step") else 0


def _build(task: Task, albert_config: AlbertConfig, strategy: tf.distribute.Strategy | None):
    with (strategy or tf.distribute.get_strategy()).scope():
        return task.build_model(albert_config, model_dtype(task.settings))


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


def inference_checkpoint(config: FinetuneSettings) -> str:
    """`model.ckpt-best` if evaluated, else the last checkpoint, else the `initial_weights`."""
    best = os.path.join(config.output_dir, BEST_CHECKPOINT)
    if os.path.exists(best + ".index"):
        return best
    found = list_checkpoints(config.output_dir)
    if found:
        return found[-1][1]
    if initial_weights(config):
        return initial_weights(config)
    raise FileNotFoundError(
        f"no checkpoint in {config.output_dir} and no init_checkpoint or hf_model"
    )


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
) -> dict:
    """The original scripts' main(): train, then evaluate all checkpoints, then predict; then
    export (when `export_dir` is set).

    Without `do_train`, the task's `checkpoint_to_score` (if any) is scored, predicted and
    exported alone instead of the checkpoints of `output_dir`: it is neither copied to
    `model.ckpt-best` nor deleted.

    The chief holds `output_dir` for the job (`OutputInUseError` while another job does) and
    first removes what a killed run left there (`albert_tf.output_dirs.claim_output_dir`). A job
    that fails or is stopped before its first checkpoint leaves a new `output_dir` as it found
    it (`albert_tf.finetuning.new_output_dir`).
    """
    config = task.settings
    if not (do_train or do_eval or do_predict or config.export_dir):
        raise ValueError("At least one of do_train, do_eval, do_predict or export_dir must be set")
    checkpoint = None if do_train else task.checkpoint_to_score()
    model_dtype(config)  # a bad mixed_precision fails here, before any work
    albert_config = resolve_albert_config(config)
    if do_predict:
        task.check_predict_inputs()  # fail before hours of training
    chief = strategy is None or is_chief(strategy)
    created = not os.path.lexists(config.output_dir)
    with (
        claim_output_dir(
            config.output_dir,
            (TRAIN_STATE_DIR,),
            writes=chief,
            other_writers=is_multi_worker(strategy),
        ),
        emptied_unless_checkpointed(config.output_dir, writes=chief, created=created),
    ):
        return _run(task, albert_config, do_train, do_eval, do_predict, strategy, checkpoint)


def _run(
    task: Task,
    albert_config: AlbertConfig,
    do_train: bool,
    do_eval: bool,
    do_predict: bool,
    strategy: tf.distribute.Strategy | None,
    checkpoint: str | None,
) -> dict:
    config = task.settings
    chief = strategy is None or is_chief(strategy)
    # Scoring, prediction and export run in one process: never on a multi-worker strategy.
    local_strategy = None if is_multi_worker(strategy) else strategy
    if checkpoint:
        if not chief:
            return {}
        return _run_one_checkpoint(
            task, albert_config, checkpoint, do_eval, do_predict, local_strategy
        )
    summary: dict = {}
    evaluator = None
    if do_eval and chief:
        evaluator = CheckpointEvaluator(
            task.dev_scorer(), config.output_dir, config.keep_all_checkpoints
        )
    if do_train:
        resumed = prepare(task, albert_config, strategy)
        # Built after the seed is set and a resume is known to be this job's.
        batches, num_examples = task.train_dataset()
        saved = train(task, albert_config, batches, num_examples, resumed, evaluator, strategy)
        summary["checkpoints"] = [p for _, p in saved]
        if evaluator is not None:
            summary["eval"] = evaluator.write()
    if not chief:
        logging.info("Not the chief: the chief scores, predicts and writes the outputs")
        return summary
    if do_eval and not do_train:
        summary["eval"] = evaluate_checkpoints(task, albert_config, evaluator, local_strategy)
    if do_predict:
        inputs = task.predict_inputs()  # bad rows are reported before a missing checkpoint
        model, path = load_for_inference(task, albert_config, local_strategy)
        summary["predictions"] = task.predict(model, path, inputs)
    if config.export_dir:
        model, path = load_for_inference(task, albert_config, local_strategy)
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
