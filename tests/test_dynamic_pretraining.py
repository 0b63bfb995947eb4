"""Pretraining on unmasked records, masked as tf.data reads them: detection, features, seeds,
resume, and a run end to end."""

import pathlib
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from albert_tf import AlbertConfig, records
from albert_tf.training import pretraining
from albert_tf.training.distribution import build_strategy
from albert_tf.training.input_pipeline import (
    DynamicMasking,
    detect_masking,
    pretraining_dataset,
    pretraining_dataset_fn,
)
from albert_tf.training.pretraining import run_pretraining
from albert_tf.training.pretraining_options import PretrainingOptions, SettingsError
from tests.model_configs import SAMPLE_VOCAB_TINY

ROOT = pathlib.Path(__file__).resolve().parents[1]
STATIC = ROOT / "tests/fixtures/original_data/orig_small_seq128.tfrecord"
SEQ, PRED = 128, 20
MASKING = DynamicMasking(vocab_size=SAMPLE_VOCAB_TINY["vocab_size"])
MASK_ID = MASKING.mask_id


def unmask(payload: bytes) -> dict[str, list[int]]:
    """The unmasked features of a masked record: the labels put back at the masked positions."""
    features = records.decode_example(payload)
    ids = list(features["input_ids"])
    for position, label, weight in zip(
        features["masked_lm_positions"], features["masked_lm_ids"], features["masked_lm_weights"]
    ):
        if weight > 0:
            ids[position] = label
    return {**{n: features[n] for n in records.UNMASKED_FEATURE_NAMES}, "input_ids": ids}


def write_unmasked(path, payloads) -> str:
    with open(path, "wb") as f:
        for payload in payloads:
            f.write(records.frame_record(records.encode_example(unmask(payload))))
    return str(path)


@pytest.fixture(scope="module")
def payloads():
    return list(records.read_tfrecords(str(STATIC)))


@pytest.fixture(scope="module")
def unmasked(tmp_path_factory, payloads):
    """All 1836 fixture records, unmasked."""
    return write_unmasked(tmp_path_factory.mktemp("unmasked") / "unmasked.tfrecord", payloads)


@pytest.fixture(scope="module")
def small(tmp_path_factory, payloads):
    """The first 64 records, unmasked: a few batches make an epoch."""
    return write_unmasked(tmp_path_factory.mktemp("small") / "small.tfrecord", payloads[:64])


def dynamic(path, batch_size=32, is_training=False, **kwargs):
    return pretraining_dataset(
        path, SEQ, PRED, batch_size, is_training, dynamic_masking=MASKING, **kwargs
    )


def masks(batches):
    return [(b["input_ids"].numpy(), b["masked_lm_positions"].numpy()) for b in batches]


def assert_same_masks(a, b):
    for (ids_a, positions_a), (ids_b, positions_b) in zip(masks(a), masks(b), strict=True):
        np.testing.assert_array_equal(ids_a, ids_b)
        np.testing.assert_array_equal(positions_a, positions_b)


def different_rows(a, b) -> float:
    """Share of examples whose masked positions differ between two lists of batches."""
    rows = [
        not np.array_equal(x, y)
        for (_, pa), (_, pb) in zip(masks(a), masks(b), strict=True)
        for x, y in zip(pa, pb)
    ]
    return sum(rows) / len(rows)


