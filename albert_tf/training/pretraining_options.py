"""The settings of a pretraining run (the original `run_pretraining.py` flags), their checks, and
what is derived from them alone: the XLA choice, steps per execution, the dynamic masking."""

from __future__ import annotations

import dataclasses
import math

import tensorflow as tf

from albert_tf.config import AlbertConfig, resolve_max_predictions_per_seq
from albert_tf.training.input_pipeline import MASKING_MODES, DynamicMasking

SENTENCE_TASKS = ("auto", "sop", "nsp", "none")
MIXED_PRECISION_POLICIES = {"none": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}


@dataclasses.dataclass
class PretrainingOptions:
    """Settings of a run; names and defaults are the original `run_pretraining.py` flags."""

    input_file: str
    output_dir: str
    eval_input_file: str | None = None  # held-out data; None evaluates on `input_file` (original)
    init_checkpoint: str | None = None
    max_seq_length: int = 512
    max_predictions_per_seq: int | None = None  # None: min(20, max_seq_length), i.e. 20 at 512
    train_batch_size: int = 4096  # global, per optimizer update
    eval_batch_size: int = 64
    optimizer: str = "lamb"
    learning_rate: float = 0.00176
    poly_power: float = 1.0
    num_train_steps: int = 125000
    num_warmup_steps: int = 3125
    start_warmup_step: int = 0
    save_checkpoints_steps: int = 5000
    keep_checkpoint_max: int = 5
    iterations_per_loop: int = 1000
    max_eval_steps: int = 100
    do_train: bool = True
    do_eval: bool = False
    mixed_precision: str = "none"
    gradient_accumulation_steps: int = 1
    jit_compile: bool | None = None  # None: see `use_xla`
    log_every_steps: int = 100
    shuffle_buffer: int = 100
    seed: int | None = None  # also of the masks of unmasked records (None: a random one)
    skip_corrupt_records: bool = False  # skip (and count) corrupt or misfit records
    # MLM + the records' sentence task (auto: SOP, or NSP when data prep wrote them with
    # random_next_sentence), or "none": MLM alone (`albert_tf.training.sentence_task`).
    sentence_task: str = "auto"
    # Masked or unmasked records (see `input_pipeline.pretraining_dataset`); the masking of
    # unmasked ones: the original `create_pretraining_data.py` flags and defaults. `masking`
    # is that of `input_file`; `eval_input_file` is always detected.
    masking: str = "auto"
    masked_lm_prob: float = 0.15
    ngram: int = 3
    favor_shorter_ngram: bool = True
    do_whole_word_mask: bool = True

    def __post_init__(self):
        self.max_predictions_per_seq = resolve_max_predictions_per_seq(
            self.max_predictions_per_seq, self.max_seq_length
        )


class SettingsError(ValueError):
    """A setting (flag) that cannot run; the message names the flag."""


def validate(options: PretrainingOptions, config: AlbertConfig, replicas: int) -> None:
    """Raise SettingsError for settings that cannot run, naming the flag."""
    o = options
    if o.max_seq_length > config.max_position_embeddings:
        raise SettingsError(
            f"--max_seq_length={o.max_seq_length} exceeds max_position_embeddings="
            f"{config.max_position_embeddings} of the config"
        )
    if o.mixed_precision not in MIXED_PRECISION_POLICIES:
        raise SettingsError(f"--mixed_precision must be one of {sorted(MIXED_PRECISION_POLICIES)}")
    if o.gradient_accumulation_steps < 1:
        raise SettingsError("--gradient_accumulation_steps must be >= 1")
    if o.masking not in MASKING_MODES:
        raise SettingsError(f"--masking must be one of {MASKING_MODES}, got {o.masking!r}")
    if not 0 <= o.masked_lm_prob <= 1:
        raise SettingsError(f"--masked_lm_prob must be in [0, 1], got {o.masked_lm_prob}")
    if o.ngram < 1:
        raise SettingsError(f"--ngram must be >= 1, got {o.ngram}")
    if o.sentence_task not in SENTENCE_TASKS:
        raise SettingsError(
            f"--sentence_task must be one of {SENTENCE_TASKS}, got {o.sentence_task!r}"
        )
    if o.train_batch_size % (replicas * o.gradient_accumulation_steps):
        raise SettingsError(
            f"--train_batch_size={o.train_batch_size} must divide evenly over "
            f"{replicas} replica(s) x {o.gradient_accumulation_steps} accumulation "
            f"steps"
        )
    if o.gradient_accumulation_steps > 1 and replicas > 1:
        # Keras 3.15 cannot accumulate under a multi-replica strategy (merge_call inside cond).
        raise SettingsError(
            "--gradient_accumulation_steps > 1 needs a single replica; with several "
            "replicas raise --train_batch_size instead"
        )
    for name in (
        "num_train_steps",
        "save_checkpoints_steps",
        "iterations_per_loop",
        "train_batch_size",
        "eval_batch_size",
        "keep_checkpoint_max",
    ):
        if getattr(o, name) < 1:
            raise SettingsError(f"--{name} must be >= 1, got {getattr(o, name)}")


def use_xla(options: PretrainingOptions, strategy: tf.distribute.Strategy) -> bool:
    """Whether the train step is XLA-compiled: `options.jit_compile` if set, else the default."""
    if options.jit_compile is not None:
        return options.jit_compile
    if isinstance(strategy, tf.distribute.TPUStrategy):
        return True
    if options.mixed_precision in ("none", "bf16") and not tf.config.list_logical_devices("GPU"):
        # On CPU oneDNN's matmuls beat XLA:CPU's: fp32 steps are ~6% faster without XLA (its
        # elementwise fusion is kept where it counts, by fused_gelu), and bf16 ones ~2.2x, as
        # XLA:CPU does not use AMX (benchmarks/model_throughput.py with and without XLA).
        return False
    # Keras 3.15 fails to XLA-compile a train step spanning several local devices.
    return strategy.num_replicas_in_sync == 1


def steps_per_execution(options: PretrainingOptions) -> int:
    # Must divide an epoch (= one checkpoint interval) so saves land on exact steps.
    micro_steps = options.save_checkpoints_steps * options.gradient_accumulation_steps
    return math.gcd(min(options.iterations_per_loop, options.log_every_steps), micro_steps)


def masking_settings(o: PretrainingOptions, config: AlbertConfig) -> DynamicMasking:
    """How unmasked records are masked: the masking flags over the model's vocabulary."""
    return DynamicMasking(
        vocab_size=config.vocab_size,
        masked_lm_prob=o.masked_lm_prob,
        ngram=o.ngram,
        favor_shorter_ngram=o.favor_shorter_ngram,
        do_whole_word_mask=o.do_whole_word_mask,
    )
