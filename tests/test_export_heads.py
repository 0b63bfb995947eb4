"""Export of the original code's checkpoints (golden outputs), of classifiers, and the CLI."""

import json
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from ai_edge_litert.interpreter import Interpreter

from albert_tf import AlbertConfig, AlbertModel, AlbertPretrainer
from albert_tf.export import ExportConfig, export_model, load_serving_head
from albert_tf.export.parity import ParityThresholds
from albert_tf.modeling.heads.classifier import AlbertClassifier
from albert_tf.text.tokenization import AlbertTokenizer
from tests.tolerances import GOLDEN, SAME_MODEL, assert_close_to_scale

# Compares floats against goldens or another form of the model: CI reruns it on other kernels.
pytestmark = pytest.mark.numerics

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
CHECKPOINTS = FIXTURES / "original_checkpoints"
SHARED = CHECKPOINTS / "albert_tiny_shared"
SPM = FIXTURES / "albert_spm" / "30k-clean.model"
REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
INPUTS = ("input_ids", "input_mask", "segment_ids")


def log_softmax(x):
    shifted = x - x.max(-1, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), -1, keepdims=True))


def assert_golden(outputs, expected, relative):
    real = expected["input_mask"].astype(bool)  # padded positions are not meaningful
    assert_close_to_scale(
        outputs["sequence_output"][real], expected["sequence_output"][real], relative
    )
    assert_close_to_scale(outputs["pooled_output"], expected["pooled_output"], relative)
    vocab = outputs["mlm_logits"].shape[-1]
    assert_close_to_scale(
        log_softmax(outputs["mlm_logits"]).reshape(-1, vocab), expected["mlm_log_probs"], relative
    )
    assert_close_to_scale(log_softmax(outputs["sop_logits"]), expected["sop_log_probs"], relative)


@pytest.mark.parametrize(
    "folder", ["albert_tiny_shared", "albert_tiny_grouped", "albert_tiny_shared_training"]
)
def test_original_checkpoints_exported_still_give_the_golden_outputs(folder, tmp_path):
    formats = ("saved_model",) if folder.endswith("training") else ("saved_model", "tflite_fp32")
    head = load_serving_head(
        "pretrainer",
        tf1_checkpoint=str(CHECKPOINTS / folder),
        albert_config_file=str(CHECKPOINTS / folder / "albert_config.json"),
    )
    export_model(
        head,
        ExportConfig(
            output_dir=str(tmp_path),
            max_seq_length=16,
            max_predictions_per_seq=4,
            formats=formats,
            latency_runs=2,
            num_verification_examples=64,
        ),
    )
    expected = np.load(CHECKPOINTS / folder / "expected.npz")
    x = {k: tf.constant(expected[k]) for k in INPUTS}
    signatures = tf.saved_model.load(str(tmp_path / "albert" / "1")).signatures
    outputs = {
        **signatures["serving_default"](**x),
        **signatures["sop"](**x),
        **signatures["mlm"](**x, masked_lm_positions=tf.constant(expected["masked_lm_positions"])),
    }
    assert_golden({k: v.numpy() for k, v in outputs.items()}, expected, GOLDEN)
    if "tflite_fp32" in formats:
        interpreter = Interpreter(
            model_path=str(tmp_path / "albert_tflite" / "1" / "albert_fp32.tflite")
        )
        rows = []
        for i in range(len(expected["input_ids"])):
            row = {k: expected[k][i : i + 1] for k in INPUTS}
            rows.append(
                {
                    **interpreter.get_signature_runner("serving_default")(**row),
                    **interpreter.get_signature_runner("sop")(**row),
                    **interpreter.get_signature_runner("mlm")(
                        **row, masked_lm_positions=expected["masked_lm_positions"][i : i + 1]
                    ),
                }
            )
        assert_golden({k: np.concatenate([r[k] for r in rows]) for k in rows[0]}, expected, GOLDEN)


def generic_classifier(config):
    """The documented interface: any Keras model, dict of the three inputs -> `probabilities`."""
    inputs = {k: keras.Input((None,), dtype="int32", name=k) for k in INPUTS}
    pooled = AlbertModel(config)(inputs)["pooled_output"]
    probabilities = keras.layers.Dense(3, activation="softmax", name="probabilities")(pooled)
    return keras.Model(inputs, {"probabilities": probabilities}, name="generic_classifier")


@pytest.mark.parametrize(
    "build",
    [lambda c: AlbertClassifier(c, num_labels=3), generic_classifier],
    ids=["AlbertClassifier", "generic"],
)
def test_classifier_head_serves_probabilities(build, tmp_path):
    keras.utils.set_random_seed(5)
    config = AlbertConfig.from_json_file(SHARED / "albert_config.json")
    model = build(config)
    model.save(tmp_path / "classifier.keras")
    head = load_serving_head("classifier", keras_model=str(tmp_path / "classifier.keras"))
    report = export_model(
        head,
        ExportConfig(
            output_dir=str(tmp_path / "out"),
            max_seq_length=16,
            max_predictions_per_seq=4,
            latency_runs=2,
            formats=("saved_model", "tflite_fp32"),
        ),
    )
    assert report["artifacts"]["tflite_fp32"]["figures"]["top1_agreement"] == 1.0
    expected = np.load(SHARED / "expected.npz")
    reference = model({k: expected[k] for k in INPUTS})["probabilities"].numpy()
    signatures = tf.saved_model.load(str(tmp_path / "out" / "albert" / "1")).signatures
    assert sorted(signatures) == ["serve_examples", "serving_default"]
    got = signatures["serving_default"](**{k: tf.constant(expected[k]) for k in INPUTS})
    assert list(got) == ["probabilities"]
    assert_close_to_scale(got["probabilities"].numpy(), reference, SAME_MODEL)
    interpreter = Interpreter(
        model_path=str(tmp_path / "out" / "albert_tflite" / "1" / "albert_fp32.tflite")
    )
    assert interpreter.get_signature_list() == {
        "serving_default": {"inputs": sorted(INPUTS), "outputs": ["probabilities"]}
    }
    runner = interpreter.get_signature_runner("serving_default")
    for i in range(2):
        got = runner(**{k: expected[k][i : i + 1] for k in INPUTS})["probabilities"][0]
        assert_close_to_scale(got, reference[i], ParityThresholds().fp32_relative_diff)


