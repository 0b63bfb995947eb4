"""GLUE dev metrics in numpy, with the original's key names, and the scorer that computes them
for a model on a task's dev set (`GlueDevScorer`, what checkpoint selection calls).

The original computed `eval_accuracy`, `eval_loss`, `matthew_corr` (CoLA, with TF's
`div_no_nan`: 0 when undefined) and `pearson`/`MSE` (STS-B) in-graph. F1 (MRPC, QQP; positive class
"1") and Spearman (STS-B) are the other official GLUE metrics, which the original did not report.
Written here rather than taken from scipy/sklearn, which are not dependencies; tests pin them to
hand-computed values. Undefined correlations (a constant input) are NaN.
"""

from __future__ import annotations

import dataclasses

import keras
import numpy as np
import tensorflow as tf

from albert_tf.finetuning.progress import predict_with_progress
from albert_tf.tasks.glue import processors as glue

# The metric the original picked the best checkpoint by (`run_classifier.py` `key_name`).
SELECTION_METRIC = {"cola": "matthew_corr", "sts-b": "pearson"}
F1_TASKS = ("mrpc", "qqp")


def selection_metric(task_name: str) -> str:
    """Key of the metric the best checkpoint is chosen by (higher is better)."""
    return SELECTION_METRIC.get(task_name, "eval_accuracy")


def accuracy(labels, predictions) -> float:
    """Share of equal entries."""
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    return float(np.mean(labels == predictions))


def _confusion(labels, predictions, positive=1):
    labels, predictions = np.asarray(labels) == positive, np.asarray(predictions) == positive
    tp = float(np.sum(labels & predictions))
    tn = float(np.sum(~labels & ~predictions))
    fp = float(np.sum(~labels & predictions))
    fn = float(np.sum(labels & ~predictions))
    return tp, tn, fp, fn


def f1_score(labels, predictions, positive=1) -> float:
    """Binary F1 of the positive class, 2TP / (2TP + FP + FN); 0 when there is no positive."""
    tp, _, fp, fn = _confusion(labels, predictions, positive)
    denominator = 2 * tp + fp + fn
    return 2 * tp / denominator if denominator else 0.0


def matthews_corrcoef(labels, predictions, positive=1) -> float:
    """(TP·TN − FP·FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)); 0 when undefined, as the original."""
    tp, tn, fp, fn = _confusion(labels, predictions, positive)
    denominator = np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return float((tp * tn - fp * fn) / denominator) if denominator else 0.0


def pearson(x, y) -> float:
    """Pearson correlation of two 1-D samples (NaN if either is constant)."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    dx, dy = x - x.mean(), y - y.mean()
    denominator = np.sqrt(np.sum(dx * dx) * np.sum(dy * dy))
    return float(np.sum(dx * dy) / denominator) if denominator else float("nan")


def rankdata(x) -> np.ndarray:
    """1-based ranks; ties get the average of the ranks they span."""
    x = np.asarray(x)
    order = np.argsort(x, kind="stable")
    sorted_x = x[order]
    # Start index of each run of equal values, and the run each sorted element belongs to.
    starts = np.flatnonzero(np.r_[True, sorted_x[1:] != sorted_x[:-1]])
    run = np.cumsum(np.r_[True, sorted_x[1:] != sorted_x[:-1]]) - 1
    ends = np.r_[starts[1:], len(x)]
    average = (starts + ends + 1) / 2.0  # mean of 1-based ranks starts+1 .. ends
    ranks = np.empty(len(x), np.float64)
    ranks[order] = average[run]
    return ranks


def spearman(x, y) -> float:
    """Spearman rank correlation: Pearson of the average ranks."""
    return pearson(rankdata(x), rankdata(y))


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=-1, keepdims=True))


def task_metrics(task_name: str, labels, logits) -> dict[str, float]:
    """All dev metrics of a task from label ids (floats for STS-B) and logits [N, num_labels]."""
    logits = np.asarray(logits, np.float64)
    labels = np.asarray(labels)
    metrics: dict[str, float] = {"num_examples": int(len(labels))}
    if task_name == "sts-b":
        scores = logits.reshape(-1)
        mse = float(np.mean((scores - labels) ** 2))
        metrics.update(
            pearson=pearson(scores, labels),
            spearman=spearman(scores, labels),
            MSE=mse,
            eval_loss=mse,
        )
        return metrics
    predictions = logits.argmax(axis=-1)
    nll = -_log_softmax(logits)[np.arange(len(labels)), labels.astype(np.int64)]
    metrics.update(eval_accuracy=accuracy(labels, predictions), eval_loss=float(np.mean(nll)))
    if task_name in F1_TASKS:
        metrics["f1"] = f1_score(labels, predictions)
    if task_name == "cola":
        metrics["matthew_corr"] = matthews_corrcoef(labels, predictions)
    return metrics


def majority_baseline(
    task_name: str, train_labels, dev_labels, num_labels: int = 2
) -> dict[str, float]:
    """Metrics of always predicting the most frequent training label (STS-B: the mean score)."""
    train_labels, dev_labels = np.asarray(train_labels), np.asarray(dev_labels)
    if task_name == "sts-b":
        logits = np.full((len(dev_labels), 1), float(np.mean(train_labels)))
    else:
        majority = np.bincount(train_labels.astype(np.int64), minlength=num_labels).argmax()
        logits = np.zeros((len(dev_labels), num_labels))
        logits[:, majority] = 1.0
    metrics = task_metrics(task_name, dev_labels, logits)
    metrics.pop("eval_loss")  # meaningless for a constant guess
    return metrics


def predict_logits(
    model: keras.Model, dataset: tf.data.Dataset, what: str = "GLUE", total: int | None = None
) -> np.ndarray:
    """Inference-mode logits [N, num_labels] of a classifier over a dataset of `total` examples
    (`what` and `total` for the progress lines)."""
    return np.asarray(predict_with_progress(model, dataset, what, total)["logits"])


@dataclasses.dataclass
class GlueDevScorer:
    """A GLUE task's dev set and metrics, for `CheckpointEvaluator`.

    Args:
      name: GLUE task name (decides the metrics and the selection key).
      dataset: dev batches in file order; `labels`: their label ids (scores for STS-B).

    Example:
      scorer = GlueDevScorer("mrpc", dev_batches, dev_labels)
      scorer.score(model)["eval_accuracy"], scorer.baseline["eval_accuracy"]
    """

    name: str
    dataset: tf.data.Dataset
    labels: np.ndarray

    def __post_init__(self):
        self.labels = np.asarray(self.labels)
        self.selection_metric = selection_metric(self.name)
        # The most frequent dev label (the mean score for STS-B): no constant guess does better.
        self.baseline = majority_baseline(
            self.name, self.labels, self.labels, glue.get_task(self.name).num_labels
        )

    def score(self, model: keras.Model) -> dict[str, float]:
        """The task's metrics of `model` on dev (`selection_metric` among them)."""
        logits = predict_logits(model, self.dataset, f"{self.name} dev", len(self.labels))
        return task_metrics(self.name, self.labels, logits)
