"""One pretraining run: the original `run_pretraining.py` recipe on Keras 3 + tf.distribute.

On the shared training harness (`albert_tf.training.harness`): resumable (tf.train checkpoints of
weights, optimizer slots and step), observable (progress line, TensorBoard scalars); it ends with
the model as `.keras` and as an original TF1 checkpoint.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings

import tensorflow as tf
from absl import logging

from albert_tf.checkpoints.hf import initialize_from_hf, is_hf_folder, load_hf_config
from albert_tf.checkpoints.hf_config import HF_EXTRA
from albert_tf.checkpoints.tf1 import assign_tf1_weights, read_weights, save_tf1_checkpoint
from albert_tf.config import AlbertConfig
from albert_tf.io import atomic_path, write_json
from albert_tf.modeling.model import AlbertPretrainer
from albert_tf.output_dirs import claim_output_dir
from albert_tf.training import eval_sets, record_checks
from albert_tf.training.distribution import is_chief, is_multi_worker
from albert_tf.training.harness import (
    Schedule,
    TrainStateCheckpoints,
    compile_model,
    dtype_policy,
    resume,
    train,
)
from albert_tf.training.input_pipeline import pretraining_dataset, pretraining_dataset_fn
from albert_tf.training.pretraining_inputs import checked_inputs, record_spec
from albert_tf.training.pretraining_options import (
    PretrainingOptions,
    SettingsError,
    masking_settings,
    steps_per_execution,
    use_xla,
    validate,
)
from albert_tf.training.sentence_task import apply_sentence_task, resolve_sentence_task


# What each transformers class but AlbertForPreTraining lacks of a pretrainer.
HF_LACKS = {
    "AlbertForMaskedLM": "sentence-order (SOP) head and pooler",
    "AlbertModel": "masked-LM and SOP heads",
    "AlbertForSequenceClassification": "masked-LM and SOP heads",
    "AlbertForQuestionAnswering": "masked-LM and SOP heads and pooler",
    "AlbertForMultipleChoice": "masked-LM and SOP heads",
}


def load_initial_weights(model: AlbertPretrainer, path: str) -> None:
    """Initialise from an original TF1 checkpoint, one of our `.keras` files or a transformers
    folder (what its class lacks, e.g. the SOP head of `AlbertForMaskedLM`, stays fresh)."""
    if is_hf_folder(path):
        initialize_from_hf(model, path, require_head=True)
        architecture = load_hf_config(path).extra[HF_EXTRA]["architectures"][0]
        if architecture in HF_LACKS:
            logging.warning(
                "%s is an %s, which has no %s: they start freshly initialised",
                path,
                architecture,
                HF_LACKS[architecture],
            )
    else:
        assign_tf1_weights(model, read_weights(path), path)
    logging.info("initialised weights from %s", path)


def run_pretraining(
    options: PretrainingOptions, config: AlbertConfig, strategy: tf.distribute.Strategy
) -> dict:
    """Train (resuming if checkpoints exist), evaluate, export. Returns paths and metrics.

    The chief holds `output_dir` for the run (`OutputInUseError` while another job does) and
    first removes what a killed run left there (`albert_tf.output_dirs.claim_output_dir`).
    """
    validate(options, config, strategy.num_replicas_in_sync)
    with claim_output_dir(
        options.output_dir,
        _SUBFOLDERS,
        writes=is_chief(strategy),
        other_writers=is_multi_worker(strategy),
    ):
        return _run_pretraining(options, config, strategy)


# The folders of output_dir that a run writes with temporary names.
_SUBFOLDERS = ("checkpoints", "tf1", "repaired_records")


def _run_pretraining(
    o: PretrainingOptions, config: AlbertConfig, strategy: tf.distribute.Strategy
) -> dict:
    chief = is_chief(strategy)
    # Non-chief workers must save too (collective writes) but into a scratch directory.
    work_dir = o.output_dir if chief else tempfile.mkdtemp(prefix="albert_worker_")
    os.makedirs(work_dir, exist_ok=True)
    try:
        train_files, eval_files, skipped, masking = checked_inputs(o, work_dir)
        sentence_task = resolve_sentence_task(o.sentence_task, o.input_file) if o.do_train else None
        # Failures are located with the features both kinds of records share when any is unmasked.
        spec = record_spec(o, "dynamic" if "dynamic" in masking else "static")
        # Repaired copies are read as files; otherwise the patterns, globbed once per pipeline.
        train_source = train_files if o.skip_corrupt_records else o.input_file
        eval_source = (eval_files or train_files) if o.skip_corrupt_records else None

        def build_model() -> AlbertPretrainer:
            model = AlbertPretrainer(config, dtype=dtype_policy(o.mixed_precision))
            apply_sentence_task(model, sentence_task)  # before compile: it freezes layers
            return model

        model = compile_model(
            build_model,
            strategy,
            jit_compile=use_xla(o, strategy),
            steps_per_execution=steps_per_execution(o),
            init_lr=o.learning_rate,
            num_train_steps=o.num_train_steps,
            num_warmup_steps=o.num_warmup_steps,
            optimizer=o.optimizer,
            poly_power=o.poly_power,
            start_warmup_step=o.start_warmup_step,
            gradient_accumulation_steps=(
                o.gradient_accumulation_steps if o.gradient_accumulation_steps > 1 else None
            ),
        )
        # Every worker resumes from the chief's checkpoints (a multi-worker job's output_dir is
        # on a filesystem all workers share): a worker restoring anything else would train on
        # other weights than the chief's, its gradients still summed with the chief's.
        checkpoints = TrainStateCheckpoints(
            model, work_dir, restore_dir=o.output_dir, max_to_keep=o.keep_checkpoint_max
        )
        try:
            step = resume(
                checkpoints,
                strategy,
                f"the step to resume from: every worker must see the chief's --output_dir "
                f"{o.output_dir}",
            )
        except ValueError as error:
            raise SettingsError(str(error)) from error
        results = {
            "output_dir": o.output_dir,
            "resumed_from": checkpoints.latest(),
            "sentence_task": sentence_task,
        }
        if o.skip_corrupt_records:
            results["skipped_records"] = skipped  # per input file, only those with any
        if not step and (o.init_checkpoint or o.hf_model):
            load_initial_weights(model, o.init_checkpoint or o.hf_model)
        try:
            if o.do_train:
                results["train_history"], step = _train(
                    model, checkpoints, o, strategy, work_dir, train_source, masking[0], step
                )
            results["global_step"] = step
            if o.do_eval:
                results["eval"] = eval_sets.evaluate_sets(
                    evaluate, model, o, step, work_dir if chief else None, eval_source, masking[1]
                )
        except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as failure:
            # `fit` stops at the failure without running another callback: no checkpoint of
            # the failed state is saved, none is removed.
            diagnosed = record_checks.diagnose(
                failure, train_files + eval_files, spec, hint=not o.skip_corrupt_records
            )
            if diagnosed is None:
                raise
            raise diagnosed from failure
        if chief:
            results.update(_export(model, work_dir, step))
        if o.skip_corrupt_records:
            logging.log(
                logging.WARNING if skipped else logging.INFO,
                "skipped %d corrupt record(s) in all: %s",
                sum(skipped.values()),
                json.dumps(skipped),
            )
        return results
    finally:
        if not chief:
            shutil.rmtree(work_dir, ignore_errors=True)


def _train(
    model,
    checkpoints: TrainStateCheckpoints,
    o: PretrainingOptions,
    strategy,
    work_dir: str,
    source: str | list[str],
    masking: str,
    done: int,
) -> tuple[list[dict], int]:
    """Train from step `done` up to `num_train_steps` on `source` (patterns or files) of masked
    ("static") or unmasked ("dynamic") records; returns the monitor's reports (step, loss, lr,
    ...) and the step reached."""

    def batches_from(step: int, until_stop):
        dataset_fn = pretraining_dataset_fn(
            source,
            o.max_seq_length,
            o.max_predictions_per_seq,
            o.train_batch_size // o.gradient_accumulation_steps,
            is_training=True,
            # Every applied update took `gradient_accumulation_steps` micro-batches.
            start_step=step * o.gradient_accumulation_steps,
            masking=masking,
            seed=o.seed,
            shuffle_buffer=o.shuffle_buffer,
            dynamic_masking=masking_settings(o, model.config),
        )
        return strategy.distribute_datasets_from_function(lambda ctx: until_stop(dataset_fn(ctx)))

    if done < o.num_train_steps:
        if masking == "dynamic":
            logging.info(
                "masking unmasked records as they are read (masked_lm_prob %g, ngram %d, whole "
                "words %s), masks continuing after step %d",
                o.masked_lm_prob,
                o.ngram,
                o.do_whole_word_mask,
                done,
            )
        logging.info(
            "training steps %d..%d, global batch %d (%d replica(s)%s), XLA %s",
            done,
            o.num_train_steps,
            o.train_batch_size,
            strategy.num_replicas_in_sync,
            f", {o.gradient_accumulation_steps} accumulation steps"
            if o.gradient_accumulation_steps > 1
            else "",
            model.jit_compile,
        )
    shown = {"masked_lm_accuracy": "mlm_acc", "sentence_order_accuracy": "sop_acc"}
    schedule = Schedule.of(o, o.num_train_steps, shown_metrics=shown)
    summary_dir = os.path.join(work_dir, "logs", "train")
    return train(model, batches_from, done, schedule, checkpoints, summary_dir)


def evaluate(
    model,
    o: PretrainingOptions,
    step: int,
    write_dir: str | None,
    files: list[str] | None = None,
    masking: str | None = None,
) -> dict:
    """The original eval metrics over at most `max_eval_steps` batches of held-out data (or of the
    training data, as the original did, when no `eval_input_file` is given); `files`, when given,
    are read instead of the patterns (checked or repaired copies). `masking` (default
    `o.masking`): of the records; unmasked ones get the same masks at every evaluation."""
    source = o.eval_input_file or o.input_file
    if not o.eval_input_file:
        logging.warning(
            "no --eval_input_file: evaluating on the training data, as the original "
            "run_pretraining.py did; these numbers are not held-out"
        )
    dataset = pretraining_dataset(
        files or source,
        o.max_seq_length,
        o.max_predictions_per_seq,
        o.eval_batch_size,
        is_training=False,
        repeat=False,
        masking=masking or o.masking,
        seed=o.seed,
        dynamic_masking=masking_settings(o, model.config),
    )
    with warnings.catch_warnings():
        # The eval records are read once and their number is not known up front, so Keras ends
        # every evaluation by running out of data and warns as if that had cut it short.
        warnings.filterwarnings(
            "ignore", message=r"Your input ran out of data; interrupting", category=UserWarning
        )
        metrics = model.evaluate(dataset.take(o.max_eval_steps), verbose=0, return_dict=True)
    if not int(model.metric_trackers["sentence_order_accuracy"].count.numpy()):
        raise SettingsError(
            f"no complete batch of --eval_batch_size={o.eval_batch_size} records in {source}"
        )
    metrics = {k: float(v) for k, v in metrics.items()}
    metrics.update(global_step=step, eval_input_file=source, held_out=bool(o.eval_input_file))
    logging.info("eval at step %d: %s", step, json.dumps(metrics, sort_keys=True))
    if write_dir:
        write_json(os.path.join(write_dir, "eval_results.json"), metrics)
    return metrics


def _export(model, work_dir: str, step: int) -> dict:
    keras_path = os.path.join(work_dir, "albert_pretrainer.keras")
    with atomic_path(keras_path, suffix=".keras") as staging:
        model.save(staging)
    tf1_prefix = save_tf1_checkpoint(
        model, os.path.join(work_dir, "tf1", "model.ckpt"), global_step=step
    )
    model.config.to_json_file(os.path.join(work_dir, "tf1", "albert_config.json"))
    logging.info("wrote %s and TF1 checkpoint %s", keras_path, tf1_prefix)
    return {"keras_model": keras_path, "tf1_checkpoint": tf1_prefix}
