"""Export of the original code's checkpoints (golden outputs), of classifiers, the CLI, and the
head registry (`albert_tf.export.heads`)."""

import dataclasses
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
from albert_tf.export import ExportConfig, export_model, heads, load_serving_head, serving_head
from albert_tf.export.parity import ParityThresholds, parity_figures
from albert_tf.export.heads import ServingHead
from albert_tf.modeling.heads.classifier import AlbertClassifier
from albert_tf.text.tokenization import AlbertTokenizer
from tests.model_configs import CLASSIFIER_TINY, MICRO
from tests.tolerances import GOLDEN, SAME_MODEL, assert_close_to_scale

# Compares floats against goldens or another form of the model: CI reruns it on other kernels.
pytestmark = [pytest.mark.numerics, pytest.mark.e2e]

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
    "folder",
    [
        "albert_tiny_shared",
        # Half a minute: grouped layers are also checked by the TF1 loader's golden tests.
        pytest.param("albert_tiny_grouped", marks=pytest.mark.slow),
        "albert_tiny_shared_training",
    ],
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
        **dict(CLASSIFIER_TINY, num_hidden_layers=1, intermediate_size=32), initializer_range=0.2
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


@pytest.mark.slow  # four CLI runs; the SQuAD export tests run the CLI on a TF1 checkpoint too
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


def _scores(model, features):
    return {"scores": model({k: features[k] for k in INPUTS}, training=False)["scores"]}


def _embedding(model, features):
    return {"embedding": model({k: features[k] for k in INPUTS}, training=False)["embedding"]}


def _check_scorer(model):
    if "scores" not in {layer.name for layer in model.layers}:
        raise ValueError(f"{model.name} is no scorer: it lacks a `scores` layer")


# A head no export module knows: two signatures of its own names, parity on its own outputs.
SCORER = heads.HeadSpec(
    name="scorer",
    summary="made up for the test.",
    check=_check_scorer,
    signatures={
        "serving_default": heads.Signature(INPUTS, ("scores",), _scores),
        "embed": heads.Signature(INPUTS, ("embedding",), _embedding),
    },
    parity=heads.ParityKeys(top1="scores", cosine="embedding"),
)


def scorer_model(config):
    inputs = {k: keras.Input((None,), dtype="int32", name=k) for k in INPUTS}
    pooled = AlbertModel(config)(inputs)["pooled_output"]
    scores = keras.layers.Dense(3, name="scores")(pooled)
    return keras.Model(inputs, {"scores": scores, "embedding": pooled}, name="scorer_model")


def test_every_registered_head_serves_its_parity_outputs_from_backbone_inputs():
    assert heads.HEADS == tuple(heads.REGISTRY)
    assert heads.HEADS == ("pretrainer", "classifier", "squad_v1", "squad_v2", "race")
    for name, spec in heads.REGISTRY.items():
        assert spec.name == name
        # Every head takes the backbone's inputs first (SQuAD v2 adds p_mask).
        assert spec.signatures["serving_default"].inputs[:3] == INPUTS
        served = {o for s in spec.signatures.values() for o in s.outputs}
        assert {spec.parity.top1, spec.parity.cosine} <= served, name
    with pytest.raises(ValueError, match=r"parity outputs \['missing'\] are not served"):
        dataclasses.replace(SCORER, parity=heads.ParityKeys(top1="scores", cosine="missing"))
    with pytest.raises(ValueError, match="serving_default must take"):
        dataclasses.replace(SCORER, signatures={"embed": SCORER.signatures["embed"]})


def test_a_registered_head_is_checked_served_and_gated_from_its_entry_alone(monkeypatch, tmp_path):
    keras.utils.set_random_seed(7)
    config = AlbertConfig(**MICRO, initializer_range=0.2)
    with pytest.raises(
        ValueError,
        match=r"head must be one of \('pretrainer', 'classifier', 'squad_v1', 'squad_v2', 'race'\)",
    ):
        serving_head("scorer", scorer_model(config))
    monkeypatch.setitem(heads.REGISTRY, "scorer", SCORER)
    with pytest.raises(ValueError, match=r"'race', 'scorer'\), got 'ranker'"):
        ServingHead("ranker", scorer_model(config), config)
    with pytest.raises(ValueError, match="is no scorer"):
        serving_head("scorer", AlbertPretrainer(config))
    model = scorer_model(config)
    head = serving_head("scorer", model)
    assert head.signature_inputs == {"serving_default": INPUTS, "embed": INPUTS}
    report = export_model(
        head,
        ExportConfig(
            output_dir=str(tmp_path),
            max_seq_length=16,
            max_predictions_per_seq=4,
            formats=("saved_model", "tflite_fp32"),
            latency_runs=2,
            num_verification_examples=16,
        ),
    )
    assert report["head"] == "scorer"
    for key in ("saved_model", "tflite_fp32"):
        figures = report["artifacts"][key]["figures"]
        assert figures["top1_agreement"] == 1.0 and figures["min_cosine"] > 0.9999, key
        assert {"max_abs_diff/scores", "max_abs_diff/embedding"} <= set(figures), key
    signatures = tf.saved_model.load(str(tmp_path / "albert" / "1")).signatures
    assert sorted(signatures) == ["embed", "serve_examples", "serving_default"]
    assert list(signatures["embed"].structured_outputs) == ["embedding"]
    interpreter = Interpreter(
        model_path=str(tmp_path / "albert_tflite" / "1" / "albert_fp32.tflite")
    )
    assert interpreter.get_signature_list() == {
        "serving_default": {"inputs": sorted(INPUTS), "outputs": ["scores"]},
        "embed": {"inputs": sorted(INPUTS), "outputs": ["embedding"]},
    }
    # Called without keys, parity finds the registered head whose outputs these are.
    scores = np.array([[1.0, 0.0], [0.0, 1.0]])
    figures = parity_figures({"scores": scores}, {"scores": scores[::-1]}, np.zeros(0))
    assert figures["top1_agreement"] == 0.0 and "min_cosine" not in figures


def test_a_signature_returning_other_outputs_than_it_declares_is_refused(monkeypatch):
    config = AlbertConfig(**MICRO, initializer_range=0.2)
    lying = dataclasses.replace(
        SCORER,
        name="lying",
        signatures={**SCORER.signatures, "embed": heads.Signature(INPUTS, ("embedding",), _scores)},
    )
    monkeypatch.setitem(heads.REGISTRY, "lying", lying)
    head = ServingHead("lying", scorer_model(config), config)
    features = {k: tf.zeros((1, 4), tf.int32) for k in INPUTS}
    assert list(head.outputs("serving_default", features)) == ["scores"]
    with pytest.raises(ValueError, match=r"returned \['scores'\], declares \['embedding'\]"):
        head.outputs("embed", features)
