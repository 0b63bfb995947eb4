"""TFLite metadata for on-device clients: the flatbuffer, the packed model, and the export's use.

The metadata is read back here by a reader written from the schema (independent of the writer);
`test_app_clients.py` runs the real clients on exported files.
"""

import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import types

import flatbuffers
import keras
import numpy as np
import pytest
from ai_edge_litert import schema_py_generated as schema
from ai_edge_litert.interpreter import Interpreter
from flatbuffers.table import Table

from albert_tf import AlbertConfig
from albert_tf.export import ExportConfig, export_model, serving_head
from albert_tf.export.tflite import metadata as tm
from albert_tf.export.tflite.app_metadata import (
    AppMetadataSettings,
    attach,
    default_max_seq_length,
    settings_beside,
)
from albert_tf.export.data import examples_from_text
from albert_tf.modeling.heads.classifier import AlbertClassifier
from albert_tf.text.client_sentencepiece import client_sentencepiece_model
from albert_tf.text.tokenization import AlbertTokenizer
from tests.conftest import FIXTURES, REPO_ROOT
from tests.model_configs import CLASSIFIER_TINY

pytestmark = pytest.mark.e2e  # starts the CLIs or runs whole exports

SPM = FIXTURES / "albert_spm" / "30k-clean.model"
CORPUS = FIXTURES / "original_data" / "corpus_small.txt"
INPUTS = ("input_ids", "input_mask", "segment_ids")
SEQ = 32
LABELS = ("negative", "positive")


# A reader of flatbuffer tables by slot, from the format's definition (vtable of uint16 offsets).
def _offset(tab: Table, slot: int) -> int:
    return tab.Offset(4 + 2 * slot)


def string(tab, slot):
    o = _offset(tab, slot)
    return tab.String(o + tab.Pos).decode() if o else None


def child(tab, slot):
    o = _offset(tab, slot)
    return Table(tab.Bytes, tab.Indirect(o + tab.Pos)) if o else None


def children(tab, slot):
    o = _offset(tab, slot)
    if not o:
        return []
    start = tab.Vector(o)
    return [Table(tab.Bytes, tab.Indirect(start + 4 * i)) for i in range(tab.VectorLen(o))]


def uint8(tab, slot):
    o = _offset(tab, slot)
    return tab.Get(flatbuffers.number_types.Uint8Flags, o + tab.Pos) if o else 0


def root(buffer: bytes) -> Table:
    return Table(bytearray(buffer), flatbuffers.encode.Get(flatbuffers.packer.uoffset, buffer, 0))


def test_metadata_flatbuffer_fields():
    spm_file = tm.AssociatedFile("sp.model", "the tokenizer", b"spm")
    labels = tm.AssociatedFile("labels.txt", "names", b"a\nb\n", tm.TENSOR_AXIS_LABELS)
    info = tm.ModelInfo(
        "albert",
        "a model",
        "3",
        "",
        "",
        (tm.TensorInfo("segment_ids", "s"), tm.TensorInfo("mask", "m"), tm.TensorInfo("ids", "i")),
        (tm.TensorInfo("probability", "p", (labels,)),),
        spm_file,
    )
    buffer = tm.metadata_flatbuffer(info)
    assert buffer[4:8] == b"M001"
    model = root(buffer)
    assert [string(model, s) for s in (0, 1, 2, 7)] == ["albert", "a model", "3", "1.1.0"]
    (subgraph,) = children(model, 3)
    assert [string(t, 0) for t in children(subgraph, 2)] == ["segment_ids", "mask", "ids"]
    (output,) = children(subgraph, 3)
    assert string(output, 0) == "probability"
    content = child(output, 3)
    assert uint8(content, 0) == 1 and child(content, 1) is not None  # FeatureProperties
    (label_file,) = children(output, 6)
    assert (string(label_file, 0), uint8(label_file, 2)) == ("labels.txt", 2)
    (unit,) = children(subgraph, 5)
    assert uint8(unit, 0) == 5  # SentencePieceTokenizerOptions
    (model_file,) = children(child(unit, 1), 0)
    assert (string(model_file, 0), string(model_file, 1)) == ("sp.model", "the tokenizer")
    assert [f.name for f in info.files] == ["sp.model", "labels.txt"]
    plain = tm.ModelInfo("m", "", "1", "", "", info.inputs, info.outputs)
    assert string(root(tm.metadata_flatbuffer(plain)), 7) == "1.0.0"
    assert children(children(root(tm.metadata_flatbuffer(plain)), 3)[0], 5) == []


