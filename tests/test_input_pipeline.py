"""Tests for albert_tf.training.input_pipeline on the TFRecord written by the original script."""

import pathlib

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.records import FEATURE_NAMES
from albert_tf.training.input_pipeline import (
    feature_spec,
    list_input_files,
    per_replica_batch_size,
    pretraining_dataset,
    pretraining_dataset_fn,
)

ORIGINAL = (
    pathlib.Path(__file__).resolve().parent
    / "fixtures"
    / "original_data"
    / "orig_small_seq128.tfrecord"
)
NUM_RECORDS = 1836
SEQ, PRED = 128, 20


def original_examples():
    return [tf.train.Example.FromString(r.numpy()) for r in tf.data.TFRecordDataset(str(ORIGINAL))]


def dataset(patterns=str(ORIGINAL), batch_size=64, is_training=False, **kwargs):
    return pretraining_dataset(patterns, SEQ, PRED, batch_size, is_training, **kwargs)


def record_keys(ds):
    """One hashable identity per record: its ids, masked positions and label."""
    keys = []
    for batch in ds:
        for ids, pos, label in zip(
            batch["input_ids"].numpy(),
            batch["masked_lm_positions"].numpy(),
            batch["next_sentence_labels"].numpy(),
        ):
            keys.append((ids.tobytes(), pos.tobytes(), int(label[0])))
    return keys


def test_feature_spec_matches_original_records():
    spec = feature_spec(SEQ, PRED)
    assert tuple(spec) == FEATURE_NAMES
    example = original_examples()[0]
    assert set(example.features.feature) == set(spec)
    for name, feature in example.features.feature.items():
        kind = feature.WhichOneof("kind")
        assert kind == ("float_list" if spec[name].dtype == tf.float32 else "int64_list"), name
        assert [len(getattr(feature, kind).value)] == list(spec[name].shape), name


