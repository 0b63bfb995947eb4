"""The `keras_text` export format: a classifier or a SQuAD model as a `.keras` file that takes
raw strings.

The file is an `AlbertTextClassifier` (`albert_tf.modeling.heads.text_classifier`): the head's
classifier behind the in-graph tokenizer the text SavedModels use, with the SentencePiece model
inside, returning `probabilities` and the `label` names (the export's labels: `classifier_info.json`
beside `--keras_model`, or a transformers folder's `id2label`; else "0", "1", ...). Before it is
published it is reloaded as a user would (`keras.saving.load_model`, safe mode) and checked on
the export's texts, single and pairs: its ids must equal `AlbertTokenizer`'s exactly, its
probabilities the Keras model's on those ids (the format's `RelativeDiffLimit`), its labels the
names of their argmax. A SQuAD head's file is an `AlbertTextQuestionAnswerer`
(`albert_tf.export.qa.keras_model`, the text-in QA SavedModel's graph, with the export's `QaSettings`),
checked as that SavedModel is: the same answers and n-best lists as the Python path on the probe
questions and the settings' verification file.
"""

from __future__ import annotations

import dataclasses
import os

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from albert_tf.export.parity import merge_figures, parity_figures
from albert_tf.modeling.heads.text_classifier import AlbertTextClassifier
from albert_tf.modeling.model import BACKBONE_INPUTS

ARTIFACT = "keras_text"


def label_names(job) -> list[str] | None:
    """The export's label names in output order (`ExportConfig.app_metadata.labels`); None:
    the model's default ("0", "1", ...)."""
    labels = job.config.app_metadata.labels
    return list(labels) if labels else None


def _batches(signature_rows: list, size: int = 32):
    return [signature_rows[i : i + size] for i in range(0, len(signature_rows), size)]


def verify(path: str, head, tokenizer, max_seq_length: int, texts, thresholds, limit) -> dict:
    """Reload the `.keras` file at `path` and check it on `texts` ((text_a, text_b or None)):
    `predict` on every text_a alone and on every pair with a text_b."""
    model = keras.saving.load_model(path, compile=False, safe_mode=True)
    failures, figures, checked = [], [], 0
    for signature, rows in (
        ("single", [(a, None) for a, _ in texts]),
        ("pairs", [(a, b) for a, b in texts if b is not None]),
    ):
        for batch in _batches(rows):
            inputs = (
                [a for a, _ in batch]
                if signature == "single"
                else {"text_a": [a for a, _ in batch], "text_b": [b for _, b in batch]}
            )
            packed = [tokenizer.encode_pair(a, b, max_seq_length) for a, b in batch]
            expected = {
                k: np.array([getattr(p, k) for p in packed], np.int32) for k in BACKBONE_INPUTS
            }
            segments = (
                tf.constant(inputs)
                if signature == "single"
                else (tf.constant(inputs["text_a"]), tf.constant(inputs["text_b"]))
            )
            ids = model.preprocessing(segments)
            wrong = [
                i
                for i in range(len(batch))
                if any((np.asarray(ids[k][i]) != expected[k][i]).any() for k in BACKBONE_INPUTS)
            ]
            if wrong:
                failures.append(
                    f"{signature}: {len(wrong)} of {len(batch)} texts get other ids than "
                    f"AlbertTokenizer, e.g. {batch[wrong[0]]!r:.200}"
                )
            outputs = model.predict(inputs, verbose=0)
            reference = head.keras_outputs(expected, "serving_default")
            figures.append(
                parity_figures(reference, {"probabilities": outputs["probabilities"]}, np.zeros(0))
            )
            if model.label_names is not None:
                names = [model.label_names[i] for i in outputs["probabilities"].argmax(-1)]
                if list(outputs["label"]) != names:
                    failures.append(f"{signature}: labels are not the names of the argmax")
            checked += len(batch)
    figures = merge_figures(figures)
    failures += limit.failures(figures, thresholds)
    figures["num_texts"] = checked
    return {"figures": figures, "failures": failures, "label_names": model.label_names}


def verify_question_answerer(path: str, head, tokenizer, max_seq_length: int, settings) -> dict:
    """Reload the `.keras` QA model at `path` and compare its answers with the Python path's
    (`qa.verify`), as the text-in SavedModel's are compared."""
    from albert_tf.export.qa import verify as qa_verify

    model = keras.saving.load_model(path, compile=False, safe_mode=True)
    examples = qa_verify.verification_examples(settings)
    expected = qa_verify.python_path_answers(head, tokenizer, examples, max_seq_length, settings)
    got = model.predict(
        {
            "question": [e.question_text for e in examples],
            "context": [e.paragraph_text for e in examples],
        },
        verbose=0,
    )
    # answer_differences reads the SavedModel's bytes.
    got = {k: np.vectorize(str.encode)(v) if v.dtype == object else v for k, v in got.items()}
    threshold = settings.null_score_diff_threshold if head.kind == "squad_v2" else None
    failures = qa_verify.answer_differences(expected, got, [e.qas_id for e in examples], threshold)
    return {"figures": {"num_questions": len(examples)}, "failures": failures}


def _build_question_answerer(job) -> dict[str, str]:
    from albert_tf.export.qa.keras_model import AlbertTextQuestionAnswerer
    from albert_tf.export.qa.text import QaSettings
    from albert_tf.text.tf_tokenization import AlbertPreprocessingLayer

    head, config = job.head, job.config
    settings = config.qa or QaSettings(max_context_bytes=config.max_text_bytes)
    logging.info("Building the text .keras question answerer")
    preprocessing = AlbertPreprocessingLayer(
        job.tokenizer.model_proto,
        max_seq_length=config.max_seq_length,
        do_lower_case=config.do_lower_case,
    )
    model = AlbertTextQuestionAnswerer(
        head.model, preprocessing, head.kind, dataclasses.asdict(settings)
    )
    path = os.path.join(job.staging, f"{ARTIFACT}.keras")
    model.save(path)
    job.artifacts[ARTIFACT] = verify_question_answerer(
        path, head, job.tokenizer, config.max_seq_length, settings
    )
    return {ARTIFACT: path}


def build(job, spec) -> dict[str, str]:
    """The `keras_text` format (a `formats.FormatSpec`) of a `formats.ExportJob`: the text
    classifier (or SQuAD question answerer) built under `job.staging`, verified and recorded in
    `job.artifacts`."""
    head, config = job.head, job.config
    refusal = spec.refusal(head.kind, job.tokenizer is not None)
    if refusal:
        raise ValueError(refusal)
    if head.kind in ("squad_v1", "squad_v2"):
        return _build_question_answerer(job)
    logging.info("Building the text .keras classifier")
    model = AlbertTextClassifier.from_spm_model(
        head.model,
        job.tokenizer.model_proto,
        config.max_seq_length,
        do_lower_case=config.do_lower_case,
        label_names=None if getattr(head.model, "regression", False) else label_names(job),
    )
    path = os.path.join(job.staging, f"{ARTIFACT}.keras")
    model.save(path)
    job.artifacts[ARTIFACT] = verify(
        path, head, job.tokenizer, config.max_seq_length, job.texts, job.thresholds, spec.parity
    )
    return {ARTIFACT: path}
