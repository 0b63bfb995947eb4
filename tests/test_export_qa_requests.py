"""What a text model does with any request: the text-in QA model answers every context as the
Python path does (pieceless ones included), whatever steps its loops take, and refuses text over
its stored `max_context_bytes` or not UTF-8; every text model refuses inputs of another rank or
dtype, with one line naming the input. The QA model is served from a fresh process."""

import json
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.config import AlbertConfig
from albert_tf.export import serving_head
from albert_tf.export.qa import answers as qa_answers
from albert_tf.export.qa.text import QaSettings, QaTextModel, save_qa_text_model
from albert_tf.export.qa.verify import PROBE_QUESTIONS, answer_differences, python_path_answers
from albert_tf.export.qa.ragged_rows import first_at_or_after, last_at_or_before
from albert_tf.export.savedmodel import save_with_signatures, text_functions
from albert_tf.export.heads.loading import load_serving_head
from albert_tf.modeling.heads.classifier import AlbertClassifier
from albert_tf.tasks.squad.examples import SquadExample, SquadFormatError, read_squad_examples
from albert_tf.text.tf_tokenization import AlbertPreprocessingLayer
from albert_tf.text.tokenization import AlbertTokenizer
from tests.conftest import FIXTURES

# Compares floats with the Python path's: CI reruns it on other kernels.
pytestmark = [pytest.mark.numerics, pytest.mark.e2e]

SQUAD = FIXTURES / "original_squad"
SPM = FIXTURES / "albert_spm" / "30k-clean.model"
SEQ, STRIDE, QUERY = 128, 32, 24  # the fixtures' windows, as tests/test_export_qa.py
LIMIT = 4096  # the v1 model's max_context_bytes here
# Non-blank contexts with no SentencePiece piece (or, NUL, one the Python path skips): the
# Python path answers them with its fallback.
PIECELESS = ["\ufffd", "\x00", "\x01", "\u200b", "\u0301\u0302", " \u200b\u2060 ", "\x7f\x1f"]

# Run in a fresh interpreter: TensorFlow and tensorflow-text only (the text model's ops).
SERVE_SCRIPT = """
import json, sys
import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401

latin = np.vectorize(lambda b: b.decode("latin-1"), otypes=[str])

assert not [m for m in sys.modules if m.split(".")[0] == "albert_tf"]
spec = json.load(open(sys.argv[1]))
out = {}
for key, path in spec["models"].items():
    serve = tf.saved_model.load(path).signatures["serving_default"]
    for name, (question, context) in spec["requests"].items():
        def text(rows):
            return tf.constant([r.encode("latin-1") if isinstance(r, str) else r for r in rows])
        question = text(question) if isinstance(question, list) else tf.constant(question)
        context = text(context) if isinstance(context, list) else tf.constant(context)
        try:
            got = {k: t.numpy() for k, t in serve(question=question, context=context).items()}
            out[f"{key}/{name}"] = {
                k: (latin(v).tolist() if v.dtype == object else v.tolist()) for k, v in got.items()
            }
        except tf.errors.InvalidArgumentError as e:
            out[f"{key}/{name}"] = {"error": str(e)}
json.dump(out, open(sys.argv[2], "w"))
"""


@pytest.fixture(scope="module")
def tokenizer():
    return AlbertTokenizer(SPM)


@pytest.fixture(scope="module")
def preprocessing(tokenizer):
    return AlbertPreprocessingLayer(tokenizer.model_proto, max_seq_length=SEQ)


@pytest.fixture(scope="module")
def heads():
    folders = {kind: SQUAD / f"{kind}_tiny" for kind in ("squad_v1", "squad_v2")}
    return {
        k: load_serving_head(
            k, tf1_checkpoint=str(f), albert_config_file=str(f / "albert_config.json")
        )
        for k, f in folders.items()
    }


def examples_with_pieceless():
    examples = read_squad_examples(SQUAD / "postprocess_v1.1" / "dev-v1.1-subset.json", False)
    examples += [SquadExample(f"probe-{i}", q, c) for i, (q, c) in enumerate(PROBE_QUESTIONS)]
    return examples + [SquadExample(f"pieceless-{i}", "Who?", c) for i, c in enumerate(PIECELESS)]


def as_arrays(rows: list[dict]) -> dict[str, np.ndarray]:
    return {k: np.concatenate([np.asarray(r[k]) for r in rows]) for k in rows[0]}


