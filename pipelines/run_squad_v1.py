r"""Fine-tune ALBERT on SQuAD v1.1, with the flags of the original `run_squad_v1.py`.

    python pipelines/run_squad_v1.py --recipe=squad_v1 --spm_model_file=30k-clean.model \
        --albert_config_file=albert_config.json --init_checkpoint=pretrained/model.ckpt-best \
        --train_file=train-v1.1.json --predict_file=dev-v1.1.json --output_dir=out/squad1 \
        --do_train --do_predict

--recipe=squad_v1 applies the original release's recipe (lr 5e-5, batch 48, 2 epochs, warmup 10 %,
seq 384, stride 128, query 64, n-best 20, max answer 30, a checkpoint every 5000 steps); flags
given explicitly win. Outputs in --output_dir: `model.ckpt-<step>` (TF1 names), `eval_results.json`
(every checkpoint's official EM/F1 on --predict_file when it has answers; final and best),
`model.ckpt-best`, `predictions.json`, `nbest_predictions.json`. --do_predict without --do_train
scores and predicts --init_checkpoint itself (else the checkpoints of --output_dir). Running the
same command again resumes training from the last checkpoint.

This module also holds what run_squad_v2.py shares (`define_flags`, `main_for`).
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
RECIPE_NAMES = ("squad_v1", "squad_v2")


def define_flags(version: str) -> None:
    """The original script's flags (same names and defaults) for SQuAD `version` ("v1"/"v2"),
    then ours."""
    flags.DEFINE_string("albert_config_file", None, "albert_config.json of the model.")
    flags.DEFINE_string("vocab_file", None, "Accepted for compatibility; unused (SentencePiece).")
    flags.DEFINE_string("spm_model_file", None, "SentencePiece model, e.g. 30k-clean.model.")
    flags.DEFINE_string("output_dir", None, "Where checkpoints, results and predictions go.")
    flags.DEFINE_string("train_file", None, "SQuAD json for training, e.g. train-v1.1.json.")
    flags.DEFINE_string(
        "predict_file", None, "SQuAD json to predict (and score, when it has answers)."
    )
    flags.DEFINE_string(
        "train_feature_file",
        None,
        "TFRecord cache of the training windows (built if missing or built with other "
        "settings). Default: <output_dir>/train.tf_record.",
    )
    flags.DEFINE_string(
        "predict_feature_file",
        None,
        "TFRecord cache of the predict windows. Default: <output_dir>/predict.tf_record.",
    )
    flags.DEFINE_string(
        "predict_feature_left_file",
        None,
        "What post-processing needs of the predict windows (JSON; the original pickled them). "
        "Default: <output_dir>/predict_left_file.json.",
    )
    flags.DEFINE_string(
        "init_checkpoint",
        None,
        "Initial weights: an original TF1 checkpoint (pretraining or SQuAD), ours (TF1), or a "
        ".keras file. Without --do_train, the checkpoint to score and predict.",
    )
    flags.DEFINE_string(
        "albert_hub_module_handle", None, "Not supported (TF1 hub.Module); use --init_checkpoint."
    )
    flags.DEFINE_bool("do_lower_case", True, "Lowercase the text (uncased models).")
    flags.DEFINE_integer("max_seq_length", 384, "Tokens per window, padded.")
    flags.DEFINE_integer("doc_stride", 128, "Pieces between the starts of a context's windows.")
    flags.DEFINE_integer("max_query_length", 64, "Question pieces kept.")
    flags.DEFINE_bool("do_train", False, "Fine-tune on --train_file.")
    flags.DEFINE_bool(
        "do_predict",
        False,
        "Predict --predict_file (scoring every checkpoint when it has answers).",
    )
    flags.DEFINE_integer("train_batch_size", 32, "Batch size for training.")
    flags.DEFINE_integer("predict_batch_size", 8, "Batch size for prediction.")
    flags.DEFINE_float("learning_rate", 5e-5, "Initial learning rate (linear decay to 0).")
    flags.DEFINE_float("num_train_epochs", 3.0, "Epochs over the training questions.")
    flags.DEFINE_float("warmup_proportion", 0.1, "Share of the steps with linear warmup.")
    flags.DEFINE_integer(
        "save_checkpoints_steps", 1000, "Save (and score) a checkpoint every N steps."
    )
    flags.DEFINE_integer("n_best_size", 20, "Answers kept per question in nbest_predictions.json.")
    flags.DEFINE_integer("max_answer_length", 30, "Longest answer, in pieces.")
    _distribution_flags.define_tpu_and_distribution_flags()
    flags.DEFINE_string(
        "export_dir",
        None,
        f"Save squad_{version}.keras (with its config, SentencePiece model and "
        "squad_info.json) here, from the best checkpoint"
        + ("." if version == "v1" else " (an addition: the original v2 had no export)."),
    )
    if version == "v1":
        flags.DEFINE_bool("use_einsum", True, "Accepted for compatibility; ignored.")
    else:
        flags.DEFINE_integer("start_n_top", 5, "Beam size for the start positions.")
        flags.DEFINE_integer("end_n_top", 5, "Beam size for the end positions per start.")
        flags.DEFINE_float("dropout_prob", 0.1, "Dropout in the answer-class head.")
    # Additions.
    flags.DEFINE_enum(
        "recipe",
        None,
        list(RECIPE_NAMES),
        "Apply the original release's SQuAD recipe; flags given explicitly win.",
    )
    flags.DEFINE_integer(
        "train_step",
        None,
        "Training steps (default: questions / train_batch_size * num_train_epochs).",
    )
    flags.DEFINE_integer("warmup_step", None, "Warmup steps (default: warmup_proportion of them).")
    flags.DEFINE_enum("optimizer", "adamw", ["adamw", "lamb"], "The original optimizers.")
    flags.DEFINE_bool(
        "keep_all_checkpoints",
        False,
        "Keep every checkpoint; by default those neither best nor last are deleted, as the "
        "original did.",
    )
    flags.DEFINE_bool(
        "skip_bad_answers",
        False,
        "Skip (and count) training questions whose answer is not at its answer_start instead of "
        "stopping with the file and question id.",
    )
    flags.DEFINE_bool("jit_compile", False, "XLA-compile training.")
    flags.DEFINE_integer("random_seed", 12345, "Seed of initialisation, dropout and shuffling.")
    flags.DEFINE_integer("log_every_steps", 50, "Log loss and learning rate every N steps.")
    flags.mark_flags_as_required(["spm_model_file", "output_dir"])


def config_from_flags(version: str):
    """The job's `SquadConfig` from the parsed flags."""
    from albert_tf.tasks.squad.finetune import SquadConfig

    extra = {}
    if version == "v2":
        extra = dict(
            start_n_top=FLAGS.start_n_top,
            end_n_top=FLAGS.end_n_top,
            dropout_prob=FLAGS.dropout_prob,
        )
    return SquadConfig(
        version=version,
        output_dir=FLAGS.output_dir,
        spm_model_file=FLAGS.spm_model_file,
        albert_config_file=FLAGS.albert_config_file,
        init_checkpoint=FLAGS.init_checkpoint,
        train_file=FLAGS.train_file,
        predict_file=FLAGS.predict_file,
        train_feature_file=FLAGS.train_feature_file,
        predict_feature_file=FLAGS.predict_feature_file,
        predict_feature_left_file=FLAGS.predict_feature_left_file,
        do_lower_case=FLAGS.do_lower_case,
        max_seq_length=FLAGS.max_seq_length,
        doc_stride=FLAGS.doc_stride,
        max_query_length=FLAGS.max_query_length,
        train_batch_size=FLAGS.train_batch_size,
        predict_batch_size=FLAGS.predict_batch_size,
        learning_rate=FLAGS.learning_rate,
        num_train_epochs=FLAGS.num_train_epochs,
        warmup_proportion=FLAGS.warmup_proportion,
        train_step=FLAGS.train_step,
        warmup_step=FLAGS.warmup_step,
        save_checkpoints_steps=FLAGS.save_checkpoints_steps,
        n_best_size=FLAGS.n_best_size,
        max_answer_length=FLAGS.max_answer_length,
        optimizer=FLAGS.optimizer,
        export_dir=FLAGS.export_dir,
        keep_all_checkpoints=FLAGS.keep_all_checkpoints,
        skip_bad_answers=FLAGS.skip_bad_answers,
        jit_compile=FLAGS.jit_compile,
        mixed_precision=FLAGS.mixed_precision,
        seed=FLAGS.random_seed,
        log_every_steps=FLAGS.log_every_steps,
        **extra,
    )


