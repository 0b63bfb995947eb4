"""ALBERT pretraining: the original `run_pretraining.py` flags on Keras 3 + tf.distribute.

  python pipelines/pretrain.py                     # no flags: the whole demo pipeline on the
                                                   # bundled sample corpus (see README)
  python pipelines/pretrain.py --input_file=data/*.tfrecord --output_dir=runs/base \
      --albert_config_file=albert_config.json --tpu=my-tpu --train_batch_size=4096

Running the same command again resumes from the last checkpoint in --output_dir.
"""

import json
import pathlib
import sys

sys.path.insert(
    0, str(pathlib.Path(__file__).resolve().parents[1])
)  # run from a checkout, uninstalled

from pipelines import _cli  # first: TensorFlow's log level must be set before it loads
from pipelines import _distribution_flags
from absl import app, flags, logging

FLAGS = flags.FLAGS
# --- the original run_pretraining.py flags (same names and defaults) ---
flags.DEFINE_string("albert_config_file", None, "The albert_config.json of the model to train.")
flags.DEFINE_string("input_file", None, "Comma-separated globs of training TFRecords.")
flags.DEFINE_string("output_dir", None, "Where checkpoints, summaries and the model are written.")
flags.DEFINE_string(
    "init_checkpoint",
    None,
    "Initial weights: an original TF1 checkpoint (prefix or directory) or a .keras.",
)
flags.DEFINE_integer("max_seq_length", 512, "Sequence length of the TFRecords.")
flags.DEFINE_integer(
    "max_predictions_per_seq",
    None,
    "Masked positions per sequence in the TFRecords, or per example masked with "
    "--masking=dynamic (default: min(20, --max_seq_length)).",
)
flags.DEFINE_bool("do_train", True, "Train.")
flags.DEFINE_bool("do_eval", False, "Evaluate at the end (on --eval_input_file if given).")
flags.DEFINE_integer("train_batch_size", 4096, "Global batch size of one optimizer update.")
flags.DEFINE_integer("eval_batch_size", 64, "Global eval batch size.")
flags.DEFINE_enum("optimizer", "lamb", ["adamw", "lamb"], "The original optimizers.")
flags.DEFINE_float("learning_rate", 0.00176, "Peak learning rate.")
flags.DEFINE_float("poly_power", 1.0, "Exponent of the polynomial decay.")
flags.DEFINE_integer("num_train_steps", 125000, "Optimizer updates.")
flags.DEFINE_integer("num_warmup_steps", 3125, "Linear warmup updates.")
flags.DEFINE_integer("start_warmup_step", 0, "Step at which warmup starts.")
flags.DEFINE_integer("save_checkpoints_steps", 5000, "Checkpoint every this many updates.")
flags.DEFINE_integer("keep_checkpoint_max", 5, "Checkpoints kept.")
flags.DEFINE_integer(
    "iterations_per_loop",
    1000,
    "Steps per device loop (Keras steps_per_execution; capped to divide "
    "--save_checkpoints_steps and --log_every_steps).",
)
flags.DEFINE_integer("max_eval_steps", 100, "Eval batches.")
flags.DEFINE_bool("use_tpu", False, "Use a TPU (same as --strategy=tpu).")
flags.DEFINE_string("tpu_name", None, "TPU name or grpc:// address (alias of --tpu).")
flags.DEFINE_string("tpu_zone", None, "GCE zone of the TPU.")
flags.DEFINE_string("gcp_project", None, "GCP project of the TPU.")
flags.DEFINE_string("master", None, "TF master address (TF1 compatibility; same as --tpu).")
flags.DEFINE_integer("num_tpu_cores", 8, "Accepted for compatibility; the TPU system decides.")
# --- ours ---
flags.DEFINE_string("tpu", None, "TPU to train on: name, grpc:// address or 'local'.")
flags.DEFINE_enum(
    "strategy",
    "auto",
    list(_distribution_flags.STRATEGIES),
    "tf.distribute strategy; auto picks TPU / multi-worker (TF_CONFIG) / "
    "mirrored (several GPUs) / one device.",
)
flags.DEFINE_enum("mixed_precision", "none", ["none", "bf16", "fp16"], "Compute precision.")
flags.DEFINE_integer(
    "gradient_accumulation_steps",
    1,
    "Micro-batches per update (single replica); each is "
    "train_batch_size / gradient_accumulation_steps.",
)
flags.DEFINE_string(
    "eval_input_file",
    None,
    "Held-out TFRecords for --do_eval (the original evaluated on training data). Several "
    "record sets scored apart, e.g. SOP and NSP records of the same text: "
    "name=glob,name=glob (sop=heldout_sop.tfrecord,nsp=heldout_nsp.tfrecord); the results "
    "give each set's metrics and the MLM, SOP and NSP accuracy.",
)
flags.DEFINE_enum(
    "sentence_task",
    "auto",
    ["auto", "sop", "nsp", "none"],
    "The sentence loss trained beside MLM. auto: the records' (SOP, or NSP when data prep "
    "wrote them with --random_next_sentence, per its .summary.json beside them; SOP without "
    "one); sop / nsp: the same, checked against that summary; none: MLM alone from the same "
    "records (the pooler and sentence head stay untrained, in the checkpoints as always).",
)
flags.DEFINE_integer("log_every_steps", 100, "Progress line and summaries every N updates.")
flags.DEFINE_integer("shuffle_buffer", 100, "Record shuffle buffer (the original's 100).")
flags.DEFINE_integer(
    "seed",
    None,
    "Seed for the input order and the masks of unmasked records (None: nondeterministic, as "
    "the original's sloppy interleave; masks from a random seed, logged).",
)
flags.DEFINE_bool(
    "jit_compile",
    None,
    "XLA-compile the train step (default: wherever Keras "
    "supports it for the strategy, except fp32 and bf16 on CPU, which run faster "
    "through oneDNN's matmuls than through XLA:CPU: ~6% for fp32, ~2.2x for bf16).",
)
flags.DEFINE_enum(
    "masking",
    "auto",
    ["auto", "static", "dynamic"],
    "static: the records are masked (the original's). dynamic: they are unmasked "
    "(input_ids, input_mask, segment_ids, token_boundary, next_sentence_labels) and every "
    "example is masked afresh each time it is read, by the data prep's n-gram whole-word "
    "algorithm, from --seed (a random seed without it), continuing after a resume. auto: "
    "from the first record of the first file. Speaks for --input_file: the records of "
    "--eval_input_file are always read as they are (auto).",
)
# --- the original create_pretraining_data.py masking flags (same names and defaults), used by
# --masking=dynamic; --max_predictions_per_seq above is its fourth.
flags.DEFINE_float("masked_lm_prob", 0.15, "Masked LM probability (--masking=dynamic).")
flags.DEFINE_integer("ngram", 3, "Maximum n-gram length (words) to mask (--masking=dynamic).")
flags.DEFINE_bool(
    "favor_shorter_ngram", True, "p(n) ∝ 1/n; otherwise reversed (--masking=dynamic)."
)
flags.DEFINE_bool(
    "do_whole_word_mask", True, "Mask whole words, all pieces together (--masking=dynamic)."
)
flags.DEFINE_bool(
    "skip_corrupt_records",
    False,
    "Skip and count input records that are corrupt "
    "(bad CRC), cut, or whose feature lengths do not fit the flags: every record "
    "is checked before training and files holding bad ones are read from repaired "
    "copies under <output_dir>/repaired_records (the inputs are never modified); "
    "the count per file is logged and returned as skipped_records. Without it a "
    "bad record stops the run with one line naming file, record and byte offset.",
)


