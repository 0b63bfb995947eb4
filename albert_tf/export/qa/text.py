"""Question answering with text in and answers out, in one graph: the SQuAD text-in SavedModel.

`serving_default(question, context)` (string [B] each, contexts of any length) runs the Python
path (`read_squad_examples` -> `convert_examples_to_features` -> model -> `postprocess_v1/v2`)
in-graph: `offsets` tokenizes each context and maps its pieces back to context characters,
`windows` builds the windows, the SQuAD model scores them a step of windows at a time
(`scoring`), and `answers`
keeps the n-best lists. Outputs per question: `answer` (string), `score` (start + end score of the
best span), `probability` (its softmax share of the n-best list) and the list itself
(`nbest_text`, `nbest_score`, `nbest_probability` [B, n_best_size], `nbest_size`); v2 adds
`best_span` (the best span's text whatever the null decision), `null_odds` and `no_answer`
(null odds >= the threshold stored in the model, in which case `answer` is "").

Memory follows what a request must hold: its contexts' code points, pieces and windows (linear in
its text), one step of windows' activations (`scoring`) and one step of candidate texts
(`answers.nbest_lists`); about 250 bytes per byte of context (benchmarks/qa_serving_memory.py).
Requests are checked before any work (`inputs.checked_requests`): strings [B] of one batch
size, valid UTF-8, and at most `max_context_bytes` of context (and of question) text in all.

The graph needs tensorflow-text ops (as the other text models), which the stock TF Serving model
server links (`serving_ops`): the export checks that it uses no other add-on op.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import tensorflow as tf

from albert_tf.export.qa.answers import FALLBACKS, nbest_lists, null_scores
from albert_tf.export.qa.inputs import checked_requests
from albert_tf.export.qa.inputs import DEFAULT_MAX_CONTEXT_BYTES
from albert_tf.export.qa.offsets import ContextPieces
from albert_tf.export.qa.scoring import scored_candidates, windows_per_step
from albert_tf.export.qa.windows import build_windows
from albert_tf.text.tf_tokenization import AlbertPreprocessingLayer

QA_HEADS = ("squad_v1", "squad_v2")
QA_SETTINGS_FILE = "qa_settings.json"  # the settings, beside the model's other assets


@dataclasses.dataclass(frozen=True)
class QaSettings:
    """How the text-in model windows contexts and picks answers (the original's flags).

    Args:
        doc_stride: pieces between window starts.
        max_query_length: question pieces kept.
        n_best_size: n-best entries per question (and v1's top starts / ends per window).
        max_answer_length: longest answer, in pieces.
        null_score_diff_threshold: v2: "no answer" where null odds >= this.
        verification_file: a SQuAD json whose questions the exported model must answer like the
            Python path (besides `verify.PROBE_QUESTIONS`); None: the probes only.
        max_context_bytes: the most UTF-8 bytes of contexts (and of questions) one request may
            hold, all its rows together; the model rejects a request with more (stored in it).

    Example:
        >>> QaSettings(doc_stride=128, max_query_length=64, null_score_diff_threshold=-0.5)
    """

    doc_stride: int = 128
    max_query_length: int = 64
    n_best_size: int = 20
    max_answer_length: int = 30
    null_score_diff_threshold: float = 0.0
    verification_file: str | None = None
    max_context_bytes: int = DEFAULT_MAX_CONTEXT_BYTES

    def validate(self, max_seq_length: int) -> None:
        """ValueError naming the first setting that cannot work at `max_seq_length`."""
        if self.doc_stride < 1 or self.max_query_length < 0:
            raise ValueError(
                f"doc_stride={self.doc_stride} must be >= 1 and max_query_length="
                f"{self.max_query_length} >= 0"
            )
        if max_seq_length < self.max_query_length + 4:
            raise ValueError(
                f"max_seq_length={max_seq_length} leaves no room for the document after a "
                f"{self.max_query_length}-piece query, [CLS] and two [SEP]"
            )
        if self.n_best_size < 1 or self.max_answer_length < 1:
            raise ValueError(
                f"n_best_size={self.n_best_size} and max_answer_length="
                f"{self.max_answer_length} must be >= 1"
            )
        if self.max_context_bytes < 1:
            raise ValueError(f"max_context_bytes={self.max_context_bytes} must be >= 1")
        if not np.isfinite(self.null_score_diff_threshold):
            raise ValueError(f"null_score_diff_threshold={self.null_score_diff_threshold}")
        if self.verification_file and not os.path.isfile(self.verification_file):
            raise FileNotFoundError(f"QA verification file not found: {self.verification_file}")


class QaTextModel:
    """(question, context) strings -> answers, as the Python path gives them (module docstring).

    Args:
        head: a `squad_v1` or `squad_v2` `heads.ServingHead` (not imported here: the head
            registry reaches this module, and savedmodel imports the registry).
        preprocessing: the model's `AlbertPreprocessingLayer` (its `max_seq_length` is the
            windows' length).
        settings: windows and answer settings.

    Example:
        >>> qa = QaTextModel(head, AlbertPreprocessingLayer.from_file(spm, max_seq_length=384),
        ...                  QaSettings())
        >>> qa(tf.constant(["Who?"]), tf.constant(["Rollo did."]))["answer"]
    """

    def __init__(self, head, preprocessing: AlbertPreprocessingLayer, settings: QaSettings):
        if head.kind not in QA_HEADS:
            raise ValueError(f"a text-in QA model needs a head of {QA_HEADS}, got {head.kind!r}")
        self.max_seq_length = preprocessing.max_seq_length
        if self.max_seq_length > head.config.max_position_embeddings:
            raise ValueError(
                f"max_seq_length={self.max_seq_length} exceeds max_position_embeddings="
                f"{head.config.max_position_embeddings}"
            )
        settings.validate(self.max_seq_length)
        self.head, self.preprocessing, self.settings = head, preprocessing, settings
        self.pieces = ContextPieces(preprocessing)
        self.windows_per_step = windows_per_step(head.config, self.max_seq_length)

    def __call__(self, questions: tf.Tensor, contexts: tf.Tensor) -> dict[str, tf.Tensor]:
        """string [B] questions and contexts -> the outputs named in the module docstring."""
        tokenizer = self.preprocessing.tokenizer
        settings = self.settings
        query = self.preprocessing.tokenize(questions)[:, : settings.max_query_length]
        pieces = self.pieces(contexts)
        windows = build_windows(
            query,
            pieces["ids"],
            pieces["aligned"],
            self.max_seq_length,
            settings.doc_stride,
            tokenizer.cls_id,
            tokenizer.sep_id,
        )
        candidates, cls_logits = scored_candidates(
            self.head,
            windows,
            settings.n_best_size,
            settings.max_answer_length,
            self.windows_per_step,
        )
        nbest = nbest_lists(candidates, pieces, settings.n_best_size, FALLBACKS[self.head.kind])
        outputs = {
            "answer": nbest["nbest_text"][:, 0],
            "score": nbest["nbest_start_score"][:, 0] + nbest["nbest_end_score"][:, 0],
            "probability": nbest["nbest_probability"][:, 0],
            "nbest_text": nbest["nbest_text"],
            "nbest_score": nbest["nbest_start_score"] + nbest["nbest_end_score"],
            "nbest_probability": nbest["nbest_probability"],
            "nbest_size": nbest["nbest_size"],
        }
        if self.head.kind == "squad_v2":
            odds = null_scores(windows, cls_logits, tf.shape(contexts, tf.int64)[0])
            no_answer = odds >= settings.null_score_diff_threshold
            outputs["best_span"] = outputs["answer"]
            outputs["answer"] = tf.where(no_answer, "", outputs["answer"])
            outputs["null_odds"] = odds
            outputs["no_answer"] = no_answer
        return {
            k: tf.cast(v, tf.float32) if v.dtype == tf.float64 else v for k, v in outputs.items()
        }

    def serving_function(self) -> tf.types.experimental.GenericFunction:
        """`serving_default`: `question`, `context` string [B] -> the outputs (requests checked
        by `inputs.checked_requests`)."""

        def serve(question, context):
            question, context = checked_requests(question, context, self.settings.max_context_bytes)
            return self(question, context)

        return tf.function(
            serve,
            input_signature=[
                tf.TensorSpec([None], tf.string, name="question"),
                tf.TensorSpec([None], tf.string, name="context"),
            ],
            autograph=False,
        )


def save_qa_text_model(model: QaTextModel, path: str, assets: dict[str, str]) -> None:
    """Write `model` as a SavedModel with `serving_default` and asset files.

    As `savedmodel.save_with_signatures`, plus the SentencePiece resource the offsets read
    (a captured resource must be tracked to be saved).
    """
    function = model.serving_function().get_concrete_function()
    root = tf.Module()
    root.model_variables = list({id(v): v for v in function.variables}.values())
    root.sentencepiece = model.pieces.sentencepiece_with_offsets
    for name, source in assets.items():
        setattr(root, name, tf.saved_model.Asset(source))
    tf.saved_model.save(root, path, signatures={"serving_default": function})
