"""Building the text-in QA SavedModel and checking it against the Python path.

The Python path is the project's own: `read_squad_examples` -> `convert_examples_to_features` ->
the Keras model -> `postprocess_v1` / `postprocess_v2`. An export is written only when the
reloaded SavedModel gives the same answers and n-best texts on every question it is checked on
(float32 ties aside, see `answer_differences`), and scores, probabilities and null odds within
float32 round-off. `head` arguments are `heads.ServingHead`s (not imported: the head registry
reaches this module, and savedmodel imports the registry).
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import tensorflow as tf
from absl import logging

from albert_tf.export.qa.inputs import requests_within
from albert_tf.export.qa.text import QA_SETTINGS_FILE, QaSettings, QaTextModel, save_qa_text_model
from albert_tf.export.serving_ops import tf_serving_failures
from albert_tf.tasks.squad.examples import SquadExample, read_squad_examples
from albert_tf.tasks.squad.features import convert_examples_to_features
from albert_tf.tasks.squad.postprocess_v1 import postprocess_v1, raw_results_v1
from albert_tf.tasks.squad.postprocess_v2 import (
    accumulate_predictions_v2,
    predictions_v2,
    raw_results_v2,
)
from albert_tf.text.tf_tokenization import AlbertPreprocessingLayer
from albert_tf.text.tokenization import AlbertTokenizer
from albert_tf.tolerance import FLOAT32_EPS, scaled_limit

# Probes every QA text export answers like the Python path: accents, odd whitespace, digits with
# commas, characters SentencePiece drops, a context far longer than a window, an empty question.
PROBE_QUESTIONS = [
    ("Who did it?", "Rollo did it in 911, near Rouen."),
    ("Quand?", "  Le  traité de Saint-Clair-sur-Epte, en 911 — ﬁn de l'été.\u200b\tVoilà. "),
    ("How much was paid?", "In 1990, 1,000, and 2,500,000 were paid; ½ of it later.\ufeff"),
    ("What is repeated?", "The river flows north. " * 80 + "The answer is the sea."),
    ("", "Context without a question."),
]


def python_path_answers(
    head,
    tokenizer: AlbertTokenizer,
    examples: list[SquadExample],
    max_seq_length: int,
    settings: QaSettings,
) -> dict[str, dict]:
    """The Python path's answers: {qas_id: {"answer", "nbest", and for v2 "null_odds",
    "best_span"}} from `convert_examples_to_features`, the Keras model and `postprocess_v1/v2`."""
    features = convert_examples_to_features(
        examples,
        tokenizer,
        max_seq_length,
        settings.doc_stride,
        settings.max_query_length,
        is_training=False,
    )
    names = head.signature_inputs["serving_default"]
    inputs = {k: np.array([getattr(f, k) for f in features], np.int32) for k in names}
    inputs = {k: v.reshape(len(features), max_seq_length) for k, v in inputs.items()}
    outputs = (
        head.keras_outputs(inputs, "serving_default")
        if features
        else {
            k: np.zeros((0, max_seq_length))
            for k in head.spec.signatures["serving_default"].outputs
        }
    )
    unique_ids = [f.unique_id for f in features]
    if head.kind == "squad_v1":
        results = raw_results_v1(unique_ids, outputs["start_logits"], outputs["end_logits"])
        predictions = postprocess_v1(
            examples, features, results, settings.n_best_size, settings.max_answer_length
        )
        thresholded = predictions
    else:
        results = raw_results_v2(
            unique_ids,
            *(outputs[k] for k in ("start_top_log_probs", "start_top_index")),
            *(outputs[k] for k in ("end_top_log_probs", "end_top_index", "cls_logits")),
        )
        span_scores = accumulate_predictions_v2(
            examples, features, results, settings.max_answer_length
        )
        predictions = predictions_v2(examples, features, span_scores, settings.n_best_size)
        thresholded = predictions_v2(
            examples,
            features,
            span_scores,
            settings.n_best_size,
            settings.null_score_diff_threshold,
        )
    answers = {}
    for example in examples:
        qas_id = example.qas_id
        answers[qas_id] = {
            "answer": thresholded.predictions[qas_id],
            "nbest": predictions.nbest_predictions[qas_id],
        }
        if predictions.null_odds is not None:
            answers[qas_id]["null_odds"] = predictions.null_odds[qas_id]
            answers[qas_id]["best_span"] = predictions.predictions[qas_id]
    return answers


def _tie(scores: list[float], j: int, limit: float) -> bool:
    """Entry j of an n-best list ties a neighbour's score, or is the last (it may tie with the
    first candidate left out)."""
    neighbours = [scores[k] for k in (j - 1, j + 1) if 0 <= k < len(scores)]
    return j == len(scores) - 1 or any(abs(scores[j] - s) <= limit for s in neighbours)


def answer_differences(
    expected: dict[str, dict], got: dict[str, np.ndarray], ids, null_threshold: float | None = None
) -> list[str]:
    """Where text-in outputs `got` (rows in the order of `ids`) differ from `python_path_answers`.

    Answers and n-best texts must be equal, and scores, probabilities and null odds equal within
    float32 round-off, except where round-off decides: two n-best entries whose scores tie within
    it may come in either order (the model scores a window in another batch than the Python path,
    which moves its float32 outputs by a few ulps), and a question whose null odds are that close
    to `null_threshold` may fall on either side.
    """
    problems = []
    limit = 64 * FLOAT32_EPS  # float32 outputs of float64 sums of float32 scores
    for row, qas_id in enumerate(ids):
        want = expected[qas_id]
        texts = [e["text"] for e in want["nbest"]]
        scores = [e["start_log_prob"] + e["end_log_prob"] for e in want["nbest"]]
        tolerance = scaled_limit(scores, limit)
        size = int(got["nbest_size"][row])
        got_texts = [t.decode("utf-8") for t in got["nbest_text"][row][:size]]
        got_scores = np.asarray(got["nbest_score"][row][:size], np.float64)
        untied = len(got_texts) != len(texts) or any(
            a != b
            and not (abs(got_scores[j] - scores[j]) <= tolerance and _tie(scores, j, tolerance))
            for j, (a, b) in enumerate(zip(got_texts, texts))
        )
        answer = got["answer"][row].decode("utf-8")
        if answer != want["answer"]:
            odds = want.get("null_odds")
            near_threshold = (
                odds is not None
                and null_threshold is not None
                and abs(odds - null_threshold) <= scaled_limit(odds, limit)
            )
            untied |= not near_threshold and not (
                answer == got_texts[0] and _tie(scores, 0, tolerance)
            )
        if untied:
            problems.append(
                f"question {qas_id!r}: answer {answer!r} / n-best {got_texts[:3]} instead of "
                f"{want['answer']!r} / {texts[:3]}"
            )
            continue
        probabilities = [e["probability"] for e in want["nbest"]]
        pairs = [
            ("nbest_score", got_scores, scores),
            ("nbest_probability", got["nbest_probability"][row][:size], probabilities),
        ]
        if "null_odds" in want:
            pairs.append(("null_odds", got["null_odds"][row], want["null_odds"]))
        for name, value, reference in pairs:
            diff = np.max(np.abs(np.asarray(value, np.float64) - reference), initial=0.0)
            if not diff <= scaled_limit(reference, limit):
                problems.append(f"question {qas_id!r}: {name} off by {diff:.3g}")
    return problems


def _requests(examples: list[SquadExample], max_context_bytes: int, size: int = 32):
    """The examples in requests of up to `size` questions within the model's
    `max_context_bytes`; and a failure for each example that no request can hold."""
    rows = [(example.question_text, example.paragraph_text) for example in examples]
    requests, over = requests_within(rows, max_context_bytes, size)
    failures = [
        f"question {examples[i].qas_id!r}: {max(len(t.encode('utf-8')) for t in rows[i])} bytes "
        f"of text, more than max_context_bytes={max_context_bytes}"
        for i in over
    ]
    return [[examples[i] for i in request] for request in requests], failures


def verification_examples(settings: QaSettings) -> list[SquadExample]:
    """What every text-in QA model is checked on: `PROBE_QUESTIONS`, then every question of
    `settings.verification_file`."""
    examples = [
        SquadExample(f"probe-{i}", question, context)
        for i, (question, context) in enumerate(PROBE_QUESTIONS)
    ]
    if settings.verification_file:
        examples += read_squad_examples(settings.verification_file, is_training=False)
    return examples


def verify_qa_text_model(
    path: str, head, tokenizer: AlbertTokenizer, max_seq_length: int, settings: QaSettings
) -> dict:
    """Reload the text-in SavedModel and compare its answers with the Python path's on
    `PROBE_QUESTIONS` and every question of `settings.verification_file`."""
    examples = verification_examples(settings)
    expected = python_path_answers(head, tokenizer, examples, max_seq_length, settings)
    serve = tf.saved_model.load(path).signatures["serving_default"]
    batches, failures = _requests(examples, settings.max_context_bytes)
    rows = [
        serve(
            question=tf.constant([e.question_text for e in batch]),
            context=tf.constant([e.paragraph_text for e in batch]),
        )
        for batch in batches
    ]
    if rows:
        got = {k: np.concatenate([r[k].numpy() for r in rows]) for k in rows[0]}
        served = [e.qas_id for batch in batches for e in batch]
        threshold = settings.null_score_diff_threshold if head.kind == "squad_v2" else None
        failures += answer_differences(expected, got, served, threshold)
    failures += tf_serving_failures(path)
    return {"figures": {"num_questions": len(examples)}, "failures": failures}


def build_qa_text_model(
    head,
    tokenizer: AlbertTokenizer,
    max_seq_length: int,
    do_lower_case: bool,
    settings: QaSettings,
    assets: dict[str, str],
    staging: str,
    artifacts: dict,
) -> dict[str, str]:
    """Build and verify the text-in SavedModel under `staging` as the `text` artifact; return
    {"text": staged path} if it passed."""
    logging.info("Building the text-in QA SavedModel")
    preprocessing = AlbertPreprocessingLayer(
        tokenizer.model_proto, max_seq_length=max_seq_length, do_lower_case=do_lower_case
    )
    model = QaTextModel(head, preprocessing, settings)
    settings_file = os.path.join(os.path.dirname(assets["albert_config_file"]), QA_SETTINGS_FILE)
    with open(settings_file, "w", encoding="utf-8") as f:
        json.dump(
            {"head": head.kind, "max_seq_length": max_seq_length, **dataclasses.asdict(settings)},
            f,
            indent=2,
        )
    path = os.path.join(staging, "text")
    save_qa_text_model(model, path, {**assets, "qa_settings_file": settings_file})
    artifacts["text"] = verify_qa_text_model(path, head, tokenizer, max_seq_length, settings)
    artifacts["text"]["size_bytes"] = sum(
        os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files
    )
    return {} if artifacts["text"]["failures"] else {"text": path}
