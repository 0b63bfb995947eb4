"""The serving bundle a fine-tuning job exports: the model, its config, its tokenizer, a manifest."""

from __future__ import annotations

import os
import shutil

import keras
from absl import logging

from albert_tf.config import AlbertConfig
from albert_tf.io import atomic_path, write_json


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