def test_eval_batches_have_fixed_shapes_dtypes_and_original_values():
    ds = dataset(batch_size=32)
    expected_shapes = {
        **{n: [32, SEQ] for n in ("input_ids", "input_mask", "segment_ids", "token_boundary")},
        **{n: [32, PRED] for n in ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights")},
        "next_sentence_labels": [32, 1],
    }
    assert {n: s.shape.as_list() for n, s in ds.element_spec.items()} == expected_shapes
    for name, spec in ds.element_spec.items():
        assert spec.dtype == (tf.float32 if name == "masked_lm_weights" else tf.int32), name

    batch = next(iter(ds))
    examples = original_examples()[:32]
    for name in FEATURE_NAMES:
        kind = "float_list" if name == "masked_lm_weights" else "int64_list"
        raw = np.array([getattr(e.features.feature[name], kind).value for e in examples])
        np.testing.assert_array_equal(batch[name].numpy(), raw, err_msg=name)
    assert set(np.unique(batch["next_sentence_labels"])) <= {0, 1}


@pytest.mark.parametrize("batch_size", [64, 100, NUM_RECORDS])
def test_eval_reads_every_record_once_in_order(batch_size):
    batches = list(dataset(batch_size=batch_size))
    assert len(batches) == NUM_RECORDS // batch_size  # drop_remainder=True
    if batch_size == 64:
        assert record_keys(batches) == record_keys(dataset(batch_size=64))  # deterministic
        assert len(set(record_keys(dataset(batch_size=1)))) == NUM_RECORDS


def test_eval_repeat_is_optional():
    ds = dataset(batch_size=NUM_RECORDS, repeat=True)
    first, second = list(ds.take(2))
    np.testing.assert_array_equal(first["input_ids"], second["input_ids"])


def test_training_repeats_shuffles_and_is_reproducible_with_seed():
    eval_first = next(iter(dataset(batch_size=64)))
    train = dataset(batch_size=64, is_training=True, seed=7)
    batches = list(train.take(NUM_RECORDS // 64 + 5))  # more than one pass: it repeats
    assert len(batches) == NUM_RECORDS // 64 + 5
    assert not np.array_equal(batches[0]["input_ids"], eval_first["input_ids"])
    again = list(dataset(batch_size=64, is_training=True, seed=7).take(3))
    for a, b in zip(batches, again):
        np.testing.assert_array_equal(a["input_ids"], b["input_ids"])
    # Shuffling only reorders: the first pass holds original records.
    originals = set(record_keys(dataset(batch_size=1)))
    assert set(record_keys(batches[:5])) <= originals


def split_into_files(tmp_path, num_files):
    records = [r.numpy() for r in tf.data.TFRecordDataset(str(ORIGINAL))]
    paths = []
    for i in range(num_files):
        path = tmp_path / f"part-{i:02d}.tfrecord"
        with tf.io.TFRecordWriter(str(path)) as writer:
            for record in records[i::num_files]:
                writer.write(record)
        paths.append(str(path))
    return paths


@pytest.mark.parametrize("num_files", [1, 4], ids=["record_shards", "file_shards"])
def test_two_input_pipelines_partition_the_data(tmp_path, num_files):
    pattern = str(ORIGINAL)
    if num_files > 1:
        split_into_files(tmp_path, num_files)
        pattern = str(tmp_path / "part-*.tfrecord")
    parts = []
    for pipeline_id in range(2):
        context = tf.distribute.InputContext(2, pipeline_id, num_replicas_in_sync=2)
        parts.append(record_keys(dataset(pattern, batch_size=1, input_context=context)))
    assert len(parts[0]) + len(parts[1]) == NUM_RECORDS
    assert abs(len(parts[0]) - len(parts[1])) <= 1
    assert not set(parts[0]) & set(parts[1])
    assert set(parts[0]) | set(parts[1]) == set(record_keys(dataset(batch_size=1)))


def test_dataset_fn_gives_per_replica_batches_of_its_shard(tmp_path):
    pattern = [str(p) for p in split_into_files(tmp_path, 2)]
    dataset_fn = pretraining_dataset_fn(pattern, SEQ, PRED, global_batch_size=32, is_training=False)
    batch = next(iter(dataset_fn(tf.distribute.InputContext(2, 1, num_replicas_in_sync=4))))
    assert batch["input_ids"].shape == (8, SEQ)
    second_file = next(iter(dataset(pattern[1], batch_size=8)))
    np.testing.assert_array_equal(batch["input_ids"], second_file["input_ids"])

    strategy = tf.distribute.get_strategy()
    distributed = strategy.distribute_datasets_from_function(dataset_fn)
    assert next(iter(distributed))["masked_lm_ids"].shape == (32, PRED)


def test_per_replica_batch_size():
    assert per_replica_batch_size(4096) == 4096
    assert per_replica_batch_size(4096, tf.distribute.InputContext(1, 0, 8)) == 512
    with pytest.raises(ValueError, match="not divisible"):
        per_replica_batch_size(100, tf.distribute.InputContext(1, 0, 8))


def test_missing_pattern_is_a_clear_error(tmp_path):
    missing = str(tmp_path / "nothing-*.tfrecord")
    with pytest.raises(FileNotFoundError, match="nothing-"):
        dataset(missing)
    with pytest.raises(FileNotFoundError, match="nothing-"):
        list_input_files(f"{ORIGINAL},{missing}")  # one typo among good patterns
    assert list_input_files(f"{ORIGINAL}, {ORIGINAL}") == [str(ORIGINAL)]


def test_malformed_record_error_names_file_record_and_feature(tmp_path):
    good = [r.numpy() for r in tf.data.TFRecordDataset(str(ORIGINAL)).take(3)]
    bad = tf.train.Example.FromString(good[0])
    del bad.features.feature["input_ids"].int64_list.value[100:]
    path = tmp_path / "bad.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in good + [bad.SerializeToString()]:
            writer.write(record)
    with pytest.raises(
        tf.errors.InvalidArgumentError, match=r"bad\.tfrecord \(record 3\).*input_ids"
    ):
        list(dataset(str(path), batch_size=2))

    other_length = tmp_path / "seq64.tfrecord"
    other_length.write_bytes(path.read_bytes())
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"seq64\.tfrecord \(record 0\)"):
        next(iter(pretraining_dataset(str(other_length), 64, PRED, 2, is_training=False)))
