"""The official SQuAD metrics: v1.1 (`evaluate-v1.1.py`) and v2.0 (`evaluate-v2.0.py`), whose
definitions the original's `squad_utils` mirrors.

Answers are compared after normalization (lowercase, punctuation and the articles a/an/the
removed, whitespace collapsed); F1 is over the normalized words; each question takes its best
score over its gold answers; results are percentages. v2.0 scores an empty prediction as "no
answer" (right only on an unanswerable question) and can turn predictions into "no answer" where
a question's null odds exceed a threshold.

`dataset` is the SQuAD file's content: the whole JSON object, or its "data" list of articles.
"""

from __future__ import annotations

import collections
import logging
import re
import string
from collections.abc import Mapping

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(text: str) -> str:
    """Lowercase, drop ASCII punctuation, replace a/an/the by a space, collapse whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def answer_tokens(text: str) -> list[str]:
    """The normalized answer's words (none for an empty answer)."""
    return normalize_answer(text).split() if text else []


def _token_f1(prediction_tokens: list[str], gold_tokens: list[str]) -> float:
    common = collections.Counter(prediction_tokens) & collections.Counter(gold_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(prediction_tokens)
    recall = num_same / len(gold_tokens)
    return (2 * precision * recall) / (precision + recall)


def exact_match_v1(prediction: str, gold: str) -> bool:
    """v1.1 exact match: the normalized strings are equal."""
    return normalize_answer(prediction) == normalize_answer(gold)


def f1_v1(prediction: str, gold: str) -> float:
    """v1.1 word F1 (0 when either side normalizes to nothing)."""
    return _token_f1(normalize_answer(prediction).split(), normalize_answer(gold).split())


def exact_v2(gold: str, prediction: str) -> int:
    """v2.0 exact match, 1 or 0 ("" matches only "")."""
    return int(normalize_answer(gold) == normalize_answer(prediction))


def f1_v2(gold: str, prediction: str) -> float:
    """v2.0 word F1; when either side is empty (no answer), 1 if both are, else 0."""
    gold_tokens, prediction_tokens = answer_tokens(gold), answer_tokens(prediction)
    if not gold_tokens or not prediction_tokens:
        return float(gold_tokens == prediction_tokens)
    return _token_f1(prediction_tokens, gold_tokens)


def _articles(dataset) -> list:
    return dataset["data"] if isinstance(dataset, Mapping) else dataset


def _questions(dataset):
    for article in _articles(dataset):
        for paragraph in article["paragraphs"]:
            yield from paragraph["qas"]


def evaluate_v1(dataset, predictions: Mapping[str, str]) -> dict[str, float]:
    """Official v1.1 scores {"exact_match", "f1"} in percent; a question without a prediction
    scores 0 (and is logged), as the official script does."""
    exact_total = f1_total = 0.0
    total = 0
    for qa in _questions(dataset):
        total += 1
        if qa["id"] not in predictions:
            logging.warning("Unanswered question %s will receive score 0.", qa["id"])
            continue
        golds = [answer["text"] for answer in qa["answers"]]
        prediction = predictions[qa["id"]]
        exact_total += max(exact_match_v1(prediction, gold) for gold in golds)
        f1_total += max(f1_v1(prediction, gold) for gold in golds)
    if total == 0:
        raise ValueError("SQuAD v1.1 evaluation: the dataset has no questions")
    return {"exact_match": 100.0 * exact_total / total, "f1": 100.0 * f1_total / total}


def has_answer_by_question(dataset) -> dict[str, bool]:
    """{question id: whether it has a gold answer} (False = unanswerable)."""
    return {qa["id"]: bool(qa["answers"]) for qa in _questions(dataset)}


def raw_scores_v2(dataset, predictions: Mapping[str, str]) -> tuple[dict, dict]:
    """Per question, the best v2.0 exact and F1 over its gold answers ("" for unanswerable);
    questions without a prediction are left out, as the official script does."""
    exact_scores, f1_scores = {}, {}
    for qa in _questions(dataset):
        qid = qa["id"]
        golds = [a["text"] for a in qa["answers"] if normalize_answer(a["text"])] or [""]
        if qid not in predictions:
            logging.warning("Missing prediction for %s", qid)
            continue
        prediction = predictions[qid]
        exact_scores[qid] = max(exact_v2(gold, prediction) for gold in golds)
        f1_scores[qid] = max(f1_v2(gold, prediction) for gold in golds)
    return exact_scores, f1_scores


def apply_null_threshold(
    scores: Mapping[str, float],
    null_odds: Mapping[str, float],
    has_answer: Mapping[str, bool],
    threshold: float,
) -> dict[str, float]:
    """Scores with "no answer" predicted where null odds > `threshold`: 1 on an unanswerable
    question, 0 on an answerable one."""
    return {
        qid: float(not has_answer[qid]) if null_odds[qid] > threshold else score
        for qid, score in scores.items()
    }


def _summary(exact_scores, f1_scores, qids=None) -> dict[str, float]:
    qids = list(exact_scores) if qids is None else qids
    total = len(qids)
    return {
        "exact": 100.0 * sum(exact_scores[q] for q in qids) / total,
        "f1": 100.0 * sum(f1_scores[q] for q in qids) / total,
        "total": total,
    }


def find_best_threshold(
    predictions: Mapping[str, str],
    scores: Mapping[str, float],
    null_odds: Mapping[str, float],
    has_answer: Mapping[str, bool],
) -> tuple[float, float]:
    """(best score in percent, its threshold) over null-odds thresholds, as the official
    script: starts from "no answer everywhere" at threshold 0.0, then answers the questions in
    increasing null odds, keeping a threshold only when it strictly improves the score."""
    current = best = sum(1 for qid in has_answer if not has_answer[qid])
    best_threshold = 0.0
    for qid in sorted(null_odds, key=lambda q: null_odds[q]):
        if qid not in scores:
            continue
        if has_answer[qid]:
            current += scores[qid]
        elif predictions[qid]:
            current -= 1
        if current > best:
            best, best_threshold = current, null_odds[qid]
    return 100.0 * best / len(scores), best_threshold


def evaluate_v2(
    dataset,
    predictions: Mapping[str, str],
    null_odds: Mapping[str, float] | None = None,
    null_odds_threshold: float = 1.0,
) -> dict[str, float]:
    """Official v2.0 scores in the official key order: exact, f1, total, HasAns_* and NoAns_*
    (when such questions exist), and with `null_odds` best_exact, best_exact_thresh, best_f1,
    best_f1_thresh. "No answer" is predicted where null odds > `null_odds_threshold` (the
    script's default 1.0; without `null_odds` nothing is).

    Raises ValueError naming the questions of `dataset` without a prediction (or null odds).
    """
    has_answer = has_answer_by_question(dataset)
    if not has_answer:
        raise ValueError("SQuAD v2.0 evaluation: the dataset has no questions")
    missing = [qid for qid in has_answer if qid not in predictions]
    if missing:
        raise ValueError(f"SQuAD v2.0 evaluation: no prediction for questions {missing}")
    if null_odds is None:
        odds = {qid: 0.0 for qid in predictions}
    else:
        missing = [qid for qid in has_answer if qid not in null_odds]
        if missing:
            raise ValueError(f"SQuAD v2.0 evaluation: no null odds for questions {missing}")
        odds = dict(null_odds)
    exact_raw, f1_raw = raw_scores_v2(dataset, predictions)
    exact = apply_null_threshold(exact_raw, odds, has_answer, null_odds_threshold)
    f1 = apply_null_threshold(f1_raw, odds, has_answer, null_odds_threshold)
    results = _summary(exact, f1)
    for prefix, wanted in (("HasAns", True), ("NoAns", False)):
        qids = [qid for qid, answerable in has_answer.items() if answerable == wanted]
        if qids:
            for key, value in _summary(exact, f1, qids).items():
                results[f"{prefix}_{key}"] = value
    if null_odds is not None:
        results["best_exact"], results["best_exact_thresh"] = find_best_threshold(
            predictions, exact_raw, odds, has_answer
        )
        results["best_f1"], results["best_f1_thresh"] = find_best_threshold(
            predictions, f1_raw, odds, has_answer
        )
    return results
