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
same command again resumes training from the last checkpoint. --hf_model=DIR starts from a Hugging
Face transformers folder instead (an AlbertForQuestionAnswering one, head included; its config.json
and spiece.model stand in for --albert_config_file and --spm_model_file).

This module also holds what run_squad_v2.py shares (`squad_cli`).
"""

import pathlib
import sys

sys.path.insert(
    0, str(pathlib.Path(__file__).resolve().parents[1])
)  # run from a checkout, uninstalled

from pipelines import _cli  # noqa: F401  (first: TensorFlow's log level must be set before it loads)
from pipelines._finetune_cli import FinetuneCli, main  # loads TensorFlow quietly: first
from absl import flags, logging

from albert_tf.tasks.squad.config import RECIPES, V2_ONLY, SquadConfig
from albert_tf.tasks.squad import finetune as squad_finetune
from albert_tf.tasks.squad.finetune import SquadFinetuneTask


def write_text_model(export_dir: str, model, settings: SquadConfig) -> str:
    """The bundle's `squad_text.keras`: `model` taking a question and a context as strings."""
    from albert_tf.export.qa.keras_model import write_text_question_answerer

    return write_text_question_answerer(
        export_dir,
        model,
        settings.spm_model_file,
        settings.max_seq_length,
        settings.do_lower_case,
        f"squad_{settings.version}",
        {
            "doc_stride": settings.doc_stride,
            "max_query_length": settings.max_query_length,
            "n_best_size": settings.n_best_size,
            "max_answer_length": settings.max_answer_length,
        },
    )


def squad_cli(version: str) -> FinetuneCli:
    """The CLI of the original `run_squad_{version}.py` ("v1" or "v2")."""

    def check_recipe(flag_values) -> None:
        if flag_values.recipe not in (None, f"squad_{version}"):
            logging.warning("Using the %s recipe for SQuAD %s", flag_values.recipe, version)

    return FinetuneCli(
        SquadConfig,
        SquadFinetuneTask,
        RECIPES,
        phases={
            "do_train": (False, "Fine-tune on --train_file."),
            "do_predict": (
                False,
                "Predict --predict_file (scoring every checkpoint when it has answers).",
            ),
        },
        required=("output_dir",),
        given={"version": version},
        skip=V2_ONLY if version == "v1" else (),
        after_recipe=check_recipe,
        recipe_help="Apply the original release's SQuAD recipe; flags given explicitly win.",
        phase_inputs={
            "train_file": "do_train",
            "train_feature_file": "do_train",
            "predict_file": "do_predict",
            "predict_feature_file": "do_predict",
            "predict_feature_left_file": "do_predict",
        },
        task_options={"write_text_model": write_text_model},
        run=squad_finetune.run,
    )


def cli() -> None:
    """The `albert-run-squad-v1` console script: this CLI, as `python pipelines/run_squad_v1.py`."""
    flags.DEFINE_bool("use_einsum", True, "Accepted for compatibility; ignored.")
    main(squad_cli("v1"))


if __name__ == "__main__":
    cli()
