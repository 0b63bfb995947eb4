"""`masking_mode="dynamic"` (`--masking=dynamic`): the static job's SOP instances, written once,
unmasked, in the `records.UNMASKED_FEATURE_NAMES` schema, for the trainer to mask."""

import json
import pathlib
import random
import subprocess
import sys

import pytest
import tensorflow as tf

from albert_tf import records
from albert_tf.text.tokenization import AlbertTokenizer
from data_prep import corpus, instances, pipeline
from data_prep.stats import MASKING_RECORD_KEYS, MASKING_SUMMARY_KEYS, record_statistics

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
SPM = str(FIXTURES / "albert_spm" / "30k-clean.model")
CORPUS = FIXTURES / "original_data" / "corpus_small.txt"
REPO = pathlib.Path(__file__).resolve().parents[1]
SEQ = 128


def _config(out: pathlib.Path, inputs, **overrides):
    base = dict(
        input_file=str(inputs),
        output_file=str(out / "train.tfrecord"),
        spm_model_file=SPM,
        dupe_factor=1,
        pair=instances.PairConfig(max_seq_length=SEQ),
        masking=instances.MaskingConfig(max_predictions_per_seq=20),
        masking_mode="dynamic",
        num_workers=1,
    )
    base.update(overrides)
    return pipeline.DataPrepConfig(**base)


def _read(path) -> list[bytes]:
    return list(records.read_tfrecords(str(path)))


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipelines.create_pretraining_data", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory):
    # The first third of corpus_small (about 70 documents), as the pipeline tests use.
    path = tmp_path_factory.mktemp("corpus") / "small.txt"
    text = CORPUS.read_text("utf-8")
    path.write_text("\n\n".join(text.split("\n\n")[:70]) + "\n", "utf-8")
    return path


@pytest.fixture(scope="module")
def tokenizer():
    return AlbertTokenizer(SPM)


@pytest.fixture(scope="module")
def dynamic_run(tmp_path_factory, small_corpus):
    """A dynamic run with several pools and shards; returns (summary, raw records in shard order)."""
    out = tmp_path_factory.mktemp("dynamic")
    config = _config(out, small_corpus, num_output_shards=2, batch_chars=16 * 1024)
    summary = pipeline.run(config)
    shards = sorted(out.glob("train.tfrecord-*"))
    return summary, [_read(p) for p in shards]


def test_records_have_exactly_the_unmasked_schema(dynamic_run):
    summary, shards = dynamic_run
    raw = [r for shard in shards for r in shard]
    assert len(raw) == summary["instances"] > 300
    lengths = records.feature_lengths(SEQ, names=records.UNMASKED_FEATURE_NAMES)
    spec = {name: tf.io.FixedLenFeature([n], tf.int64) for name, n in lengths.items()}
    for data in raw[:50]:
        assert set(records.decode_example(data)) == set(records.UNMASKED_FEATURE_NAMES)
        parsed = tf.io.parse_single_example(data, spec)
        decoded = records.decode_example(data)
        for name in lengths:
            assert parsed[name].numpy().tolist() == decoded[name]


def test_instances_are_packed_unmasked_with_the_start_piece_boundary(dynamic_run, tokenizer):
    _, shards = dynamic_run
    tok = tokenizer
    pieces = [tok.sp_model.id_to_piece(i) for i in range(tok.vocab_size)]
    word_start = instances.start_piece_table(pieces)
    text_ids = {i for s in tok.encode_batch(CORPUS.read_text("utf-8").splitlines()) for i in s if s}
    assert tok.mask_id not in text_ids  # the text holds no [MASK], so no record may either
    for data in (r for shard in shards for r in shard):
        f = records.decode_example(data)
        length = sum(f["input_mask"])
        ids = f["input_ids"]
        assert f["input_mask"] == [1] * length + [0] * (SEQ - length)
        assert ids[length:] == [0] * (SEQ - length) and f["token_boundary"][length:] == ids[length:]
        num_a = f["segment_ids"][:length].count(0)
        assert f["segment_ids"] == [0] * num_a + [1] * (length - num_a) + [0] * (SEQ - length)
        assert ids[0] == tok.cls_id and ids[num_a - 1] == tok.sep_id == ids[length - 1]
        assert 3 <= num_a < length and ids.count(tok.cls_id) == 1 and ids.count(tok.sep_id) == 2
        assert tok.mask_id not in ids and set(ids[1 : length - 1]) - {tok.sep_id} <= text_ids
        expected = [
            1 if i in (tok.cls_id, tok.sep_id) else int(word_start[i]) for i in ids[:length]
        ]
        assert f["token_boundary"][:length] == expected
        assert f["next_sentence_labels"] in ([0], [1])


