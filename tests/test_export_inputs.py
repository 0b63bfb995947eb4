"""Export on bad input: clear errors naming what is wrong, and nothing corrupt left behind."""

import os
import pathlib

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.checkpoints import CheckpointMismatchError, load_tf1_checkpoint
from albert_tf.export import (
    ExportConfig,
    ParityError,
    export_model,
    load_serving_head,
    serving_head,
)
from albert_tf.export.data import load_examples
from albert_tf.export.parity import ParityThresholds
from albert_tf.text.tokenization import AlbertTokenizer

# Compares floats against goldens or another form of the model: CI reruns it on other kernels.
pytestmark = [pytest.mark.numerics, pytest.mark.e2e]

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
CHECKPOINTS = FIXTURES / "original_checkpoints"
SHARED = CHECKPOINTS / "albert_tiny_shared"
SPM = FIXTURES / "albert_spm" / "30k-clean.model"
INPUTS = ("input_ids", "input_mask", "segment_ids")


@pytest.fixture(scope="module")
def head():
    return serving_head("pretrainer", load_tf1_checkpoint(SHARED, SHARED / "albert_config.json"))


@pytest.fixture(scope="module")
def signatures(head, tmp_path_factory):
    out = tmp_path_factory.mktemp("export")
    export_model(
        head,
        ExportConfig(
            output_dir=str(out),
            max_seq_length=16,
            max_predictions_per_seq=4,
            formats=("saved_model",),
        ),
    )
    return tf.saved_model.load(str(out / "albert" / "1")).signatures


def ids(shape, value=1, dtype=tf.int32):
    return tf.fill(shape, tf.constant(value, dtype))


def test_config_checkpoint_mismatch_names_every_problem():
    other_config = CHECKPOINTS / "albert_tiny_grouped" / "albert_config.json"
    with pytest.raises(CheckpointMismatchError, match="does not match the config") as error:
        load_serving_head(
            "pretrainer", tf1_checkpoint=str(SHARED), albert_config_file=str(other_config)
        )
    assert "missing from checkpoint: bert/encoder/transformer/group_1/inner_group_0" in str(
        error.value
    )


@pytest.mark.parametrize(
    "settings, message",
    [
        (
            dict(max_seq_length=65),
            r"max_seq_length=65 must be in \[3, max_position_embeddings=64\]",
        ),
        (dict(max_predictions_per_seq=0), "max_predictions_per_seq=0"),
        (dict(formats=("saved_model", "onnx")), "formats must be"),
        (dict(version=0), "version must be a positive int"),
        (dict(num_verification_examples=0), "num_verification_examples must be a positive int"),
        (dict(latency_runs=-1), "latency_runs must be a positive int"),
        (dict(formats=("tflite_int8",)), "tflite_int8: calibrated on real inputs"),
        (dict(spm_model_file=str(SPM)), "has 30000 pieces but the model's vocab_size is 300"),
    ],
)
def test_bad_settings_fail_before_anything_is_written(head, tmp_path, settings, message):
    with pytest.raises(ValueError, match=message):
        export_model(
            head,
            ExportConfig(
                output_dir=str(tmp_path / "out"),
                **{"max_seq_length": 16, "max_predictions_per_seq": 4, **settings},
            ),
        )
    assert not (tmp_path / "out").exists()


def test_existing_version_is_never_overwritten(head, tmp_path):
    (tmp_path / "albert" / "1").mkdir(parents=True)
    (tmp_path / "albert" / "1" / "keep").write_text("served")
    with pytest.raises(FileExistsError, match="choose another version"):
        export_model(
            head,
            ExportConfig(
                output_dir=str(tmp_path),
                max_seq_length=16,
                max_predictions_per_seq=4,
                formats=("saved_model",),
            ),
        )
    assert (tmp_path / "albert" / "1" / "keep").read_text() == "served"
    assert sorted(os.listdir(tmp_path)) == ["albert"]


def test_a_variant_failing_parity_is_refused_the_rest_written(head, tmp_path):
    impossible = ParityThresholds(fp32_relative_diff=-1.0)  # nothing can pass
    with pytest.raises(ParityError, match="tflite_fp32") as error:
        export_model(
            head,
            ExportConfig(
                output_dir=str(tmp_path),
                max_seq_length=16,
                max_predictions_per_seq=4,
                latency_runs=2,
                formats=("saved_model", "tflite_fp32"),
                thresholds=impossible,
            ),
        )
    assert "max abs diff" in str(error.value)
    assert (tmp_path / "albert" / "1" / "saved_model.pb").is_file()
    assert not (tmp_path / "albert_tflite").exists()
    assert sorted(os.listdir(tmp_path)) == ["albert", "export_report_albert_1.json"]  # no staging


def test_signature_rejects_wrong_dtype(signatures):
    with pytest.raises(tf.errors.InvalidArgumentError, match="expected to be a int32 tensor"):
        signatures["serving_default"](
            input_ids=ids([1, 8], dtype=tf.int64),
            input_mask=ids([1, 8]),
            segment_ids=ids([1, 8], 0),
        )


