"""Exported TFLite files in the real on-device clients, each in its own virtualenv as an app runs it.

MediaPipe Tasks' `TextClassifier` and the TFLite Task Library's `BertNLClassifier` run an exported
classifier, its `BertQuestionAnswerer` an exported SQuAD v1.1 model, on texts the clients' path
would get wrong without the packed SentencePiece model: capitals beyond ASCII, accents, fullwidth
letters, digit-commas, curly quotes, over-long input. Each is compared with our Python path.

The clients live in `.venv-clients/<client>/` (`bash .ci/run` creates them from
`requirements-client-<client>.txt`) or where `ALBERT_MEDIAPIPE_PYTHON` /
`ALBERT_TFLITE_SUPPORT_PYTHON` point; a client that is missing or cannot start fails its test.
"""

import gzip
import json
import pathlib

import keras
import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter

from albert_tf import AlbertConfig
from albert_tf.export import PROBE_TEXTS, ExportConfig, export_model, serving_head
from albert_tf.export.tflite.app_metadata import AppMetadataSettings
from benchmarks.bert_qa_client import client_answers, client_inputs, near_tie
from albert_tf.export.parity import ParityThresholds
from albert_tf.export.qa.verify import PROBE_QUESTIONS
from albert_tf.modeling.heads.classifier import AlbertClassifier
from albert_tf.modeling.heads.squad_v1 import AlbertSquadV1
from albert_tf.text.client_sentencepiece import (
    CLIENT_PROBE_TEXTS,
    ClientTokenizer,
    client_sentencepiece_model,
)
from albert_tf.text.tokenization import AlbertTokenizer
from tests.client_venvs import run_in_client
from tests.conftest import FIXTURES, REPO_ROOT
from tests.model_configs import CLASSIFIER_TINY
from tests.tolerances import SAME_MODEL, assert_close_to_scale

# numerics: client outputs against ours, on whichever kernels; e2e: whole exports
pytestmark = [pytest.mark.numerics, pytest.mark.e2e]

SPM = FIXTURES / "albert_spm" / "30k-clean.model"
CORPUS = FIXTURES / "original_data" / "corpus_small.txt"
RUNNER = REPO_ROOT / "tests" / "app_clients" / "run_client.py"
VENVS = {"mediapipe": "ALBERT_MEDIAPIPE_PYTHON", "tflite-support": "ALBERT_TFLITE_SUPPORT_PYTHON"}
INPUTS = ("input_ids", "input_mask", "segment_ids")
SEQ = 64
LABELS = ("negative", "positive")
VARIANTS = ("tflite_fp32", "tflite_fp16", "tflite_int8_dynamic")
FP32 = ParityThresholds().fp32_relative_diff  # 1e-4 of the scale
TEXTS = [
    *CLIENT_PROBE_TEXTS,
    *[t for pair in PROBE_TEXTS for t in pair if t is not None],
    "ÉMILE ZOLA’S “J’ACCUSE…!” — 1,898 WORDS",
    "ａｌｂｅｒｔ ＬＩＴＥ ｆｔｗ",
]


def run_client(venv: str, client: str, model, **request) -> object:
    """The client's results (`tests/app_clients/run_client.py`); a missing or broken client fails
    the test with one line."""
    request = {"client": client, "model": str(model), **request}
    answer = run_in_client(venv, VENVS[venv], RUNNER, request, f"{client} ({venv})")
    return answer["results"]


@pytest.fixture(scope="module")
def tokenizer():
    return AlbertTokenizer(SPM)


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    keras.utils.set_random_seed(11)
    config = AlbertConfig(**dict(CLASSIFIER_TINY, num_hidden_layers=1), initializer_range=0.2)
    model = AlbertClassifier(config, num_labels=2)
    out = tmp_path_factory.mktemp("clients")
    report = export_model(
        serving_head("classifier", model),
        ExportConfig(
            output_dir=str(out),
            model_name="sst2",
            max_seq_length=SEQ,
            formats=VARIANTS,
            spm_model_file=str(SPM),
            representative_data=str(CORPUS),
            num_verification_examples=16,
            latency_runs=2,
            app_metadata=AppMetadataSettings(labels=LABELS, task_name="sst-2"),
        ),
    )
    return model, {v: report["artifacts"][v]["path"] for v in VARIANTS}


