r"""Fine-tune ALBERT on a GLUE task, with the flags of the original `run_classifier.py`.

    python pipelines/finetune.py --recipe=mrpc --data_dir=glue --spm_model_file=30k-clean.model \
        --albert_config_file=albert_config.json --init_checkpoint=pretrained/model.ckpt-best \
        --output_dir=out/mrpc --do_train --do_eval --do_predict --export_dir=out/mrpc/export

--recipe=<task> applies that task's hyper-parameters from the original `run_glue.sh`
(learning_rate, train_batch_size, train_step, warmup_step, save_checkpoints_steps, plus
max_seq_length 512, adamw, lowercasing); any of those flags given explicitly on the command line
wins over the recipe. Outputs in --output_dir: `model.ckpt-<step>` (TF1 names), `eval_results.json`
(final and best checkpoint), `model.ckpt-best`, `test_results.tsv` and the GLUE submission file.
"""

import pathlib
import sys

sys.path.insert(
    0, str(pathlib.Path(__file__).resolve().parents[1])
)  # run from a checkout, uninstalled

from pipelines import _cli  # first: TensorFlow's log level must be set before it loads
from absl import app, flags, logging

_cli.import_tensorflow_quietly()  # the next line imports it, for the recipes
from albert_tf.tasks.glue import finetune as finetuning  # noqa: E402
from albert_tf.tasks.glue import processors as glue  # noqa: E402

FLAGS = flags.FLAGS

# The original's flags, same names and defaults.
flags.DEFINE_string(
    "data_dir",
    None,
    "GLUE root holding the task folders (SST-2/train.tsv, ...), "
    "as the original; the task folder itself also works.",
)
flags.DEFINE_string(
    "task_name",
    None,
    f"GLUE task: {', '.join(sorted(glue.TASKS))} (case-insensitive). Defaults to --recipe.",
)
flags.DEFINE_string("spm_model_file", None, "SentencePiece model, e.g. 30k-clean.model.")
flags.DEFINE_string("vocab_file", None, "Accepted for compatibility; unused (SentencePiece only).")
flags.DEFINE_string(
    "albert_hub_module_handle",
    None,
    "Not supported (TF1 hub.Module); accepted empty, "
    "as run_glue.sh passes it. Use --init_checkpoint.",
)
flags.DEFINE_bool(
    "do_lower_case", True, "Lowercase the text (the released English models are uncased)."
)
flags.DEFINE_string(
    "albert_config_file",
    None,
    "albert_config.json of the model. Optional when "
    "--init_checkpoint is a .keras file or a TF1 checkpoint with albert_config.json "
    "beside it, or for eval/predict of an --output_dir that training wrote.",
)
flags.DEFINE_string(
    "init_checkpoint",
    None,
    "Initial weights: an original TF1 checkpoint (prefix or "
    "directory; pretraining or classifier), ours (TF1 export), or one of our .keras "
    "files (pretrainer, backbone, classifier). The head is loaded too when it has the "
    "task's shape.",
)
flags.DEFINE_string("output_dir", None, "Where checkpoints, eval results and predictions go.")
flags.DEFINE_integer(
    "max_seq_length",
    512,
    "Maximum total tokens after tokenization; longer "
    "inputs are truncated as the original (longer side first).",
)
flags.DEFINE_integer("train_step", 1000, "Total number of training steps.")
flags.DEFINE_integer("warmup_step", 0, "Linear learning-rate warmup steps.")
flags.DEFINE_float(
    "learning_rate", 5e-5, "Initial learning rate (linear decay to 0 at train_step)."
)
flags.DEFINE_integer("train_batch_size", 32, "Batch size for training.")
flags.DEFINE_integer("eval_batch_size", 8, "Batch size for eval.")
flags.DEFINE_integer("predict_batch_size", 8, "Batch size for prediction.")
flags.DEFINE_enum("optimizer", "adamw", ["adamw", "lamb"], "The original optimizers.")
flags.DEFINE_bool("do_train", False, "Fine-tune on the train split.")
flags.DEFINE_bool(
    "do_eval",
    False,
    "Score every checkpoint on dev; write eval_results.json with the "
    "final and the best checkpoint, copy the best to model.ckpt-best.",
)
flags.DEFINE_bool(
    "do_predict",
    False,
    "Predict the test split with model.ckpt-best (else the last "
    "checkpoint); write test_results.tsv and the GLUE submission file.",
)
flags.DEFINE_integer(
    "save_checkpoints_steps",
    1000,
    "Save (and, with --do_train --do_eval, "
    "evaluate) a checkpoint every this many steps, and at the last step.",
)
flags.DEFINE_string(
    "export_dir",
    None,
    "Save classifier.keras (outputs `logits`, `probabilities`) "
    "with its config, SentencePiece model and classifier_info.json here, for "
    "pipelines/export.py --head=classifier.",
)

