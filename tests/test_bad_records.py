"""Bad input records: one short error naming file, record and problem, or skipped and counted."""

import hashlib
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
import tensorflow as tf

from albert_tf import AlbertConfig, records
from albert_tf.export.data import load_examples
from albert_tf.tasks.glue.processors import MalformedRowError, read_split
from albert_tf.training.distribution import build_strategy
from albert_tf.training.input_pipeline import feature_spec, pretraining_dataset
from albert_tf.training.pretraining import run_pretraining
from albert_tf.training.pretraining_options import PretrainingOptions
from albert_tf.training.record_checks import CorruptRecordError, diagnose
from tests.model_configs import SAMPLE_VOCAB_TINY

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
FIXTURES = REPO_ROOT / "tests" / "fixtures"
ORIGINAL = FIXTURES / "original_data" / "orig_small_seq128.tfrecord"
TINY = SAMPLE_VOCAB_TINY
PAYLOADS = list(records.read_tfrecords(str(ORIGINAL)))  # 1836 records of seq 128
OFFSETS = [sum(16 + len(p) for p in PAYLOADS[:i]) for i in range(len(PAYLOADS))]


def options(tmp_path, input_file, **overrides):
    values = dict(
        input_file=str(input_file),
        output_dir=str(tmp_path / "run"),
        max_seq_length=128,
        max_predictions_per_seq=20,
        train_batch_size=16,
        learning_rate=0.01,
        num_train_steps=2,
        num_warmup_steps=1,
        save_checkpoints_steps=2,
        keep_checkpoint_max=1,
        log_every_steps=2,
        seed=1,
    )
    return PretrainingOptions(**{**values, **overrides})


def flip(path, offset):
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x5A
    path.write_bytes(bytes(data))


def seq64(payload: bytes) -> bytes:
    """The record with its sequence features cut to 64 values (records of another length)."""
    features = records.decode_example(payload)
    for name in ("input_ids", "input_mask", "segment_ids", "token_boundary"):
        features[name] = features[name][:64]
    return records.encode_example(features)


def sha(path) -> str:
    return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()


def test_scan_locates_flipped_and_cut_records_and_resyncs(tmp_path):
    path = tmp_path / "bad.tfrecord"
    shutil.copy(ORIGINAL, path)
    flip(path, OFFSETS[50] + 12 + 100)  # data of record 50
    flip(path, OFFSETS[300] + 3)  # length of record 300: the scan must search for record 301
    path.write_bytes(path.read_bytes()[:-50])  # the last record cut
    with open(path, "rb") as f:
        first = list(records.scan_records(f, str(path)))
    assert (
        len(first) == 51
        and str(first[-1])
        == f"{path}: record 50: bad data CRC: data checksum mismatch (byte offset {OFFSETS[50]})"
    )
    with open(path, "rb") as f:
        items = list(records.scan_records(f, str(path), resync=True))
    bad = [
        (b.index, b.offset, b.problem.split(":")[0])
        for b in items
        if isinstance(b, records.BadRecord)
    ]
    assert bad == [
        (50, OFFSETS[50], "bad data CRC"),
        (300, OFFSETS[300], "bad length CRC"),
        (1835, OFFSETS[1835], "truncated data"),
    ]
    good = [i.data for i in items if isinstance(i, records.Record)]
    assert good == [p for i, p in enumerate(PAYLOADS) if i not in (50, 300, 1835)]
    with pytest.raises(records.RecordError, match=r"record 50: bad data CRC"):
        list(records.read_tfrecords(str(path)))