def test_auto_detects_and_dynamic_batches_are_what_the_model_gets(unmasked, payloads):
    assert detect_masking([str(STATIC)]) == "static"
    assert detect_masking([unmasked]) == "dynamic"
    static = pretraining_dataset(str(STATIC), SEQ, PRED, 32, is_training=False)  # auto
    masked = dynamic(unmasked)  # auto
    assert masked.element_spec == static.element_spec  # shapes, dtypes
    assert list(masked.element_spec) == list(static.element_spec)  # key order
    with pytest.raises(ValueError, match="unmasked.tfrecord.*DynamicMasking"):
        pretraining_dataset(unmasked, SEQ, PRED, 32, is_training=False)

    original = np.array([unmask(p)["input_ids"] for p in payloads[:64]])
    replaced = {"mask": 0, "kept": 0, "random": 0}
    for index, (batch, expected) in enumerate(zip(masked.take(2), static.take(2))):
        for name in ("input_mask", "segment_ids", "token_boundary", "next_sentence_labels"):
            np.testing.assert_array_equal(batch[name], expected[name], err_msg=name)
        rows = original[32 * index : 32 * (index + 1)]
        ids, positions = batch["input_ids"].numpy(), batch["masked_lm_positions"].numpy()
        labels, weights = batch["masked_lm_ids"].numpy(), batch["masked_lm_weights"].numpy()
        for row, original_ids in enumerate(rows):
            count = int(weights[row].sum())
            assert 0 < count <= PRED and not weights[row, count:].any()
            chosen = positions[row, :count]
            assert (np.diff(chosen) > 0).all() and not positions[row, count:].any()
            np.testing.assert_array_equal(labels[row, :count], original_ids[chosen])
            keep = np.ones(SEQ, bool)
            keep[chosen] = False
            np.testing.assert_array_equal(ids[row, keep], original_ids[keep])
            new = ids[row, chosen]
            replaced["mask"] += int((new == MASK_ID).sum())
            replaced["kept"] += int((new == original_ids[chosen]).sum())
            replaced["random"] += int(((new != MASK_ID) & (new != original_ids[chosen])).sum())
    total = sum(replaced.values())
    assert 0.7 < replaced["mask"] / total < 0.9 and replaced["random"] > 0  # 80/10/10


def test_same_seed_same_masks_new_masks_each_epoch_and_pipeline(small, tmp_path):
    first = list(dynamic(small, is_training=True, seed=3).take(4))
    assert_same_masks(first, list(dynamic(small, is_training=True, seed=3).take(4)))
    assert different_rows(first, list(dynamic(small, is_training=True, seed=4).take(4))) > 0.9

    # Evaluation order, repeated: batches 2 and 3 hold batches 0 and 1's records again.
    epochs = list(dynamic(small, repeat=True).take(4))
    for name in ("input_mask", "segment_ids", "next_sentence_labels"):
        np.testing.assert_array_equal(epochs[0][name], epochs[2][name])
    assert different_rows(epochs[:2], epochs[2:]) > 0.9
    assert_same_masks(epochs, list(dynamic(small, repeat=True).take(4)))  # fixed eval seed

    # Two pipelines reading identical files (one each): same records, their own masks.
    twin = tmp_path / "twin.tfrecord"
    twin.write_bytes(pathlib.Path(small).read_bytes())
    per_pipeline = [
        list(
            dynamic(
                [small, str(twin)],
                input_context=tf.distribute.InputContext(2, pipeline_id, 2),
                seed=3,
            )
        )
        for pipeline_id in (0, 1)
    ]
    np.testing.assert_array_equal(
        per_pipeline[0][0]["input_mask"], per_pipeline[1][0]["input_mask"]
    )
    assert different_rows(*per_pipeline) > 0.9


@pytest.mark.parametrize("replicas", [1, 2])
def test_resumed_dataset_continues_the_masks(small, replicas):
    # The eval order repeats the same records each epoch, so the masks of step k on can be
    # compared record for record: 64 records are 4 steps of 16.
    def batches(start_step, steps):
        dataset_fn = pretraining_dataset_fn(
            small,
            SEQ,
            PRED,
            global_batch_size=16,
            is_training=False,
            repeat=True,
            start_step=start_step,
            dynamic_masking=MASKING,
        )
        dataset = dataset_fn(tf.distribute.InputContext(1, 0, replicas))
        return list(dataset.take(steps * replicas))  # a batch per replica and step

    uninterrupted = batches(0, 8)
    resumed = batches(4, 4)
    assert_same_masks(resumed, uninterrupted[4 * replicas :])
    assert different_rows(resumed, uninterrupted[: 4 * replicas]) > 0.9  # not the first masks