def test_dynamic_instances_are_the_static_ones_before_masking(tmp_path, small_corpus):
    # Same seed and pairs, same number of records: the shuffle puts them in the same order, so
    # undoing each static record's masks (its labels at its positions) gives the dynamic record.
    dynamic = pipeline.run(_config(tmp_path / "d", small_corpus))
    static = pipeline.run(_config(tmp_path / "s", small_corpus, masking_mode="static"))
    assert dynamic["instances"] == static["instances"]
    pairs = zip(_read(tmp_path / "d" / "train.tfrecord"), _read(tmp_path / "s" / "train.tfrecord"))
    restored = 0
    for d, s in pairs:
        d, s = records.decode_example(d), records.decode_example(s)
        ids = list(s["input_ids"])
        for position, label, weight in zip(
            s["masked_lm_positions"], s["masked_lm_ids"], s["masked_lm_weights"]
        ):
            if weight:
                ids[position] = label
                restored += 1
        assert d == {name: ids if name == "input_ids" else s[name] for name in d}
    assert restored > 10 * static["instances"]
    for key in ("documents", "sentences", "tokens", "instances", "sop_labels", "mean_real_length"):
        assert dynamic[key] == static[key]


def test_output_is_identical_for_any_worker_count(tmp_path, small_corpus, dynamic_run):
    _, one_worker = dynamic_run
    config = _config(
        tmp_path, small_corpus, num_output_shards=2, batch_chars=16 * 1024, num_workers=2
    )
    pipeline.run(config)
    assert [_read(p) for p in sorted(tmp_path.glob("train.tfrecord-*"))] == one_worker


def test_summary_records_the_mode_and_instance_statistics_only(dynamic_run):
    summary, shards = dynamic_run
    assert summary["masking"] == {
        "mode": "dynamic",
        "features": list(records.UNMASKED_FEATURE_NAMES),
        "masked_lm_prob": 0.15,
        "max_predictions_per_seq": 20,
        "ngram": 3,
        "favor_shorter_ngram": True,
        "do_whole_word_mask": True,
        "do_permutation": False,
    }
    assert summary["settings"]["masking_mode"] == "dynamic"
    assert all(summary[key] is None for key in MASKING_SUMMARY_KEYS)
    assert summary["documents"] == 70 and summary["tokens"] > 20000
    assert 0.45 < summary["sop_label_1_share"] < 0.65 and 90 < summary["mean_real_length"] <= SEQ
    inferred = record_statistics(records.decode_example(r) for shard in shards for r in shard)
    assert all(inferred[key] is None for key in MASKING_RECORD_KEYS)
    assert inferred["instances"] == summary["instances"]
    assert inferred["sop_label_1_share"] == pytest.approx(summary["sop_label_1_share"])
    assert inferred["mean_real_length"] == pytest.approx(summary["mean_real_length"])