def main_for(version: str):
    """The CLI's main() for SQuAD `version`."""

    def main(argv):
        if len(argv) > 1:
            raise app.UsageError(f"unexpected arguments: {argv[1:]}")
        if FLAGS.albert_hub_module_handle:
            raise app.UsageError(
                "--albert_hub_module_handle (TF1 hub.Module) is not supported; pass the "
                "checkpoint as --init_checkpoint"
            )
        if FLAGS.recipe is not None:
            from albert_tf.tasks.squad.finetune import RECIPES

            _distribution_flags.apply_recipe(RECIPES[FLAGS.recipe])
            if FLAGS.recipe != f"squad_{version}":
                logging.warning("Using the %s recipe for SQuAD %s", FLAGS.recipe, version)
        _distribution_flags.note_ignored_flags()
        from albert_tf.tasks.squad import finetune
        from albert_tf.training.distribution import TPUUnavailableError

        def job():
            config = config_from_flags(version)
            logging.info("Fine-tuning config: %s", config)
            return finetune.run(
                config,
                FLAGS.do_train,
                FLAGS.do_predict,
                strategy=_distribution_flags.strategy_from_flags(),
            )

        summary = _cli.exit_on_bad_input(job, (OSError, ValueError, TPUUnavailableError))
        if "eval" in summary:
            for which in ("final", "best"):
                entry = summary["eval"][which]
                logging.info("%s checkpoint (step %d): %s", which, entry["step"], entry["metrics"])

    return main


if __name__ == "__main__":
    define_flags("v1")
    flags.adopt_module_key_flags(_cli)  # --help lists the TPU and distribution flags too
    _cli.run(main_for("v1"), tensorflow=True)
