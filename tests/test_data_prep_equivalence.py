"""Our output against the original's `orig_small_seq128.tfrecord`: exact schema, matching statistics.

The original file is one draw of a random process (its masking was not even seeded), so statistics are
compared, not bytes. Statistics that need the n-gram spans or the [MASK]/kept/random split are inferred
from the records in the same way for both files (`data_prep.stats.record_statistics`).

The SOP label-1 share varies by about 1.5 points (one standard deviation) from seed to seed on this
corpus, for a literal re-implementation of the original algorithm and for ours alike (60 seeds each:
mean 0.550 vs 0.551; instances 1801 vs 1808), while the original file sits at 0.575, 1.5 to 1.7
deviations above. One seed of ours can miss it by more than the 4-point tolerance by chance alone, so
the test compares the original with our expectation, the mean over ten seeds starting at the fixture's
12345, and checks the other statistics seed by seed as well.
"""

import pathlib

import numpy as np
import pytest
import tensorflow as tf

from albert_tf import records
from data_prep import instances, pipeline, stats

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
GOLDEN = FIXTURES / "original_data" / "orig_small_seq128.tfrecord"
CORPUS = FIXTURES / "original_data" / "corpus_small.txt"
SPM = FIXTURES / "albert_spm" / "30k-clean.model"
SEEDS = range(12345, 12355)


def _fixture_flags(tmp_path, seed):
    # The fixture's flags: --max_seq_length=128 --max_predictions_per_seq=20 --dupe_factor=2, defaults otherwise.
    return pipeline.DataPrepConfig(
        input_file=str(CORPUS),
        output_file=str(tmp_path / f"seed{seed}.tfrecord"),
        spm_model_file=str(SPM),
        random_seed=seed,
        dupe_factor=2,
        pair=instances.PairConfig(max_seq_length=128),
        masking=instances.MaskingConfig(max_predictions_per_seq=20),
        num_workers=1,
    )


def _decoded(path):
    return [records.decode_example(r) for r in records.read_tfrecords(str(path))]


@pytest.fixture(scope="module")
def ours(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("equivalence")
    runs = []
    for seed in SEEDS:
        summary = pipeline.run(_fixture_flags(tmp_path, seed))
        runs.append((summary, _decoded(tmp_path / f"seed{seed}.tfrecord")))
    return runs


@pytest.fixture(scope="module")
def golden():
    return _decoded(GOLDEN)


def test_statistics_match_the_original(ours, golden):
    theirs = stats.record_statistics(golden)
    per_seed = [stats.record_statistics(decoded) for _, decoded in ours]

    def mean(key, sub=None):
        return float(np.mean([s[key][sub] if sub else s[key] for s in per_seed]))

    assert theirs["instances"] == 1836
    assert abs(mean("instances") / theirs["instances"] - 1) <= 0.06
    assert abs(mean("sop_label_1_share") - theirs["sop_label_1_share"]) <= 0.04
    assert abs(mean("mean_real_length") / theirs["mean_real_length"] - 1) <= 0.04
    assert abs(mean("predictions_per_instance") / theirs["predictions_per_instance"] - 1) <= 0.04
    for kind in ("mask", "kept", "random"):
        assert abs(mean("replacement_shares", kind) - theirs["replacement_shares"][kind]) <= 0.02, (
            kind
        )
    for run in ("1", "2", "3", "4+"):
        assert abs(mean("run_shares", run) - theirs["run_shares"][run]) <= 0.03, run

    # Every single seed is also close to the original: the original file is itself one draw, so
    # one seed of ours differs from it with sqrt(2) times the seed-to-seed spread; allowed is the
    # larger of the fixed tolerance and three such deviations (the spread measured on our seeds).
    def per_seed_values(key, sub=None):
        return np.array([s[key][sub] if sub else s[key] for s in per_seed])

    for key, sub, tolerance, relative in (
        ("instances", None, 0.06, True),
        ("mean_real_length", None, 0.04, True),
        ("predictions_per_instance", None, 0.04, True),
        ("replacement_shares", "mask", 0.02, False),
    ):
        values, reference = per_seed_values(key, sub), theirs[key][sub] if sub else theirs[key]
        scale = reference if relative else 1.0
        allowed = max(tolerance, 3 * np.sqrt(2) * values.std(ddof=1) / scale)
        assert np.all(np.abs(values - reference) / scale <= allowed), (key, values, reference)


def test_summary_agrees_with_what_the_records_show(ours):
    for summary, decoded in ours:
        inferred = stats.record_statistics(decoded)
        assert summary["instances"] == inferred["instances"] == len(decoded)
        assert summary["sop_label_1_share"] == pytest.approx(inferred["sop_label_1_share"])
        assert summary["mean_real_length"] == pytest.approx(inferred["mean_real_length"])
        assert summary["predictions_per_instance"] == pytest.approx(
            inferred["predictions_per_instance"]
        )
        for kind in (
            "mask",
            "kept",
            "random",
        ):  # only random picks of [MASK] or the label itself differ
            assert summary["replacement_shares"][kind] == pytest.approx(
                inferred["replacement_shares"][kind], abs=2e-3
            )


def _schema(decoded_records):
    shapes = set()
    for features in decoded_records:
        shapes.add(
            tuple(
                (name, len(values), type(values[0]).__name__) for name, values in features.items()
            )
        )
    return shapes


def test_schema_is_exactly_the_originals(ours, golden):
    expected = {
        tuple(
            (
                name,
                1
                if name == "next_sentence_labels"
                else 20
                if name.startswith("masked_lm")
                else 128,
                "float" if name == "masked_lm_weights" else "int",
            )
            for name in records.WIRE_ORDER
        )
    }
    assert _schema(golden) == expected
    for _, decoded in ours:
        assert _schema(decoded) == expected
    spec = {
        name: tf.io.FixedLenFeature([128], tf.int64)
        for name in ("input_ids", "input_mask", "segment_ids", "token_boundary")
    }
    spec.update(
        {
            name: tf.io.FixedLenFeature([20], tf.int64)
            for name in ("masked_lm_positions", "masked_lm_ids")
        }
    )
    spec["masked_lm_weights"] = tf.io.FixedLenFeature([20], tf.float32)
    spec["next_sentence_labels"] = tf.io.FixedLenFeature([1], tf.int64)
    ours_path = pathlib.Path(ours[0][0]["outputs"][0]["file"])
    for path in (GOLDEN, ours_path):
        batch = next(
            iter(
                tf.data.TFRecordDataset(str(path))
                .batch(64)
                .map(lambda x: tf.io.parse_example(x, spec))
            )
        )
        mask = batch["input_mask"].numpy()
        assert (
            batch["input_ids"].shape == (64, 128) and batch["masked_lm_weights"].dtype == tf.float32
        )
        # Real tokens first, then padding; [CLS] first, [SEP] closing each segment.
        assert (np.diff(mask, axis=1) <= 0).all()
        ids, segments = batch["input_ids"].numpy(), batch["segment_ids"].numpy()
        for row_ids, row_segments, length in zip(ids, segments, mask.sum(axis=1)):
            num_a = int((row_segments[:length] == 0).sum())
            assert row_ids[0] == 2 and row_ids[num_a - 1] == 3 and row_ids[length - 1] == 3
            assert list(row_segments[:length]) == [0] * num_a + [1] * (length - num_a)
            assert not row_segments[length:].any() and not row_ids[length:].any()
