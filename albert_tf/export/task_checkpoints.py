"""Fine-tuned task models to export, from an original TF1 checkpoint (or ours) and its config."""

from __future__ import annotations

import os

from albert_tf.checkpoints.task_heads import load_task_checkpoint
from albert_tf.config import AlbertConfig
from albert_tf.export.pipeline import serving_head
from albert_tf.export.savedmodel import ServingHead
from albert_tf.modeling.heads.multiple_choice import RACE_NUM_CHOICES, AlbertMultipleChoice
from albert_tf.modeling.heads.squad_v1 import AlbertSquadV1
from albert_tf.modeling.heads.squad_v2 import DEFAULT_N_TOP, AlbertSquadV2

TASK_HEADS = ("squad_v1", "squad_v2", "race")


def load_task_head(
    kind: str,
    tf1_checkpoint: str,
    albert_config_file: str,
    start_n_top: int = DEFAULT_N_TOP,
    end_n_top: int = DEFAULT_N_TOP,
    num_choices: int = RACE_NUM_CHOICES,
) -> ServingHead:
    """The `kind` model (`AlbertSquadV1`, `AlbertSquadV2` with its beam widths, or
    `AlbertMultipleChoice`) with every weight, head included, from a fine-tuned checkpoint as
    `run_squad_v1.py` / `run_squad_v2.py` / `run_race.py` write it; wrapped for export.

    Raises ValueError for another kind, FileNotFoundError for a missing config, and
    `CheckpointMismatchError` naming every variable that is missing or of another shape.

    Example:
        >>> head = load_task_head("squad_v2", "squad_v2/model.ckpt-best", "albert_config.json")
    """
    if kind not in TASK_HEADS:
        raise ValueError(f"a TF1 task checkpoint exports as one of {TASK_HEADS}, got {kind!r}")
    if not albert_config_file or not os.path.isfile(albert_config_file):
        raise FileNotFoundError(f"albert_config_file not found: {albert_config_file!r}")
    config = AlbertConfig.from_json_file(albert_config_file)
    if kind == "squad_v1":
        model = AlbertSquadV1(config)
    elif kind == "squad_v2":
        model = AlbertSquadV2(config, start_n_top=start_n_top, end_n_top=end_n_top)
    else:
        model = AlbertMultipleChoice(config, num_choices=num_choices)
    load_task_checkpoint(model, tf1_checkpoint)
    return serving_head(kind, model)
