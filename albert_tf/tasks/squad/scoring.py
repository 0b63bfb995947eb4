"""Scoring SQuAD predictions as the original scripts do: the predict file's windows through the
model, post-processed, then the official v1.1 metrics or v2.0 with the null-threshold search."""

from __future__ import annotations

import dataclasses
import json
from typing import Protocol

import keras
import numpy as np

from albert_tf.finetuning.progress import predict_with_progress
from albert_tf.tasks.squad import inputs as squad_inputs
from albert_tf.tasks.squad import metrics as squad_metrics
from albert_tf.tasks.squad.examples import SquadExample, SquadFormatError
from albert_tf.tasks.squad.features import SquadFeature
from albert_tf.tasks.squad.postprocess import SquadPredictions
from albert_tf.tasks.squad.postprocess_v1 import postprocess_v1, raw_results_v1
from albert_tf.tasks.squad.postprocess_v2 import (
    accumulate_predictions_v2,
    evaluate_with_null_threshold,
    predictions_v2,
    raw_results_v2,
)

SELECTION_METRIC = "f1"  # the original's `key_name`, for both versions
V2_OUTPUTS = (
    "start_top_log_probs",
    "start_top_index",
    "end_top_log_probs",
    "end_top_index",
    "cls_logits",
)


class ScoringSettings(Protocol):
    """The job settings prediction reads (`SquadConfig` has them, same names as the flags)."""

    version: str
    max_seq_length: int
    predict_batch_size: int
    n_best_size: int
    max_answer_length: int


def read_squad_data(path: str) -> list:
    """A SQuAD file's "data" list (its articles, with the gold answers the metrics read)."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)["data"]
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as e:
        raise SquadFormatError(f"{path}: not a SQuAD file: {e}") from e


def scorable(dataset: list, version: str) -> bool:
    """Whether a SQuAD file's questions carry gold answers to score against: v1.1 needs at least
    one answer per question, v2.0 an `answers` list on each (empty = unanswerable)."""
    questions = [qa for article in dataset for p in article["paragraphs"] for qa in p["qas"]]
    if not questions:
        return False
    if version == "v1":
        return all(isinstance(qa.get("answers"), list) and qa["answers"] for qa in questions)
    return all(isinstance(qa.get("answers"), list) for qa in questions)


@dataclasses.dataclass
class SquadPredictInputs:
    """The predict file, read and cut into windows.

    Args:
      dataset: the file's "data" list (gold answers for the metrics).
      examples: its questions, in file order.
      features: their windows (model inputs in `record_file`, not in these objects).
      record_file: the windows as TFRecords (`predict_feature_file`).
      scorable: whether the file has gold answers (`scorable`).

    Example:
      inputs = task.predict_inputs()
      len(inputs.features)  # windows
    """

    dataset: list
    examples: list[SquadExample]
    features: list[SquadFeature]
    record_file: str
    scorable: bool

    @property
    def unique_ids(self) -> np.ndarray:
        """The windows' unique ids, in order."""
        return np.array([f.unique_id for f in self.features], np.int64)


def predict_squad(
    model: keras.Model, config: ScoringSettings, inputs: SquadPredictInputs, what: str = "SQuAD"
) -> tuple[SquadPredictions, dict[str, float] | None]:
    """The predict file's answers from `model` and, when it is scorable, their metrics; `what`
    names the prediction in its progress lines.

    v1: official v1.1 `exact_match` and `f1`. v2: the original's `evaluate_v2` (best span, null
    threshold = the official search's best_f1_thresh, "" where the null odds reach it): the
    official figures of those final predictions (exact, f1, total, HasAns_*, NoAns_*), the
    search's best_exact, best_f1 and their thresholds, and `null_score_diff_threshold`.
    """
    batches = squad_inputs.predict_dataset(
        inputs.record_file, config.max_seq_length, config.predict_batch_size, len(inputs.features)
    )
    outputs = predict_with_progress(model, batches, what, len(inputs.features), "windows")
    if config.version == "v1":
        results = raw_results_v1(inputs.unique_ids, outputs["start_logits"], outputs["end_logits"])
        predictions = postprocess_v1(
            inputs.examples, inputs.features, results, config.n_best_size, config.max_answer_length
        )
        if not inputs.scorable:
            return predictions, None
        return predictions, squad_metrics.evaluate_v1(inputs.dataset, predictions.predictions)
    results = raw_results_v2(inputs.unique_ids, *(outputs[name] for name in V2_OUTPUTS))
    spans = accumulate_predictions_v2(
        inputs.examples, inputs.features, results, config.max_answer_length
    )
    if not inputs.scorable:
        return predictions_v2(inputs.examples, inputs.features, spans, config.n_best_size), None
    evaluation = evaluate_with_null_threshold(
        inputs.dataset, inputs.examples, inputs.features, spans, config.n_best_size
    )
    final = evaluation.predictions
    scores = squad_metrics.evaluate_v2(inputs.dataset, final.predictions, final.null_odds)
    scores = {k: v for k, v in scores.items() if not k.startswith("best_")}
    scores.update({k: v for k, v in evaluation.official_scores.items() if k.startswith("best_")})
    scores["null_score_diff_threshold"] = evaluation.eval_results["null_score_diff_threshold"]
    return final, scores


@dataclasses.dataclass
class SquadDevScorer:
    """The predict file (with gold answers) as the loop's dev set.

    Args:
      name: squad_v1 or squad_v2.
      config: the job's settings (lengths, batch size, n-best).
      inputs: the predict file's windows.

    Example:
      scorer = SquadDevScorer("squad_v1", config, task.predict_inputs())
      scorer.score(model)["f1"]
    """

    name: str
    config: ScoringSettings
    inputs: SquadPredictInputs
    selection_metric: str = SELECTION_METRIC

    @property
    def baseline(self) -> dict[str, float]:
        """The official metrics of answering every question with the empty answer (v2: right on
        every unanswerable question; v1: right only where a gold answer normalises to nothing)."""
        empty = {example.qas_id: "" for example in self.inputs.examples}
        if self.config.version == "v1":
            return squad_metrics.evaluate_v1(self.inputs.dataset, empty)
        return squad_metrics.evaluate_v2(self.inputs.dataset, empty)

    def score(self, model: keras.Model) -> dict[str, float]:
        """The official metrics of `model`'s predictions (see `predict_squad`)."""
        return predict_squad(model, self.config, self.inputs, f"{self.name} dev")[1]
