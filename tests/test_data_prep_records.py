"""Example bytes and TFRecord framing written without TensorFlow, checked against the original file and TF."""

import pathlib
import random

import numpy as np
import pytest
import tensorflow as tf

from albert_tf import records

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
GOLDEN = FIXTURES / "original_data" / "orig_small_seq128.tfrecord"


def _golden_records():
    return list(records.read_tfrecords(str(GOLDEN)))


def _fields(features):
    length = sum(features["input_mask"])
    num_pred = int(sum(features["masked_lm_weights"]))
    return dict(
        input_ids=features["input_ids"][:length],
        num_segment_a=features["segment_ids"][:length].count(0),
        token_boundary=features["token_boundary"][:length],
        masked_positions=features["masked_lm_positions"][:num_pred],
        masked_label_ids=features["masked_lm_ids"][:num_pred],
        sop_label=features["next_sentence_labels"][0],
    )


def test_reencoding_the_original_file_gives_the_same_bytes():
    # Decode every record of the original's file and write it again: the whole file comes back byte for byte.
    encoder = records.PretrainingExampleEncoder(128, 20, 30000)
    golden = _golden_records()
    assert len(golden) == 1836
    rebuilt = [
        records.frame_record(encoder.encode(**_fields(records.decode_example(r)))) for r in golden
    ]
    assert b"".join(rebuilt) == GOLDEN.read_bytes()
    assert all(records.encode_example(records.decode_example(r)) == r for r in golden[:50])


def test_original_file_feature_names_and_wire_order():
    for data in _golden_records()[:100]:
        assert tuple(records.decode_example(data)) == records.WIRE_ORDER
    assert set(records.WIRE_ORDER) == set(records.FEATURE_NAMES)


def _random_instance(rng: random.Random, max_seq_length=128, max_pred=20):
    length = rng.randint(5, max_seq_length)
    num_a = rng.randint(3, length - 2)
    ids = [rng.randint(0, 29999) for _ in range(length)]
    num_pred = rng.randint(0, max_pred)
    positions = sorted(rng.sample(range(1, length), min(num_pred, length - 1)))
    return dict(
        input_ids=ids,
        num_segment_a=num_a,
        token_boundary=[rng.randint(0, 1) for _ in range(length)],
        masked_positions=positions,
        masked_label_ids=[rng.randint(0, 29999) for _ in positions],
        sop_label=rng.randint(0, 1),
    )


def _tf_example(inst, max_seq_length, max_pred):
    pad = max_seq_length - len(inst["input_ids"])
    pred_pad = max_pred - len(inst["masked_positions"])
    length = len(inst["input_ids"])

    def ints(values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))

    feature = {
        "input_ids": ints(inst["input_ids"] + [0] * pad),
        "input_mask": ints([1] * length + [0] * pad),
        "segment_ids": ints(
            [0] * inst["num_segment_a"] + [1] * (length - inst["num_segment_a"]) + [0] * pad
        ),
        "token_boundary": ints(inst["token_boundary"] + [0] * pad),
        "masked_lm_positions": ints(inst["masked_positions"] + [0] * pred_pad),
        "masked_lm_ids": ints(inst["masked_label_ids"] + [0] * pred_pad),
        "masked_lm_weights": tf.train.Feature(
            float_list=tf.train.FloatList(
                value=[1.0] * len(inst["masked_positions"]) + [0.0] * pred_pad
            )
        ),
        "next_sentence_labels": ints([inst["sop_label"]]),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature))


@pytest.mark.parametrize("max_seq_length,max_pred", [(128, 20), (512, 40)])
def test_our_bytes_equal_tf_examples_and_parse_with_tf(max_seq_length, max_pred):
    rng = random.Random(7)
    encoder = records.PretrainingExampleEncoder(max_seq_length, max_pred, 30000)
    spec = {
        name: tf.io.FixedLenFeature([max_seq_length], tf.int64)
        for name in ("input_ids", "input_mask", "segment_ids", "token_boundary")
    }
    spec.update(
        {
            "masked_lm_positions": tf.io.FixedLenFeature([max_pred], tf.int64),
            "masked_lm_ids": tf.io.FixedLenFeature([max_pred], tf.int64),
            "masked_lm_weights": tf.io.FixedLenFeature([max_pred], tf.float32),
            "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
        }
    )
    for _ in range(5):
        inst = _random_instance(rng, max_seq_length, max_pred)
        ours = encoder.encode(**inst)
        expected = _tf_example(inst, max_seq_length, max_pred)
        parsed_by_tf = tf.train.Example.FromString(ours)
        assert parsed_by_tf == expected
        # Map order aside (protobuf leaves it to the implementation), the bytes are TF's own.
        assert parsed_by_tf.SerializeToString(deterministic=True) == expected.SerializeToString(
            deterministic=True
        )
        parsed = tf.io.parse_single_example(ours, spec)
        expected_values = {
            k: np.asarray(v.int64_list.value or v.float_list.value)
            for k, v in expected.features.feature.items()
        }
        for name, value in parsed.items():
            np.testing.assert_array_equal(value.numpy(), expected_values[name], err_msg=name)


def test_tf_reads_our_framing(tmp_path):
    path = tmp_path / "x.tfrecord"
    payloads = [b"", b"a", bytes(range(256)) * 40]
    path.write_bytes(b"".join(records.frame_record(p) for p in payloads))
    assert [r.numpy() for r in tf.data.TFRecordDataset(str(path))] == payloads
    assert list(records.read_tfrecords(str(path))) == payloads


def test_corrupt_record_is_named(tmp_path):
    data = bytearray(records.frame_record(b"hello") + records.frame_record(b"world"))
    data[-6] ^= 0xFF  # inside the second record's data
    path = tmp_path / "bad.tfrecord"
    path.write_bytes(bytes(data))
    with pytest.raises(records.RecordError, match=r"bad.tfrecord: record 1: bad data CRC"):
        list(records.read_tfrecords(str(path)))
    path.write_bytes(bytes(data[:10]))
    with pytest.raises(records.RecordError, match="record 0: truncated header"):
        list(records.read_tfrecords(str(path)))


def test_generic_encoder_round_trips_extreme_values():
    features = {
        "input_ids": [0, 1, 127, 128, 2**31, 2**63 - 1, -1, -(2**63)],
        "masked_lm_weights": [0.5, -2.0],
    }
    decoded = records.decode_example(records.encode_example(features))
    assert decoded == features
    assert (
        tf.train.Example.FromString(records.encode_example(features))
        .features.feature["input_ids"]
        .int64_list.value
        == features["input_ids"]
    )


def test_encoder_rejects_oversized_inputs():
    encoder = records.PretrainingExampleEncoder(8, 2, 100)
    with pytest.raises(ValueError, match="exceed max_seq_length"):
        encoder.encode(list(range(9)), 3, [1] * 9, [], [], 0)
    with pytest.raises(ValueError, match="predictions exceed"):
        encoder.encode(list(range(5)), 3, [1] * 5, [1, 2, 3], [4, 5, 6], 0)