def main(argv):
    del argv
    if FLAGS.input_file is None and FLAGS.output_dir is None and FLAGS.albert_config_file is None:
        from pipelines import demo_pipeline

        demo_pipeline.run()
        return
    for name in ("input_file", "output_dir", "albert_config_file"):
        if not getattr(FLAGS, name):
            raise app.UsageError(f"--{name} is required (or give no flags at all for the demo)")

    from albert_tf.checkpoints import CheckpointMismatchError
    from albert_tf.config import AlbertConfig
    from albert_tf.training.callbacks import NonFiniteLossError
    from albert_tf.training.distribution import TPUUnavailableError
    from albert_tf.training.pretraining import run_pretraining
    from albert_tf.training.pretraining_options import PretrainingOptions, SettingsError
    from albert_tf.training.record_checks import CorruptRecordError

    try:
        try:
            config = AlbertConfig.from_json_file(FLAGS.albert_config_file)
        except ValueError as error:
            raise SettingsError(f"--albert_config_file: {error}") from error
        strategy = _distribution_flags.strategy_from_flags()
        options = PretrainingOptions(
            **{field: getattr(FLAGS, field) for field in PretrainingOptions.__dataclass_fields__}
        )
        results = run_pretraining(options, config, strategy)
    except (
        TPUUnavailableError,
        NonFiniteLossError,
        SettingsError,
        CheckpointMismatchError,
        CorruptRecordError,
        FileNotFoundError,
    ) as error:
        logging.error("%s: %s", type(error).__name__, error)
        sys.exit(1)
    logging.info("done: %s", json.dumps(results, indent=2, sort_keys=True, default=str))


if __name__ == "__main__":
    _cli.run(main, tensorflow=True)
