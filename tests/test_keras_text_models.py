"""Keras models that take strings (`AlbertTextClassifier`): the text `.keras` classifier equals the
Python tokenizer's ids, the text-in SavedModel and the ids-in classifier; it loads from its file
alone in a fresh process; fine-tuning bundles hold it and `--formats=keras_text` writes it."""

import json
import os
import pathlib
import subprocess
import sys

import albert_tf
import keras
import numpy as np
import pytest
import tensorflow as tf

from albert_tf import AlbertClassifier, AlbertConfig, AlbertPretrainer
from albert_tf.export import ExportConfig, export_model, serving_head
from albert_tf.finetuning.bundle import TEXT_CLASSIFIER_FILE
from albert_tf.modeling.heads.text_classifier import AlbertTextClassifier
from albert_tf.modeling.model import BACKBONE_INPUTS
from albert_tf.tasks.glue import finetune as glue_finetune
from albert_tf.text.tokenization import AlbertTokenizer
from tests.model_configs import CLASSIFIER_TINY, MICRO
from tests.tolerances import SAME_MODEL, assert_close_to_scale

pytestmark = pytest.mark.e2e  # starts the CLIs or runs whole exports

ROOT = pathlib.Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
SPM = FIXTURES / "albert_spm" / "30k-clean.model"
GOLDEN = json.loads(
    (FIXTURES / "original_tokenization" / "tokenization_golden.json").read_text("utf-8")
)
TEXTS = [case["text"] for case in GOLDEN["cases"]]
PAIRS = (TEXTS, TEXTS[1:] + TEXTS[:1])  # every golden text as text_a and as text_b
LABELS = ["negative", "positive"]
SEQ = 48


