"""`AlbertTextQuestionAnswerer`: a `.keras` SQuAD model that takes a question and a context as
strings and returns the answer text, as the text-in QA SavedModel does (the same graph,
`text.QaTextModel`, with the SentencePiece model inside the file):

    model = keras.saving.load_model("squad_text.keras")   # after `import albert_tf`
    model.predict({"question": ["Who did it?"], "context": ["Rollo did it in 911."]})["answer"]

Outputs, per question: `answer` (str), `score`, `probability`, the n-best list (`nbest_text`,
`nbest_score`, `nbest_probability` [B, n_best_size], `nbest_size`); a SQuAD v2 model adds
`best_span`, `null_odds` and `no_answer`. A request over the stored `max_context_bytes` of
context (or question) text is refused before any work, as the SavedModel refuses it.
"""

from __future__ import annotations

import dataclasses
import functools
import os

import keras
import numpy as np
import tensorflow as tf

from albert_tf.export.heads.loading import serving_head
from albert_tf.export.qa.inputs import checked_requests
from albert_tf.export.qa.text import QA_HEADS, QaSettings, QaTextModel
from albert_tf.modeling.heads.text_classifier import string_batch
from albert_tf.text.tf_tokenization import AlbertPreprocessingLayer

QA_INPUTS = ("question", "context")
DEFAULT_BATCH_SIZE = 32
STRING_OUTPUTS = ("answer", "best_span", "nbest_text")


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertTextQuestionAnswerer(keras.Model):
    """(question, context) strings -> answers; the text-in QA SavedModel's graph as a Keras model.

    Args:
        squad_model: an `AlbertSquadV1` or `AlbertSquadV2` (ids in, span scores out).
        preprocessing: the `AlbertPreprocessingLayer` (SentencePiece model, `max_seq_length`:
            the windows' length, `do_lower_case`).
        head_kind: "squad_v1" or "squad_v2": which post-processing answers.
        settings: `QaSettings` fields (windows, n-best, null threshold, request limit).
        name: the model's name.

    Example:
        >>> qa = AlbertTextQuestionAnswerer(squad, AlbertPreprocessingLayer(proto, 384),
        ...                                 "squad_v1", {"doc_stride": 128})
        >>> qa.predict({"question": ["Who?"], "context": ["Rollo did."]})["answer"]
    """

    def __init__(
        self,
        squad_model: keras.Model,
        preprocessing: AlbertPreprocessingLayer,
        head_kind: str,
        settings: dict | None = None,
        name: str = "albert_text_question_answerer",
        **kwargs,
    ):
        super().__init__(name=name, **kwargs)
        if head_kind not in QA_HEADS:
            raise ValueError(f"head_kind must be one of {QA_HEADS}, got {head_kind!r}")
        settings = dict(settings or {})
        settings.pop("verification_file", None)  # an export-time check, not the model's
        self.squad_model, self.preprocessing, self.head_kind = squad_model, preprocessing, head_kind
        self.settings = QaSettings(**settings)
        self._answers = QaTextModel(
            serving_head(head_kind, squad_model), preprocessing, self.settings
        )
        # tensorflow-text's ops have no XLA kernels: Keras must not jit-compile `predict`.
        self.supports_jit = False
        self.built = True

    def _questions_and_contexts(self, inputs):
        if isinstance(inputs, dict):
            if set(inputs) != set(QA_INPUTS):
                raise ValueError(f"inputs are {QA_INPUTS}, got {sorted(inputs)}")
            return inputs["question"], inputs["context"]
        if isinstance(inputs, (tuple, list)) and len(inputs) == 2:
            return tuple(inputs)
        raise ValueError("inputs: {'question': [...], 'context': [...]} or (questions, contexts)")

    def call(self, inputs):
        questions, contexts = self._questions_and_contexts(inputs)
        return self._serve(
            tf.convert_to_tensor(questions, tf.string), tf.convert_to_tensor(contexts, tf.string)
        )

    @functools.cached_property
    def _serve(self):
        """The SavedModel's serving function: batches of any size, requests checked first."""

        def serve(questions, contexts):
            questions, contexts = checked_requests(
                questions, contexts, self.settings.max_context_bytes
            )
            return self._answers(questions, contexts)

        spec = tf.TensorSpec([None], tf.string)
        return tf.function(serve, input_signature=[spec, spec], autograph=False)

    def predict(self, x, batch_size=None, verbose="auto", steps=None, callbacks=None):
        """Keras's `predict` on `{"question": [...], "context": [...]}` or `(questions,
        contexts)` (a `tf.data.Dataset` of such batches passes as it is); the texts come back
        as `str`s."""
        if not isinstance(x, tf.data.Dataset):
            questions, contexts = self._questions_and_contexts(x)
            texts = {
                "question": string_batch(questions, "question"),
                "context": string_batch(contexts, "context"),
            }
            if texts["question"].shape[0] != texts["context"].shape[0]:
                raise ValueError("question and context must hold as many texts each")
            x = tf.data.Dataset.from_tensor_slices(texts).batch(batch_size or DEFAULT_BATCH_SIZE)
        outputs = super().predict(x, verbose=verbose, steps=steps, callbacks=callbacks)
        decode = np.vectorize(lambda b: b.decode("utf-8"), otypes=[object])
        return {k: decode(v) if k in STRING_OUTPUTS else v for k, v in outputs.items()}

    def get_config(self):
        return {
            "squad_model": keras.saving.serialize_keras_object(self.squad_model),
            "preprocessing": keras.saving.serialize_keras_object(self.preprocessing),
            "head_kind": self.head_kind,
            "settings": {
                k: v
                for k, v in dataclasses.asdict(self.settings).items()
                if k != "verification_file"
            },
            "name": self.name,
            "trainable": self.trainable,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for key in ("squad_model", "preprocessing"):
            config[key] = keras.saving.deserialize_keras_object(config[key])
        return cls(**config)


TEXT_QA_FILE = "squad_text.keras"


def write_text_question_answerer(
    export_dir: str,
    squad_model: keras.Model,
    spm_model_file: str,
    max_seq_length: int,
    do_lower_case: bool,
    head_kind: str,
    settings: dict,
) -> str:
    """Writes `TEXT_QA_FILE` (an `AlbertTextQuestionAnswerer` of `squad_model`, the
    SentencePiece model embedded) into `export_dir`, atomically; returns its path."""
    from absl import logging

    from albert_tf.io import atomic_path
    from albert_tf.text.tokenization import AlbertTokenizer

    preprocessing = AlbertPreprocessingLayer(
        AlbertTokenizer(spm_model_file).model_proto,
        max_seq_length=max_seq_length,
        do_lower_case=do_lower_case,
    )
    model = AlbertTextQuestionAnswerer(squad_model, preprocessing, head_kind, settings)
    os.makedirs(export_dir, exist_ok=True)
    target = os.path.join(export_dir, TEXT_QA_FILE)
    with atomic_path(target, suffix=".keras") as staging:
        model.save(staging)
    logging.info("Exported %s (question and context in, answers out)", target)
    return target
