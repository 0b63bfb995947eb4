"""RACE dev metrics in numpy: accuracy overall and per exam level (middle / high school), and
the mean cross-entropy the original reported as `eval_loss`.

The original reported only `eval_accuracy` and `eval_loss` over the questions it read (both
levels unless `--middle_only` / `--high_only`); RACE results are conventionally also given per
level, which the question's example id tells: the reader takes it from the article's "id" field,
"middle123.txt" / "high45.txt" in the RACE release, or a path under `middle/` or `high/`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

LEVELS = ("middle", "high")


def race_level(example_id: str) -> str:
    """ "middle" or "high", from the start of the id's last path component, or from a directory
    named so in it; a ValueError naming the id otherwise."""
    parts = str(example_id).replace("\\", "/").split("/")
    for level in LEVELS:
        if parts[-1].startswith(level) or level in parts[:-1]:
            return level
    raise ValueError(f"RACE example id {example_id!r} names no level (middle or high)")


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=-1, keepdims=True))


def race_metrics(example_ids: Sequence[str], label_ids, logits) -> dict[str, float]:
    """Metrics of one RACE evaluation from each question's example id, gold option (0-3) and
    option logits [N, 4]: eval_accuracy, eval_loss and num_examples over all questions, and
    {level}_accuracy / {level}_num_examples for each level present (the prediction is the first
    highest logit, as tf.argmax).

    Raises ValueError when the lengths disagree, a label is not an option index, or an id names
    no level.
    """
    logits = np.asarray(logits, np.float64)
    label_ids = np.asarray(label_ids).reshape(-1)
    if logits.ndim != 2 or not len(example_ids) == len(label_ids) == logits.shape[0]:
        raise ValueError(
            f"RACE metrics: {len(example_ids)} example ids, {len(label_ids)} labels and logits "
            f"of shape {logits.shape} do not describe the same questions"
        )
    if len(label_ids) == 0:
        raise ValueError("RACE metrics: no questions")
    bad = [i for i, label in enumerate(label_ids) if not 0 <= label < logits.shape[1]]
    if bad:
        raise ValueError(
            f"RACE metrics: question {bad[0]} ({example_ids[bad[0]]!r}) has label "
            f"{label_ids[bad[0]]}, not one of {logits.shape[1]} options"
        )
    label_ids = label_ids.astype(np.int64)
    correct = logits.argmax(axis=-1) == label_ids
    nll = -_log_softmax(logits)[np.arange(len(label_ids)), label_ids]
    metrics: dict[str, float] = {
        "eval_accuracy": float(np.mean(correct)),
        "eval_loss": float(np.mean(nll)),
        "num_examples": int(len(label_ids)),
    }
    levels = np.array([race_level(example_id) for example_id in example_ids])
    for level in LEVELS:
        in_level = levels == level
        if in_level.any():
            metrics[f"{level}_accuracy"] = float(np.mean(correct[in_level]))
            metrics[f"{level}_num_examples"] = int(in_level.sum())
    return metrics