def test_wrong_seq_length_fails_before_a_model_is_built(tmp_path):
    with pytest.raises(
        CorruptRecordError,
        match=rf"^{ORIGINAL}: record 0: records have seq length "
        r"128 \(input_ids\), --max_seq_length is 64 \(byte offset 0\)$",
    ):
        run_pretraining(
            options(tmp_path, ORIGINAL, max_seq_length=64),
            AlbertConfig(**TINY),
            build_strategy("one_device"),
        )
    # Every file's first record is checked: here the second file is the odd one.
    other = tmp_path / "seq64.tfrecord"
    other.write_bytes(b"".join(records.frame_record(seq64(p)) for p in PAYLOADS[:3]))
    with pytest.raises(
        CorruptRecordError,
        match=rf"^{other}: record 0: records have seq length "
        r"64 \(input_ids\), --max_seq_length is 128 \(byte offset 0\)$",
    ):
        run_pretraining(
            options(tmp_path, f"{ORIGINAL},{other}"),
            AlbertConfig(**TINY),
            build_strategy("one_device"),
        )
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_corrupt_record_mid_run_names_it_and_keeps_the_last_checkpoint(tmp_path):
    path = tmp_path / "train.tfrecord"
    shutil.copy(ORIGINAL, path)
    run_pretraining(options(tmp_path, path), AlbertConfig(**TINY), build_strategy("one_device"))
    checkpoints = tmp_path / "run" / "checkpoints"
    before = {p.name: sha(p) for p in checkpoints.iterdir()}
    assert tf.train.latest_checkpoint(str(checkpoints)).endswith("ckpt-2")
    flip(path, OFFSETS[50] + 12 + 100)  # read within the first batches (shuffle buffer 100)
    expected = (
        rf"^{path}: record 50: bad data CRC: data checksum mismatch \(byte offset "
        rf"{OFFSETS[50]}\); --skip_corrupt_records skips and counts such records$"
    )
    with pytest.raises(CorruptRecordError, match=expected):
        run_pretraining(
            options(tmp_path, path, num_train_steps=8),
            AlbertConfig(**TINY),
            build_strategy("one_device"),
        )
    # Nothing saved from the failed state, nothing removed (keep_checkpoint_max=1 would have).
    assert {p.name: sha(p) for p in checkpoints.iterdir()} == before


def test_a_misfit_record_mid_file_is_named_from_the_parse_error(tmp_path):
    payloads = list(PAYLOADS[:64])
    payloads[40] = seq64(payloads[40])  # CRC-valid, so only parsing the batch finds it
    path = tmp_path / "mixed.tfrecord"
    path.write_bytes(b"".join(records.frame_record(p) for p in payloads))
    named = r"mixed.tfrecord \(record 40\)"  # from the input pipeline's example_names
    with pytest.raises(tf.errors.InvalidArgumentError, match=named) as caught:
        for _ in pretraining_dataset(str(path), 128, 20, 16, is_training=False):
            pass
    offset = sum(16 + len(p) for p in payloads[:40])
    assert str(diagnose(caught.value, [str(path)], feature_spec(128, 20))) == (
        f"{path}: record 40: records have seq length 64 (input_ids), --max_seq_length is 128 "
        f"(byte offset {offset}); --skip_corrupt_records skips and counts such records"
    )


def test_skip_corrupt_records_trains_and_counts_per_file(tmp_path):
    payloads = list(PAYLOADS)
    payloads[200] = seq64(payloads[200])  # CRC-valid but of another length
    path = tmp_path / "train.tfrecord"
    path.write_bytes(b"".join(records.frame_record(p) for p in payloads))
    offsets = [sum(16 + len(p) for p in payloads[:i]) for i in range(len(payloads))]
    flip(path, offsets[50] + 12 + 100)
    flip(path, offsets[100] + 2)
    path.write_bytes(path.read_bytes()[:-50])
    clean = tmp_path / "clean.tfrecord"
    shutil.copy(ORIGINAL, clean)
    original_bytes = sha(path)
    results = run_pretraining(
        options(tmp_path, f"{path},{clean}", skip_corrupt_records=True),
        AlbertConfig(**TINY),
        build_strategy("one_device"),
    )
    assert results["skipped_records"] == {str(path): 4}
    assert results["global_step"] == 2
    assert sha(path) == original_bytes  # the input itself is never modified
    repaired_dir = tmp_path / "run" / "repaired_records"
    (repaired,) = repaired_dir.iterdir()  # only the file with bad records, no temporary left
    assert repaired.name.endswith("-train.tfrecord")
    assert list(records.read_tfrecords(str(repaired))) == [
        p for i, p in enumerate(payloads) if i not in (50, 100, 200, 1835)
    ]


