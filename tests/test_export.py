"""Export: SavedModels (ids and text) and fp32 TFLite, checked against the Keras model on real text.

One tiny model with the real 30k SentencePiece vocabulary (random weights, seeded) is exported
once per module; the tests reload what was written, in this process and in a fresh one.
"""

import json
import pathlib
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf
from ai_edge_litert.interpreter import Interpreter

from albert_tf import AlbertConfig, AlbertPretrainer
from albert_tf.export import ExportConfig, export_model, serving_head
from albert_tf.export.data import examples_from_text
from albert_tf.export.parity import ParityThresholds
from albert_tf.export.tflite.converter import op_names
from albert_tf.text.tokenization import AlbertTokenizer
from albert_tf.tolerance import scaled_limit
from tests.tolerances import SAME_MODEL, assert_close_to_scale
from tests.model_configs import SAMPLE_VOCAB_TINY

# Compares floats against goldens or another form of the model: CI reruns it on other kernels.
pytestmark = [pytest.mark.numerics, pytest.mark.e2e]

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
SPM = FIXTURES / "albert_spm" / "30k-clean.model"
CORPUS = FIXTURES / "original_data" / "corpus_small.txt"
GOLDEN_TOKENIZATION = FIXTURES / "original_tokenization" / "tokenization_golden.json"
SEQ, PREDICTIONS = 64, 10
INPUTS = ("input_ids", "input_mask", "segment_ids")


def tiny_config(**overrides):
    """Real vocabulary, tiny width. initializer_range 0.2 (not 0.02) so that outputs depend on
    the input: at 0.02 the pooled output varies across sentences by 0.0004, a vacuous check."""
    return AlbertConfig(**{**SAMPLE_VOCAB_TINY, "initializer_range": 0.2, **overrides})


@pytest.fixture(scope="module")
def tokenizer():
    return AlbertTokenizer(SPM)


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(1234)
    return AlbertPretrainer(tiny_config())


@pytest.fixture(scope="module")
def sentences(tokenizer):
    """256 real sentence pairs of the corpus (not the ones the export verified on: other seed)."""
    examples, texts = examples_from_text(str(CORPUS), tokenizer, SEQ, PREDICTIONS, 256, seed=7)
    return examples, texts


@pytest.fixture(scope="module")
def exported(model, tmp_path_factory):
    out = tmp_path_factory.mktemp("export")
    config = ExportConfig(
        output_dir=str(out),
        model_name="tiny",
        version=3,
        max_seq_length=SEQ,
        max_predictions_per_seq=PREDICTIONS,
        spm_model_file=str(SPM),
        formats=("saved_model", "tflite_fp32"),
        representative_data=str(CORPUS),
        latency_runs=5,
    )
    report = export_model(serving_head("pretrainer", model), config)
    return out, report


def keras_reference(model, examples):
    features = {k: tf.constant(examples[k]) for k in (*INPUTS, "masked_lm_positions")}
    return {k: v.numpy() for k, v in model(features).items()}


def test_layout_report_and_no_leftovers(exported):
    out, report = exported
    assert sorted(p.name for p in out.iterdir()) == [
        "export_report_tiny_3.json",
        "tiny",
        "tiny_preprocessing",
        "tiny_text",
        "tiny_tflite",
    ]
    assert (out / "tiny" / "3" / "saved_model.pb").is_file()
    assert (out / "tiny_tflite" / "3" / "tiny_fp32.tflite").is_file()
    assert json.loads((out / "export_report_tiny_3.json").read_text()) == report
    assert report["verification"] == {
        "source": str(CORPUS),
        "num_examples": 256,
        "num_calibration_examples": 100,
    }
    for key in ("saved_model", "preprocessing", "text", "tflite_fp32"):
        assert report["artifacts"][key]["failures"] == [], key
        assert report["artifacts"][key]["size_bytes"] > 0
    fp32 = report["artifacts"]["tflite_fp32"]
    assert fp32["figures"]["max_abs_diff/mlm_logits"] <= scaled_limit(
        fp32["figures"]["max_abs/mlm_logits"], ParityThresholds().fp32_relative_diff
    )
    for threads in ("threads_1", "threads_2"):
        latency = fp32["latency_batch1"][threads]
        assert 0 < latency["p50_ms"] <= latency["p90_ms"]