def test_first_and_last_valid_index_in_each_range():
    valid = tf.constant([False, True, True, False, False, True])
    low, high = tf.constant([0, 2, 3, 3, 4, 0], tf.int64), tf.constant([5, 2, 4, 5, 3, 0], tf.int64)
    assert first_at_or_after(valid, low, high).numpy().tolist() == [1, 2, -1, 5, -1, -1]
    assert last_at_or_before(valid, low, high).numpy().tolist() == [5, 2, -1, 5, -1, -1]
    none = tf.zeros([0], tf.bool)
    assert last_at_or_before(none, low[:1], high[:1]).numpy().tolist() == [-1]


@pytest.mark.parametrize("kind", ["squad_v1", "squad_v2"])
def test_answers_do_not_depend_on_the_steps_of_the_loops(
    kind, heads, tokenizer, preprocessing, monkeypatch
):
    """Windows scored 3 at a time and n-best texts read a few candidates at a time (requests
    ordinarily take one step of each) still give the Python path's answers."""
    monkeypatch.setattr(qa_answers, "TEXT_CODE_POINTS_PER_STEP", 100)
    settings = QaSettings(STRIDE, QUERY)
    model = QaTextModel(heads[kind], preprocessing, settings)
    model.windows_per_step = 3
    serve = model.serving_function()
    examples = examples_with_pieceless()
    expected = python_path_answers(heads[kind], tokenizer, examples, SEQ, settings)
    rows = [
        {
            k: v.numpy()
            for k, v in serve(
                tf.constant([e.question_text for e in examples[i : i + 16]]),
                tf.constant([e.paragraph_text for e in examples[i : i + 16]]),
            ).items()
        }
        for i in range(0, len(examples), 16)
    ]
    ids = [e.qas_id for e in examples]
    threshold = 0.0 if kind == "squad_v2" else None
    assert answer_differences(expected, as_arrays(rows), ids, threshold) == []