@pytest.mark.e2e
def test_cli_cut_record_is_one_line_without_traceback(tmp_path):
    path = tmp_path / "cut.tfrecord"
    path.write_bytes(ORIGINAL.read_bytes()[:-50])
    config = tmp_path / "albert_config.json"
    AlbertConfig(**TINY).to_json_file(config)
    flags = dict(
        input_file=path,
        output_dir=tmp_path / "run",
        albert_config_file=config,
        max_seq_length=128,
        max_predictions_per_seq=20,
        train_batch_size=16,
        num_train_steps=2,
        num_warmup_steps=1,
        save_checkpoints_steps=2,
        shuffle_buffer=2000,
    )  # the buffer reads the whole file, cut end included
    process = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "pipelines/pretrain.py"),
            *[f"--{k}={v}" for k, v in flags.items()],
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert process.returncode == 1, process.stderr[-3000:]
    assert "Traceback" not in process.stderr
    errors = [line for line in process.stderr.splitlines() if "CorruptRecordError" in line]
    assert len(errors) == 1 and errors[0].endswith(
        f"CorruptRecordError: {path}: record 1835: truncated data: the file ends inside the "
        f"record (byte offset {OFFSETS[1835]}); --skip_corrupt_records skips and counts such "
        f"records"
    )


def test_export_calibration_records_corrupt_cut_or_too_long(tmp_path):
    path = tmp_path / "calibration.tfrecord"
    shutil.copy(ORIGINAL, path)
    flip(path, OFFSETS[5] + 12 + 40)
    with pytest.raises(
        CorruptRecordError,
        match=rf"^{path}: corrupt TFRecord file: record 5: "
        rf"bad data CRC: data checksum mismatch \(byte offset {OFFSETS[5]}\)$",
    ):
        load_examples(str(path), None, 128, 20, 10, 0)
    assert len(load_examples(str(path), None, 128, 20, 5, 0)[0]["input_ids"]) == 5  # before it
    cut = tmp_path / "cut.tfrecord"
    cut.write_bytes(ORIGINAL.read_bytes()[:-50])
    with pytest.raises(CorruptRecordError, match=r"record 1835: truncated data"):
        load_examples(str(cut), None, 128, 20, 5000, 0)
    with pytest.raises(
        ValueError,
        match=rf"^{ORIGINAL}: record 0 input_ids has length 128, "
        r"more than 64",
    ):
        load_examples(str(ORIGINAL), None, 64, 20, 10, 0)


def test_finetune_tsv_with_flipped_bytes_and_a_cut_last_row(tmp_path):
    lines = (FIXTURES / "glue" / "SST-2" / "dev.tsv").read_bytes().splitlines(keepends=True)
    lines[5] = lines[5][:3] + b"\xff\xfe" + lines[5][5:]  # not UTF-8 any more
    data = b"".join(lines)
    path = tmp_path / "SST-2" / "dev.tsv"
    path.parent.mkdir()
    path.write_bytes(data[:-4])  # the last row cut inside its text: no label column
    expected = rf"^{path}:6: not valid UTF-8 .*skip_malformed_rows"
    with pytest.raises(MalformedRowError, match=expected):
        read_split("sst-2", tmp_path, "dev")
    result = read_split("sst-2", tmp_path, "dev", skip_malformed_rows=True)
    assert [line for line, _ in result.skipped] == [6, len(lines)]
    assert "not valid UTF-8" in result.skipped[0][1] and "got 1" in result.skipped[1][1]
    assert len(result.examples) == len(lines) - 3  # header, two skipped