def python_path(model, tokenizer, path=None) -> np.ndarray:
    """Our probabilities of `TEXTS`: our tokenizer, then the Keras model or the TFLite file."""
    packed = [tokenizer.encode_pair(t, None, SEQ) for t in TEXTS]
    inputs = {k: np.array([getattr(p, k) for p in packed], np.int32) for k in INPUTS}
    if path is None:
        return model(inputs)["probabilities"].numpy()
    runner = Interpreter(model_path=path).get_signature_runner()
    rows = [runner(**{k: v[i : i + 1] for k, v in inputs.items()}) for i in range(len(TEXTS))]
    return np.concatenate([r["probabilities"] for r in rows])


@pytest.mark.parametrize(
    "venv, client",
    [("mediapipe", "mediapipe_text_classifier"), ("tflite-support", "bert_nl_classifier")],
)
def test_classifier_clients_give_our_probabilities(venv, client, classifier, tokenizer):
    model, paths = classifier
    keras_probabilities = python_path(model, tokenizer)
    assert np.ptp(keras_probabilities[:, 1]) > 0.01  # the texts are told apart
    for variant, path in paths.items():
        results = run_client(venv, client, path, texts=TEXTS)
        assert all(r["names"] == list(LABELS) for r in results)
        got = np.array([r["scores"] for r in results])
        ours = python_path(model, tokenizer, path)  # the same file on our ids
        assert_close_to_scale(got, ours, FP32, err_msg=variant)
        assert (got.argmax(-1) == ours.argmax(-1)).all(), variant
        if variant == "tflite_fp32":
            assert_close_to_scale(got, keras_probabilities, FP32)
            assert (got.argmax(-1) == keras_probabilities.argmax(-1)).all()


def test_tflite_supports_own_parser_reads_our_metadata(classifier):
    _, paths = classifier
    read = run_client("tflite-support", "tflite_support_metadata", paths["tflite_fp32"])
    assert read["min_parser_version"] == read["json"]["min_parser_version"] == "1.1.0"
    assert read["files"] == ["labels.txt", "sentencepiece.model"]
    (subgraph,) = read["json"]["subgraph_metadata"]
    assert sorted(t["name"] for t in subgraph["input_tensor_metadata"]) == [
        "ids",
        "mask",
        "segment_ids",
    ]
    (unit,) = subgraph["input_process_units"]
    assert unit["options_type"] == "SentencePieceTokenizerOptions"
    (output,) = subgraph["output_tensor_metadata"]
    assert output["associated_files"][0]["type"] == "TENSOR_AXIS_LABELS"


def qa_questions() -> list[tuple[str, str]]:
    """(context, question) pairs: the QA export probes, the clients' hard cases as contexts, and
    the SQuAD v1.1 dev questions of the fixtures."""
    pairs = [(context, question) for question, context in PROBE_QUESTIONS]
    pairs += [(text, "Who wrote J’ACCUSE?") for text in TEXTS]
    squad = FIXTURES / "original_squad" / "postprocess_v1.1" / "dev-v1.1-subset.json"
    for article in json.loads(squad.read_text())["data"]:
        for paragraph in article["paragraphs"]:
            pairs += [(paragraph["context"], q["question"]) for q in paragraph["qas"]]
    return pairs