@pytest.fixture(scope="module")
def served(heads, preprocessing, tmp_path_factory):
    """Requests, good and bad, to both text-in models from a fresh process: {model/request:
    outputs or {"error": message}}. Strings travel through JSON as latin-1 (bytes that are not
    UTF-8 too)."""
    work = tmp_path_factory.mktemp("qa_requests")
    models = {}
    for kind, limit in (("squad_v1", LIMIT), ("squad_v2", QaSettings().max_context_bytes)):
        model = QaTextModel(
            heads[kind], preprocessing, QaSettings(STRIDE, QUERY, max_context_bytes=limit)
        )
        models[kind] = str(work / kind)
        save_qa_text_model(model, models[kind], {"spm_model_file": str(SPM)})

    def raw(*texts):
        return [
            t.encode("utf-8").decode("latin-1") if isinstance(t, str) else t.decode("latin-1")
            for t in texts
        ]

    requests = {f"pieceless_{i}": (raw("Who?"), raw(c)) for i, c in enumerate(PIECELESS)}
    requests["pieceless_all"] = (raw(*["Who?"] * len(PIECELESS)), raw(*PIECELESS))
    requests["at_limit"] = (raw("Who?"), raw("Rollo did it. " * 292 + "At 4096."))
    requests["over_limit"] = (raw("Who?"), raw("x" * (LIMIT + 1)))
    requests["over_limit_together"] = (raw("a", "b"), raw("x" * 2049, "y" * 2048))
    requests["question_over_limit"] = (raw("w" * (LIMIT + 1)), raw("Rollo did it."))
    requests["context_not_utf8"] = (raw("a", "b"), raw("Rollo did it.", b"Rollo \xff did it."))
    requests["question_not_utf8"] = (raw(b"Who \xed\xa0\x80?"), raw("Rollo did it."))
    requests["rank_2"] = ([["Who?"]], raw("Rollo did it."))
    requests["scalar_context"] = (raw("Who?"), "Rollo did it.")
    requests["int_question"] = ([1], raw("Rollo did it."))
    spec = {"models": models, "requests": requests}
    (work / "spec.json").write_text(json.dumps(spec))
    (work / "serve.py").write_text(SERVE_SCRIPT)
    run = subprocess.run(
        [sys.executable, str(work / "serve.py"), str(work / "spec.json"), str(work / "out.json")],
        capture_output=True,
        text=True,
        cwd=work,
        env={"TF_CPP_MIN_LOG_LEVEL": "2", "PATH": "/usr/bin:/bin"},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads((work / "out.json").read_text())


def outputs(entry: dict) -> dict[str, np.ndarray]:
    """A served request's outputs as the signature returns them (strings as bytes)."""
    assert "error" not in entry, entry.get("error")
    as_bytes = np.vectorize(lambda t: t.encode("latin-1"), otypes=[object])
    arrays = {k: np.array(v) for k, v in entry.items()}
    return {k: as_bytes(v) if v.dtype.kind == "U" else v for k, v in arrays.items()}


@pytest.mark.parametrize("kind", ["squad_v1", "squad_v2"])
def test_pieceless_contexts_are_answered_as_the_python_path_answers_them(
    served, heads, tokenizer, kind
):
    settings = QaSettings(STRIDE, QUERY)
    examples = [SquadExample(f"pieceless-{i}", "Who?", c) for i, c in enumerate(PIECELESS)]
    expected = python_path_answers(heads[kind], tokenizer, examples, SEQ, settings)
    threshold = 0.0 if kind == "squad_v2" else None
    for i, example in enumerate(examples):
        got = outputs(served[f"{kind}/pieceless_{i}"])
        assert answer_differences(expected, got, [example.qas_id], threshold) == []
    got = outputs(served[f"{kind}/pieceless_all"])
    assert answer_differences(expected, got, [e.qas_id for e in examples], threshold) == []


def error_line(served, key) -> str:
    return served[key]["error"]


def test_text_over_the_stored_limit_is_refused_naming_the_field(served):
    assert outputs(served["squad_v1/at_limit"])["nbest_size"][0] >= 1
    assert "context: the contexts of the request hold 4097 bytes, more than " + (
        f"max_context_bytes={LIMIT} (the limit stored in this model"
    ) in error_line(served, "squad_v1/over_limit")
    assert "the contexts of the request hold 4097 bytes" in error_line(
        served, "squad_v1/over_limit_together"
    )
    assert (
        f"question: the questions of the request hold 4097 bytes, more than max_context_bytes={LIMIT}"
        in error_line(served, "squad_v1/question_over_limit")
    )
    # The other model stores the default limit: the same requests are answered.
    for request in ("over_limit", "over_limit_together", "question_over_limit"):
        assert "error" not in served[f"squad_v2/{request}"], request


@pytest.mark.parametrize("kind", ["squad_v1", "squad_v2"])
def test_bad_requests_fail_with_one_line_naming_the_input(served, kind):
    assert "context[1] is not valid UTF-8" in error_line(served, f"{kind}/context_not_utf8")
    assert "question[0] is not valid UTF-8" in error_line(served, f"{kind}/question_not_utf8")
    assert "Shape of tensor question [1,1] is not compatible with expected shape [?]" in (
        error_line(served, f"{kind}/rank_2")
    )
    assert "Shape of tensor context [] is not compatible" in error_line(
        served, f"{kind}/scalar_context"
    )
    # A dtype is checked before the graph runs (here by the signature's call).
    assert "expected to be a string tensor but is a int32 tensor" in error_line(
        served, f"{kind}/int_question"
    )


def test_python_path_refuses_contexts_and_questions_without_utf8(tmp_path):
    for field, text in (("context", "Rollo \ud800 did it."), ("question", "Who\udc80?")):
        paragraph = {"context": "Rollo did it.", "qas": [{"id": "q1", "question": "Who?"}]}
        if field == "context":
            paragraph["context"] = text
        else:
            paragraph["qas"][0]["question"] = text
        path = tmp_path / f"{field}.json"
        path.write_text(json.dumps({"data": [{"paragraphs": [paragraph]}]}))
        with pytest.raises(
            SquadFormatError, match=f"question 'q1': the {field} is not valid UTF-8"
        ):
            read_squad_examples(path, is_training=False)


def test_generic_text_models_refuse_other_ranks_naming_the_input(preprocessing, tmp_path):
    config = AlbertConfig.from_json_file(SQUAD / "squad_v1_tiny" / "albert_config.json")
    head = serving_head("classifier", AlbertClassifier(config, num_labels=2))
    for name, model_head in (("preprocessing", None), ("text", head)):
        save_with_signatures(
            str(tmp_path / name), text_functions(preprocessing, model_head), {"spm": str(SPM)}
        )
        signatures = tf.saved_model.load(str(tmp_path / name)).signatures
        assert signatures["serving_default"](text=tf.constant(["Rollo did it."])), name
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"tensor text \[2,1\] is not"):
            signatures["serving_default"](text=tf.constant([["a"], ["b"]]))
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"tensor text_b \[\] is not"):
            signatures["pairs"](text_a=tf.constant(["a"]), text_b=tf.constant("b"))
