"""The lift study's runs through the library's entry points: the precision check, pretraining
(`run_pretraining`, checkpoints kept every `checkpoint_every` steps), each checkpoint and the
random init scored on the held-out records and saved as `.keras` (`run_pretraining` with no
training, resuming from that checkpoint), and GLUE fine-tunes (`finetune_glue`)."""

from __future__ import annotations

import dataclasses
import glob
import math
import os
import shutil
import statistics

from benchmarks.ablations.runs import finetune_glue, loss_curves
from benchmarks.lift.settings import LiftSettings
from pipelines.demo_pipeline import small_run_options

PRETRAINING = "pretraining"


def albert_config(s: LiftSettings):
    from albert_tf.config import AlbertConfig

    return AlbertConfig(vocab_size=s.vocab_size, **s.model)


def _options(s: LiftSettings, records: dict, output_dir: str, **settings):
    defaults = dict(
        input_file=records["train"]["path"],
        eval_input_file=f"sop={records['heldout']['path']}",
        save_checkpoints_steps=s.checkpoint_every,
        keep_checkpoint_max=s.num_train_steps // s.checkpoint_every + 1,
        log_every_steps=s.log_every_steps,
        shuffle_buffer=10000,
        seed=s.pretrain_seed,  # the order the records are read in and their masks
        masking="dynamic",
    )
    return dataclasses.replace(small_run_options(s, output_dir=output_dir, **defaults), **settings)


def _pretraining_run(s: LiftSettings, options) -> dict:
    import keras

    from albert_tf.training.distribution import build_strategy
    from albert_tf.training.pretraining import run_pretraining

    keras.backend.clear_session()
    keras.utils.set_random_seed(s.pretrain_seed)  # the initial weights
    return run_pretraining(options, albert_config(s), build_strategy("one_device"))


def has_bf16_units() -> bool:
    """Whether the CPU has bfloat16 matrix instructions (AVX512_BF16 or AMX-BF16)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "").split()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def precision_check(s: LiftSettings, records: dict, steps: int) -> dict:
    """`steps` pretraining steps from the same start in fp32 and in bf16: examples/s (median of
    the reports after the first, which holds the tracing) and the last reported losses."""
    measured = {}
    for precision in ("none", "bf16"):
        options = _options(
            s,
            records,
            os.path.join(s.work_dir, "runs", "precision_check", precision),
            num_train_steps=steps,
            log_every_steps=max(1, steps // 6),
            do_eval=False,
            eval_input_file=None,
            mixed_precision=precision,
        )
        history = _pretraining_run(s, options)["train_history"]
        measured[precision] = {
            "examples_per_second": statistics.median(h["examples_per_second"] for h in history[1:]),
            "loss": history[-1]["loss"],
            "masked_lm_loss": history[-1].get("masked_lm_loss"),
        }
    measured["bf16_speedup"] = (
        measured["bf16"]["examples_per_second"] / measured["none"]["examples_per_second"]
    )
    return measured


def pretrain(s: LiftSettings, records: dict, mixed_precision: str, start: int, end: int) -> dict:
    """The pretraining phase from step `start` (0, or where the previous phase's schedule reached
    0) to `end`, resumed if interrupted: warmup from `start` to the phase's peak rate, decay to 0
    at `end`; scored on the held-out records at its end."""
    output_dir = os.path.join(s.work_dir, "runs", PRETRAINING)
    options = _options(
        s,
        records,
        output_dir,
        do_train=True,
        do_eval=True,
        mixed_precision=mixed_precision,
        num_train_steps=end,
        start_warmup_step=start,
        learning_rate=s.peak_learning_rate(start),
    )
    results = _pretraining_run(s, options)
    return {
        "keras_model": results["keras_model"],
        "tf1_checkpoint": results["tf1_checkpoint"],
        "curves": loss_curves(os.path.join(output_dir, "logs", "train")),
    }


def score_checkpoint(s: LiftSettings, records: dict, step: int, mixed_precision: str) -> dict:
    """Held-out MLM and SOP accuracy of the model at `step` (0: the random init, the weights
    pretraining started from) and that model as `.keras`: its checkpoint is copied into a run
    folder of its own, which `run_pretraining` resumes from without training."""
    import tensorflow as tf

    output_dir = os.path.join(s.work_dir, "runs", f"step-{step}")
    if step:
        source = os.path.join(s.work_dir, "runs", PRETRAINING, "checkpoints", f"ckpt-{step}")
        target = os.path.join(output_dir, "checkpoints")
        os.makedirs(target, exist_ok=True)
        for path in glob.glob(source + ".*"):
            shutil.copy2(path, target)
        # The state file naming it, as training leaves it.
        tf.compat.v1.train.update_checkpoint_state(target, f"ckpt-{step}")
    options = _options(
        s, records, output_dir, do_train=False, do_eval=True, mixed_precision=mixed_precision
    )
    results = _pretraining_run(s, options)
    accuracy = results["eval"]["accuracy"]
    if results["global_step"] != step:
        raise RuntimeError(f"{output_dir}: scored step {results['global_step']}, not {step}")
    return {
        "step": step,
        "keras_model": results["keras_model"],
        "mlm": accuracy["mlm"],
        "sop": accuracy["sop"],
    }


def finetune_steps(s: LiftSettings, train_rows: int) -> int:
    """Steps of `finetune_epochs` over `train_rows` at the fine-tuning batch size."""
    return max(1, math.ceil(s.finetune_epochs * train_rows / s.finetune_batch_size))


def finetune(
    s: LiftSettings,
    task: str,
    glue_dir: str,
    train_rows: int,
    init: str,
    output_dir: str,
    learning_rate: float,
    seed: int,
    spm_model_file: str,
) -> dict:
    """One fine-tune; returns its dev metrics and the trivial baseline beside them."""
    steps = finetune_steps(s, train_rows)
    result = finetune_glue(
        task,
        glue_dir,
        output_dir,
        init,
        spm_model_file,
        max_seq_length=s.finetune_max_seq_length,
        train_step=steps,
        warmup_step=max(1, round(steps * s.finetune_warmup_share)),
        learning_rate=learning_rate,
        train_batch_size=s.finetune_batch_size,
        seed=seed,
    )
    shutil.rmtree(output_dir, ignore_errors=True)  # checkpoints of a score already kept
    metrics = {k: result["metrics"][k] for k in ("eval_accuracy", "f1") if k in result["metrics"]}
    return {"metrics": metrics, "baseline": result.get("baseline")}