def test_text_classifier_takes_sentence_pairs(tmp_path):
    import albert_tf.text.tf_tokenization  # noqa: F401  (registers the tf-text ops to load the model)

    keras.utils.set_random_seed(6)
    config = AlbertConfig(
        vocab_size=30000,
        embedding_size=16,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
        initializer_range=0.2,
    )
    model = AlbertClassifier(config, num_labels=3)
    model.save(tmp_path / "mnli.keras")
    head = load_serving_head("classifier", keras_model=str(tmp_path / "mnli.keras"))
    export_model(
        head,
        ExportConfig(
            output_dir=str(tmp_path / "out"),
            model_name="mnli",
            max_seq_length=32,
            spm_model_file=str(SPM),
            formats=("saved_model",),
            num_verification_examples=32,
        ),
    )
    premises = ["A man inspects the uniform of a figure.", "", "Two women are embracing. " * 20]
    hypotheses = ["The man is sleeping.", "Nobody is here.", ""]
    text = tf.saved_model.load(str(tmp_path / "out" / "mnli_text" / "1"))
    got = text.signatures["pairs"](text_a=tf.constant(premises), text_b=tf.constant(hypotheses))
    tokenizer = AlbertTokenizer(SPM)
    packed = [tokenizer.encode_pair(a, b, 32) for a, b in zip(premises, hypotheses)]
    reference = model({k: np.array([getattr(p, k) for p in packed], np.int32) for k in INPUTS})
    assert_close_to_scale(
        got["probabilities"].numpy(), reference["probabilities"].numpy(), SAME_MODEL
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match="same batch size"):
        text.signatures["pairs"](text_a=tf.constant(premises), text_b=tf.constant(hypotheses[:2]))


def test_wrong_head_for_the_model_is_a_clear_error(tmp_path):
    config = AlbertConfig.from_json_file(SHARED / "albert_config.json")
    AlbertPretrainer(config).save(tmp_path / "pretrainer.keras")
    AlbertClassifier(config, num_labels=2).save(tmp_path / "classifier.keras")
    with pytest.raises(ValueError, match="is no classifier"):
        load_serving_head("classifier", keras_model=str(tmp_path / "pretrainer.keras"))
    with pytest.raises(ValueError, match="is not an AlbertPretrainer"):
        load_serving_head("pretrainer", keras_model=str(tmp_path / "classifier.keras"))
    with pytest.raises(ValueError, match="exports as head=pretrainer"):
        load_serving_head(
            "classifier",
            tf1_checkpoint=str(SHARED),
            albert_config_file=str(SHARED / "albert_config.json"),
        )
    with pytest.raises(FileNotFoundError, match="Keras model file not found"):
        load_serving_head("pretrainer", keras_model=str(tmp_path / "missing.keras"))


def run_cli(*flags):
    return subprocess.run(
        [sys.executable, str(REPO_ROOT / "pipelines" / "export.py"), *flags],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={"TF_CPP_MIN_LOG_LEVEL": "2", "PATH": "/usr/bin:/bin"},
    )


def test_cli_exports_a_tf1_checkpoint_and_fails_cleanly_on_bad_flags(tmp_path):
    common = [
        f"--tf1_checkpoint={SHARED}",
        f"--albert_config_file={SHARED / 'albert_config.json'}",
        f"--output_dir={tmp_path}",
    ]
    bad = run_cli(*common, "--max_seq_length=65")
    assert bad.returncode != 0
    assert (
        "export failed: max_seq_length=65 must be in [3, max_position_embeddings=64]" in bad.stderr
    )
    bad_pair = run_cli(*common, "--max_seq_length=16", "--max_predictions_per_seq=20")
    assert bad_pair.returncode != 0
    assert (
        "export failed: max_predictions_per_seq=20 must be in [1, max_seq_length=16]"
        in bad_pair.stderr
    )
    assert list(tmp_path.iterdir()) == []
    # No --max_predictions_per_seq: min(20, --max_seq_length) = 16.
    good = run_cli(
        *common,
        "--max_seq_length=16",
        "--formats=saved_model,tflite_fp32",
        "--model_name=golden",
        "--version=7",
        "--latency_runs=2",
        "--num_verification_examples=64",
        "--num_calibration_examples=8",
    )
    assert good.returncode == 0, good.stderr[-3000:]
    report = json.loads((tmp_path / "export_report_golden_7.json").read_text())
    assert report["max_predictions_per_seq"] == 16
    assert report["verification"]["num_examples"] == 64
    assert report["artifacts"]["saved_model"]["path"] == str(tmp_path / "golden" / "7")
    assert (tmp_path / "golden_tflite" / "7" / "golden_fp32.tflite").is_file()