@pytest.mark.parametrize(
    "inputs, message",
    [
        (
            dict(input_ids=ids([8]), input_mask=ids([1, 8]), segment_ids=ids([1, 8], 0)),
            r"Shape of tensor input_ids \[8\] is not compatible with expected shape \[\?,\?\]",
        ),
        (
            dict(input_ids=ids([2, 8]), input_mask=ids([2, 8, 1]), segment_ids=ids([2, 8], 0)),
            r"Shape of tensor input_mask \[2,8,1\] is not compatible",
        ),
        (
            dict(input_ids=ids([2, 8]), input_mask=ids([2, 9]), segment_ids=ids([2, 8], 0)),
            "input_mask must have the shape of input_ids",
        ),
        (
            dict(input_ids=ids([2, 8], 300), input_mask=ids([2, 8]), segment_ids=ids([2, 8], 0)),
            "input_ids has values >= 300",
        ),
        (
            dict(input_ids=ids([2, 8], -1), input_mask=ids([2, 8]), segment_ids=ids([2, 8], 0)),
            "input_ids has negative values",
        ),
        (
            dict(input_ids=ids([2, 8]), input_mask=ids([2, 8]), segment_ids=ids([2, 8], 2)),
            "segment_ids has values >= 2",
        ),
        (
            dict(input_ids=ids([1, 65]), input_mask=ids([1, 65]), segment_ids=ids([1, 65], 0)),
            "seq_length exceeds max_position_embeddings=64",
        ),
    ],
)
def test_signature_rejects_bad_shapes_and_values_naming_the_input(signatures, inputs, message):
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        signatures["serving_default"](**inputs)


def test_mlm_signature_rejects_positions_outside_the_sequence(signatures):
    x = dict(input_ids=ids([2, 8]), input_mask=ids([2, 8]), segment_ids=ids([2, 8], 0))
    with pytest.raises(
        tf.errors.InvalidArgumentError, match="masked_lm_positions has values >= seq_length"
    ):
        signatures["mlm"](**x, masked_lm_positions=ids([2, 3], 8))
    with pytest.raises(tf.errors.InvalidArgumentError, match="batch size of input_ids"):
        signatures["mlm"](**x, masked_lm_positions=ids([3, 3], 0))


def test_serve_examples_rejects_examples_of_another_length(signatures):
    example = tf.train.Example(
        features=tf.train.Features(
            feature={
                k: tf.train.Feature(int64_list=tf.train.Int64List(value=[1] * 20)) for k in INPUTS
            }
        )
    )
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=r"Key: (input_ids|input_mask|segment_ids), Index: 0.  Number of int64 "
        r"values != expected.  Values size: 20 but output shape: \[16\]",
    ):
        signatures["serve_examples"](examples=tf.constant([example.SerializeToString()]))


def test_representative_data_errors_name_the_file(tmp_path):
    tokenizer = AlbertTokenizer(SPM)
    blank = tmp_path / "blank.txt"
    blank.write_text("\n \n\n")
    with pytest.raises(ValueError, match=f"{blank}: no text"):
        load_examples(str(blank), tokenizer, 32, 4, 10, 0)
    binary = tmp_path / "data.bin"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ValueError, match="not UTF-8 text"):
        load_examples(str(binary), tokenizer, 32, 4, 10, 0)
    with pytest.raises(ValueError, match="needs a SentencePiece model"):
        load_examples(str(FIXTURES / "original_data" / "corpus_small.txt"), None, 32, 4, 10, 0)
    with pytest.raises(FileNotFoundError, match="representative data not found"):
        load_examples(str(tmp_path / "missing.txt"), tokenizer, 32, 4, 10, 0)
    records = FIXTURES / "original_data" / "orig_small_seq128.tfrecord"
    with pytest.raises(ValueError, match="record 0 input_ids has length 128, more than 64"):
        load_examples(str(records), None, 64, 20, 10, 0)
    corrupt = tmp_path / "corrupt.tfrecord"
    corrupt.write_bytes(records.read_bytes()[:1000])
    with pytest.raises(ValueError, match=f"{corrupt}: corrupt TFRecord"):
        load_examples(str(corrupt), None, 128, 20, 10, 0)


def test_pretraining_records_load_as_the_original_wrote_them():
    records = FIXTURES / "original_data" / "orig_small_seq128.tfrecord"
    examples, texts = load_examples(str(records), None, 128, 20, 50, 0)
    assert texts == [] and examples["input_ids"].shape == (50, 128)
    first = tf.train.Example.FromString(next(iter(tf.data.TFRecordDataset(str(records)))).numpy())
    features = first.features.feature
    assert examples["input_ids"][0].tolist() == list(features["input_ids"].int64_list.value)
    weights = np.array(features["masked_lm_weights"].float_list.value)
    assert examples["masked_lm_weights"][0].tolist() == weights.tolist()
    real = weights > 0
    assert (
        examples["masked_lm_positions"][0][real]
        == np.array(features["masked_lm_positions"].int64_list.value)[real]
    ).all()


def test_text_examples_are_real_sentences_packed_and_masked():
    tokenizer = AlbertTokenizer(SPM)
    examples, texts = load_examples(
        str(FIXTURES / "original_data" / "corpus_small.txt"), tokenizer, 64, 10, 200, 3
    )
    assert len(texts) == 200 and examples["input_ids"].shape == (200, 64)
    assert any(b is not None for _, b in texts) and (examples["segment_ids"] == 1).any()
    for row in range(200):
        a, b = texts[row]
        packed = tokenizer.encode_pair(a, b, 64)
        real = examples["masked_lm_weights"][row] > 0
        positions = examples["masked_lm_positions"][row][real]
        assert 1 <= len(positions) <= 10
        unmasked = examples["input_ids"][row].copy()
        assert (unmasked[positions] == tokenizer.mask_id).all()
        unmasked[positions] = np.array(packed.input_ids)[positions]
        assert unmasked.tolist() == packed.input_ids
        assert examples["input_mask"][row].tolist() == packed.input_mask