def options(tmp_path, input_file, **overrides):
    values = dict(
        input_file=str(input_file),
        output_dir=str(tmp_path / "run"),
        max_seq_length=SEQ,
        train_batch_size=16,
        eval_batch_size=16,
        learning_rate=0.01,
        num_train_steps=4,
        num_warmup_steps=1,
        save_checkpoints_steps=2,
        log_every_steps=1,
        max_eval_steps=2,
        gradient_accumulation_steps=2,
        seed=5,
    )
    return PretrainingOptions(**{**values, **overrides})


def test_run_trains_on_unmasked_records_and_resumes_the_masks(tmp_path, unmasked, monkeypatch):
    starts = []

    def recording_fn(*args, **kwargs):
        starts.append((kwargs["masking"], kwargs["start_step"]))
        return pretraining_dataset_fn(*args, **kwargs)

    monkeypatch.setattr(pretraining, "pretraining_dataset_fn", recording_fn)
    config, strategy = AlbertConfig(**SAMPLE_VOCAB_TINY), build_strategy("one_device")
    first = run_pretraining(options(tmp_path, unmasked), config, strategy)
    assert first["global_step"] == 4
    resumed = run_pretraining(
        options(tmp_path, unmasked, num_train_steps=6, do_eval=True), config, strategy
    )
    assert resumed["resumed_from"].endswith("ckpt-4") and resumed["global_step"] == 6
    # 4 updates of 2 micro-batches each were taken before the resume.
    assert starts == [("dynamic", 0), ("dynamic", 8)]
    history = first["train_history"] + resumed["train_history"]
    assert [h["step"] for h in history] == [1, 2, 3, 4, 5, 6]
    assert all(np.isfinite(h["loss"]) and h["loss"] > 0 for h in history)
    assert resumed["eval"]["masked_lm_loss"] > 0 and 0 <= resumed["eval"]["masked_lm_accuracy"] <= 1


def test_masking_flag_must_fit_the_records(tmp_path, unmasked):
    config, strategy = AlbertConfig(**SAMPLE_VOCAB_TINY), build_strategy("one_device")
    with pytest.raises(SettingsError, match=r"--masking=dynamic, but .* are masked"):
        run_pretraining(options(tmp_path, STATIC, masking="dynamic"), config, strategy)
    with pytest.raises(SettingsError, match=r"orig_small_seq128.tfrecord holds masked records"):
        run_pretraining(options(tmp_path, f"{unmasked},{STATIC}"), config, strategy)
    with pytest.raises(SettingsError, match="--ngram must be >= 1"):
        run_pretraining(options(tmp_path, unmasked, ngram=0), config, strategy)


def test_masking_flag_speaks_for_the_training_records_only(tmp_path, unmasked):
    # Training on unmasked records, scored on held-out records with fixed masks.
    config, strategy = AlbertConfig(**SAMPLE_VOCAB_TINY), build_strategy("one_device")
    run = options(tmp_path, unmasked, masking="dynamic", do_eval=True, eval_input_file=str(STATIC))
    result = run_pretraining(run, config, strategy)
    assert result["global_step"] == 4
    assert 0 <= result["eval"]["masked_lm_accuracy"] <= 1 and result["eval"]["masked_lm_loss"] > 0


@pytest.mark.e2e
def test_cli_masking_flags_reach_the_run(tmp_path, small):
    config = tmp_path / "albert_config.json"
    AlbertConfig(**SAMPLE_VOCAB_TINY).to_json_file(config)
    flags = dict(
        input_file=small,
        output_dir=tmp_path / "run",
        albert_config_file=config,
        max_seq_length=SEQ,
        masking="static",
        masked_lm_prob=0.2,
        ngram=2,
    )
    result = subprocess.run(
        [sys.executable, str(ROOT / "pipelines/pretrain.py")]
        + [f"--{k}={v}" for k, v in flags.items()]
        + ["--nofavor_shorter_ngram", "--nodo_whole_word_mask"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1, result.stderr[-3000:]
    assert "SettingsError: --masking=static, but the records of" in result.stderr
    assert "Traceback" not in result.stderr