def test_saved_model_signatures_names_dtypes_shapes(exported):
    loaded = tf.saved_model.load(str(exported[0] / "tiny" / "3"))
    assert sorted(loaded.signatures) == ["mlm", "serve_examples", "serving_default", "sop"]
    ids = tf.TensorSpec([None, None], tf.int32)
    expected_inputs = {
        "serving_default": INPUTS,
        "sop": INPUTS,
        "mlm": (*INPUTS, "masked_lm_positions"),
    }
    for name, inputs in expected_inputs.items():
        specs = loaded.signatures[name].structured_input_signature[1]
        assert sorted(specs) == sorted(inputs)
        assert all(
            spec.dtype == ids.dtype and spec.shape.as_list() == [None, None]
            for spec in specs.values()
        )
    examples = loaded.signatures["serve_examples"].structured_input_signature[1]["examples"]
    assert examples.dtype == tf.string and examples.shape.as_list() == [None]
    outputs = {name: sorted(fn.structured_outputs) for name, fn in loaded.signatures.items()}
    assert outputs == {
        "serving_default": ["pooled_output", "sequence_output"],
        "serve_examples": ["pooled_output", "sequence_output"],
        "mlm": ["mlm_logits"],
        "sop": ["sop_logits"],
    }


_FRESH_PROCESS = textwrap.dedent("""
    import sys
    import numpy as np
    import tensorflow as tf
    path, inputs, outputs = sys.argv[1:]
    x = dict(np.load(inputs, allow_pickle=True))
    model = tf.saved_model.load(path)
    ids = {k: tf.constant(x[k]) for k in ("input_ids", "input_mask", "segment_ids")}
    result = {}
    result.update(model.signatures["serving_default"](**ids))
    result.update(model.signatures["mlm"](**ids, masked_lm_positions=tf.constant(x["positions"])))
    result.update(model.signatures["sop"](**ids))
    served = model.signatures["serve_examples"](examples=tf.constant(list(x["examples"])))
    result.update({"examples_" + k: v for k, v in served.items()})
    assert "tensorflow_text" not in sys.modules, "loading imported tensorflow_text"
    np.savez(outputs, **{k: v.numpy() for k, v in result.items()})
""")


def test_loads_and_matches_keras_in_a_fresh_process_without_tensorflow_text(
    exported, model, sentences, tmp_path
):
    from albert_tf.export.savedmodel import serialize_examples

    examples, _ = sentences
    np.savez(
        tmp_path / "in.npz",
        **{k: examples[k] for k in INPUTS},
        positions=examples["masked_lm_positions"],
        examples=serialize_examples(examples),
    )
    subprocess.run(
        [
            sys.executable,
            "-c",
            _FRESH_PROCESS,
            str(exported[0] / "tiny" / "3"),
            str(tmp_path / "in.npz"),
            str(tmp_path / "out.npz"),
        ],
        check=True,
        env={"TF_CPP_MIN_LOG_LEVEL": "2", "PATH": "/usr/bin:/bin"},
    )
    got = np.load(tmp_path / "out.npz")
    reference = keras_reference(model, examples)
    assert len(examples["input_ids"]) >= 200
    # Meaningful: outputs vary across sentences, MLM predictions are many different tokens.
    assert reference["pooled_output"].std(axis=0).mean() > 0.1
    assert reference["sop_logits"].std(axis=0).mean() > 0.05
    assert len(np.unique(reference["mlm_logits"].argmax(-1))) > 50
    for key in ("sequence_output", "pooled_output", "mlm_logits", "sop_logits"):
        assert_close_to_scale(got[key], reference[key], SAME_MODEL, err_msg=key)
    for key in ("sequence_output", "pooled_output"):
        assert_close_to_scale(got["examples_" + key], reference[key], SAME_MODEL, err_msg=key)


