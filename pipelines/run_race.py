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
--hf_model=DIR starts from a Hugging Face transformers folder instead of --init_checkpoint (its
config.json and spiece.model stand in for --albert_config_file and --spm_model_file).
"""

import pathlib
import sys

sys.path.insert(
    0, str(pathlib.Path(__file__).resolve().parents[1])
)  # run from a checkout, uninstalled

from pipelines import _cli  # noqa: F401  (first: TensorFlow's log level must be set before it loads)
from pipelines._finetune_cli import FinetuneCli, main  # loads TensorFlow quietly: first
from absl import flags

from albert_tf.tasks.race.config import RECIPES, RaceConfig
from albert_tf.tasks.race.finetune import RaceFinetuneTask
from pipelines import _distribution_flags

CLI = FinetuneCli(
    RaceConfig,
    RaceFinetuneTask,
    RECIPES,
    phases={
        "do_train": (True, "Fine-tune on the train split."),
        "do_eval": (
            True,
            "Score every checkpoint on dev; write eval_results.json with the final and the best, "
            "copy the best to model.ckpt-best.",
        ),
        "do_predict": (False, "Score and answer the test split with the best checkpoint."),
    },
    required=("data_dir", "output_dir"),
    ignored=(*_distribution_flags.IGNORED_ORIGINAL_FLAGS, "num_keep_checkpoint"),
    recipe_help="Apply the original release's RACE recipe; flags given explicitly win.",
    # Each split's cache is read by its phase alone.
    phase_inputs={"train_file": "do_train", "eval_file": "do_eval", "predict_file": "do_predict"},
)


def cli() -> None:
    """The `albert-run-race` console script: this CLI, as `python pipelines/run_race.py`."""
    flags.DEFINE_integer("num_keep_checkpoint", 5, "Accepted for compatibility (unused there too).")
    main(CLI)


if __name__ == "__main__":
    cli()
