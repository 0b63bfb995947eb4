"""Best-of-checkpoints selection: the original's rule, pruning, `model.ckpt-best`, the JSON."""

import json

import numpy as np
import pytest

from albert_tf.finetuning.selection import CheckpointEvaluator, _better, list_checkpoints
from albert_tf.tasks.glue.metrics import GlueDevScorer
from albert_tf.io import write_json


class ScriptedModel:
    """Stands in for a classifier: `predict` returns the next prepared logits."""

    def __init__(self, logits):
        self.logits = list(logits)

    def predict(self, dataset, verbose=0, callbacks=None):
        return {"logits": self.logits.pop(0)}


def fake_checkpoint(directory, step):
    prefix = directory / f"model.ckpt-{step}"
    (directory / f"model.ckpt-{step}.index").write_bytes(f"index {step}".encode())
    (directory / f"model.ckpt-{step}.data-00000-of-00001").write_bytes(f"data {step}".encode())
    return str(prefix)


def logits_with_accuracy(labels, correct):
    logits = np.zeros((len(labels), 2))
    for i, label in enumerate(labels):
        logits[i, label if i < correct else 1 - label] = 1.0
    return logits


def test_better_is_strict_and_nan_never_wins():
    assert _better(0.8, 0.7) and not _better(0.7, 0.7)  # ties keep the earlier checkpoint
    assert _better(0.1, float("nan")) and not _better(float("nan"), 0.1)


@pytest.mark.parametrize("keep_all", [False, True])
def test_best_is_kept_copied_and_reported(tmp_path, keep_all):
    labels = np.array([0, 1, 1, 0, 1])
    correct = {100: 2, 200: 4, 300: 4, 400: 3}  # accuracies .4 .8 .8 .6
    model = ScriptedModel(logits_with_accuracy(labels, c) for c in correct.values())
    evaluator = CheckpointEvaluator(GlueDevScorer("mrpc", None, labels), str(tmp_path), keep_all)
    for step in correct:
        evaluator.evaluate(model, step, fake_checkpoint(tmp_path, step))
    results = json.loads((tmp_path / "eval_results.json").read_text())
    assert results["best"]["step"] == 200  # first of the tied 0.8s, as the original's `>`
    assert results["final"]["step"] == 400
    assert results["best"]["metrics"]["eval_accuracy"] == pytest.approx(0.8)
    assert results["final"]["metrics"]["eval_accuracy"] == pytest.approx(0.6)
    assert [h["step"] for h in results["history"]] == [100, 200, 300, 400]
    assert results["selection_metric"] == "eval_accuracy" and "f1" in results["best"]["metrics"]
    assert (tmp_path / "model.ckpt-best.index").read_bytes() == b"index 200"
    assert (tmp_path / "model.ckpt-best.data-00000-of-00001").read_bytes() == b"data 200"
    steps = [step for step, _ in list_checkpoints(str(tmp_path))]
    assert steps == ([100, 200, 300, 400] if keep_all else [200, 400])


def test_undefined_metrics_are_null_in_json(tmp_path):
    labels = np.array([1.0, 2.0, 3.0])
    model = ScriptedModel([np.ones((3, 1))])  # constant scores: Pearson undefined
    evaluator = CheckpointEvaluator(GlueDevScorer("sts-b", None, labels), str(tmp_path))
    evaluator.evaluate(model, 10, fake_checkpoint(tmp_path, 10))
    results = json.loads((tmp_path / "eval_results.json").read_text())  # strict JSON parses
    assert results["selection_metric"] == "pearson"
    assert results["best"]["metrics"]["pearson"] is None
    write_json(str(tmp_path / "x.json"), {"v": [float("inf")]})
    assert json.loads((tmp_path / "x.json").read_text()) == {"v": [None]}
    assert not list(tmp_path.glob("*.tmp"))


def test_list_checkpoints_ignores_best_and_sorts_by_step(tmp_path):
    for step in (1000, 200, 30):
        fake_checkpoint(tmp_path, step)
    (tmp_path / "model.ckpt-best.index").write_bytes(b"")
    assert [s for s, _ in list_checkpoints(str(tmp_path))] == [30, 200, 1000]
    assert list_checkpoints(str(tmp_path / "missing")) == []
