r"""Fine-tune ALBERT on RACE, with the flags of the original `run_race.py`.

    python pipelines/run_race.py --recipe=race --data_dir=data --spm_model_file=30k-clean.model \
        --albert_config_file=albert_config.json --init_checkpoint=pretrained/model.ckpt-best \
        --output_dir=out/race --do_train --do_eval

--data_dir holds RACE/{train,dev,test}/{middle,high}/all.txt. --recipe=race applies the original
release's recipe (lr 1e-5, batch 32, 12000 steps, warmup 1000, seq 512, max_qa_length 128, a
checkpoint every 100 steps); flags given explicitly win. As the original, --do_train and --do_eval
default to true. Outputs in --output_dir: `model.ckpt-<step>` (TF1 names), `eval_results.json`
(every checkpoint's dev accuracy overall / middle / high and loss; final and best), `model.ckpt-best`,
and with --do_predict the test split's `predict_results.txt` and `test_predictions.tsv`.
Without --do_train, --init_checkpoint itself is evaluated and predicted (else the checkpoints of
--output_dir). Running the same command again resumes training from the last checkpoint.
"""

import pathlib
import sys

sys.path.insert(
    0, str(pathlib.Path(__file__).resolve().parents[1])
)  # run from a checkout, uninstalled

from pipelines import _cli  # first: TensorFlow's log level must be set before it loads
from pipelines import _distribution_flags
from absl import app, flags, logging

FLAGS = flags.FLAGS

# The original's flags, same names and defaults.
flags.DEFINE_string("data_dir", None, "The folder holding RACE/{train,dev,test}/{middle,high}/.")
flags.DEFINE_string("albert_config_file", None, "albert_config.json of the model.")
flags.DEFINE_string("task_name", "race", "The task: race.")
flags.DEFINE_string("vocab_file", None, "Accepted for compatibility; unused (SentencePiece).")
flags.DEFINE_string(
    "train_file", None, "TFRecord cache of the train split. Default: <output_dir>/train.tf_record."
)
flags.DEFINE_string(
    "eval_file", None, "TFRecord cache of the dev split. Default: <output_dir>/eval.tf_record."
)
flags.DEFINE_string(
    "predict_file",
    None,
    "TFRecord cache of the test split. Default: <output_dir>/predict.tf_record.",
)
flags.DEFINE_string("spm_model_file", None, "SentencePiece model, e.g. 30k-clean.model.")
flags.DEFINE_string("output_dir", None, "Where checkpoints, results and predictions go.")
flags.DEFINE_string(
    "init_checkpoint",
    None,
    "Initial weights: an original TF1 checkpoint (pretraining or RACE), ours (TF1), or a .keras "
    "file. Without --do_train, the checkpoint to evaluate and predict.",
)
flags.DEFINE_string(
    "albert_hub_module_handle", None, "Not supported (TF1 hub.Module); use --init_checkpoint."
)
flags.DEFINE_bool("do_lower_case", True, "Lowercase the text (uncased models).")
flags.DEFINE_float("dropout_prob", 0.1, "Dropout on the pooled output (the v2 recipe used 0).")
flags.DEFINE_integer("max_seq_length", 512, "Tokens per packed choice, padded.")
flags.DEFINE_integer("max_qa_length", 128, "Pieces kept from the end of question + option.")
flags.DEFINE_integer("num_keep_checkpoint", 5, "Accepted for compatibility (unused there too).")
flags.DEFINE_bool("high_only", False, "Read the high school questions only.")
flags.DEFINE_bool("middle_only", False, "Read the middle school questions only.")
flags.DEFINE_bool("do_train", True, "Fine-tune on the train split.")
flags.DEFINE_bool(
    "do_eval",
    True,
    "Score every checkpoint on dev; write eval_results.json with the final and the best, "
    "copy the best to model.ckpt-best.",
)
flags.DEFINE_bool("do_predict", False, "Score and answer the test split with the best checkpoint.")
flags.DEFINE_integer("train_batch_size", 32, "Batch size for training.")
flags.DEFINE_integer("eval_batch_size", 8, "Batch size for eval.")
flags.DEFINE_integer("predict_batch_size", 8, "Batch size for prediction.")
flags.DEFINE_float("learning_rate", 1e-5, "Initial learning rate (linear decay to 0).")
flags.DEFINE_integer("train_step", 12000, "Total number of training steps.")
flags.DEFINE_integer("warmup_step", 1000, "Linear learning-rate warmup steps.")
flags.DEFINE_integer(
    "save_checkpoints_steps", 100, "Save (and evaluate) a checkpoint every N steps."
)
_distribution_flags.define_tpu_and_distribution_flags()
flags.adopt_module_key_flags(_cli)  # --help lists them as this script's