def reimplemented_answers(path, questions, encode, tokenizer) -> list[tuple[list[dict], bool]]:
    """`BertQuestionAnswerer`'s algorithm in Python (`bert_qa_client`) on the same file: each
    question's answers, and whether round-off could reorder them (`near_tie`)."""
    runner = Interpreter(model_path=str(path)).get_signature_runner()
    answers = []
    for context, question in questions:
        inputs = client_inputs(context, question, encode, tokenizer.cls_id, tokenizer.sep_id)
        logits = runner(**inputs.features())
        logits = (logits["start_logits"], logits["end_logits"])
        tie = near_tie(inputs, *logits, SAME_MODEL * max(1.0, *np.abs(logits).max(axis=-1).flat))
        answers.append(([vars(a) for a in client_answers(inputs, *logits)], tie))
    return answers


@pytest.fixture(scope="module")
def squad_model(tmp_path_factory):
    """A tiny SQuAD v1.1 model (random weights) exported at 384 with the clients' metadata. Its
    seed puts the best logits in the context for most questions (with other seeds, in the
    padding: the client then answers nothing, a vacuous comparison)."""
    keras.utils.set_random_seed(1)
    config = AlbertConfig(
        **dict(CLASSIFIER_TINY, num_hidden_layers=1, max_position_embeddings=384),
        initializer_range=0.2,
    )
    report = export_model(
        serving_head("squad_v1", AlbertSquadV1(config)),
        ExportConfig(
            output_dir=str(tmp_path_factory.mktemp("squad")),
            model_name="squad",
            max_seq_length=384,
            formats=("tflite_fp32", "tflite_int8_dynamic"),
            spm_model_file=str(SPM),
            representative_data=str(CORPUS),
            num_verification_examples=8,
            latency_runs=2,
        ),
    )
    return {v: pathlib.Path(report["artifacts"][v]["path"]) for v in report["artifacts"]}


def assert_same_answers(questions, got, expected) -> int:
    """The client's answers are ours, text and positions, logits within fp32 round-off, but
    where two logits they depend on are within round-off of each other (the client's runtime
    rounds otherwise than LiteRT; at most 1 question in 1000, or 1); returns how many differ."""
    ties = 0
    for question, theirs, (ours, tie) in zip(questions, got, expected, strict=True):
        spans = [(a["text"], a["start"], a["end"]) for a in theirs]
        if spans != [(a["text"], a["start"], a["end"]) for a in ours]:
            assert tie, (question, theirs, ours)
            ties += 1
            continue
        assert_close_to_scale([a["logit"] for a in theirs], [a["logit"] for a in ours], FP32)
    assert ties <= max(1, len(questions) // 1000)
    return ties


def test_question_answerer_gives_our_answers(squad_model, tokenizer):
    """The client's answers equal the re-implementation's with our tokenizer and with the
    clients' tokenization of the packed model, position for position; logits within fp32."""
    client = ClientTokenizer(client_sentencepiece_model(tokenizer.model_proto))
    questions = qa_questions()
    for path in squad_model.values():
        got = run_client("tflite-support", "bert_question_answerer", path, questions=questions)
        assert sum(bool(answers) for answers in got) > 0.75 * len(questions)
        for encode in (tokenizer.encode, client.encode):
            assert_same_answers(
                questions, got, reimplemented_answers(path, questions, encode, tokenizer)
            )


@pytest.mark.slow  # ~2 minutes on 2 cores: 10,570 questions in the client and in Python
def test_question_answerer_on_every_squad_dev_question(squad_model, tokenizer):
    with gzip.open(FIXTURES / "squad" / "dev-v1.1.json.gz", "rt", encoding="utf-8") as f:
        articles = json.load(f)["data"]
    questions = [
        (p["context"], q["question"]) for a in articles for p in a["paragraphs"] for q in p["qas"]
    ]
    assert len(questions) == 10570
    path = squad_model["tflite_fp32"]
    got = run_client("tflite-support", "bert_question_answerer", path, questions=questions)
    assert_same_answers(
        questions, got, reimplemented_answers(path, questions, tokenizer.encode, tokenizer)
    )