@pytest.fixture(scope="module")
def tokenizer():
    return AlbertTokenizer(SPM)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A tiny classifier exported with metadata (labels given) and without."""
    out = tmp_path_factory.mktemp("metadata")
    keras.utils.set_random_seed(3)
    config = AlbertConfig(**dict(CLASSIFIER_TINY, num_hidden_layers=1), initializer_range=0.2)
    head = serving_head("classifier", AlbertClassifier(config, num_labels=2))
    reports = {}
    for name, settings in (
        ("with", AppMetadataSettings(labels=LABELS, task_name="SST-2")),
        ("without", AppMetadataSettings(enabled=False)),
    ):
        reports[name] = export_model(
            head,
            ExportConfig(
                output_dir=str(out),
                model_name=name,
                max_seq_length=SEQ,
                formats=("tflite_fp32", "tflite_int8_dynamic"),
                spm_model_file=str(SPM),
                representative_data=str(CORPUS),
                num_verification_examples=16,
                latency_runs=2,
                app_metadata=settings,
            ),
        )
    return {"dir": out, "reports": reports, "head": head}


def test_export_writes_the_clients_metadata(exported, tokenizer):
    report = exported["reports"]["with"]
    assert report["app_metadata"]["clients"] == [
        "MediaPipe Tasks TextClassifier",
        "TFLite Task Library BertNLClassifier",
    ]
    assert report["app_metadata"]["mismatches"] == [] and report["app_metadata"]["checked_texts"]
    # The exact set of comma-written numbers the clients split otherwise, for this vocabulary.
    assert len(report["app_metadata"]["comma_numbers_differing"]) == 393
    for variant in ("tflite_fp32", "tflite_int8_dynamic"):
        entry = report["artifacts"][variant]
        model = pathlib.Path(entry["path"]).read_bytes()
        assert entry["size_bytes"] == len(model) > entry["size_bytes_without_metadata"]
        inputs, outputs = tm.subgraph_tensor_names(model)
        assert set(inputs) == set(INPUTS) and outputs == ["probabilities"]
        names = {"input_ids": "ids", "input_mask": "mask", "segment_ids": "segment_ids"}
        metadata = root(tm.metadata_of(model))
        assert string(metadata, 7) == entry["app_metadata"]["min_parser_version"] == "1.1.0"
        (subgraph,) = children(metadata, 3)
        assert [string(t, 0) for t in children(subgraph, 2)] == [names[n] for n in inputs]
        assert [string(t, 0) for t in children(subgraph, 3)] == ["probability"]
        files = tm.associated_files(model)
        assert files["labels.txt"] == b"negative\npositive\n"
        assert files["sentencepiece.model"] == client_sentencepiece_model(tokenizer.model_proto)
        assert entry["min_runtime_version"] == "2.9.0"
        # Per-tensor int8 dense layers: FULLY_CONNECTED within what older runtimes run.
        assert tm.operator_versions(model)["FULLY_CONNECTED"] <= 9


def test_outputs_are_bit_identical_with_and_without_metadata(exported, tokenizer):
    """The file without metadata (`--tflite_metadata=false`) is the converted one, and both give
    the same bits on real text."""
    reports = exported["reports"]
    assert "app_metadata" not in reports["without"]["artifacts"]["tflite_fp32"]
    assert reports["without"]["app_metadata"] == {
        "clients": [],
        "note": "--tflite_metadata=false: the files as converted, for raw interpreters",
    }
    examples, _ = examples_from_text(str(CORPUS), tokenizer, SEQ, 4, 24, seed=9)
    for variant in ("tflite_fp32", "tflite_int8_dynamic"):
        with_path = reports["with"]["artifacts"][variant]["path"]
        without = pathlib.Path(reports["without"]["artifacts"][variant]["path"]).read_bytes()
        assert tm.metadata_of(without) is None and tm.associated_files(without) == {}
        assert len(without) == reports["with"]["artifacts"][variant]["size_bytes_without_metadata"]
        runners = [
            Interpreter(model_content=m).get_signature_runner()
            for m in (pathlib.Path(with_path).read_bytes(), without)
        ]
        for i in range(24):
            row = {k: examples[k][i : i + 1] for k in INPUTS}
            a, b = (r(**row)["probabilities"] for r in runners)
            assert np.array_equal(a, b), (variant, i)


def test_packed_model_keeps_buffers_aligned_and_replaces_metadata(exported):
    path = exported["reports"]["without"]["artifacts"]["tflite_fp32"]["path"]
    model = pathlib.Path(path).read_bytes()
    info = tm.ModelInfo(
        "m",
        "first",
        "1",
        "",
        "",
        tuple(tm.TensorInfo(n, "") for n in ("a", "b", "c")),
        (tm.TensorInfo("probability", "", (tm.AssociatedFile("x.txt", "", b"x\ny\n", 2),)),),
    )
    packed = tm.with_metadata(model, info)
    parsed = schema.Model.GetRootAsModel(packed, 0)
    starts = [
        parsed.Buffers(i)._tab.Vector(parsed.Buffers(i)._tab.Offset(4))
        for i in range(parsed.BuffersLength())
        if parsed.Buffers(i).DataLength()
    ]
    assert len(starts) > 10 and all(s % 16 == 0 for s in starts)
    assert tm.with_metadata(packed, info) == packed  # replaced, not added twice
    second = tm.with_metadata(packed, dataclasses.replace(info, description="second"))
    assert string(root(tm.metadata_of(second)), 1) == "second"
    assert parsed.BuffersLength() == schema.Model.GetRootAsModel(second, 0).BuffersLength()
    assert tm.associated_files(second) == {"x.txt": b"x\ny\n"}
    with pytest.raises(ValueError, match="names 3 inputs and 2 outputs"):
        tm.with_metadata(model, tm.ModelInfo("m", "", "1", "", "", info.inputs, info.outputs * 2))


def _job(head, tokenizer, examples, texts=(), **config):
    """What the post-processing step reads of an export job."""
    base = dict(
        model_name="m",
        version=1,
        max_seq_length=SEQ,
        do_lower_case=True,
        app_metadata=AppMetadataSettings(single_text_client=True),
    )
    return types.SimpleNamespace(
        head=head,
        config=types.SimpleNamespace(**{**base, **config}),
        tokenizer=tokenizer,
        texts=list(texts),
        verification=examples,
        shared={},
        notes={},
    )


def _converted(exported, variant="tflite_fp32") -> bytes:
    return pathlib.Path(exported["reports"]["without"]["artifacts"][variant]["path"]).read_bytes()


def test_metadata_refused_where_the_clients_tokenize_otherwise(exported, tokenizer):
    examples, _ = examples_from_text(str(CORPUS), tokenizer, SEQ, 4, 4, seed=9)
    texts = [("It supports more than 11,003 species.", None)]
    job = _job(exported["head"], tokenizer, examples, texts)
    model = _converted(exported)
    out, fields = attach(model, job, "tflite_fp32")
    assert out == model and tm.metadata_of(out) is None
    (failure,) = fields["failures"]
    assert "tokenization differs from ours on 1 texts" in failure and "'▁1', '1,0'" in failure
    assert job.notes["app_metadata"]["mismatches"]


def test_author_and_license_go_into_the_metadata_of_a_known_single_text_classifier(
    exported, tokenizer
):
    examples, _ = examples_from_text(str(CORPUS), tokenizer, SEQ, 4, 4, seed=9)
    model = _converted(exported)
    signed = AppMetadataSettings(LABELS, task_name="sst-2", author="A. Author", license="MIT")
    out, fields = attach(
        model, _job(exported["head"], tokenizer, examples, app_metadata=signed), "x"
    )
    assert "failures" not in fields
    metadata = root(tm.metadata_of(out))  # ModelMetadata: name 0, author 4, license 5
    assert (string(metadata, 0), string(metadata, 4), string(metadata, 5)) == (
        "m",
        "A. Author",
        "MIT",
    )
    published = exported["reports"]["with"]["artifacts"]["tflite_fp32"]["path"]
    unsigned = root(tm.metadata_of(pathlib.Path(published).read_bytes()))
    assert string(unsigned, 4) is None and string(unsigned, 5) is None
    # A classifier whose task is unknown may take pairs: refused unless said to take one text.
    unknown = _job(exported["head"], tokenizer, examples, app_metadata=AppMetadataSettings())
    with pytest.raises(ValueError, match="give --single_text_client if it was trained on one"):
        attach(model, unknown, "x")


def test_cased_models_fail_and_other_heads_get_a_note(exported, tokenizer):
    examples, _ = examples_from_text(str(CORPUS), tokenizer, SEQ, 4, 4, seed=9)
    model = _converted(exported)
    with pytest.raises(ValueError, match=r"cased model \(do_lower_case=False\)"):
        attach(model, _job(exported["head"], tokenizer, examples, do_lower_case=False), "x")
    notes = {
        ("classifier", "MRPC", SEQ, tokenizer): "mrpc is a sentence-pair task",
        ("classifier", "cola", SEQ, None): "give spm_model_file",
        ("squad_v1", None, 128, tokenizer): "max_seq_length=384 for it",
        ("squad_v2", None, 384, tokenizer): "no 'no answer'",
        ("race", None, SEQ, tokenizer): "multiple choice",
        ("pretrainer", None, SEQ, tokenizer): "no on-device client serves a pretrainer",
    }
    for (kind, task, seq, tok), note in notes.items():
        job = _job(
            types.SimpleNamespace(kind=kind),
            tok,
            examples,
            max_seq_length=seq,
            app_metadata=AppMetadataSettings(task_name=task),
        )
        assert attach(model, job, "tflite_fp32") == (model, {})
        assert note in job.notes["app_metadata"]["note"]
        assert job.notes["app_metadata"]["clients"] == []


def test_settings_from_the_fine_tuning_bundle(tmp_path):
    (tmp_path / "classifier_info.json").write_text(
        json.dumps({"task_name": "sst-2", "labels": ["0", "1"]})
    )
    model = str(tmp_path / "classifier.keras")
    assert settings_beside(model) == AppMetadataSettings(True, ("0", "1"), "sst-2")
    assert settings_beside(model, enabled=False) == AppMetadataSettings(False, ("0", "1"), "sst-2")
    assert settings_beside(str(tmp_path / "other" / "m.keras")) == AppMetadataSettings()
    (tmp_path / "classifier_info.json").write_text("{not json")
    with pytest.raises(ValueError, match="classifier_info.json: not a readable"):
        settings_beside(model)
    for wrong in (["0", "1"], {"labels": "01"}):
        (tmp_path / "classifier_info.json").write_text(json.dumps(wrong))
        with pytest.raises(ValueError, match="classifier_info.json: not a classifier info file"):
            settings_beside(model)


def test_squad_v1_defaults_to_the_question_answerers_length():
    def head(kind, positions):
        return types.SimpleNamespace(
            kind=kind, config=types.SimpleNamespace(max_position_embeddings=positions)
        )

    assert default_max_seq_length(head("squad_v1", 512), True, None, 128) == 384
    assert default_max_seq_length(head("squad_v1", 512), True, 256, 128) == 256
    assert default_max_seq_length(head("squad_v1", 512), False, None, 128) == 128
    assert default_max_seq_length(head("squad_v1", 128), True, None, 128) == 128
    assert default_max_seq_length(head("classifier", 512), True, None, 128) == 128


@pytest.mark.slow  # the export CLI end to end; the library's export is tested above
def test_cli_labels_from_the_bundle_and_metadata_off(tmp_path):
    """`pipelines/export.py` reads the label names beside `--keras_model`; with
    `--tflite_metadata=false` the file has none."""
    keras.utils.set_random_seed(4)
    config = AlbertConfig(**dict(CLASSIFIER_TINY, num_hidden_layers=1), initializer_range=0.2)
    AlbertClassifier(config, num_labels=2).save(tmp_path / "classifier.keras")
    (tmp_path / "classifier_info.json").write_text(
        json.dumps({"task_name": "cola", "labels": ["unacceptable", "acceptable"]})
    )
    for version, flag in ((1, "--tflite_metadata"), (2, "--tflite_metadata=false")):
        done = subprocess.run(
            [
                sys.executable,
                str(REPO_ROOT / "pipelines" / "export.py"),
                "--head=classifier",
                f"--keras_model={tmp_path / 'classifier.keras'}",
                f"--spm_model_file={SPM}",
                f"--output_dir={tmp_path / 'out'}",
                f"--version={version}",
                "--max_seq_length=16",
                "--formats=tflite_fp32",
                "--num_verification_examples=4",
                "--latency_runs=1",
                flag,
            ],
            capture_output=True,
            text=True,
            cwd=REPO_ROOT,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        )
        assert done.returncode == 0, done.stderr[-2000:]
        model = tmp_path / "out" / "albert_tflite" / str(version) / "albert_fp32.tflite"
        files = tm.associated_files(model.read_bytes())
        if version == 1:
            assert files["labels.txt"] == b"unacceptable\nacceptable\n"
        else:
            assert files == {} and tm.metadata_of(model.read_bytes()) is None
