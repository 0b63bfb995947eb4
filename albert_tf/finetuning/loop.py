"""GLUE fine-tuning as the original `run_classifier.py`: train, score every checkpoint, predict.

Training uses Keras `fit` with the original AdamW (or LAMB) and schedule, saving a TF1-named
checkpoint `model.ckpt-<step>` every `save_checkpoints_steps` and at the last step; with an
evaluator each is scored on dev as soon as it is saved (`selection`: final and best
checkpoint in `eval_results.json`, best copied to `model.ckpt-best`). Prediction writes the
original's `test_results.tsv` (probabilities) and a GLUE submission file (`SST-2.tsv`:
index<TAB>label); export writes a `.keras` classifier.

Deliberate differences, none changing the maths: training examples are fully shuffled (seeded)
instead of the original's file order through a 100-example buffer (CoLA's file here is not in
GLUE's order); batches are padded to their longest example unless `dynamic_padding=False` (see
`albert_tf.tasks.glue.inputs`); no checkpoint at step 0; training does not resume.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import time
import zipfile

import keras
import numpy as np
from absl import logging

from albert_tf.checkpoints.classifier import initialize_from_checkpoint, load_classifier_checkpoint
from albert_tf.checkpoints.tf1 import save_tf1_checkpoint
from albert_tf.config import AlbertConfig
from albert_tf.finetuning.selection import (
    BEST_CHECKPOINT,
    CHECKPOINT_PREFIX,
    CheckpointEvaluator,
    list_checkpoints,
)
from albert_tf.io import atomic_path, write_json, write_text
from albert_tf.modeling.heads.classifier import AlbertClassifier
from albert_tf.tasks.glue import processors as glue
from albert_tf.tasks.glue.inputs import encode_split, make_dataset
from albert_tf.text.tokenization import AlbertTokenizer
from albert_tf.training.optimization import create_optimizer

# run_glue.sh: every task also used --max_seq_length=512 --optimizer=adamw --do_lower_case.
_RECIPE_COMMON = dict(max_seq_length=512, optimizer="adamw", do_lower_case=True)
RECIPES: dict[str, dict] = {
    task: dict(
        _RECIPE_COMMON,
        learning_rate=lr,
        train_batch_size=batch,
        train_step=steps,
        warmup_step=warmup,
        save_checkpoints_steps=every,
    )
    for task, lr, batch, steps, warmup, every in (
        ("sst-2", 1e-5, 32, 20935, 1256, 100),
        ("mnli", 3e-5, 128, 10000, 1000, 100),
        ("cola", 1e-5, 16, 5336, 320, 100),
        ("qnli", 1e-5, 32, 33112, 1986, 200),
        ("qqp", 5e-5, 128, 14000, 1000, 100),
        ("rte", 3e-5, 32, 800, 200, 100),
        ("sts-b", 2e-5, 16, 3598, 214, 100),
        ("mrpc", 2e-5, 32, 800, 200, 100),
    )
}


@dataclasses.dataclass
class FinetuneConfig:
    """One fine-tuning job; defaults are the original `run_classifier.py` flag defaults."""

    task_name: str
    data_dir: str
    output_dir: str
    spm_model_file: str
    albert_config_file: str | None = None
    init_checkpoint: str | None = None
    do_lower_case: bool = True
    max_seq_length: int = 512
    train_step: int = 1000
    warmup_step: int = 0
    learning_rate: float = 5e-5
    train_batch_size: int = 32
    eval_batch_size: int = 8
    predict_batch_size: int = 8
    optimizer: str = "adamw"
    save_checkpoints_steps: int = 1000
    export_dir: str | None = None
    skip_malformed_rows: bool = False
    keep_all_checkpoints: bool = False
    dynamic_padding: bool = True
    jit_compile: bool = False
    seed: int = 12345
    log_every_steps: int = 50

    @property
    def pad_dynamically(self) -> bool:
        """Dynamic padding, except under XLA (which would compile every batch width)."""
        return self.dynamic_padding and not self.jit_compile

    def __post_init__(self):
        self.task = glue.get_task(self.task_name)
        for name in (
            "max_seq_length",
            "train_step",
            "train_batch_size",
            "eval_batch_size",
            "predict_batch_size",
            "save_checkpoints_steps",
            "log_every_steps",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if not 0 <= self.warmup_step <= self.train_step:
            raise ValueError(f"warmup_step must be in [0, train_step], got {self.warmup_step}")


def resolve_albert_config(config: FinetuneConfig) -> AlbertConfig:
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


def read_split(config: FinetuneConfig, split: str) -> glue.GlueSplit:
    """Reads a split, logging any skipped malformed rows."""
    result = glue.read_split(
        config.task, config.data_dir, split, config.do_lower_case, config.skip_malformed_rows
    )
    if result.skipped:
        line, reason = result.skipped[0]
        logging.warning(
            "%s: skipped %d malformed rows (first: line %d: %s)",
            result.path,
            len(result.skipped),
            line,
            reason,
        )
    logging.info("%s: %d examples", result.path, len(result.examples))
    return result


# --- training -----------------------------------------------------------------------------------


class _CheckpointEveryN(keras.callbacks.Callback):
    """Ends training at `train_step`; at each epoch end (= every N steps) saves, then evaluates."""

    def __init__(self, config: FinetuneConfig, evaluator: CheckpointEvaluator | None):
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


def build_classifier(config: FinetuneConfig, albert_config: AlbertConfig):
    """A fresh `AlbertClassifier` for the task."""
    task = config.task
    return AlbertClassifier(
        albert_config, task.num_labels, regression=task.is_regression, seed=config.seed
    )


def train(
    config: FinetuneConfig,
    albert_config: AlbertConfig,
    tokenizer: AlbertTokenizer,
    evaluator: CheckpointEvaluator | None = None,
) -> list[tuple[int, str]]:
    """Fine-tunes from `init_checkpoint` (random init without one); returns the saved checkpoints.

    With an evaluator, each checkpoint is scored right after it is saved (the original ran a
    separate eval job that polled the checkpoints).
    """
    if list_checkpoints(config.output_dir):
        raise FileExistsError(
            f"{config.output_dir} already holds {CHECKPOINT_PREFIX}-* "
            "checkpoints; use a new output_dir (training does not resume)"
        )
    os.makedirs(config.output_dir, exist_ok=True)
    albert_config.to_json_file(os.path.join(config.output_dir, "albert_config.json"))
    keras.utils.set_random_seed(config.seed)
    train_split = read_split(config, "train")
    if not train_split.examples:
        raise ValueError(f"{train_split.path}: no training examples")
    encoded = encode_split(train_split, config.task, tokenizer, config.max_seq_length)
    dataset = make_dataset(
        encoded,
        config.train_batch_size,
        config.max_seq_length,
        training=True,
        seed=config.seed,
        dynamic_padding=config.pad_dynamically,
    )
    model = build_classifier(config, albert_config)
    if config.init_checkpoint:
        initialize_from_checkpoint(model, config.init_checkpoint)
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
        config.task.name,
        len(encoded.lengths),
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


# --- eval-only, predict, export -----------------------------------------------------------------


def evaluate_checkpoints(
    config: FinetuneConfig, albert_config: AlbertConfig, evaluator: CheckpointEvaluator
) -> dict:
    """Scores every `model.ckpt-<step>` in `output_dir` (the original's `--do_eval` loop)."""
    found = list_checkpoints(config.output_dir)
    if not found:
        raise FileNotFoundError(
            f"no {CHECKPOINT_PREFIX}-<step> checkpoints in "
            f"{config.output_dir} to evaluate; train first (do_train)"
        )
    model = build_classifier(config, albert_config)
    for step, prefix in found:
        load_classifier_checkpoint(model, prefix)
        evaluator.evaluate(model, step, prefix)
    return evaluator.write()


def inference_checkpoint(config: FinetuneConfig) -> str:
    """`model.ckpt-best` if evaluated, else the last checkpoint, else a classifier init_checkpoint."""
    best = os.path.join(config.output_dir, BEST_CHECKPOINT)
    if os.path.exists(best + ".index"):
        return best
    found = list_checkpoints(config.output_dir)
    if found:
        return found[-1][1]
    if config.init_checkpoint:
        return config.init_checkpoint
    raise FileNotFoundError(f"no checkpoint in {config.output_dir} and no init_checkpoint")


def load_for_inference(config: FinetuneConfig, albert_config: AlbertConfig):
    """A classifier holding the `inference_checkpoint` weights, and that checkpoint's path."""
    path = inference_checkpoint(config)
    model = build_classifier(config, albert_config)
    load_classifier_checkpoint(model, path)
    return model, path


def predict(
    config: FinetuneConfig, albert_config: AlbertConfig, tokenizer: AlbertTokenizer
) -> dict[str, str]:
    """Predicts the test split; writes `test_results.tsv` and the GLUE submission file."""
    task = config.task
    split = read_split(config, "test")
    encoded = encode_split(split, task, tokenizer, config.max_seq_length)
    model, checkpoint = load_for_inference(config, albert_config)
    dataset = make_dataset(
        encoded,
        config.predict_batch_size,
        config.max_seq_length,
        training=False,
        dynamic_padding=config.pad_dynamically,
    )
    outputs = model.predict(dataset, verbose=0)
    probabilities = np.asarray(outputs["probabilities"])
    if task.is_regression:
        answers = [str(float(p[0])) for p in probabilities]
    else:
        answers = [task.labels[i] for i in probabilities.argmax(axis=-1)]
    paths = {
        "probabilities": os.path.join(config.output_dir, "test_results.tsv"),
        "submission": os.path.join(config.output_dir, task.submission_file),
    }
    write_text(
        paths["probabilities"],
        "".join("\t".join(str(float(p)) for p in row) + "\n" for row in probabilities),
    )
    write_text(
        paths["submission"],
        "index\tprediction\n"
        + "".join(f"{guid}\t{answer}\n" for guid, answer in zip(encoded.guids, answers)),
    )
    logging.info("Wrote %d predictions of %s to %s", len(answers), checkpoint, paths["submission"])
    return paths


def export_classifier(config: FinetuneConfig, albert_config: AlbertConfig) -> str:
    """Saves `classifier.keras` (+ config, SentencePiece model, `classifier_info.json`) to
    `export_dir` for `pipelines/export.py --head=classifier`."""
    model, checkpoint = load_for_inference(config, albert_config)
    os.makedirs(config.export_dir, exist_ok=True)
    target = os.path.join(config.export_dir, "classifier.keras")
    with atomic_path(target, suffix=".keras") as staging:
        model.save(staging)
    albert_config.to_json_file(os.path.join(config.export_dir, "albert_config.json"))
    spm_name = os.path.basename(config.spm_model_file)
    with atomic_path(os.path.join(config.export_dir, spm_name)) as staging:
        shutil.copyfile(config.spm_model_file, staging)
    task = config.task
    write_json(
        os.path.join(config.export_dir, "classifier_info.json"),
        {
            "model_file": "classifier.keras",
            "task_name": task.name,
            "labels": None if task.is_regression else list(task.labels),
            "regression": task.is_regression,
            "inputs": {
                name: "int32 [batch, seq_length]"
                for name in ("input_ids", "input_mask", "segment_ids")
            },
            "outputs": {
                "logits": f"float32 [batch, {task.num_labels}]",
                "probabilities": f"float32 [batch, {task.num_labels}]"
                + (" (the score, as the original)" if task.is_regression else " (softmax)"),
            },
            "max_seq_length": config.max_seq_length,
            "do_lower_case": config.do_lower_case,
            "spm_model_file": spm_name,
            "albert_config_file": "albert_config.json",
            "checkpoint": checkpoint,
        },
    )
    logging.info("Exported %s (from %s) to %s", target, checkpoint, config.export_dir)
    return target


def run(config: FinetuneConfig, do_train: bool, do_eval: bool, do_predict: bool) -> dict:
    """The original's main(): train, then evaluate all checkpoints, then predict; then export."""
    if not (do_train or do_eval or do_predict or config.export_dir):
        raise ValueError("At least one of do_train, do_eval, do_predict or export_dir must be set")
    albert_config = resolve_albert_config(config)
    tokenizer = AlbertTokenizer(config.spm_model_file, do_lower_case=config.do_lower_case)
    if do_predict:
        glue.task_file(config.task, config.data_dir, "test")  # fail before hours of training
    summary: dict = {}
    evaluator = None
    if do_eval:
        dev = encode_split(read_split(config, "dev"), config.task, tokenizer, config.max_seq_length)
        evaluator = CheckpointEvaluator(
            config.task.name,
            config.output_dir,
            make_dataset(
                dev,
                config.eval_batch_size,
                config.max_seq_length,
                training=False,
                dynamic_padding=config.pad_dynamically,
            ),
            dev.label_ids,
            config.keep_all_checkpoints,
        )
    if do_train:
        summary["checkpoints"] = [p for _, p in train(config, albert_config, tokenizer, evaluator)]
        if evaluator is not None:
            summary["eval"] = evaluator.write()
    elif do_eval:
        summary["eval"] = evaluate_checkpoints(config, albert_config, evaluator)
    if do_predict:
        summary["predictions"] = predict(config, albert_config, tokenizer)
    if config.export_dir:
        summary["export"] = export_classifier(config, albert_config)
    return summary