def test_assets_travel_with_every_saved_model(exported, model):
    for name in ("tiny", "tiny_preprocessing", "tiny_text"):
        assets = exported[0] / name / "3" / "assets"
        assert (assets / "30k-clean.model").read_bytes() == SPM.read_bytes()
        assert (assets / "do_lower_case.txt").read_text() == "true\n"
        assert AlbertConfig.from_json_file(assets / "albert_config.json") == model.config


def test_preprocessing_ids_equal_the_golden_tokenization(exported, tokenizer):
    """All 420 golden cases, alone and as consecutive pairs, packed at SEQ (long ones truncated)."""
    cases = json.loads(GOLDEN_TOKENIZATION.read_text())["cases"]
    assert len(cases) == 420
    loaded = tf.saved_model.load(str(exported[0] / "tiny_preprocessing" / "3"))
    single = loaded.signatures["serving_default"](text=tf.constant([c["text"] for c in cases]))
    pairs = loaded.signatures["pairs"](
        text_a=tf.constant([c["text"] for c in cases[:-1]]),
        text_b=tf.constant([c["text"] for c in cases[1:]]),
    )
    for row, case in enumerate(cases):
        packed = tokenizer.pack(case["ids"], None, SEQ)
        for key in INPUTS:
            assert single[key][row].numpy().tolist() == getattr(packed, key), (case["text"], key)
    for row, (a, b) in enumerate(zip(cases[:-1], cases[1:])):
        packed = tokenizer.pack(a["ids"], b["ids"], SEQ)
        for key in INPUTS:
            assert pairs[key][row].numpy().tolist() == getattr(packed, key), (a["text"], key)


def test_text_model_equals_keras_on_tokenizer_ids_including_empty_and_overlong(
    exported, model, tokenizer, sentences
):
    import albert_tf.text.tf_tokenization  # noqa: F401  (registers the tf-text ops to load the model)

    texts = [a for a, _ in sentences[1][:40]] + ["", "word " * 500]
    loaded = tf.saved_model.load(str(exported[0] / "tiny_text" / "3"))
    got = loaded.signatures["serving_default"](text=tf.constant(texts))
    packed = [tokenizer.encode_pair(t, None, SEQ) for t in texts]
    assert packed[-2].input_ids[:3] == [tokenizer.cls_id, tokenizer.sep_id, 0]  # empty: [CLS] [SEP]
    assert sum(packed[-1].input_mask) == SEQ and packed[-1].input_ids[-1] == tokenizer.sep_id
    features = {k: tf.constant([getattr(p, k) for p in packed]) for k in INPUTS}
    reference = model.backbone(features)
    for key in ("sequence_output", "pooled_output"):
        assert_close_to_scale(got[key].numpy(), reference[key].numpy(), SAME_MODEL, err_msg=key)


def test_tflite_fp32_is_builtin_only_and_matches_keras_on_real_sentences(
    exported, model, sentences
):
    examples, _ = sentences
    path = exported[0] / "tiny_tflite" / "3" / "tiny_fp32.tflite"
    assert not [op for op in op_names(path.read_bytes()) if op.startswith("CUSTOM")]
    interpreter = Interpreter(model_path=str(path), num_threads=2)
    assert interpreter.get_signature_list() == {
        "serving_default": {
            "inputs": sorted(INPUTS),
            "outputs": ["pooled_output", "sequence_output"],
        },
        "mlm": {"inputs": sorted((*INPUTS, "masked_lm_positions")), "outputs": ["mlm_logits"]},
        "sop": {"inputs": sorted(INPUTS), "outputs": ["sop_logits"]},
    }
    reference = keras_reference(model, examples)
    runners = {
        name: interpreter.get_signature_runner(name) for name in ("serving_default", "mlm", "sop")
    }
    for i in range(len(examples["input_ids"])):
        x = {k: examples[k][i : i + 1] for k in INPUTS}
        got = {
            **runners["serving_default"](**x),
            **runners["sop"](**x),
            **runners["mlm"](**x, masked_lm_positions=examples["masked_lm_positions"][i : i + 1]),
        }
        for key, value in got.items():
            assert_close_to_scale(
                value[0], reference[key][i], ParityThresholds().fp32_relative_diff, err_msg=key
            )
