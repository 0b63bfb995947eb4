"""TF1 checkpoints of `AlbertClassifier` in and out, as the original `run_classifier.py` has them.

The backbone's names are those of `TF1_NAME_RULES` (`albert_tf.checkpoints.tf1`); the head's are
the top-level `output_weights` / `output_bias`, exactly what an original fine-tuned checkpoint
holds.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np
from absl import logging

from albert_tf.checkpoints.tf1 import CheckpointMismatchError, read_weights, tf1_variable_map
from albert_tf.modeling.heads.classifier import AlbertClassifier

HEAD_TF1_NAMES = ("output_weights", "output_bias")


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
    head_ok = all(
        n in tensors and tuple(tensors[n].shape) == tuple(targets[n].shape) for n in HEAD_TF1_NAMES
    )
    checked = [n for n in targets if n not in HEAD_TF1_NAMES or require_head]
    problems = [
        f"missing from checkpoint: {n} {tuple(targets[n].shape)}"
        for n in sorted(checked)
        if n not in tensors
    ]
    problems += [
        f"shape mismatch: {n} checkpoint {tuple(tensors[n].shape)} vs model "
        f"{tuple(targets[n].shape)}"
        for n in sorted(checked)
        if n in tensors and tuple(tensors[n].shape) != tuple(targets[n].shape)
    ]
    if problems:
        raise CheckpointMismatchError(
            f"{source} does not match the classifier ({len(problems)} problems):\n  "
            + "\n  ".join(problems)
        )
    for name, variable in targets.items():
        if name not in HEAD_TF1_NAMES or head_ok:
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
