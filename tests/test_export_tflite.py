"""TFLite variants: builtin ops only, the parity gates, and every variant on real sentences."""

import json
import math
import pathlib

import keras
import numpy as np
import pytest
import tensorflow as tf
from ai_edge_litert.interpreter import Interpreter

from albert_tf import AlbertConfig, AlbertPretrainer
from albert_tf.checkpoints import load_tf1_checkpoint
from albert_tf.export import ExportConfig, ParityError, export_model, serving_head
from albert_tf.export.data import examples_from_text, random_examples
from albert_tf.export.formats import REGISTRY, parity_failures
from albert_tf.export.parity import ParityThresholds, parity_figures
from albert_tf.export.tflite.converter import convert, non_builtin_ops, op_names
from albert_tf.modeling import layers
from albert_tf.text.tokenization import AlbertTokenizer
from albert_tf.tolerance import scaled_limit
from tests.model_configs import SAMPLE_VOCAB_TINY

# Compares floats against goldens or another form of the model: CI reruns it on other kernels.
pytestmark = pytest.mark.numerics

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
SPM = FIXTURES / "albert_spm" / "30k-clean.model"
CORPUS = FIXTURES / "original_data" / "corpus_small.txt"
INPUTS = ("input_ids", "input_mask", "segment_ids")
ALL_VARIANTS = (
    "tflite_fp32",
    "tflite_fp16",
    "tflite_int8_dynamic",
    "tflite_int8",
    "tflite_int8_integer_only",
)


def test_non_builtin_ops_fail_conversion_and_are_detected(tmp_path):
    function = tf.function(
        lambda x: {"y": tf.linalg.det(x)},
        input_signature=[tf.TensorSpec([1, 4, 4], tf.float32, name="x")],
    )
    module = tf.Module()
    module.f = function
    tf.saved_model.save(module, str(tmp_path), signatures={"serving_default": function})
    with pytest.raises(Exception, match="TF Select ops: MatrixDeterminant"):
        convert(str(tmp_path), ["serving_default"], REGISTRY["tflite_fp32"].tflite)
    converter = tf.lite.TFLiteConverter.from_saved_model(str(tmp_path))
    converter.target_spec.supported_ops = [
        tf.lite.OpsSet.TFLITE_BUILTINS,
        tf.lite.OpsSet.SELECT_TF_OPS,
    ]
    flex = converter.convert()
    assert op_names(flex) == ["CUSTOM:FlexMatrixDeterminant"]
    assert non_builtin_ops(flex) == ["CUSTOM:FlexMatrixDeterminant"]


