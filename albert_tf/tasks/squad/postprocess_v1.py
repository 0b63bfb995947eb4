"""SQuAD v1.1 post-processing as the original's `accumulate_predictions_v1` +
`write_predictions_v1`: from each window's start and end logits to an answer per question.

The candidates are the top `n_best_size` starts times the top `n_best_size` ends over **all**
positions of the window, padding included (the original never masks them; masking changes the
n-best lists), and only then filtered (see `postprocess.valid_span`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

import numpy as np

from albert_tf.tasks.squad import postprocess
from albert_tf.tasks.squad.examples import SquadExample
from albert_tf.tasks.squad.features import SquadFeature
from albert_tf.tasks.squad.postprocess import SpanScores, SquadPredictions

# Answer used when no span of a question survives the filters.
V1_FALLBACK = ("empty", 0.0, 0.0)


@dataclasses.dataclass(frozen=True)
class RawResultV1:
    """The v1 head's output for one window (the original passes these logits under the name
    `start_log_prob` / `end_log_prob`; they are not normalized).

    Args:
        unique_id: the window's `SquadFeature.unique_id`.
        start_logits: one score per position of the window, padding included.
        end_logits: the same for the answer's end.

    Example:
        >>> RawResultV1(1000000000, [0.1, 2.0], [0.3, 1.5]).unique_id
        1000000000
    """

    unique_id: int
    start_logits: Sequence[float]
    end_logits: Sequence[float]


def raw_results_v1(unique_ids, start_logits, end_logits) -> list[RawResultV1]:
    """RawResultV1 per row of the arrays [N], [N, L], [N, L] (what prediction outputs), with the
    scores as Python floats."""
    unique_ids = np.asarray(unique_ids).reshape(-1)
    start_logits, end_logits = np.asarray(start_logits), np.asarray(end_logits)
    if start_logits.shape != end_logits.shape or start_logits.shape[:1] != unique_ids.shape:
        raise ValueError(
            f"raw results: {unique_ids.shape[0]} unique_ids but start_logits "
            f"{start_logits.shape} and end_logits {end_logits.shape}"
        )
    return [
        RawResultV1(int(uid), start.astype(np.float64).tolist(), end.astype(np.float64).tolist())
        for uid, start, end in zip(unique_ids, start_logits, end_logits)
    ]


def accumulate_predictions_v1(
    examples: Sequence[SquadExample],
    features: Iterable[SquadFeature],
    results: Iterable[RawResultV1],
    n_best_size: int = 20,
    max_answer_length: int = 30,
    span_scores: SpanScores | None = None,
) -> SpanScores:
    """Adds the valid spans among each window's top starts x top ends to `span_scores` (a new
    one when None; pass one again to average several passes) and returns it.

    Raises ValueError naming the question when a window has no result, no [SEP], or NaN logits.
    """
    span_scores = SpanScores() if span_scores is None else span_scores
    by_id = postprocess.results_by_unique_id(results)
    for example, windows in zip(examples, postprocess.features_by_example(examples, features)):
        for window in windows:
            result = postprocess.result_for(by_id, window, example)
            postprocess.check_finite(result.start_logits, "start_logits", window.unique_id)
            postprocess.check_finite(result.end_logits, "end_logits", window.unique_id)
            offset = postprocess.doc_offset(window, example)
            ends = postprocess.top_indexes(result.end_logits, n_best_size)
            for start in postprocess.top_indexes(result.start_logits, n_best_size):
                for end in ends:
                    if postprocess.valid_span(window, start, end, offset, max_answer_length):
                        span_scores.add_span(
                            window.unique_id,
                            start - offset,
                            end - offset,
                            float(result.start_logits[start]),
                            float(result.end_logits[end]),
                        )
    return span_scores


def predictions_v1(
    examples: Sequence[SquadExample],
    features: Iterable[SquadFeature],
    span_scores: SpanScores,
    n_best_size: int = 20,
) -> SquadPredictions:
    """Each question's n-best list and its top text as the prediction ("empty" when no span
    survived), as `write_predictions_v1` computes them (without writing; see
    `postprocess.write_prediction_files`)."""
    predictions: dict[str, str] = {}
    nbest_predictions: dict[str, list[dict[str, object]]] = {}
    for example, windows in zip(examples, postprocess.features_by_example(examples, features)):
        nbest = postprocess.nbest_for_example(
            example, windows, span_scores, n_best_size, V1_FALLBACK
        )
        predictions[example.qas_id] = nbest[0]["text"]
        nbest_predictions[example.qas_id] = nbest
    return SquadPredictions(predictions, nbest_predictions)


def postprocess_v1(
    examples: Sequence[SquadExample],
    features: Sequence[SquadFeature],
    results: Iterable[RawResultV1],
    n_best_size: int = 20,
    max_answer_length: int = 30,
) -> SquadPredictions:
    """One pass of raw results to predictions: `accumulate_predictions_v1` then
    `predictions_v1`, as `run_squad_v1.py` does before scoring."""
    span_scores = accumulate_predictions_v1(
        examples, features, results, n_best_size, max_answer_length
    )
    return predictions_v1(examples, features, span_scores, n_best_size)
