"""TF1 checkpoints of any task model (backbone + a head declaring `TF1_HEAD_RULES`) in and out.

The backbone's names come from `TF1_NAME_RULES`, the head's from its model class's
`TF1_HEAD_RULES` (`AlbertClassifier`, `AlbertMultipleChoice`: top-level `output_weights` /
`output_bias`; `AlbertSquadV1`: `cls/squad/...`; `AlbertSquadV2`: `start_logits/...`,
`end_logits/...`, `answer_class/...`), so an original fine-tuned checkpoint loads as it is. The weight check is
`check_weights` of `albert_tf.checkpoints.tf1`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import keras
import numpy as np
from absl import logging

from albert_tf.checkpoints.tf1 import check_weights, head_tf1_names, read_weights, tf1_variable_map


def assign_task_weights(
    model: keras.Model, tensors: Mapping[str, np.ndarray], source: str, require_head: bool
) -> bool:
    """Assigns a task model from {original name: array}; returns whether its head was loaded.

    Every backbone variable must be present with its shape, else `CheckpointMismatchError` lists
    every problem and nothing is assigned. The head is required with `require_head`; otherwise it
    is loaded only if all of its variables are present with matching shapes, and keeps its fresh
    initialisation if not. Other names (pretraining heads, another task's head) are ignored.
    """
    targets = tf1_variable_map(model)
    head_names = head_tf1_names(model)
    shapes = {name: tuple(np.shape(value)) for name, value in tensors.items()}
    head_ok = all(shapes.get(n) == tuple(targets[n].shape) for n in head_names)
    check_weights(
        {n: v.shape for n, v in targets.items() if n not in head_names or require_head},
        shapes,
        source,
        type(model).__name__,
        allow_unexpected=True,
    )
    for name, variable in targets.items():
        if name not in head_names or head_ok:
            variable.assign(tensors[name])
    ignored = sorted(set(tensors) - set(targets))
    if ignored:
        logging.info(
            "%s: ignored %d variables not in the %s (e.g. %s)",
            source,
            len(ignored),
            type(model).__name__,
            ignored[0],
        )
    return head_ok


def initialize_task_model(model: keras.Model, path: str | os.PathLike) -> bool:
    """Fine-tuning init: backbone from a pretraining or task checkpoint (TF1 or `.keras`); the
    head too when the checkpoint holds all of it with the same shapes. Returns whether it did."""
    head_loaded = assign_task_weights(
        model, read_weights(path), os.fspath(path), require_head=False
    )
    logging.info("Initialised the backbone%s from %s", " and head" if head_loaded else "", path)
    return head_loaded


def load_task_checkpoint(model: keras.Model, path: str | os.PathLike) -> None:
    """Loads a complete task checkpoint (ours or the original's), head included."""
    assign_task_weights(model, read_weights(path), os.fspath(path), require_head=True)