# Additions.
flags.DEFINE_enum(
    "recipe",
    None,
    ["race"],
    "Apply the original release's RACE recipe; flags given explicitly win.",
)
flags.DEFINE_enum("optimizer", "adamw", ["adamw", "lamb"], "The original optimizers.")
flags.DEFINE_string(
    "export_dir",
    None,
    "Save race.keras (with its config, SentencePiece model and race_info.json) here.",
)
flags.DEFINE_bool(
    "keep_all_checkpoints",
    False,
    "Keep every checkpoint; by default those neither best nor last are deleted, as the original.",
)
flags.DEFINE_bool("jit_compile", False, "XLA-compile training.")
flags.DEFINE_integer("random_seed", 12345, "Seed of initialisation, dropout and shuffling.")
flags.DEFINE_integer("log_every_steps", 50, "Log loss and learning rate every N steps.")

flags.mark_flags_as_required(["data_dir", "spm_model_file", "output_dir"])


def config_from_flags():
    """The job's `RaceConfig` from the parsed flags (recipe applied)."""
    from albert_tf.tasks.race.finetune import RaceConfig

    return RaceConfig(
        data_dir=FLAGS.data_dir,
        output_dir=FLAGS.output_dir,
        spm_model_file=FLAGS.spm_model_file,
        albert_config_file=FLAGS.albert_config_file,
        init_checkpoint=FLAGS.init_checkpoint,
        task_name=FLAGS.task_name,
        train_file=FLAGS.train_file,
        eval_file=FLAGS.eval_file,
        predict_file=FLAGS.predict_file,
        do_lower_case=FLAGS.do_lower_case,
        dropout_prob=FLAGS.dropout_prob,
        max_seq_length=FLAGS.max_seq_length,
        max_qa_length=FLAGS.max_qa_length,
        high_only=FLAGS.high_only,
        middle_only=FLAGS.middle_only,
        train_batch_size=FLAGS.train_batch_size,
        eval_batch_size=FLAGS.eval_batch_size,
        predict_batch_size=FLAGS.predict_batch_size,
        learning_rate=FLAGS.learning_rate,
        train_step=FLAGS.train_step,
        warmup_step=FLAGS.warmup_step,
        save_checkpoints_steps=FLAGS.save_checkpoints_steps,
        optimizer=FLAGS.optimizer,
        export_dir=FLAGS.export_dir,
        keep_all_checkpoints=FLAGS.keep_all_checkpoints,
        jit_compile=FLAGS.jit_compile,
        mixed_precision=FLAGS.mixed_precision,
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
    if FLAGS.recipe is not None:
        from albert_tf.tasks.race.finetune import RECIPES

        _distribution_flags.apply_recipe(RECIPES[FLAGS.recipe])
    _distribution_flags.note_ignored_flags(
        ("iterations_per_loop", "num_tpu_cores", "num_keep_checkpoint")
    )
    if not (FLAGS.do_train or FLAGS.do_eval or FLAGS.do_predict):
        raise app.UsageError("At least one of `do_train`, `do_eval` or `do_predict' must be True.")
    from albert_tf.tasks.race import finetune
    from albert_tf.training.distribution import TPUUnavailableError

    def job():
        config = config_from_flags()
        logging.info("Fine-tuning config: %s", config)
        return finetune.run(
            config,
            FLAGS.do_train,
            FLAGS.do_eval,
            FLAGS.do_predict,
            strategy=_distribution_flags.strategy_from_flags(),
        )

    summary = _cli.exit_on_bad_input(job, (OSError, ValueError, TPUUnavailableError))
    if "eval" in summary:
        for which in ("final", "best"):
            entry = summary["eval"][which]
            logging.info("%s checkpoint (step %d): %s", which, entry["step"], entry["metrics"])


if __name__ == "__main__":
    _cli.run(main, tensorflow=True)
