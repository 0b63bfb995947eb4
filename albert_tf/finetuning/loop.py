"""The task-agnostic fine-tuning loop: train, score every checkpoint, keep the best, predict.

Training uses Keras `fit` with the original AdamW (or LAMB) and schedule, saving a TF1-named
checkpoint `model.ckpt-<step>` every `save_checkpoints_steps` and at the last step; with an
evaluator each is scored on dev as soon as it is saved (`selection`: final and best checkpoint
in `eval_results.json`, best copied to `model.ckpt-best`). Prediction and export use the best
checkpoint when there is one. What differs per benchmark comes from a `Task`.

Deliberate differences from the original scripts, none changing the maths: no checkpoint at
step 0; training does not resume.
"""

from __future__ import annotations

import json
import math
import os
import time
import zipfile

import keras
from absl import logging

from albert_tf.checkpoints.tf1 import save_tf1_checkpoint
from albert_tf.config import AlbertConfig
from albert_tf.finetuning.selection import (
    BEST_CHECKPOINT,
    CHECKPOINT_PREFIX,
    CheckpointEvaluator,
    list_checkpoints,
)
from albert_tf.finetuning.task import LoopSettings, Task
from albert_tf.training.optimization import create_optimizer


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


class _CheckpointEveryN(keras.callbacks.Callback):
    """Ends training at `train_step`; at each epoch end (= every N steps) saves, then evaluates."""

    def __init__(self, config: LoopSettings, evaluator: CheckpointEvaluator | None):
        super().__init__()
        self.config, self.evaluator = config, evaluator
        self.saved: list[tuple[int, str]] = []
        self._start = time.time()

    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        if step % self.config.log_every_steps == 0 or step == self.config.train_step:
            rate = step / max(time.time() - self._start, 1e-9)
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
        prefix = save_tf1_checkpoint(
            self.model,
            os.path.join(self.config.output_dir, f"{CHECKPOINT_PREFIX}-{step}"),
            global_step=step,
        )
        self.saved.append((step, prefix))
        if self.evaluator is not None:
            self.evaluator.evaluate(self.model, step, prefix)


def train(
    task: Task, albert_config: AlbertConfig, evaluator: CheckpointEvaluator | None = None
) -> list[tuple[int, str]]:
    """Fine-tunes from `init_checkpoint` (random init without one); returns the saved checkpoints.

    With an evaluator, each checkpoint is scored right after it is saved (the original ran a
    separate eval job that polled the checkpoints).
    """
    config = task.settings
    if list_checkpoints(config.output_dir):
        raise FileExistsError(
            f"{config.output_dir} already holds {CHECKPOINT_PREFIX}-* "
            "checkpoints; use a new output_dir (training does not resume)"
        )
    os.makedirs(config.output_dir, exist_ok=True)
    albert_config.to_json_file(os.path.join(config.output_dir, "albert_config.json"))
    keras.utils.set_random_seed(config.seed)
    dataset, num_examples = task.train_dataset()
    model = task.build_model(albert_config)
    if config.init_checkpoint:
        task.initialize(model, config.init_checkpoint)
    else:
        logging.warning("No init_checkpoint: fine-tuning a randomly initialised model")
    model.compile(
        optimizer=create_optimizer(
            config.learning_rate, config.train_step, config.warmup_step, optimizer=config.optimizer
        ),
        jit_compile=config.jit_compile,
    )
    logging.info(
        "Training %s: %d examples, %d steps of %d, lr %g, warmup %d",
        task.name,
        num_examples,
        config.train_step,
        config.train_batch_size,
        config.learning_rate,
        config.warmup_step,
    )
    callback = _CheckpointEveryN(config, evaluator)
    # One epoch per checkpoint interval; the callback stops the last one at `train_step`.
    model.fit(
        dataset,
        epochs=math.ceil(config.train_step / config.save_checkpoints_steps),
        steps_per_epoch=config.save_checkpoints_steps,
        callbacks=[callback],
        shuffle=False,
        verbose=0,
    )
    return callback.saved


def evaluate_checkpoints(
    task: Task, albert_config: AlbertConfig, evaluator: CheckpointEvaluator
) -> dict:
    """Scores every `model.ckpt-<step>` in `output_dir` (the original's `--do_eval` loop)."""
    output_dir = task.settings.output_dir
    found = list_checkpoints(output_dir)
    if not found:
        raise FileNotFoundError(
            f"no {CHECKPOINT_PREFIX}-<step> checkpoints in "
            f"{output_dir} to evaluate; train first (do_train)"
        )
    model = task.build_model(albert_config)
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


def load_for_inference(task: Task, albert_config: AlbertConfig) -> tuple[keras.Model, str]:
    """A model holding the `inference_checkpoint` weights, and that checkpoint's path."""
    path = inference_checkpoint(task.settings)
    model = task.build_model(albert_config)
    task.load(model, path)
    return model, path


def run(task: Task, do_train: bool, do_eval: bool, do_predict: bool) -> dict:
    """The original scripts' main(): train, then evaluate all checkpoints, then predict; then
    export (when `export_dir` is set)."""
    config = task.settings
    if not (do_train or do_eval or do_predict or config.export_dir):
        raise ValueError("At least one of do_train, do_eval, do_predict or export_dir must be set")
    albert_config = resolve_albert_config(config)
    if do_predict:
        task.check_predict_inputs()  # fail before hours of training
    summary: dict = {}
    evaluator = None
    if do_eval:
        evaluator = CheckpointEvaluator(
            task.dev_scorer(), config.output_dir, config.keep_all_checkpoints
        )
    if do_train:
        summary["checkpoints"] = [p for _, p in train(task, albert_config, evaluator)]
        if evaluator is not None:
            summary["eval"] = evaluator.write()
    elif do_eval:
        summary["eval"] = evaluate_checkpoints(task, albert_config, evaluator)
    if do_predict:
        inputs = task.predict_inputs()  # bad rows are reported before a missing checkpoint
        model, checkpoint = load_for_inference(task, albert_config)
        summary["predictions"] = task.predict(model, checkpoint, inputs)
    if config.export_dir:
        model, checkpoint = load_for_inference(task, albert_config)
        summary["export"] = task.export(model, checkpoint, albert_config)
    return summary
