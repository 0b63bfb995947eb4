"""The export format registry (`albert_tf.export.formats`): a format is built, gated and written from
its entry alone, and `pipelines/export.py --help` lists every format and head."""

import dataclasses
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter

from albert_tf import AlbertConfig, AlbertPretrainer
from albert_tf.export import ExportConfig, export_model, formats, heads, serving_head
from albert_tf.export.tflite import app_metadata
from albert_tf.export.parity import Int8Limit, ParityThresholds, RelativeDiffLimit
from tests.model_configs import MICRO
from tests.tolerances import assert_close_to_scale

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
INPUTS = ("input_ids", "input_mask", "segment_ids")


def test_help_lists_every_format_and_head_quietly():
    run = subprocess.run(
        [sys.executable, "pipelines/export.py", "--help"],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={"TF_CPP_MIN_LOG_LEVEL": "2", "PATH": "/usr/bin:/bin"},
    )
    flat = " ".join(run.stdout.split())
    for name, spec in formats.REGISTRY.items():
        assert f"{name}: {' '.join(spec.summary.split())}" in flat, name
    for name, spec in heads.REGISTRY.items():
        assert f"{name}: {' '.join(spec.summary.split())}" in flat, name
    # TensorFlow loads for the heads' registry, its start-up lines left out.
    assert "oneDNN" not in run.stderr and "cuda" not in run.stderr, run.stderr[-2000:]


def test_every_format_names_its_gate_destination_and_calibration():
    assert tuple(formats.REGISTRY) == (
        "saved_model",
        "tflite_fp32",
        "tflite_fp16",
        "tflite_int8_dynamic",
        "tflite_int8",
        "tflite_int8_integer_only",
        "keras_text",
    )
    assert [name for name, s in formats.REGISTRY.items() if s.calibrated] == [
        "tflite_int8",
        "tflite_int8_integer_only",
    ]
    assert [name for name, s in formats.REGISTRY.items() if isinstance(s.parity, Int8Limit)] == [
        "tflite_int8_dynamic",
        "tflite_int8",
        "tflite_int8_integer_only",
    ]
    # The calibrated int8 formats quantize a tied table's dense use per tensor, so that one copy
    # serves both; the dynamic one quantizes every dense weight per tensor (tied ones with them),
    # for the op versions the TFLite Task Library's runtime accepts.
    tied = [n for n, s in formats.REGISTRY.items() if s.tflite and s.tflite.per_tensor_when_tied]
    assert tied == ["tflite_int8", "tflite_int8_integer_only"]
    dense = [n for n, s in formats.REGISTRY.items() if s.tflite and s.tflite.dense_per_tensor]
    assert dense == ["tflite_int8_dynamic"]
    # Every TFLite format ends with its on-device clients' metadata.
    assert all(
        s.tflite.post_process[-1] is app_metadata.attach
        for s in formats.REGISTRY.values()
        if s.tflite
    )
    assert formats.destinations("out", "m", 2) == {
        "saved_model": "out/m/2",
        "preprocessing": "out/m_preprocessing/2",
        "text": "out/m_text/2",
        "tflite_fp32": "out/m_tflite/2/m_fp32.tflite",
        "tflite_fp16": "out/m_tflite/2/m_fp16.tflite",
        "tflite_int8_dynamic": "out/m_tflite/2/m_int8_dynamic.tflite",
        "tflite_int8": "out/m_tflite/2/m_int8.tflite",
        "tflite_int8_integer_only": "out/m_tflite/2/m_int8_integer_only.tflite",
        "keras_text": "out/m_keras/2/m_text.keras",
        "report": "out/export_report_m_2.json",
    }
    # The text models are held to the saved_model format's gate.
    assert formats.format_of("text") is formats.SAVED_MODEL
    figures = {"max_abs_diff/logits": 1e-4, "max_abs/logits": 2.0}
    assert formats.parity_failures("text", figures, ParityThresholds()) != []
    assert formats.parity_failures("tflite_fp32", figures, ParityThresholds()) == []
    with pytest.raises(ValueError, match="'fp8_relative_diff' is no field of ParityThresholds"):
        RelativeDiffLimit("fp8_relative_diff")
    with pytest.raises(ValueError, match="same artifact key or destination"):
        formats._check_registry(
            {"a": formats.TFLITE_FP32, "b": dataclasses.replace(formats.TFLITE_FP32, name="b")}
        )


@pytest.mark.numerics  # TFLite outputs against the Keras model
def test_a_registered_format_is_built_post_processed_gated_and_written_from_its_entry_alone(
    monkeypatch, tmp_path
):
    keras.utils.set_random_seed(9)
    model = AlbertPretrainer(AlbertConfig(**MICRO, initializer_range=0.2))
    head = serving_head("pretrainer", model)
    steps = []

    def tag(flatbuffer: bytes, job, artifact: str):  # a post-processing step, as metadata is
        steps.append((len(flatbuffer), job.head.kind, job.config.max_seq_length, artifact))
        return flatbuffer, {"tagged": True}

    made_up = formats.tflite_format(
        "fp32_tagged",
        "made up for the test.",
        RelativeDiffLimit("fp32_relative_diff"),
        formats.TfliteRecipe(post_process=(tag,)),
    )
    config = ExportConfig(
        output_dir=str(tmp_path),
        max_seq_length=16,
        max_predictions_per_seq=4,
        formats=("tflite_fp32_tagged",),
        latency_runs=2,
        num_verification_examples=16,
    )
    with pytest.raises(ValueError, match="formats must be a non-empty subset"):
        export_model(head, config)
    monkeypatch.setitem(formats.REGISTRY, made_up.name, made_up)
    calibrated = dataclasses.replace(
        made_up, name="calibrated", tflite=formats.TfliteRecipe(calibrated=True)
    )
    monkeypatch.setitem(formats.REGISTRY, "calibrated", calibrated)
    with pytest.raises(ValueError, match="calibrated: calibrated on real inputs"):
        export_model(head, dataclasses.replace(config, formats=("calibrated",)))
    report = export_model(head, config)
    path = pathlib.Path(config.destinations()["tflite_fp32_tagged"])
    assert path == tmp_path / "albert_tflite" / "1" / "albert_fp32_tagged.tflite"
    record = report["artifacts"]["tflite_fp32_tagged"]
    assert record["failures"] == [] and record["path"] == str(path)
    assert record["size_bytes"] == path.stat().st_size
    assert steps == [(record["size_bytes"], "pretrainer", 16, "tflite_fp32_tagged")]
    assert record["tagged"] is True  # a step's fields join the artifact's record
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "albert_tflite",
        "export_report_albert_1.json",
    ]
    runner = Interpreter(model_path=str(path)).get_signature_runner("sop")
    ids = {k: np.ones((1, 16), np.int32) for k in INPUTS}
    reference = model.get_layer("seq_relationship")(model.backbone(ids)["pooled_output"])
    assert_close_to_scale(
        runner(**ids)["sop_logits"], reference.numpy(), ParityThresholds().fp32_relative_diff
    )
