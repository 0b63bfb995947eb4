"""`pipelines/run_classifier.py` under its former name: the same CLI, the same flags.

python pipelines/finetune.py --recipe=mrpc --data_dir=glue ...   (see run_classifier.py)
"""

import pathlib
import sys

sys.path.insert(
    0, str(pathlib.Path(__file__).resolve().parents[1])
)  # run from a checkout, uninstalled

from pipelines import _cli  # noqa: F401  (first: TensorFlow's log level must be set before it loads)
from pipelines import run_classifier


def cli() -> None:
    """The `albert-finetune` console script: this CLI, as `python pipelines/finetune.py`."""
    run_classifier.define_original_flags()
    run_classifier.main(run_classifier.CLI)


if __name__ == "__main__":
    cli()
