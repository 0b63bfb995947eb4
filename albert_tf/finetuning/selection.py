"""Scoring fine-tuning checkpoints on dev and keeping the best, as the original's eval loop.

The original fine-tuning scripts (`--do_eval`) scored every saved checkpoint, kept the best by
one metric (the first on ties), copied it to `model.ckpt-best` and deleted the others; their
reported dev numbers are those best-of-checkpoints numbers. `eval_results.json` here names both
the **final** and the **best** checkpoint. Which metric, and how a model is scored, is the
task's `DevScorer`.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil

from absl import logging

from albert_tf.finetuning.task import DevScorer
from albert_tf.io import atomic_path, refuse_unknown_keys, write_json

CHECKPOINT_PREFIX = "model.ckpt"
BEST_CHECKPOINT = "model.ckpt-best"
EVAL_RESULTS = "eval_results.json"
# The keys `CheckpointEvaluator.write` gives `eval_results.json` (every version's), which a resumed
# run reads back.
EVAL_RESULTS_KEYS = ("task", "selection_metric", "final", "best", "baseline", "note", "history")


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


class CheckpointEvaluator:
    """Scores checkpoints on dev, tracks the best, keeps `eval_results.json` up to date.

    Args:
      scorer: the task's dev set and metrics (`name`, `selection_metric`, `score(model)`).
      output_dir: where the checkpoints are; `eval_results.json` and `model.ckpt-best` go there.
      keep_all_checkpoints: else evaluated checkpoints that are neither the best nor the latest
        are deleted, as the original did.
      copy_best: copy the best to `model.ckpt-best`; off to score a checkpoint that lives
        elsewhere (an `init_checkpoint`), which is then neither copied nor deleted.

    Example:
      evaluator = CheckpointEvaluator(scorer, "out/mrpc")
      evaluator.evaluate(model, 100, "out/mrpc/model.ckpt-100")  # also writes the JSON
    """

    def __init__(
        self,
        scorer: DevScorer,
        output_dir: str,
        keep_all_checkpoints: bool = False,
        copy_best: bool = True,
    ):
        self.scorer = scorer
        self.output_dir = output_dir
        self.keep_all_checkpoints = keep_all_checkpoints or not copy_best
        self.copy_best = copy_best
        self.key = scorer.selection_metric
        self.history: list[dict] = []
        self.best: dict | None = None
        self._copied: str | None = None  # checkpoint last copied to model.ckpt-best

    @property
    def baseline(self) -> dict | None:
        """The scorer's trivial baseline (None for a scorer that gives none)."""
        return getattr(self.scorer, "baseline", None)

    @property
    def steps(self) -> list[int]:
        """The steps evaluated so far, in order."""
        return [entry["step"] for entry in self.history]

    def restore(self, up_to_step: int) -> None:
        """Takes up the scores of an interrupted run from its `eval_results.json` (same task
        and metric, checkpoints of this `output_dir`), those of steps up to `up_to_step` (where
        it resumes); does nothing without one."""
        path = os.path.join(self.output_dir, EVAL_RESULTS)
        if not os.path.isfile(path):
            return
        with open(path, encoding="utf-8") as f:
            results = json.load(f)
        refuse_unknown_keys(results, EVAL_RESULTS_KEYS, path)
        if results.get("task") != self.scorer.name or results.get("selection_metric") != self.key:
            logging.warning("%s is of another task or metric: not taken up", path)
            return
        output_dir = os.path.abspath(self.output_dir)
        if os.path.dirname(os.path.abspath(results["best"]["checkpoint"])) != output_dir:
            logging.warning("%s scored a checkpoint outside %s: not taken up", path, output_dir)
            return
        for row in results["history"]:
            if row["step"] <= up_to_step:
                metrics = {k: _from_json(v) for k, v in row.items() if k != "step"}
                prefix = os.path.join(output_dir, f"{CHECKPOINT_PREFIX}-{row['step']}")
                self.history.append({"step": row["step"], "checkpoint": prefix, "metrics": metrics})
        for entry in self.history:  # the original's rule, replayed: the first highest
            if self.best is None or _better(
                entry["metrics"][self.key], self.best["metrics"][self.key]
            ):
                self.best = entry
        copied = os.path.exists(os.path.join(self.output_dir, BEST_CHECKPOINT + ".index"))
        if self.best is not None and copied and self.best["step"] == results["best"]["step"]:
            self._copied = self.best["checkpoint"]
        logging.info("Took up the scores of %d checkpoints from %s", len(self.history), path)

    def evaluate(self, model, step: int, prefix: str) -> dict:
        """Scores `model` (holding checkpoint `prefix`'s weights) and records the result."""
        metrics = self.scorer.score(model)
        entry = {"step": step, "checkpoint": prefix, "metrics": metrics}
        self.history.append(entry)
        if self.best is None or _better(metrics[self.key], self.best["metrics"][self.key]):
            self.best = entry
        logging.info(
            "step %d: %s (best %s %.4f at step %d)%s",
            step,
            _format(metrics),
            self.key,
            self.best["metrics"][self.key],
            self.best["step"],
            _baseline_words(self.baseline),
        )
        self._prune()
        self.write()
        return metrics

    def _prune(self):
        if self.keep_all_checkpoints:
            return
        keep = {os.path.abspath(e["checkpoint"]) for e in (self.best, self.history[-1])}
        for entry in self.history:
            if os.path.abspath(entry["checkpoint"]) not in keep:
                _remove_checkpoint(entry["checkpoint"])

    def write(self) -> dict:
        """Writes `eval_results.json` (final and best) and copies the best to `model.ckpt-best`
        (unless `copy_best` is off)."""
        output_dir = self.output_dir
        best = dict(self.best)
        if self.copy_best:
            best["copied_to"] = os.path.join(output_dir, BEST_CHECKPOINT)
            if self._copied != best["checkpoint"]:
                _copy_checkpoint(best["checkpoint"], best["copied_to"])
                self._copied = best["checkpoint"]
        results = {
            "task": self.scorer.name,
            "selection_metric": self.key,
            "final": self.history[-1],
            "best": best,
            "baseline": self.baseline,
            "note": (
                "final = the last checkpoint evaluated; best = the checkpoint with the highest "
                f"{self.key} on dev, which is what the original fine-tuning scripts reported; "
                "baseline = the same metrics of a model that learnt nothing"
            ),
            "history": [{"step": e["step"], **e["metrics"]} for e in self.history],
        }
        write_json(os.path.join(output_dir, EVAL_RESULTS), results)
        return results


def _format(metrics: dict) -> str:
    return ", ".join(
        f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items()
    )


def _baseline_words(baseline: dict | None) -> str:
    if not baseline:
        return ""
    shown = {k: v for k, v in baseline.items() if k != "num_examples"}
    return f"; a model that learnt nothing scores {_format(shown)}"


def _from_json(value):
    # write_json stores undefined metrics (NaN) as null.
    return math.nan if value is None else value


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
