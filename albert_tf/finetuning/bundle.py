"""The serving bundle a fine-tuning job exports into its `export_dir`, written and read here.

`write_serving_bundle` puts the model (a `.keras` file), its config, a copy of its SentencePiece
model and a manifest (`classifier_info.json`, `squad_info.json`, `race_info.json`) in one folder;
a classification bundle also holds `classifier_text.keras` (`write_text_classifier`): the same
classifier with ALBERT's tokenization in its graph and the SentencePiece model inside, so the
file alone predicts from strings (`keras.saving.load_model(path).predict(["a gripping film"])`).
Converters that are handed the model file take the tokenizer, its casing and the label names
from the manifest beside it (`bundle_manifest`).
"""

from __future__ import annotations

import json
import os
import shutil

import keras
from absl import logging

from albert_tf.config import AlbertConfig
from albert_tf.io import atomic_path, refuse_unknown_keys, write_json
from albert_tf.modeling.heads.text_classifier import AlbertTextClassifier

MANIFEST_FILES = ("classifier_info.json", "squad_info.json", "race_info.json")
# What the tasks' `export` writes into a manifest (`write_serving_bundle` adds the file names),
# every version's: any other key is a misspelling or another tool's file.
MANIFEST_KEYS = frozenset(
    {
        *("model_file", "spm_model_file", "albert_config_file", "checkpoint"),
        *("inputs", "outputs", "max_seq_length", "do_lower_case"),
        *("task_name", "labels", "label_names", "regression"),  # GLUE
        "max_qa_length",  # RACE
        *("version", "doc_stride", "max_query_length", "n_best_size", "max_answer_length"),
    }
)


def bundle_manifest(model_file: str | os.PathLike | None) -> dict | None:
    """The manifest beside `model_file` that names it (a manifest without `model_file` is taken
    as naming it), with its `spm_model_file` made a path in the bundle's folder; None where
    `model_file` is not in a bundle. An unreadable manifest raises `ValueError` naming it."""
    if not model_file:
        return None
    folder, name = os.path.split(os.path.abspath(os.fspath(model_file)))
    for manifest in MANIFEST_FILES:
        path = os.path.join(folder, manifest)
        if not os.path.isfile(path):
            continue
        try:
            with open(path, encoding="utf-8") as f:
                info = json.load(f)
        except (OSError, ValueError) as e:
            raise ValueError(f"{path}: not a readable bundle manifest: {e}") from None
        if not isinstance(info, dict):
            raise ValueError(f"{path}: not a bundle manifest (a JSON object)")
        refuse_unknown_keys(info, MANIFEST_KEYS, path)
        if info.get("model_file", name) != name:
            continue
        if isinstance(info.get("spm_model_file"), str):
            info["spm_model_file"] = os.path.join(folder, info["spm_model_file"])
        return info
    return None


def write_serving_bundle(
    export_dir: str,
    model: keras.Model,
    model_file: str,
    albert_config: AlbertConfig,
    spm_model_file: str,
    info_file: str,
    info: dict,
    checkpoint: str,
) -> str:
    """Writes `model_file` (a `.keras` file), `albert_config.json`, a copy of the SentencePiece
    model and `info_file` (`info` plus the bundle's file names and the source checkpoint) into
    `export_dir`, each atomically; returns the model file's path."""
    os.makedirs(export_dir, exist_ok=True)
    target = os.path.join(export_dir, model_file)
    with atomic_path(target, suffix=".keras") as staging:
        model.save(staging)
    albert_config.to_json_file(os.path.join(export_dir, "albert_config.json"))
    spm_name = os.path.basename(spm_model_file)
    with atomic_path(os.path.join(export_dir, spm_name)) as staging:
        shutil.copyfile(spm_model_file, staging)
    manifest = {
        **info,
        "model_file": model_file,
        "spm_model_file": spm_name,
        "albert_config_file": "albert_config.json",
        "checkpoint": checkpoint,
    }
    write_json(os.path.join(export_dir, info_file), manifest)
    logging.info("Exported %s (from %s) to %s", target, checkpoint, export_dir)
    return target


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