@pytest.fixture(scope="module")
def tokenizer():
    return AlbertTokenizer(str(SPM), do_lower_case=True)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A tiny classifier beside its `classifier_info.json`, exported by the CLI as the text
    SavedModels and the text `.keras` model: (classifier, export dir, report)."""
    root = tmp_path_factory.mktemp("keras_text")
    classifier = AlbertClassifier(AlbertConfig(**CLASSIFIER_TINY), num_labels=2, seed=3)
    classifier.save(root / "classifier.keras")
    (root / "classifier_info.json").write_text(json.dumps({"task_name": "SST-2", "labels": LABELS}))
    run = subprocess.run(
        [
            sys.executable,
            str(ROOT / "pipelines" / "export.py"),
            f"--keras_model={root / 'classifier.keras'}",
            "--head=classifier",
            f"--spm_model_file={SPM}",
            f"--output_dir={root / 'out'}",
            "--model_name=sst",
            f"--max_seq_length={SEQ}",
            "--formats=saved_model,keras_text",
            "--num_verification_examples=4",
            "--num_calibration_examples=1",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads((root / "out" / "export_report_sst_1.json").read_text())
    return classifier, root / "out", report


@pytest.fixture(scope="module")
def text_model(exported):
    return keras.saving.load_model(exported[1] / "sst_keras" / "1" / "sst_text.keras")


def _expected_ids(tokenizer, texts_a, texts_b=None, seq=SEQ):
    """The three id arrays `AlbertTokenizer` packs for the texts (pairs with `texts_b`)."""
    packed = [
        tokenizer.encode_pair(a, None if texts_b is None else texts_b[i], seq)
        for i, a in enumerate(texts_a)
    ]
    return {k: np.array([getattr(p, k) for p in packed], np.int32) for k in BACKBONE_INPUTS}


@pytest.mark.numerics  # the export's parity gate
def test_the_export_format_writes_the_verified_text_model(exported, text_model):
    _, out, report = exported
    record = report["artifacts"]["keras_text"]
    assert record["failures"] == []
    assert record["path"] == str(out / "sst_keras" / "1" / "sst_text.keras")
    assert record["label_names"] == LABELS  # read from classifier_info.json beside the model
    assert record["figures"]["num_texts"] > 5
    assert isinstance(text_model, albert_tf.AlbertTextClassifier)
    assert text_model.label_names == LABELS
    assert report["artifacts"]["text"]["failures"] == []  # the SavedModel it is compared with


def test_ids_equal_the_python_tokenizer_on_every_golden_case(text_model, tokenizer):
    layer = text_model.preprocessing
    single = layer(tf.constant(TEXTS))
    pairs = layer((tf.constant(PAIRS[0]), tf.constant(PAIRS[1])))
    for got, expected in (
        (single, _expected_ids(tokenizer, TEXTS)),
        (pairs, _expected_ids(tokenizer, *PAIRS)),
    ):
        for key in BACKBONE_INPUTS:
            np.testing.assert_array_equal(got[key].numpy(), expected[key], err_msg=key)
    # Several golden pairs are cut to fit: the truncation is checked too.
    lengths = [len(tokenizer.encode(a)) + len(tokenizer.encode(b)) for a, b in zip(*PAIRS)]
    assert sum(n > SEQ - 3 for n in lengths) >= 10


@pytest.mark.numerics  # three forms of one model
def test_probabilities_equal_the_text_saved_model_and_the_ids_classifier(
    exported, text_model, tokenizer
):
    classifier, out, _ = exported
    saved = tf.saved_model.load(str(out / "sst_text" / "1"))
    requests = {
        "single": (TEXTS, {"text": tf.constant(TEXTS)}, "serving_default", (TEXTS,)),
        "pairs": (
            {"text_a": PAIRS[0], "text_b": PAIRS[1]},
            {"text_a": tf.constant(PAIRS[0]), "text_b": tf.constant(PAIRS[1])},
            "pairs",
            PAIRS,
        ),
    }
    for what, (keras_inputs, saved_inputs, signature, texts) in requests.items():
        got = text_model.predict(keras_inputs, batch_size=64, verbose=0)
        from_saved = saved.signatures[signature](**saved_inputs)["probabilities"].numpy()
        ids = classifier(_expected_ids(tokenizer, *texts), training=False)["probabilities"]
        assert got["probabilities"].shape == (len(TEXTS), 2), what
        assert_close_to_scale(got["probabilities"], from_saved, SAME_MODEL, err_msg=what)
        assert_close_to_scale(got["probabilities"], np.asarray(ids), SAME_MODEL, err_msg=what)
        names = [LABELS[i] for i in got["probabilities"].argmax(-1)]
        assert list(got["label"]) == names and all(isinstance(n, str) for n in names), what
    assert text_model.predict_labels((PAIRS[0][:3], PAIRS[1][:3])) == list(
        text_model.predict({"text_a": PAIRS[0][:3], "text_b": PAIRS[1][:3]}, verbose=0)["label"]
    )


_FRESH = """
import json, sys
import albert_tf  # and nothing else of the library: it registers its Keras classes with Keras
import keras
model = keras.saving.load_model(sys.argv[1])
single = model.predict(json.loads(sys.argv[2]), verbose=0)
pair = model.predict({"text_a": ["a man plays"], "text_b": ["a man is playing"]}, verbose=0)
print(json.dumps({"single": single["probabilities"].tolist(), "labels": list(single["label"]),
                  "pair": pair["probabilities"].tolist(),
                  "modules": sorted(m for m in sys.modules if m.startswith("albert_tf.text"))}))
