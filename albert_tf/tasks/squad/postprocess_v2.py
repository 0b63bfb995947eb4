"""SQuAD v2.0 post-processing as the original's `accumulate_predictions_v2`,
`write_predictions_v2` and `evaluate_v2`: from the v2 head's beam outputs to answers, null odds
and the threshold that turns predictions into "no answer".

Candidates are the head's `start_n_top` starts, each with its `end_n_top` ends (row i of the
ends belongs to start i), filtered as `postprocess.valid_span`. A question's null score is the
smallest `cls_logits` over its windows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

import numpy as np

from albert_tf.tasks.squad import metrics, postprocess
from albert_tf.tasks.squad.examples import SquadExample
from albert_tf.tasks.squad.features import SquadFeature
from albert_tf.tasks.squad.postprocess import SpanScores, SquadPredictions

# Answer used when no span of a question survives the filters.
V2_FALLBACK = ("", -1e6, -1e6)
# The null score a question starts from before its windows lower it ("large and positive").
NULL_SCORE_START = 1000000.0


@dataclasses.dataclass(frozen=True)
class RawResultV2:
    """The v2 head's inference output for one window.

    Args:
        unique_id: the window's `SquadFeature.unique_id`.
        start_top_log_probs, start_top_index: the best `start_n_top` starts (log-probabilities
            and positions), best first.
        end_top_log_probs, end_top_index: for each of those starts in turn, its best
            `end_n_top` ends (`start_n_top * end_n_top` entries).
        cls_logits: the answer-class score (higher = more likely unanswerable).

    Example:
        >>> r = RawResultV2(1000000000, [-0.1], [14], [-0.2, -3.0], [15, 20], 2.5)
        >>> len(r.end_top_index) // len(r.start_top_index)
        2
    """

    unique_id: int
    start_top_log_probs: Sequence[float]
    start_top_index: Sequence[int]
    end_top_log_probs: Sequence[float]
    end_top_index: Sequence[int]
    cls_logits: float


def raw_results_v2(
    unique_ids, start_top_log_probs, start_top_index, end_top_log_probs, end_top_index, cls_logits
) -> list[RawResultV2]:
    """RawResultV2 per row of the prediction arrays ([N], [N,k], [N,k], [N,k*k'], [N,k*k'],
    [N]), with scores as Python floats and positions as ints."""
    unique_ids = np.asarray(unique_ids).reshape(-1)
    arrays = [start_top_log_probs, start_top_index, end_top_log_probs, end_top_index]
    arrays = [np.asarray(a).reshape(len(unique_ids), -1) for a in arrays]
    cls_logits = np.asarray(cls_logits).reshape(-1)
    if cls_logits.shape != unique_ids.shape:
        raise ValueError(
            f"raw results: {len(unique_ids)} unique_ids but {len(cls_logits)} cls_logits"
        )
    return [
        RawResultV2(
            int(unique_ids[i]),
            arrays[0][i].astype(np.float64).tolist(),
            [int(x) for x in arrays[1][i]],
            arrays[2][i].astype(np.float64).tolist(),
            [int(x) for x in arrays[3][i]],
            float(cls_logits[i]),
        )
        for i in range(len(unique_ids))
    ]


def _beam_widths(result: RawResultV2) -> int:
    start_n_top = len(result.start_top_index)
    sizes = {len(result.start_top_log_probs), start_n_top}
    ends = {len(result.end_top_log_probs), len(result.end_top_index)}
    if len(sizes) != 1 or len(ends) != 1 or start_n_top == 0 or ends.pop() % start_n_top:
        raise ValueError(
            f"raw result unique_id {result.unique_id}: start lists of "
            f"{len(result.start_top_log_probs)}/{start_n_top} and end lists of "
            f"{len(result.end_top_log_probs)}/{len(result.end_top_index)} entries do not make "
            "start_n_top starts x end_n_top ends"
        )
    return len(result.end_top_index) // start_n_top


def accumulate_predictions_v2(
    examples: Sequence[SquadExample],
    features: Iterable[SquadFeature],
    results: Iterable[RawResultV2],
    max_answer_length: int = 30,
    span_scores: SpanScores | None = None,
) -> SpanScores:
    """Adds each window's valid (start, end) candidates and each question's null score (the
    smallest `cls_logits` of its windows) to `span_scores` (a new one when None; pass one again
    to average several passes) and returns it. The beam widths come from the results' shapes.

    Raises ValueError naming the question when a window has no result, no [SEP], or NaN scores.
    """
    span_scores = SpanScores() if span_scores is None else span_scores
    by_id = postprocess.results_by_unique_id(results)
    grouped = postprocess.features_by_example(examples, features)
    for example_index, (example, windows) in enumerate(zip(examples, grouped)):
        null_score = NULL_SCORE_START
        for window in windows:
            result = postprocess.result_for(by_id, window, example)
            end_n_top = _beam_widths(result)
            postprocess.check_finite(
                result.start_top_log_probs, "start_top_log_probs", window.unique_id
            )
            postprocess.check_finite(
                result.end_top_log_probs, "end_top_log_probs", window.unique_id
            )
            postprocess.check_finite([result.cls_logits], "cls_logits", window.unique_id)
            null_score = min(null_score, float(result.cls_logits))
            offset = postprocess.doc_offset(window, example)
            for i, start in enumerate(result.start_top_index):
                for j in range(i * end_n_top, (i + 1) * end_n_top):
                    end = result.end_top_index[j]
                    if postprocess.valid_span(window, start, end, offset, max_answer_length):
                        span_scores.add_span(
                            window.unique_id,
                            start - offset,
                            end - offset,
                            float(result.start_top_log_probs[i]),
                            float(result.end_top_log_probs[j]),
                        )
        span_scores.null_scores.setdefault(example_index, []).append(null_score)
    return span_scores


def predictions_v2(
    examples: Sequence[SquadExample],
    features: Iterable[SquadFeature],
    span_scores: SpanScores,
    n_best_size: int = 20,
    null_score_diff_threshold: float | None = None,
) -> SquadPredictions:
    """Each question's n-best list, null odds (its null score, averaged over passes) and
    prediction, as `write_predictions_v2` computes them (without writing): the best span, or ""
    where a threshold is given and the null odds are >= it (the original's comparison)."""
    predictions: dict[str, str] = {}
    nbest_predictions: dict[str, list[dict[str, object]]] = {}
    null_odds: dict[str, float] = {}
    grouped = postprocess.features_by_example(examples, features)
    for example_index, (example, windows) in enumerate(zip(examples, grouped)):
        nbest = postprocess.nbest_for_example(
            example, windows, span_scores, n_best_size, V2_FALLBACK
        )
        null_scores = span_scores.null_scores.get(example_index)
        if not null_scores:
            raise ValueError(f"question {example.qas_id!r} has no accumulated null score")
        odds = sum(null_scores) / len(null_scores)
        null_odds[example.qas_id] = odds
        if null_score_diff_threshold is None or odds < null_score_diff_threshold:
            predictions[example.qas_id] = nbest[0]["text"]
        else:
            predictions[example.qas_id] = ""
        nbest_predictions[example.qas_id] = nbest
    return SquadPredictions(predictions, nbest_predictions, null_odds)


@dataclasses.dataclass
class V2Evaluation:
    """What `evaluate_with_null_threshold` returns.

    Args:
        eval_results: the original's result: exact, f1, total of the thresholded predictions
            (scored with null-odds threshold 1.0, as the original) and null_score_diff_threshold.
        predictions: the thresholded predictions, n-best lists and null odds (what the original
            leaves in predictions.json, nbest_predictions.json, null_odds.json).
        predictions_no_threshold: the best span of every question (the first pass).
        official_scores: the official v2.0 scores of the first pass with the null odds
            (HasAns_*, NoAns_*, best_exact/best_f1 and their thresholds).

    Example:
        >>> empty = SquadPredictions({}, {}, {})
        >>> V2Evaluation({"null_score_diff_threshold": 0.0}, empty, {}, {}).eval_results
        {'null_score_diff_threshold': 0.0}
    """

    eval_results: dict[str, float]
    predictions: SquadPredictions
    predictions_no_threshold: dict[str, str]
    official_scores: dict[str, float]


def evaluate_with_null_threshold(
    dataset,
    examples: Sequence[SquadExample],
    features: Sequence[SquadFeature],
    span_scores: SpanScores,
    n_best_size: int = 20,
) -> V2Evaluation:
    """The original's `evaluate_v2`: predicts the best span everywhere, scores it with the
    official v2.0 metric and the null odds, takes `best_f1_thresh` (the search starts at 0.0) as
    the threshold, predicts again with it ("" where null odds >= threshold) and scores that.
    `dataset` is the SQuAD v2.0 file's content (its "data" list or the whole object)."""
    first = predictions_v2(examples, features, span_scores, n_best_size)
    official = metrics.evaluate_v2(dataset, first.predictions, first.null_odds)
    threshold = official["best_f1_thresh"]
    final = predictions_v2(examples, features, span_scores, n_best_size, threshold)
    # The original scores the rewritten predictions with the null odds again, at the official
    # script's default threshold 1.0.
    scores = metrics.evaluate_v2(dataset, final.predictions, final.null_odds)
    eval_results = {key: scores[key] for key in ("exact", "f1", "total")}
    eval_results["null_score_diff_threshold"] = threshold
    return V2Evaluation(eval_results, final, first.predictions, official)
