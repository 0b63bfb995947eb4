"""A fine-tuning bundle's manifest, found from the path of the model file it describes.

`write_serving_bundle` puts the model, its SentencePiece model and a manifest
(`classifier_info.json`, `squad_info.json`, `race_info.json`) in one folder; converters that are
handed the model file take the tokenizer, its casing and the label names from there.
"""

from __future__ import annotations

import json
import os

from albert_tf.io import refuse_unknown_keys

MANIFEST_FILES = ("classifier_info.json", "squad_info.json", "race_info.json")
# What the tasks' `export` writes into a manifest (`bundle.write_serving_bundle` adds the file
# names), every version's: any other key is a misspelling or another tool's file.
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
