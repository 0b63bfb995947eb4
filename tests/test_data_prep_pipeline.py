"""The whole job in-process: determinism across worker counts, shards, summary, bad input, atomic output."""

import dataclasses
import gzip
import json
import os
import pathlib
import random
import signal
import subprocess
import sys
import time

import pytest

from albert_tf import records
from data_prep import corpus, instances, pipeline, units, writer

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
SPM = str(FIXTURES / "albert_spm" / "30k-clean.model")
CORPUS = FIXTURES / "original_data" / "corpus_small.txt"
REPO = pathlib.Path(__file__).resolve().parents[1]


def _config(tmp_path, inputs, **overrides):
    base = dict(
        input_file=str(inputs),
        output_file=str(tmp_path / "out" / "train.tfrecord"),
        spm_model_file=SPM,
        dupe_factor=2,
        pair=instances.PairConfig(max_seq_length=128),
        masking=instances.MaskingConfig(max_predictions_per_seq=20),
        num_workers=1,
    )
    base.update(overrides)
    return pipeline.DataPrepConfig(**base)


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory):
    # The first third of corpus_small (about 70 documents), to keep the runs short.
    path = tmp_path_factory.mktemp("corpus") / "small.txt"
    text = CORPUS.read_text("utf-8")
    path.write_text("\n\n".join(text.split("\n\n")[:70]) + "\n", "utf-8")
    return path


def _files(tmp_path):
    return sorted(p.name for p in (tmp_path / "out").iterdir())


def test_shards_are_identical_for_any_worker_count(tmp_path, small_corpus):
    outputs = {}
    for workers in (1, 2):
        config = _config(
            tmp_path / f"w{workers}",
            small_corpus,
            num_workers=workers,
            num_output_shards=3,
            batch_chars=16 * 1024,
            shuffle_buffer_size=300,
        )
        summary = pipeline.run(config)
        shards = sorted((tmp_path / f"w{workers}" / "out").glob("train.tfrecord-*"))
        assert [p.name for p in shards] == [f"train.tfrecord-0000{i}-of-00003" for i in range(3)]
        outputs[workers] = [p.read_bytes() for p in shards]
        counts = [len(list(records.read_tfrecords(str(p)))) for p in shards]
        assert (
            counts == [o["instances"] for o in summary["outputs"]]
            and sum(counts) == summary["instances"]
        )
        assert max(counts) - min(counts) <= 1  # round-robin, as the original's writers
        assert (
            len(list((tmp_path / f"w{workers}" / "out").iterdir())) == 4
        )  # 3 shards + summary, no spills
    assert outputs[1] == outputs[2]
    other_seed = _config(
        tmp_path / "seed",
        small_corpus,
        random_seed=1,
        num_output_shards=3,
        batch_chars=16 * 1024,
        shuffle_buffer_size=300,
    )
    pipeline.run(other_seed)
    assert (
        sorted((tmp_path / "seed" / "out").glob("train.tfrecord-*"))[0].read_bytes()
        != outputs[1][0]
    )


def test_summary_describes_the_run(tmp_path, small_corpus):
    summary = pipeline.run(_config(tmp_path, small_corpus))
    on_disk = json.loads((tmp_path / "out" / "train.summary.json").read_text())
    assert on_disk["instances"] == summary["instances"] > 500
    assert _files(tmp_path) == ["train.summary.json", "train.tfrecord"]
    assert summary["documents"] == 70 and summary["sentences"] > 1000 and summary["tokens"] > 20000
    assert summary["sop_labels"]["0"] + summary["sop_labels"]["1"] == summary["instances"]
    assert 0.45 < summary["sop_label_1_share"] < 0.65
    assert (
        90 < summary["mean_real_length"] <= 128 and 14 < summary["predictions_per_instance"] <= 20
    )
    shares = summary["replacement_shares"]
    assert abs(shares["mask"] - 0.8) < 0.02 and abs(shares["kept"] - 0.1) < 0.02
    assert set(summary["ngram_span_histogram"]) == {"1", "2", "3"}
    assert summary["skipped"] == [] and summary["settings"]["dupe_factor"] == 2


def test_leak_switch(tmp_path, small_corpus):
    leaky = pipeline.run(_config(tmp_path / "a", small_corpus))
    fixed = pipeline.run(
        _config(
            tmp_path / "b",
            small_corpus,
            pair=instances.PairConfig(max_seq_length=128, single_sentence_random_doc=False),
        )
    )
    assert leaky["random_document_b"] > 20
    assert fixed["random_document_b"] == 0
    assert (
        abs(fixed["sop_label_1_share"] - 0.5) < 0.04
    )  # the leak's extra label-1 instances are gone


def _write_bad_inputs(directory: pathlib.Path) -> None:
    directory.mkdir()
    good = CORPUS.read_text("utf-8").split("\n\n")
    (directory / "a_good.txt").write_text("\n\n".join(good[:20]) + "\n", "utf-8")
    (directory / "b_bad.txt").write_bytes(
        b"A fine sentence here.\nBroken \xc3\x28 bytes.\nAnother fine one.\nNUL \x00 inside.\n"
        + b"y" * (2 * 1024 * 1024)
        + b"\nLast fine sentence.\n"
    )
    (directory / "c_empty.txt").write_bytes(b"")
    (directory / "d_single.txt").write_text(
        "Only one sentence in this document.\n\nAnd one here too.\n\nThree.\n", "utf-8"
    )
    with gzip.open(directory / "e_zipped.txt.gz", "wb") as f:
        f.write("\n\n".join(good[20:30]).encode())


