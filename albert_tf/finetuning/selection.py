"""Scoring fine-tuning checkpoints on dev and keeping the best, as the original's eval loop.

The original `run_classifier.py --do_eval` scored every saved checkpoint, kept the best by
`eval_accuracy` (`matthew_corr` for CoLA, `pearson` for STS-B; the first on ties), copied it to
`model.ckpt-best` and deleted the others; its reported dev numbers are those best-of-checkpoints
numbers. `eval_results.json` here names both the **final** and the **best** checkpoint.
"""

from __future__ import annotations

import math
import os
import re
import shutil

import numpy as np
import tensorflow as tf
from absl import logging

from albert_tf.io import atomic_path, write_json
from albert_tf.tasks.glue import metrics as glue_metrics

CHECKPOINT_PREFIX = "model.ckpt"
BEST_CHECKPOINT = "model.ckpt-best"
EVAL_RESULTS = "eval_results.json"


def list_checkpoints(output_dir: str) -> list[tuple[int, str]]:
    """(step, prefix) of every `model.ckpt-<step>` in `output_dir`, by step."""
    if not os.path.isdir(output_dir):
        return []
    found = []
    for name in os.listdir(output_dir):
        match = re.fullmatch(rf"{re.escape(CHECKPOINT_PREFIX)}-(\d+)\.index", name)
        if match:
            found.append((int(match.group(1)), os.path.join(output_dir, name[: -len(".index")])))
    return sorted(found)


def predict_logits(model, dataset: tf.data.Dataset) -> np.ndarray:
    """Inference-mode logits [N, num_labels] of a classifier over a dataset."""
    return np.asarray(model.predict(dataset, verbose=0)["logits"])


class CheckpointEvaluator:
    """Scores checkpoints on dev, tracks the best, keeps `eval_results.json` up to date.

    Args:
      task_name: GLUE task (decides the metrics and the selection key).
      output_dir: where the checkpoints are; `eval_results.json` and `model.ckpt-best` go there.
      dataset: dev batches in file order; `labels`: their label ids (scores for STS-B).
      keep_all_checkpoints: else evaluated checkpoints that are neither the best nor the latest
        are deleted, as the original did.
    """

    def __init__(
        self,
        task_name: str,
        output_dir: str,
        dataset: tf.data.Dataset,
        labels,
        keep_all_checkpoints: bool = False,
    ):
        self.task_name = task_name
        self.output_dir = output_dir
        self.dataset = dataset
        self.labels = np.asarray(labels)
        self.keep_all_checkpoints = keep_all_checkpoints
        self.key = glue_metrics.selection_metric(task_name)
        self.history: list[dict] = []
        self.best: dict | None = None
        self._copied: str | None = None  # checkpoint last copied to model.ckpt-best

    def evaluate(self, model, step: int, prefix: str) -> dict:
        """Scores `model` (holding checkpoint `prefix`'s weights) and records the result."""
        metrics = glue_metrics.task_metrics(
            self.task_name, self.labels, predict_logits(model, self.dataset)
        )
        entry = {"step": step, "checkpoint": prefix, "metrics": metrics}
        self.history.append(entry)
        if self.best is None or _better(metrics[self.key], self.best["metrics"][self.key]):
            self.best = entry
        logging.info(
            "step %d: %s (best %s %.4f at step %d)",
            step,
            ", ".join(f"{k}={v:.4f}" for k, v in metrics.items() if k != "num_examples"),
            self.key,
            self.best["metrics"][self.key],
            self.best["step"],
        )
        self._prune()
        self.write()
        return metrics

    def _prune(self):
        if self.keep_all_checkpoints:
            return
        keep = {self.best["checkpoint"], self.history[-1]["checkpoint"]}
        for entry in self.history:
            if entry["checkpoint"] not in keep:
                _remove_checkpoint(entry["checkpoint"])

    def write(self) -> dict:
        """Writes `eval_results.json` (final and best) and copies the best to `model.ckpt-best`."""
        output_dir = self.output_dir
        best = dict(self.best)
        best["copied_to"] = os.path.join(output_dir, BEST_CHECKPOINT)
        if self._copied != best["checkpoint"]:
            _copy_checkpoint(best["checkpoint"], best["copied_to"])
            self._copied = best["checkpoint"]
        results = {
            "task": self.task_name,
            "selection_metric": self.key,
            "final": self.history[-1],
            "best": best,
            "note": (
                "final = the last checkpoint evaluated; best = the checkpoint with the highest "
                f"{self.key} on dev, which is what the original run_classifier.py reported"
            ),
            "history": [{"step": e["step"], **e["metrics"]} for e in self.history],
        }
        write_json(os.path.join(output_dir, EVAL_RESULTS), results)
        return results


def _better(value: float, best: float) -> bool:
    # Strictly greater wins, so ties keep the earlier checkpoint (as the original); NaN never wins.
    return math.isfinite(value) and (not math.isfinite(best) or value > best)


def _checkpoint_files(prefix: str) -> list[str]:
    directory, base = os.path.split(prefix)
    return [
        os.path.join(directory, n)
        for n in os.listdir(directory)
        if n.startswith(base + ".") and (n.endswith(".index") or ".data-" in n)
    ]


def _remove_checkpoint(prefix: str) -> None:
    for path in _checkpoint_files(prefix):
        os.remove(path)


def _copy_checkpoint(prefix: str, target: str) -> None:
    files = _checkpoint_files(prefix)
    if not files:
        raise FileNotFoundError(f"checkpoint {prefix} has no files to copy")
    for path in files:
        suffix = os.path.basename(path)[len(os.path.basename(prefix)) :]
        with atomic_path(target + suffix) as staging:
            shutil.copyfile(path, staging)