"""


@pytest.mark.numerics  # reloaded vs in memory
def test_the_file_alone_loads_and_predicts_in_a_fresh_process(exported, text_model, tmp_path):
    texts = ["a gripping film", "Café au lait, naïve résumé", ""]
    alone = tmp_path / "alone" / "model.keras"  # no SentencePiece file, no config beside it
    alone.parent.mkdir()
    alone.write_bytes((exported[1] / "sst_keras" / "1" / "sst_text.keras").read_bytes())
    run = subprocess.run(
        [sys.executable, "-c", _FRESH, str(alone), json.dumps(texts)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(ROOT)},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.splitlines()[-1])
    here = text_model.predict(texts, verbose=0)
    pair = text_model.predict((["a man plays"], ["a man is playing"]), verbose=0)
    assert_close_to_scale(result["single"], here["probabilities"], SAME_MODEL)
    assert_close_to_scale(result["pair"], pair["probabilities"], SAME_MODEL)
    assert result["labels"] == list(here["label"])
    assert "albert_tf.text.tf_tokenization" in result["modules"]


@pytest.mark.numerics  # text vs ids classifier
@pytest.mark.parametrize("task_name", ["mrpc", "sts-b"])
def test_a_glue_bundle_holds_the_text_model(tmp_path, tokenizer, task_name):
    regression = task_name == "sts-b"
    config = glue_finetune.FinetuneConfig(
        task_name,
        str(FIXTURES / "glue"),
        str(tmp_path / "out"),
        str(SPM),
        max_seq_length=32,
        export_dir=str(tmp_path / "export"),
    )
    albert_config = AlbertConfig(**CLASSIFIER_TINY)
    model = AlbertClassifier(albert_config, 1 if regression else 2, regression, seed=5)
    glue_finetune.GlueFinetuneTask(config, tokenizer).export(
        model, "model.ckpt-best", albert_config
    )
    export = tmp_path / "export"
    info = json.loads((export / "classifier_info.json").read_text())
    # What the bundle held before is all there, the manifest naming it as before.
    assert info["model_file"] == "classifier.keras" and info["spm_model_file"] == SPM.name
    assert sorted(p.name for p in export.iterdir()) == sorted(
        ["albert_config.json", "classifier.keras", "classifier_info.json", SPM.name]
        + [TEXT_CLASSIFIER_FILE]
    )
    text_model = keras.saving.load_model(export / TEXT_CLASSIFIER_FILE)
    a, b = ["The cat sat.", "Stocks fell 3%."], ["A cat was sitting.", "Markets rose."]
    got = text_model.predict({"text_a": a, "text_b": b}, verbose=0)
    ids = keras.saving.load_model(export / "classifier.keras")(
        _expected_ids(tokenizer, a, b, seq=32), training=False
    )
    assert_close_to_scale(got["probabilities"], np.asarray(ids["probabilities"]), SAME_MODEL)
    if regression:
        assert text_model.label_names is None and set(got) == {"probabilities"}
    else:
        assert text_model.label_names == info["label_names"] == ["not_equivalent", "equivalent"]
        names = info["label_names"]
        assert list(got["label"]) == [names[i] for i in got["probabilities"].argmax(-1)]


def test_keras_text_is_refused_before_any_work_for_other_heads_or_without_a_tokenizer(tmp_path):
    # The tokenizer's vocabulary, so that only the format is wrong.
    pretrainer = serving_head("pretrainer", AlbertPretrainer(AlbertConfig(**CLASSIFIER_TINY)))
    with pytest.raises(
        ValueError, match="written for --head in \\('classifier', 'squad_v1', 'squad_v2'\\)"
    ):
        export_model(
            pretrainer,
            ExportConfig(
                str(tmp_path), max_seq_length=16, formats=("keras_text",), spm_model_file=str(SPM)
            ),
        )
    classifier = serving_head("classifier", AlbertClassifier(AlbertConfig(**MICRO), 2))
    with pytest.raises(ValueError, match="'keras_text' takes text: it needs spm_model_file"):
        export_model(
            classifier,
            ExportConfig(str(tmp_path), max_seq_length=16, formats=("saved_model", "keras_text")),
        )
    assert list(tmp_path.iterdir()) == []


def test_the_model_checks_its_labels_and_inputs():
    classifier = AlbertClassifier(AlbertConfig(**CLASSIFIER_TINY), num_labels=3, seed=1)
    with pytest.raises(ValueError, match="2 label names for 3 classes"):
        AlbertTextClassifier.from_spm_model(classifier, str(SPM), 16, label_names=["a", "b"])
    with pytest.raises(ValueError, match="over the classifier's max_position_embeddings=64"):
        AlbertTextClassifier.from_spm_model(classifier, str(SPM), 65)
    model = AlbertTextClassifier.from_spm_model(classifier, str(SPM), 16)
    assert model.label_names == ["0", "1", "2"]  # nothing names the classes
    # tensorflow-text's ops have no XLA kernels: Keras refuses to jit-compile the model (on an
    # accelerator its "auto" asks the same question).
    with pytest.warns(UserWarning, match="doesn't support `jit_compile=True`"):
        model.jit_compile = True
    assert model.jit_compile is False
    with pytest.raises(ValueError, match="expected a batch of texts"):
        model.predict("one text", verbose=0)
    with pytest.raises(ValueError, match="text_a and text_b must hold as many texts each"):
        model.predict({"text_a": ["a", "b"], "text_b": ["c"]}, verbose=0)
