"""The text-in classifier a classification bundle holds beside its ids-in `.keras` model.

`classifier_text.keras` (`AlbertTextClassifier`) is the bundle's classifier with ALBERT's
tokenization in its graph and the SentencePiece model inside, so the file alone predicts from
strings: `keras.saving.load_model(path).predict(["a gripping film"])`.
"""

from __future__ import annotations

import os

import keras
from absl import logging

from albert_tf.io import atomic_path
from albert_tf.modeling.heads.text_classifier import AlbertTextClassifier

TEXT_CLASSIFIER_FILE = "classifier_text.keras"


def bundle_label_names(info: dict) -> list[str] | None:
    """The class names a bundle's manifest (`info`) records, in output order: its
    `label_names` if any, else its `labels`; None where it records none (a regression)."""
    names = info.get("label_names") or info.get("labels")
    return [str(name) for name in names] if names else None


def write_text_classifier(
    export_dir: str,
    classifier: keras.Model,
    spm_model_file: str,
    max_seq_length: int,
    do_lower_case: bool,
    label_names=None,
) -> str:
    """Writes `TEXT_CLASSIFIER_FILE` (an `AlbertTextClassifier` of `classifier`, the
    SentencePiece model embedded) into `export_dir`, atomically; returns its path."""
    model = AlbertTextClassifier.from_spm_model(
        classifier,
        spm_model_file,
        max_seq_length,
        do_lower_case=do_lower_case,
        label_names=None if getattr(classifier, "regression", False) else label_names,
    )
    target = os.path.join(export_dir, TEXT_CLASSIFIER_FILE)
    with atomic_path(target, suffix=".keras") as staging:
        model.save(staging)
    logging.info("Exported %s (text in: labels %s)", target, model.label_names)
    return target
