"""The settings of a pretraining run (the original `run_pretraining.py` flags), their checks, and
what is derived from them alone: the XLA choice, steps per execution, the dynamic masking."""

from __future__ import annotations

import dataclasses
import math

from albert_tf.config import AlbertConfig, resolve_max_predictions_per_seq
from albert_tf.records import MASKING_MODES
from albert_tf.settings import MIXED_PRECISIONS, OPTIMIZERS, OUTPUT_DIR, setting

SENTENCE_TASKS = ("auto", "sop", "nsp", "none")


@dataclasses.dataclass
class PretrainingOptions:
    """Settings of a run; names and defaults are the original `run_pretraining.py` flags (each
    field is that flag: `pipelines/pretrain.py` defines them from here).

    Args:
        every field is one flag, its help text in its `setting` (`pretrain.py --help`).

    Example:
        options = PretrainingOptions(input_file="train.tfrecord", output_dir="out",
                                     albert_config_file="albert_config.json", do_train=True)
    """

    input_file: str = setting(help="Comma-separated globs of training TFRecords.")
    output_dir: str = setting(
        help="Where checkpoints, summaries and the model are written.", path=OUTPUT_DIR
    )
    eval_input_file: str | None = setting(
        None,
        "Held-out TFRecords for --do_eval (the original evaluated on training data). Several "
        "record sets scored apart, e.g. SOP and NSP records of the same text: "
        "name=glob,name=glob (sop=heldout_sop.tfrecord,nsp=heldout_nsp.tfrecord); the results "
        "give each set's metrics and the MLM, SOP and NSP accuracy.",
    )
    init_checkpoint: str | None = setting(
        None, "Initial weights: an original TF1 checkpoint (prefix or directory) or a .keras."
    )
    hf_model: str | None = setting(
        None,
        "Initial weights from a Hugging Face transformers ALBERT folder (config.json + "
        "model.safetensors, e.g. a Hub model), instead of --init_checkpoint; its config.json is "
        "the model config unless --albert_config_file is given. What its class lacks (the SOP "
        "head of an AlbertForMaskedLM, the MLM head of an AlbertModel) starts fresh, with a "
        "warning.",
    )
    max_seq_length: int = setting(512, "Sequence length of the TFRecords.")
    max_predictions_per_seq: int | None = setting(
        None,
        "Masked positions per sequence in the TFRecords, or per example masked with "
        "--masking=dynamic (default: min(20, --max_seq_length)).",
    )
    train_batch_size: int = setting(4096, "Global batch size of one optimizer update.")
    eval_batch_size: int = setting(64, "Global eval batch size.")
    optimizer: str = setting("lamb", "The original optimizers.", choices=OPTIMIZERS)
    learning_rate: float = setting(0.00176, "Peak learning rate.")
    poly_power: float = setting(1.0, "Exponent of the polynomial decay.")
    num_train_steps: int = setting(125000, "Optimizer updates.")
    num_warmup_steps: int = setting(3125, "Linear warmup updates.")
    start_warmup_step: int = setting(0, "Step at which warmup starts.")
    save_checkpoints_steps: int = setting(5000, "Checkpoint every this many updates.")
    keep_checkpoint_max: int = setting(5, "Checkpoints kept.")
    iterations_per_loop: int = setting(
        1000,
        "Steps per device loop (Keras steps_per_execution; at most --log_every_steps and "
        "cut to divide --save_checkpoints_steps).",
    )
    max_eval_steps: int = setting(100, "Eval batches.")
    do_train: bool = setting(True, "Train.")
    do_eval: bool = setting(False, "Evaluate at the end (on --eval_input_file if given).")
    mixed_precision: str = setting("none", "Compute precision.", choices=MIXED_PRECISIONS)
    gradient_accumulation_steps: int = setting(
        1,
        "Micro-batches per update (single replica); each is "
        "train_batch_size / gradient_accumulation_steps.",
    )
    jit_compile: bool | None = setting(
        None,
        "XLA-compile the train step (default: wherever Keras supports it for the strategy, "
        "except fp32 and bf16 on CPU, which run faster through oneDNN's matmuls than through "
        "XLA:CPU: ~6% for fp32, ~2.2x for bf16).",
    )
    log_every_steps: int = setting(100, "Progress line and summaries every N updates.")
    shuffle_buffer: int = setting(100, "Record shuffle buffer (the original's 100).")
    seed: int | None = setting(
        None,
        "Seed for the input order and the masks of unmasked records (None: nondeterministic, "
        "as the original's sloppy interleave; masks from a random seed, logged).",
    )
    skip_corrupt_records: bool = setting(
        False,
        "Skip and count input records that are corrupt (bad CRC), cut, or whose feature "
        "lengths do not fit the flags: every record is checked before training and files "
        "holding bad ones are read from repaired copies under <output_dir>/repaired_records "
        "(the inputs are never modified); the count per file is logged and returned as "
        "skipped_records. Without it a bad record stops the run with one line naming file, "
        "record and byte offset.",
    )
    sentence_task: str = setting(
        "auto",
        "The sentence loss trained beside MLM. auto: the records' (SOP, or NSP when data prep "
        "wrote them with --random_next_sentence, per its .summary.json beside them; SOP without "
        "one); sop / nsp: the same, checked against that summary; none: MLM alone from the same "
        "records (the pooler and sentence head stay untrained, in the checkpoints as always).",
        choices=SENTENCE_TASKS,
    )
    # Masked or unmasked records (see `input_pipeline.pretraining_dataset`); the masking of
    # unmasked ones: the original `create_pretraining_data.py` flags and defaults. `masking`
    # is that of `input_file`; `eval_input_file` is always detected.
    masking: str = setting(
        "auto",
        "static: the records are masked (the original's). dynamic: they are unmasked "
        "(input_ids, input_mask, segment_ids, token_boundary, next_sentence_labels) and every "
        "example is masked afresh each time it is read, by the data prep's n-gram whole-word "
        "algorithm, from --seed (a random seed without it), continuing after a resume. auto: "
        "from the first record of the first file. Speaks for --input_file: the records of "
        "--eval_input_file are always read as they are (auto).",
        choices=MASKING_MODES,
    )
    masked_lm_prob: float = setting(0.15, "Masked LM probability (--masking=dynamic).")
    ngram: int = setting(3, "Maximum n-gram length (words) to mask (--masking=dynamic).")
    favor_shorter_ngram: bool = setting(True, "p(n) ∝ 1/n; otherwise reversed (--masking=dynamic).")
    do_whole_word_mask: bool = setting(
        True, "Mask whole words, all pieces together (--masking=dynamic)."
    )

    def __post_init__(self):
        self.max_predictions_per_seq = resolve_max_predictions_per_seq(
            self.max_predictions_per_seq, self.max_seq_length
        )


