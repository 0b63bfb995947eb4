r"""Fine-tune ALBERT on a GLUE task, with the flags of the original `run_classifier.py`.

    python pipelines/run_classifier.py --recipe=mrpc --data_dir=glue \
        --spm_model_file=30k-clean.model --albert_config_file=albert_config.json \
        --init_checkpoint=pretrained/model.ckpt-best --output_dir=out/mrpc \
        --do_train --do_eval --do_predict --export_dir=out/mrpc/export

--recipe=<task> applies that task's hyper-parameters from the original `run_glue.sh`
(learning_rate, train_batch_size, train_step, warmup_step, save_checkpoints_steps, plus
max_seq_length 512, adamw, lowercasing); any of those flags given explicitly on the command line
wins over the recipe. --strategy (or the original --use_tpu / --tpu_name) picks where it trains,
--mixed_precision its precision. Outputs in --output_dir: `model.ckpt-<step>` (TF1 names),
`eval_results.json` (final and best checkpoint), `model.ckpt-best`, `test_results.tsv` and the
GLUE submission file. Running the same command again resumes training from the last checkpoint.
--hf_model=DIR starts from a Hugging Face transformers folder instead of --init_checkpoint (its
config.json and spiece.model stand in for --albert_config_file and --spm_model_file).
(`pipelines/finetune.py` is the same CLI.)
"""

import pathlib
import sys

sys.path.insert(
    0, str(pathlib.Path(__file__).resolve().parents[1])
)  # run from a checkout, uninstalled

from pipelines import _cli  # noqa: F401  (first: TensorFlow's log level must be set before it loads)
from pipelines._finetune_cli import FinetuneCli, main  # loads TensorFlow quietly: first
from absl import app, flags, logging

from albert_tf.tasks.glue.finetune import RECIPES, FinetuneConfig, GlueFinetuneTask
from pipelines import _distribution_flags


def _task_from_recipe(flag_values) -> None:
    """--task_name defaults to --recipe; a task with another task's recipe is said."""
    if flag_values.recipe is not None:
        if flag_values.task_name is None:
            flag_values.task_name = flag_values.recipe
        elif flag_values.task_name.lower() != flag_values.recipe:
            logging.warning(
                "Using the %s recipe for task %s", flag_values.recipe, flag_values.task_name
            )
    if flag_values.task_name is None:
        raise app.UsageError("--task_name (or --recipe) is required")


CLI = FinetuneCli(
    FinetuneConfig,
    GlueFinetuneTask,
    RECIPES,
    phases={
        "do_train": (False, "Fine-tune on the train split."),
        "do_eval": (
            False,
            "Score every checkpoint on dev; write eval_results.json with the final and the best "
            "checkpoint, copy the best to model.ckpt-best.",
        ),
        "do_predict": (
            False,
            "Predict the test split with model.ckpt-best (else the last checkpoint); write "
            "test_results.tsv and the GLUE submission file.",
        ),
    },
    required=("data_dir", "output_dir"),
    ignored=(*_distribution_flags.IGNORED_ORIGINAL_FLAGS, "cached_dir", "keep_checkpoint_max"),
    after_recipe=_task_from_recipe,
    recipe_help="Apply run_glue.sh's hyper-parameters for this task; flags given explicitly on "
    "the command line override it.",
    recipe_case_sensitive=False,
)


def define_original_flags() -> None:
    """The original's flags that tuned its TFRecord caches and Estimator: accepted, ignored."""
    flags.DEFINE_string(
        "cached_dir", None, "Accepted for compatibility; unused (the TSV files are read directly)."
    )
    flags.DEFINE_integer(
        "keep_checkpoint_max",
        5,
        "Accepted for compatibility; evaluation keeps the best and the last checkpoint "
        "(--keep_all_checkpoints keeps every one).",
    )


def cli() -> None:
    """The `albert-run-classifier` console script: this CLI, as `python pipelines/run_classifier.py`."""
    define_original_flags()
    main(CLI)


if __name__ == "__main__":
    cli()
