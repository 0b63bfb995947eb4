"""TF1 checkpoints of `AlbertClassifier` in and out, as the original `run_classifier.py` has them.

The backbone's names are those of `TF1_NAME_RULES` (`albert_tf.checkpoints.tf1`); the head's come
from `AlbertClassifier.TF1_HEAD_RULES`: the top-level `output_weights` / `output_bias`, exactly
what an original fine-tuned checkpoint holds.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np
from absl import logging

from albert_tf.checkpoints.tf1 import check_weights, head_tf1_names, read_weights, tf1_variable_map
from albert_tf.modeling.heads.classifier import AlbertClassifier


def assign_classifier_weights(
    model: AlbertClassifier, tensors: Mapping[str, np.ndarray], source: str, require_head: bool
) -> bool:
    """Assigns `model` from {original name: array}; returns whether the head was loaded.

    Every backbone variable must be present with its shape, else `CheckpointMismatchError` lists
    every problem and nothing is assigned. The head (`output_weights`/`output_bias`) is required
    with `require_head`; otherwise it is loaded only if present with matching shapes (a classifier
    checkpoint of the same label count) and left freshly initialised if not. Other names (the
    pretraining heads `cls/...`) are ignored.
    """
    targets = tf1_variable_map(model)
    head_names = head_tf1_names(model)
    shapes = {name: tuple(np.shape(value)) for name, value in tensors.items()}
    head_ok = all(shapes.get(n) == tuple(targets[n].shape) for n in head_names)
    check_weights(
        {n: v.shape for n, v in targets.items() if n not in head_names or require_head},
        shapes,
        source,
        "classifier",
        allow_unexpected=True,
    )
    for name, variable in targets.items():
        if name not in head_names or head_ok:
            variable.assign(tensors[name])
    ignored = sorted(set(tensors) - set(targets))
    if ignored:
        logging.info(
            "%s: ignored %d variables not in the classifier (e.g. %s)",
            source,
            len(ignored),
            ignored[0],
        )
    return head_ok


def initialize_from_checkpoint(model: AlbertClassifier, path: str | os.PathLike) -> bool:
    """Fine-tuning init: backbone from a pretraining or classifier checkpoint (TF1 or `.keras`);
    the head too when the checkpoint has one of the same shape. Returns whether it did."""
    head_loaded = assign_classifier_weights(
        model, read_weights(path), os.fspath(path), require_head=False
    )
    logging.info("Initialised the backbone%s from %s", " and head" if head_loaded else "", path)
    return head_loaded


def load_classifier_checkpoint(model: AlbertClassifier, path: str | os.PathLike) -> None:
    """Loads a complete classifier checkpoint (ours or the original's), head included."""
    assign_classifier_weights(model, read_weights(path), os.fspath(path), require_head=True)