def test_parity_gates():
    thresholds = ParityThresholds()
    reference = {
        "pooled_output": np.array([[1.0, 0.0], [0.0, 1.0]]),
        "mlm_logits": np.array([[[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [0.0, 1.0]]]),
    }
    weights = np.array([[1.0, 1.0], [1.0, 0.0]])  # the last prediction is padding
    flipped = {
        "pooled_output": np.array([[1.0, 0.1], [0.0, 1.0]]),
        "mlm_logits": np.array([[[1.0, 0.0], [0.0, 1.0]], [[0.0, 1.0], [1.0, 0.0]]]),
    }
    figures = parity_figures(reference, flipped, weights)
    assert figures["top1_agreement"] == pytest.approx(2 / 3)
    assert figures["min_cosine"] == pytest.approx(1 / math.sqrt(1.01))
    assert figures["max_abs_diff/mlm_logits"] == 1.0
    assert parity_failures("tflite_int8", figures, thresholds) == ["top-1 agreement 0.6667 < 0.95"]
    assert parity_failures("tflite_fp16", figures, thresholds) == [
        "pooled_output max abs diff 0.1 > 0.01",
        "mlm_logits max abs diff 1 > 0.01",
    ]
    # fp16's limit scales with an output's magnitude beyond 1 (logits), not below it.
    large = {
        "pooled_output": reference["pooled_output"],
        "mlm_logits": 20 * reference["mlm_logits"],
    }
    off = {
        "pooled_output": large["pooled_output"] + 0.005,
        "mlm_logits": large["mlm_logits"] + 0.15,
    }
    large_figures = parity_figures(large, off, weights)
    assert large_figures["max_abs/mlm_logits"] == 20.0
    assert parity_failures("tflite_fp16", large_figures, thresholds) == []
    off["mlm_logits"] += 0.1
    assert parity_failures("tflite_fp16", parity_figures(large, off, weights), thresholds) == [
        "mlm_logits max abs diff 0.25 > 0.2 (0.01 x output scale 20)"
    ]
    assert len(parity_failures("tflite_fp32", large_figures, thresholds)) == 2
    nan = {k: np.full_like(v, np.nan) for k, v in reference.items()}
    nan_figures = parity_figures(reference, nan, weights)
    assert len(parity_failures("tflite_fp32", nan_figures, thresholds)) == 2
    assert "min cosine nan < 0.99" in parity_failures(
        "tflite_int8_dynamic", nan_figures, thresholds
    )


def test_saved_model_gate_scales_with_the_output():
    """Round-off of logits of ~9 (11 ulps of the scale) passes; a real defect (1e-3) does not."""
    thresholds = ParityThresholds()
    logits = np.linspace(-8.7, 8.7, 24, dtype=np.float32).reshape(1, 2, 12)
    weights = np.ones((1, 2))
    roundoff = {"mlm_logits": logits + np.float32(1.12e-5)}
    assert (
        parity_failures(
            "saved_model", parity_figures({"mlm_logits": logits}, roundoff, weights), thresholds
        )
        == []
    )
    defect = {"mlm_logits": logits + np.float32(1e-3)}
    assert (
        len(
            parity_failures(
                "saved_model", parity_figures({"mlm_logits": logits}, defect, weights), thresholds
            )
        )
        == 1
    )
    small = {"pooled_output": np.full((2, 4), 0.5, np.float32)}
    assert (
        parity_failures(
            "saved_model",
            parity_figures(small, {"pooled_output": small["pooled_output"] + 1e-3}, weights),
            thresholds,
        )
        != []
    )


def run_all(path, signatures, examples):
    interpreter = Interpreter(model_path=str(path), num_threads=1)
    outputs = {}
    for name, names in signatures.items():
        runner = interpreter.get_signature_runner(name)
        rows = [
            runner(**{k: examples[k][i : i + 1] for k in names})
            for i in range(len(examples["input_ids"]))
        ]
        outputs.update({k: np.concatenate([r[k] for r in rows]) for k in rows[0]})
    return outputs


SIGNATURES = {"serving_default": INPUTS, "sop": INPUTS, "mlm": (*INPUTS, "masked_lm_positions")}


@pytest.mark.slow  # ~1 minute on 2 cores
def test_every_variant_on_real_sentences_and_full_int8_refused_on_random_weights(tmp_path):
    """Tiny model, real vocabulary and sentences. Random weights leave MLM logits near-uniform,
    so the calibrated int8 variants (256 levels for the logits) flip their top-1 too often:
    refused."""
    keras.utils.set_random_seed(1234)
    model = AlbertPretrainer(AlbertConfig(**SAMPLE_VOCAB_TINY, initializer_range=0.2))
    config = ExportConfig(
        output_dir=str(tmp_path),
        max_seq_length=64,
        max_predictions_per_seq=10,
        formats=ALL_VARIANTS,
        representative_data=str(CORPUS),
        latency_runs=5,
        spm_model_file=str(SPM),
    )
    with pytest.raises(ParityError, match="tflite_int8.*top-1 agreement"):
        export_model(serving_head("pretrainer", model), config)
    report = json.loads((tmp_path / "export_report_albert_1.json").read_text())
    for variant in ALL_VARIANTS[3:]:
        assert not pathlib.Path(config.destinations()[variant]).exists()
        assert report["artifacts"][variant]["figures"]["top1_agreement"] < 0.95
    # tflite_int8 holds the tied 30000 x 16 int8 table once; the integer-only variant twice.
    int8_size = report["artifacts"]["tflite_int8"]["size_bytes"]
    assert int8_size < report["artifacts"]["tflite_int8_integer_only"]["size_bytes"] - 0.9 * 480_000
    examples, _ = examples_from_text(str(CORPUS), AlbertTokenizer(SPM), 64, 10, 200, seed=11)
    reference = {
        k: v.numpy()
        for k, v in model(
            {k: tf.constant(v) for k, v in examples.items() if k != "masked_lm_weights"}
        ).items()
    }
    sizes = {}
    for variant in ALL_VARIANTS[:3]:
        entry = report["artifacts"][variant]
        path = pathlib.Path(config.destinations()[variant])
        sizes[variant] = path.stat().st_size
        assert entry["failures"] == [] and entry["size_bytes"] == sizes[variant]
        assert not non_builtin_ops(path.read_bytes())
        assert set(entry["latency_batch1"]) == {"threads_1", "threads_2"}
        got = run_all(path, SIGNATURES, examples)
        figures = parity_figures(reference, got, examples["masked_lm_weights"])
        assert parity_failures(variant, figures, ParityThresholds()) == [], variant
    assert sizes["tflite_fp16"] < 0.6 * sizes["tflite_fp32"]
    assert sizes["tflite_int8_dynamic"] < 0.75 * sizes["tflite_fp32"]  # tiny: metadata dominates


def xnnpack_partitions(path) -> int:
    """How many pieces LiteRT's default XNNPACK delegate cuts the first signature's graph into."""
    interpreter = Interpreter(model_path=str(path), num_threads=1)
    interpreter.allocate_tensors()
    return sum(op["op_name"] == "DELEGATE" for op in interpreter._get_ops_details())


@pytest.mark.slow  # half a minute of calibration; the SQuAD exports calibrate int8 by default
def test_calibrated_int8_of_an_original_checkpoint_passes(tmp_path):
    """Both calibrated int8 variants of a trained checkpoint pass on held-out examples;
    `tflite_int8` runs in a few XNNPACK pieces, the integer-only one in many."""
    folder = FIXTURES / "original_checkpoints" / "albert_tiny_grouped"
    model = load_tf1_checkpoint(folder, folder / "albert_config.json")
    examples = random_examples(300, 16, 4, 400, seed=3)
    records = tmp_path / "calibration.tfrecord"
    with tf.io.TFRecordWriter(str(records)) as writer:
        for i in range(400):
            writer.write(
                tf.train.Example(
                    features=tf.train.Features(
                        feature={
                            **{
                                k: tf.train.Feature(
                                    int64_list=tf.train.Int64List(value=examples[k][i])
                                )
                                for k in (*INPUTS, "masked_lm_positions")
                            },
                            "masked_lm_weights": tf.train.Feature(
                                float_list=tf.train.FloatList(
                                    value=examples["masked_lm_weights"][i]
                                )
                            ),
                        }
                    )
                ).SerializeToString()
            )
    config = ExportConfig(
        output_dir=str(tmp_path / "out"),
        max_seq_length=16,
        max_predictions_per_seq=4,
        formats=ALL_VARIANTS[3:],
        representative_data=str(records),
        latency_runs=5,
    )
    report = export_model(serving_head("pretrainer", model), config)
    assert all(
        l.mask_adder == -10000.0
        for l in model._flatten_layers()
        if isinstance(l, layers.AlbertAttention)
    )  # the int8 tracing's mask did not leak
    held_out = random_examples(300, 16, 4, 200, seed=4)
    reference = {
        k: v.numpy()
        for k, v in model(
            {k: tf.constant(v) for k, v in held_out.items() if k != "masked_lm_weights"}
        ).items()
    }
    partitions = {}
    for variant in ALL_VARIANTS[3:]:
        path = pathlib.Path(config.destinations()[variant])
        ops = report["artifacts"][variant]["ops"]
        assert "QUANTIZE" in ops and "FULLY_CONNECTED" in ops
        assert not non_builtin_ops(path.read_bytes())
        interpreter = Interpreter(model_path=str(path))
        int8_weights = [d for d in interpreter.get_tensor_details() if d["dtype"] == np.int8]
        assert len(int8_weights) > 20
        figures = parity_figures(
            reference, run_all(path, SIGNATURES, held_out), held_out["masked_lm_weights"]
        )
        assert figures["top1_agreement"] >= 0.95 and figures["min_cosine"] >= 0.99, (
            variant,
            figures,
        )
        partitions[variant] = xnnpack_partitions(path)
    assert partitions["tflite_int8"] <= 3 < 20 < partitions["tflite_int8_integer_only"], partitions


def test_fp16_of_an_original_checkpoint_passes_at_its_output_scale(tmp_path):
    """Trained logits reach ~9: fp16 weights put them ~0.02 off, which a flat 1e-2 would refuse."""
    folder = FIXTURES / "original_checkpoints" / "albert_tiny_shared"
    model = load_tf1_checkpoint(folder, folder / "albert_config.json")
    report = export_model(
        serving_head("pretrainer", model),
        ExportConfig(
            output_dir=str(tmp_path),
            max_seq_length=32,
            max_predictions_per_seq=5,
            formats=("tflite_fp16",),
            latency_runs=2,
        ),
    )
    entry = report["artifacts"]["tflite_fp16"]
    figures = entry["figures"]
    assert entry["failures"] == []
    fp16_limit = ParityThresholds().fp16_relative_diff
    assert (
        fp16_limit
        < figures["max_abs_diff/mlm_logits"]
        <= scaled_limit(figures["max_abs/mlm_logits"], fp16_limit)
    )
    assert figures["max_abs_diff/pooled_output"] <= scaled_limit(
        figures["max_abs/pooled_output"], fp16_limit
    )
    assert (tmp_path / "albert_tflite" / "1" / "albert_fp16.tflite").exists()