def test_encoder_gives_the_generic_encoders_bytes():
    encoder = records.PretrainingExampleEncoder(
        SEQ, 20, 30000, names=records.UNMASKED_FEATURE_NAMES
    )
    rng = random.Random(0)
    for _ in range(200):
        length = rng.randint(5, SEQ)
        num_a = rng.randint(3, length - 2)
        ids = [rng.randint(0, 29999) for _ in range(length)]
        boundary = [rng.randint(0, 1) for _ in range(length)]
        label = rng.randint(0, 1)
        pad = [0] * (SEQ - length)
        features = {
            "input_ids": ids + pad,
            "input_mask": [1] * length + pad,
            "segment_ids": [0] * num_a + [1] * (length - num_a) + pad,
            "token_boundary": boundary + pad,
            "next_sentence_labels": [label],
        }
        assert encoder.encode(ids, num_a, boundary, (), (), label) == records.encode_example(
            features
        )
    with pytest.raises(ValueError, match="max_seq_length"):
        encoder.encode([5] * (SEQ + 1), 3, [1] * (SEQ + 1), (), (), 0)


def test_cli_dupe_factor_is_one_unless_given(tmp_path, small_corpus):
    common = (f"--input_file={small_corpus}", f"--spm_model_file={SPM}", f"--max_seq_length={SEQ}")
    result = _cli(*common, f"--output_file={tmp_path}/a/train.tfrecord", "--masking=dynamic")
    assert result.returncode == 0, result.stderr
    assert "--dupe_factor=1" in result.stderr and "not used here" in result.stderr
    once = json.loads((tmp_path / "a" / "train.summary.json").read_text())
    assert once["settings"]["dupe_factor"] == 1 and once["masking"]["mode"] == "dynamic"
    result = _cli(
        *common,
        f"--output_file={tmp_path}/b/train.tfrecord",
        "--masking=dynamic",
        "--dupe_factor=2",
        "--masked_lm_prob=0.2",
    )
    assert result.returncode == 0, result.stderr
    twice = json.loads((tmp_path / "b" / "train.summary.json").read_text())
    assert twice["settings"]["dupe_factor"] == 2 and twice["masking"]["masked_lm_prob"] == 0.2
    assert 1.8 < twice["instances"] / once["instances"] < 2.2
    assert _read(tmp_path / "b" / "train.tfrecord") != _read(tmp_path / "a" / "train.tfrecord")
    result = _cli(*common, f"--output_file={tmp_path}/c/train.tfrecord", "--masking=sometimes")
    assert result.returncode != 0 and "masking" in result.stderr


def test_static_stays_the_default(tmp_path, small_corpus):
    config = pipeline.DataPrepConfig(input_file="x", output_file="y", spm_model_file=SPM)
    assert config.masking_mode == "static" and config.dupe_factor == 40
    result = _cli(
        f"--input_file={small_corpus}",
        f"--output_file={tmp_path}/cli/train.tfrecord",
        f"--spm_model_file={SPM}",
        f"--max_seq_length={SEQ}",
        "--dupe_factor=2",
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / "cli" / "train.summary.json").read_text())
    assert summary["masking"]["mode"] == "static" and summary["settings"]["dupe_factor"] == 2
    assert summary["masking"]["features"] == list(records.FEATURE_NAMES)
    assert summary["predictions_per_instance"] > 10
    explicit = _config(tmp_path / "lib", small_corpus, dupe_factor=2, masking_mode="static")
    pipeline.run(explicit)
    assert (tmp_path / "cli" / "train.tfrecord").read_bytes() == (
        tmp_path / "lib" / "train.tfrecord"
    ).read_bytes()


def test_bad_mode_and_bad_input_fail_as_in_static(tmp_path, small_corpus):
    with pytest.raises(ValueError, match="masking_mode"):
        _config(tmp_path, small_corpus, masking_mode="sometimes")
    with pytest.raises(corpus.InputError, match="missing.txt"):
        pipeline.run(_config(tmp_path, f"{small_corpus},{tmp_path}/missing.txt"))
    assert not (tmp_path / "train.tfrecord").exists()


def test_permutation_is_refused_with_dynamic_masking():
    with pytest.raises(ValueError, match="do_permutation is not supported"):
        pipeline.DataPrepConfig(
            "in.txt",
            "out.tfrecord",
            str(SPM),
            masking_mode="dynamic",
            masking=instances.MaskingConfig(do_permutation=True),
        )