def test_bad_inputs_are_counted_not_fatal(tmp_path, caplog):
    _write_bad_inputs(tmp_path / "in")
    summary = pipeline.run(_config(tmp_path, f"{tmp_path}/in/*", num_workers=2))
    skipped = {(pathlib.Path(e["file"]).name, e["reason"]): e for e in summary["skipped"]}
    assert skipped[("b_bad.txt", "invalid_utf8")]["first_lines"] == [2]
    assert skipped[("b_bad.txt", "nul_byte")]["first_lines"] == [4]
    assert skipped[("b_bad.txt", "line_too_long")]["first_lines"] == [5]
    assert skipped[("c_empty.txt", "empty_file")]["count"] == 1
    assert summary["skipped_lines"] == 3
    assert summary["single_sentence_documents"] >= 3
    assert summary["documents"] == 20 + 1 + 3 + 10
    assert "b_bad.txt:2: skipped (invalid_utf8)" in caplog.text
    decoded = [
        records.decode_example(r)
        for r in records.read_tfrecords(str(tmp_path / "out" / "train.tfrecord"))
    ]
    assert len(decoded) == summary["instances"] > 100


def test_missing_input_fails_before_touching_outputs(tmp_path, small_corpus):
    out = tmp_path / "out"
    out.mkdir()
    (out / "train.tfrecord").write_bytes(b"previous run")
    with pytest.raises(corpus.InputError, match="missing.txt"):
        pipeline.run(_config(tmp_path, f"{small_corpus},{tmp_path}/missing.txt"))
    assert (out / "train.tfrecord").read_bytes() == b"previous run"
    assert _files(tmp_path) == ["train.tfrecord"]


def test_unwritable_output_is_named(tmp_path, small_corpus):
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("x")
    with pytest.raises(writer.OutputError, match="not_a_dir"):
        pipeline.run(_config(tmp_path, small_corpus, output_file=str(blocker / "train.tfrecord")))
    if os.geteuid() != 0:  # root writes anywhere, so a read-only directory only stops other users
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(writer.OutputError, match="locked"):
            pipeline.run(
                _config(tmp_path, small_corpus, output_file=str(locked / "train.tfrecord"))
            )


@pytest.mark.parametrize("workers", [1, 2])
def test_failure_mid_run_keeps_previous_outputs_and_leaves_no_partial_file(
    tmp_path, small_corpus, monkeypatch, workers
):
    out = tmp_path / "out"
    out.mkdir()
    (out / "train.tfrecord").write_bytes(b"previous run")
    original = units.PoolProcessor.instance_records
    calls = []

    def fail_on_second_batch(self, pool, stats):
        calls.append(pool.key)
        if len(calls) == 2:
            raise RuntimeError("disk on fire")
        return original(self, pool, stats)

    monkeypatch.setattr(units.PoolProcessor, "instance_records", fail_on_second_batch)
    with pytest.raises(RuntimeError, match="disk on fire"):
        pipeline.run(
            _config(
                tmp_path,
                small_corpus,
                batch_chars=8 * 1024,
                shuffle_buffer_size=0,
                num_workers=workers,
            )
        )
    assert (out / "train.tfrecord").read_bytes() == b"previous run"
    assert _files(tmp_path) == ["train.tfrecord"]


def test_killed_run_leaves_only_a_hidden_incomplete_file(tmp_path, small_corpus):
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        "-m",
        "pipelines.create_pretraining_data",
        f"--input_file={small_corpus}",
        f"--output_file={out}/train.tfrecord",
        f"--spm_model_file={SPM}",
        "--max_seq_length=128",
        "--dupe_factor=400",
        "--num_workers=1",
    ]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not (out.exists() and any(out.iterdir())):
            assert proc.poll() is None and time.monotonic() < deadline, "job ended before writing"
            time.sleep(0.05)
        time.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    names = os.listdir(out)
    assert len(names) == 1 and names[0].startswith(".train.tfrecord.incomplete-"), names


def test_shuffle_buffer_is_bounded_and_a_permutation():
    buffer = writer.ShuffleBuffer(10, random.Random(0))
    out = [e for e in (buffer.push(bytes([i])) for i in range(100)) if e is not None]
    assert len(out) == 90 and len(buffer._items) == 10
    out += list(buffer.drain())
    assert sorted(out) == [bytes([i]) for i in range(100)] and out != sorted(out)
    passthrough = writer.ShuffleBuffer(0, random.Random(0))
    assert [passthrough.push(b"a"), passthrough.push(b"b")] == [b"a", b"b"]


def test_output_names():
    assert writer.shard_paths("a.tfrecord", 1) == ["a.tfrecord"]
    assert writer.shard_paths("a.tfrecord,b.tfrecord", 1) == ["a.tfrecord", "b.tfrecord"]
    assert writer.shard_paths("d/a", 2) == ["d/a-00000-of-00002", "d/a-00001-of-00002"]
    with pytest.raises(ValueError):
        writer.shard_paths("a,b", 2)
    config = pipeline.DataPrepConfig(
        input_file="x", output_file="d/train.tfrecord,e.tfrecord", spm_model_file="m"
    )
    assert config.summary_path() == "d/train.summary.json"
    assert dataclasses.replace(config, output_file="d/out").summary_path() == "d/out.summary.json"
    with pytest.raises(ValueError, match="max_seq_length"):
        dataclasses.replace(config, pair=instances.PairConfig(max_seq_length=4))
