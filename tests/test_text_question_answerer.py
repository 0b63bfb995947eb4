"""The `.keras` SQuAD model that takes strings (`AlbertTextQuestionAnswerer`): the same answers and
n-best lists as the Python path (read_squad_examples -> features -> model -> postprocess), v1 and
v2; written by `--formats=keras_text`, loaded alone in a fresh process that imported only
albert_tf; refusing an over-long request; held by SQuAD fine-tuning bundles
(test_squad_finetune.py)."""

import json
import os
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest

from albert_tf import AlbertConfig
from albert_tf.export import ExportConfig, export_model, serving_head
from albert_tf.export.qa.keras_model import AlbertTextQuestionAnswerer, write_text_question_answerer
from albert_tf.export.qa.text import QaSettings
from albert_tf.export.qa.verify import PROBE_QUESTIONS, answer_differences, python_path_answers
from albert_tf.modeling.heads.squad_v1 import AlbertSquadV1
from albert_tf.modeling.heads.squad_v2 import AlbertSquadV2
from albert_tf.tasks.squad.examples import SquadExample
from albert_tf.text.tokenization import AlbertTokenizer
from tests.model_configs import CLASSIFIER_TINY

# numerics: answers against the Python path's, on whichever kernels; e2e: whole exports
pytestmark = [pytest.mark.numerics, pytest.mark.e2e]

ROOT = pathlib.Path(__file__).resolve().parents[1]
SPM = ROOT / "tests" / "fixtures" / "albert_spm" / "30k-clean.model"
SEQ = 64
SETTINGS = dict(doc_stride=16, max_query_length=16, n_best_size=5, max_answer_length=10)
QUESTIONS = [q for q, _ in PROBE_QUESTIONS]
CONTEXTS = [c for _, c in PROBE_QUESTIONS]


def squad_model(kind: str) -> keras.Model:
    keras.utils.set_random_seed(7)
    config = AlbertConfig(**CLASSIFIER_TINY)
    return AlbertSquadV1(config) if kind == "squad_v1" else AlbertSquadV2(config, 3, 3)


def as_bytes(outputs: dict) -> dict:
    """`predict`'s str outputs as the SavedModel's bytes, which `answer_differences` reads."""
    return {k: np.vectorize(str.encode)(v) if v.dtype == object else v for k, v in outputs.items()}


@pytest.mark.parametrize("kind", ["squad_v1", "squad_v2"])
def test_answers_equal_the_python_path(kind, tmp_path):
    model = squad_model(kind)
    path = write_text_question_answerer(str(tmp_path), model, str(SPM), SEQ, True, kind, SETTINGS)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert isinstance(loaded, AlbertTextQuestionAnswerer) and loaded.head_kind == kind
    got = loaded.predict({"question": QUESTIONS, "context": CONTEXTS}, batch_size=2, verbose=0)
    assert all(isinstance(a, str) for a in got["answer"])
    assert got["nbest_text"].shape == (len(QUESTIONS), SETTINGS["n_best_size"])
    if kind == "squad_v2":
        assert {"best_span", "null_odds", "no_answer"} <= set(got)
    examples = [SquadExample(f"q{i}", q, c) for i, (q, c) in enumerate(PROBE_QUESTIONS)]
    settings = QaSettings(**SETTINGS)
    expected = python_path_answers(
        serving_head(kind, model), AlbertTokenizer(SPM), examples, SEQ, settings
    )
    threshold = settings.null_score_diff_threshold if kind == "squad_v2" else None
    ids = [e.qas_id for e in examples]
    assert answer_differences(expected, as_bytes(got), ids, threshold) == []


def test_a_request_over_the_limit_is_refused(tmp_path):
    path = write_text_question_answerer(
        str(tmp_path),
        squad_model("squad_v1"),
        str(SPM),
        SEQ,
        True,
        "squad_v1",
        dict(SETTINGS, max_context_bytes=100),
    )
    loaded = keras.saving.load_model(path)
    assert loaded.settings.max_context_bytes == 100
    with pytest.raises(Exception, match="max_context_bytes"):
        loaded.predict({"question": ["Who?"], "context": ["word " * 40]}, verbose=0)
    with pytest.raises(ValueError, match="inputs are"):
        loaded.predict({"question": ["Who?"], "text": ["x"]}, verbose=0)


_FRESH = """
import json, sys
import albert_tf, keras
model = keras.saving.load_model(sys.argv[1])
out = model.predict((json.loads(sys.argv[2]), json.loads(sys.argv[3])), verbose=0)
print(json.dumps({"answer": list(out["answer"]), "score": out["score"].tolist()}))
"""


def test_export_writes_it_and_the_file_alone_answers_in_a_fresh_process(tmp_path):
    model = squad_model("squad_v1")
    report = export_model(
        serving_head("squad_v1", model),
        ExportConfig(
            str(tmp_path / "out"),
            model_name="qa",
            max_seq_length=SEQ,
            formats=("keras_text",),
            spm_model_file=str(SPM),
            qa=QaSettings(**SETTINGS),
        ),
    )
    record = report["artifacts"]["keras_text"]
    assert record["failures"] == [] and record["figures"]["num_questions"] == len(QUESTIONS)
    alone = tmp_path / "alone.keras"  # no SentencePiece file or config beside it
    alone.write_bytes(pathlib.Path(record["path"]).read_bytes())
    run = subprocess.run(
        [sys.executable, "-c", _FRESH, str(alone), json.dumps(QUESTIONS), json.dumps(CONTEXTS)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(ROOT)},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.splitlines()[-1])
    here = keras.saving.load_model(record["path"]).predict((QUESTIONS, CONTEXTS), verbose=0)
    assert result["answer"] == list(here["answer"])
    np.testing.assert_allclose(result["score"], here["score"], rtol=1e-5)


def test_registration_survives_tensorflow_loading_inside_a_library_import(tmp_path):
    """A module below the export stage that loads TensorFlow as it is imported (the checkpoints
    stage) must not make the registration import the export stage half-made: no warning."""
    run = subprocess.run(
        [sys.executable, "-W", "error", "-c", "import albert_tf.checkpoints.hf_tokenizer"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(ROOT)},
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "could not register" not in run.stderr
