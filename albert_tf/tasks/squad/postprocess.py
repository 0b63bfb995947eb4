"""SQuAD post-processing shared by v1.1 and v2.0: span scores gathered per window, n-best lists
per question, and the prediction files, as the original's `squad_utils` builds them.

A span is a pair of doc-piece indices of one window (0 = the window's first doc piece). Each
window's valid spans keep every (start score, end score) pair accumulated for them; a question's
n-best list ranks the spans of all its windows by the mean start score plus the mean end score.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from albert_tf import io
from albert_tf.tasks.squad.examples import SquadExample
from albert_tf.tasks.squad.features import SquadFeature

PREDICTIONS_FILE = "predictions.json"
NBEST_FILE = "nbest_predictions.json"
NULL_ODDS_FILE = "null_odds.json"


@dataclasses.dataclass
class SpanScores:
    """Scores gathered from one or more passes of raw results, ready for the n-best lists.

    Args:
        spans: {window unique_id: {(doc start, doc end): [(start score, end score), ...]}}, spans
            in the order first seen (ties in the n-best ranking keep that order).
        null_scores: {example index: [the question's null score from each pass]} (v2 only).

    Example:
        >>> scores = SpanScores()
        >>> scores.add_span(1000000000, 3, 5, -0.5, -1.0)
        >>> scores.mean_spans(1000000000)
        [(3, 5, -0.5, -1.0)]
    """

    spans: dict[int, dict[tuple[int, int], list[tuple[float, float]]]] = dataclasses.field(
        default_factory=dict
    )
    null_scores: dict[int, list[float]] = dataclasses.field(default_factory=dict)

    def add_span(
        self, unique_id: int, doc_start: int, doc_end: int, start_score: float, end_score: float
    ) -> None:
        """Records one (start score, end score) pair for a span of window `unique_id`."""
        window = self.spans.setdefault(unique_id, {})
        window.setdefault((doc_start, doc_end), []).append((start_score, end_score))

    def mean_spans(self, unique_id: int) -> list[tuple[int, int, float, float]]:
        """(doc start, doc end, mean start score, mean end score) of each span of a window."""
        means = []
        for (doc_start, doc_end), pairs in self.spans.get(unique_id, {}).items():
            # Summed in order and divided once, as the original averages.
            start_sum = end_sum = 0.0
            for start_score, end_score in pairs:
                start_sum += start_score
                end_sum += end_score
            means.append((doc_start, doc_end, start_sum / len(pairs), end_sum / len(pairs)))
        return means


@dataclasses.dataclass
class SquadPredictions:
    """What post-processing produces, keyed by question id in the examples' order.

    Args:
        predictions: {qas_id: answer text} ("" predicts no answer in v2).
        nbest_predictions: {qas_id: [{"text", "probability", "start_log_prob",
            "end_log_prob"}, ...]}, best first.
        null_odds: {qas_id: null score} (v2 only; None for v1).

    Example:
        >>> SquadPredictions({"q1": "Rollo"}, {"q1": []}).null_odds is None
        True
    """

    predictions: dict[str, str]
    nbest_predictions: dict[str, list[dict[str, object]]]
    null_odds: dict[str, float] | None = None


def features_by_example(
    examples: Sequence[SquadExample], features: Iterable[SquadFeature]
) -> list[list[SquadFeature]]:
    """Each example's windows, in the features' order (windows of no example are ignored)."""
    grouped: dict[int, list[SquadFeature]] = collections.defaultdict(list)
    for feature in features:
        grouped[feature.example_index].append(feature)
    return [grouped.get(index, []) for index in range(len(examples))]


def results_by_unique_id(results: Iterable, source: str = "raw results") -> dict[int, object]:
    """{unique_id: result}; a unique_id given twice is an error (its scores would be lost)."""
    by_id: dict[int, object] = {}
    for result in results:
        unique_id = int(result.unique_id)
        if unique_id in by_id:
            raise ValueError(f"{source}: unique_id {unique_id} appears more than once")
        by_id[unique_id] = result
    return by_id


def result_for(results: Mapping[int, object], feature: SquadFeature, example: SquadExample):
    """The raw result of a window, or an error naming the window and its question."""
    try:
        return results[feature.unique_id]
    except KeyError:
        raise ValueError(
            f"no raw result for window unique_id {feature.unique_id} of question {example.qas_id!r}"
        ) from None


def doc_offset(feature: SquadFeature, example: SquadExample) -> int:
    """Position of the window's first doc piece: just after the first [SEP]."""
    try:
        return feature.tokens.index("[SEP]") + 1
    except ValueError:
        raise ValueError(
            f"window unique_id {feature.unique_id} of question {example.qas_id!r} has no [SEP]"
        ) from None


def valid_span(
    feature: SquadFeature, start: int, end: int, offset: int, max_answer_length: int
) -> bool:
    """Whether positions `start`..`end` make an answer the original keeps: start in the doc at
    its max-context window, end in the doc, not before start, at most `max_answer_length` long."""
    if start - offset < 0 or start - offset >= len(feature.tok_start_to_orig_index):
        return False
    if end - offset >= len(feature.tok_end_to_orig_index):
        return False
    if not feature.token_is_max_context.get(start, False):
        return False
    return start <= end and end - start + 1 <= max_answer_length


def top_indexes(scores: Sequence[float], count: int) -> list[int]:
    """Indices of the `count` highest scores, highest first; ties keep the lower index first."""
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
    return [int(i) for i in order[:count]]


def softmax(scores: Sequence[float]) -> list[float]:
    """Softmax in Python floats, max-shifted and summed in order, as the original computes it."""
    if not scores:
        return []
    highest = max(scores)
    exps = [math.exp(score - highest) for score in scores]
    total = 0.0
    for value in exps:
        total += value
    return [value / total for value in exps]


def check_finite(values: Sequence[float], what: str, unique_id: int) -> None:
    """Rejects NaN scores, which would rank candidates arbitrarily."""
    if np.isnan(np.asarray(values, dtype=np.float64)).any():
        raise ValueError(f"raw result unique_id {unique_id}: {what} contains NaN")


def nbest_for_example(
    example: SquadExample,
    windows: Sequence[SquadFeature],
    span_scores: SpanScores,
    n_best_size: int,
    fallback: tuple[str, float, float],
) -> list[dict[str, object]]:
    """The question's n-best list: spans of all its windows ranked by mean start + mean end
    score (stable, so ties keep window then first-seen order), texts cut from the context by
    character and stripped, repeated texts dropped; `fallback` (text, start, end) when no span
    survives. Each entry: text, probability (softmax over the list), start_log_prob,
    end_log_prob."""
    candidates = []
    for window in windows:
        for doc_start, doc_end, start_score, end_score in span_scores.mean_spans(window.unique_id):
            candidates.append((window, doc_start, doc_end, start_score, end_score))
    candidates.sort(key=lambda c: c[3] + c[4], reverse=True)

    seen_texts: set[str] = set()
    nbest: list[tuple[str, float, float]] = []
    for window, doc_start, doc_end, start_score, end_score in candidates:
        if len(nbest) >= n_best_size:
            break
        first_char = window.tok_start_to_orig_index[doc_start]
        last_char = window.tok_end_to_orig_index[doc_end]
        text = example.paragraph_text[first_char : last_char + 1].strip()
        if text in seen_texts:
            continue
        seen_texts.add(text)
        nbest.append((text, start_score, end_score))
    if not nbest:
        nbest.append(fallback)

    probabilities = softmax([start + end for _, start, end in nbest])
    return [
        {"text": text, "probability": probability, "start_log_prob": start, "end_log_prob": end}
        for (text, start, end), probability in zip(nbest, probabilities)
    ]


def dumps_original_layout(value) -> str:
    """JSON as the original writes its prediction files: indent 4, keys in their own order,
    ASCII-escaped, newline-terminated; NaN and infinities become null (NaN is not JSON)."""
    return json.dumps(io.json_safe(value), indent=4, allow_nan=False) + "\n"


def write_prediction_files(
    output_dir: str | os.PathLike, predictions: SquadPredictions
) -> dict[str, str]:
    """Writes predictions.json, nbest_predictions.json and (v2) null_odds.json into
    `output_dir`, each atomically, in the original's layout; returns {file name: path}."""
    os.makedirs(output_dir, exist_ok=True)
    contents = {
        PREDICTIONS_FILE: predictions.predictions,
        NBEST_FILE: predictions.nbest_predictions,
    }
    if predictions.null_odds is not None:
        contents[NULL_ODDS_FILE] = predictions.null_odds
    paths = {}
    for name, value in contents.items():
        path = os.path.join(os.fspath(output_dir), name)
        io.write_text(path, dumps_original_layout(value))
        paths[name] = path
    return paths