# Additions.
flags.DEFINE_enum(
    "recipe",
    None,
    sorted(finetuning.RECIPES),
    "Apply run_glue.sh's hyper-parameters "
    "for this task; flags given explicitly on the command line override it.",
    case_sensitive=False,
)
flags.DEFINE_bool(
    "skip_malformed_rows",
    False,
    "Skip (and count) TSV rows with a wrong column count, "
    "an unknown label or bytes that are not UTF-8 instead of stopping with file:line.",
)
flags.DEFINE_bool(
    "keep_all_checkpoints",
    False,
    "Keep every checkpoint; by default evaluation "
    "deletes those that are neither the best nor the last, as the original did.",
)
flags.DEFINE_bool(
    "dynamic_padding",
    True,
    "Pad each batch to its longest example instead of "
    "max_seq_length (same outputs up to rounding, much faster on short texts).",
)
flags.DEFINE_bool("jit_compile", False, "XLA-compile training (implies fixed padding in training).")
flags.DEFINE_integer("random_seed", 12345, "Seed of initialisation, dropout and shuffling.")
flags.DEFINE_integer("log_every_steps", 50, "Log loss and learning rate every this many steps.")

flags.mark_flags_as_required(["data_dir", "spm_model_file", "output_dir"])


def apply_recipe() -> None:
    """Fill flags from --recipe unless given explicitly on the command line."""
    if FLAGS.recipe is None:
        return
    for name, value in finetuning.RECIPES[FLAGS.recipe].items():
        if not FLAGS[name].present:
            setattr(FLAGS, name, value)
    if FLAGS.task_name is None:
        FLAGS.task_name = FLAGS.recipe
    elif FLAGS.task_name.lower() != FLAGS.recipe:
        logging.warning("Using the %s recipe for task %s", FLAGS.recipe, FLAGS.task_name)


def config_from_flags() -> finetuning.FinetuneConfig:
    """The job's configuration from the parsed flags (recipe applied)."""
    return finetuning.FinetuneConfig(
        task_name=FLAGS.task_name,
        data_dir=FLAGS.data_dir,
        output_dir=FLAGS.output_dir,
        spm_model_file=FLAGS.spm_model_file,
        albert_config_file=FLAGS.albert_config_file,
        init_checkpoint=FLAGS.init_checkpoint,
        do_lower_case=FLAGS.do_lower_case,
        max_seq_length=FLAGS.max_seq_length,
        train_step=FLAGS.train_step,
        warmup_step=FLAGS.warmup_step,
        learning_rate=FLAGS.learning_rate,
        train_batch_size=FLAGS.train_batch_size,
        eval_batch_size=FLAGS.eval_batch_size,
        predict_batch_size=FLAGS.predict_batch_size,
        optimizer=FLAGS.optimizer,
        save_checkpoints_steps=FLAGS.save_checkpoints_steps,
        export_dir=FLAGS.export_dir,
        skip_malformed_rows=FLAGS.skip_malformed_rows,
        keep_all_checkpoints=FLAGS.keep_all_checkpoints,
        dynamic_padding=FLAGS.dynamic_padding,
        jit_compile=FLAGS.jit_compile,
        seed=FLAGS.random_seed,
        log_every_steps=FLAGS.log_every_steps,
    )


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    if FLAGS.albert_hub_module_handle:
        raise app.UsageError(
            "--albert_hub_module_handle (TF1 hub.Module) is not supported; pass the "
            "checkpoint as --init_checkpoint"
        )
    apply_recipe()
    if FLAGS.task_name is None:
        raise app.UsageError("--task_name (or --recipe) is required")
    try:
        config = config_from_flags()
        logging.info("Fine-tuning config: %s", config)
        summary = finetuning.run(config, FLAGS.do_train, FLAGS.do_eval, FLAGS.do_predict)
    except (
        OSError,
        ValueError,
    ) as e:  # bad input (files, rows, configs, checkpoints): no traceback
        logging.error("%s: %s", type(e).__name__, e)
        sys.exit(1)
    if "eval" in summary:
        for which in ("final", "best"):
            entry = summary["eval"][which]
            logging.info("%s checkpoint (step %d): %s", which, entry["step"], entry["metrics"])


if __name__ == "__main__":
    _cli.run(main)