class SettingsError(ValueError):
    """A setting (flag) that cannot run; the message names the flag."""


def validate(options: PretrainingOptions, config: AlbertConfig, replicas: int) -> None:
    """Raise SettingsError for settings that cannot run, naming the flag."""
    o = options
    if o.init_checkpoint and o.hf_model:
        raise SettingsError(
            f"--init_checkpoint={o.init_checkpoint} and --hf_model={o.hf_model} both give the "
            "initial weights: give one of them"
        )
    if o.max_seq_length > config.max_position_embeddings:
        raise SettingsError(
            f"--max_seq_length={o.max_seq_length} exceeds max_position_embeddings="
            f"{config.max_position_embeddings} of the config"
        )
    if o.eval_input_file and not o.do_eval:
        # Refused rather than turned on: evaluation takes time the user did not ask for.
        raise SettingsError(
            "--eval_input_file is set but --do_eval is not: add --do_eval to evaluate on it, or "
            "drop --eval_input_file"
        )
    if o.mixed_precision not in MIXED_PRECISIONS:
        raise SettingsError(f"--mixed_precision must be one of {sorted(MIXED_PRECISIONS)}")
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


def use_xla(options: PretrainingOptions, strategy) -> bool:
    """Whether the train step is XLA-compiled on `strategy` (a tf.distribute.Strategy):
    `options.jit_compile` if set, else the default."""
    import tensorflow as tf  # here: the CLI defines its flags from this module

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
    """Keras `steps_per_execution`: `iterations_per_loop`, at most `log_every_steps`, cut to
    divide a checkpoint interval (Keras's epoch) so that saves land on exact steps."""
    micro_steps = options.save_checkpoints_steps * options.gradient_accumulation_steps
    return math.gcd(min(options.iterations_per_loop, options.log_every_steps), micro_steps)


def masking_settings(o: PretrainingOptions, config: AlbertConfig):
    """How unmasked records are masked (an `input_pipeline.DynamicMasking`): the masking flags
    over the model's vocabulary."""
    from albert_tf.training.input_pipeline import DynamicMasking

    return DynamicMasking(
        vocab_size=config.vocab_size,
        masked_lm_prob=o.masked_lm_prob,
        ngram=o.ngram,
        favor_shorter_ngram=o.favor_shorter_ngram,
        do_whole_word_mask=o.do_whole_word_mask,
    )
