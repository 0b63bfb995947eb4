r"""Fine-tune ALBERT on SQuAD v2.0, with the flags of the original `run_squad_v2.py`.

    python pipelines/run_squad_v2.py --recipe=squad_v2 --spm_model_file=30k-clean.model \
        --albert_config_file=albert_config.json --init_checkpoint=pretrained/model.ckpt-best \
        --train_file=train-v2.0.json --predict_file=dev-v2.0.json --output_dir=out/squad2 \
        --do_train --do_predict

The flags of run_squad_v1.py (see there; --recipe=squad_v2 is the same recipe) plus the
original v2 ones: --start_n_top, --end_n_top (beam sizes, 5) and --dropout_prob (0.1). Each
checkpoint is scored as the original `evaluate_v2`: best span everywhere, the official v2.0
null-odds threshold search, predictions rewritten to "" where the null odds reach the threshold;
`eval_results.json` holds the official exact/f1, HasAns_*, NoAns_*, best_* and
`null_score_diff_threshold`. Writes `predictions.json`, `nbest_predictions.json` and
`null_odds.json`.
"""

import pathlib
import sys

sys.path.insert(
    0, str(pathlib.Path(__file__).resolve().parents[1])
)  # run from a checkout, uninstalled

from pipelines import _cli  # noqa: F401  (first: TensorFlow's log level must be set before it loads)
from pipelines._finetune_cli import main
from pipelines.run_squad_v1 import squad_cli


def cli() -> None:
    """The `albert-run-squad-v2` console script: this CLI, as `python pipelines/run_squad_v2.py`."""
    main(squad_cli("v2"))


if __name__ == "__main__":
    cli()
