"""Data prep (local and Beam runners) and vocabulary training on a hostile machine: a disk that
fills, an output directory that cannot be written, SIGTERM and SIGINT. Each ends in one line with
a non-zero exit status; nothing half-written is left and nothing written before is lost."""

import os
import pathlib
import signal
import time

import pytest

from tests.hostile import (
    assert_one_line_ending,
    full_disk_labels,
    hidden_files,
    interrupt_when,
    live_processes_in_session,
    python,
    run,
    run_on_small_filesystem,
    run_with_read_only,
)

REPO = pathlib.Path(__file__).resolve().parents[1]
SPM = REPO / "tests" / "fixtures" / "albert_spm" / "30k-clean.model"
CORPUS = REPO / "tests" / "fixtures" / "original_data" / "corpus_small.txt"  # 1.6 MB of records
BOOKS = REPO / "data_prep" / "sample_corpus" / "train" / "*.txt.gz"  # seconds of work on 2 cores


def data_prep(out: pathlib.Path, *flags: str, corpus=CORPUS) -> list[str]:
    return python(
        "-m",
        "pipelines.create_pretraining_data",
        f"--input_file={corpus}",
        f"--output_file={out}/train.tfrecord",
        f"--spm_model_file={SPM}",
        "--max_seq_length=128",
        *flags,
    )


@pytest.mark.parametrize("runner", ["local", "beam"])
def test_a_full_disk_ends_in_one_line_naming_the_file_and_leaves_nothing(runner, tmp_path):
    disk = tmp_path / "disk"
    command = data_prep(disk, "--dupe_factor=2", "--num_workers=2", f"--runner={runner}")
    result = run_on_small_filesystem(command, disk, 512 * 1024, tmp_path / "left")
    assert result.returncode == 1
    line = assert_one_line_ending(result.stderr, f"{disk}/")
    assert line.startswith(full_disk_labels()), line
    # Neither a shard nor a spill file nor a summary: the job wrote everything under hidden
    # names, which it removed on the way out.
    assert os.listdir(tmp_path / "left") == []


def test_an_output_directory_that_cannot_be_written_is_refused_before_any_work(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    result = run_with_read_only(data_prep(out, "--dupe_factor=1", "--num_workers=1"), out)
    assert result.returncode == 1
    assert_one_line_ending(result.stderr, f"PermissionDenied: {out}: permission denied")
    assert "reading" not in result.stderr  # no input was read
    assert os.listdir(out) == []


def test_an_output_file_that_is_a_directory_is_refused_before_any_work(tmp_path):
    (tmp_path / "train.tfrecord").mkdir()
    result = run(data_prep(tmp_path, "--num_workers=1"))
    assert result.returncode == 1
    assert_one_line_ending(result.stderr, f"--output_file={tmp_path}/train.tfrecord is a directory")
    assert "reading" not in result.stderr


def test_a_directory_as_input_file_is_said_to_be_one(tmp_path):
    result = run(data_prep(tmp_path / "out", corpus=tmp_path))
    assert result.returncode == 1
    assert_one_line_ending(result.stderr, f"'{tmp_path}' is a directory; give the files in it")


@pytest.mark.parametrize(
    "runner, signum, whole_group",
    [
        ("local", signal.SIGTERM, False),  # `kill PID`
        ("local", signal.SIGINT, True),  # Ctrl-C in a terminal: every process of the job
        ("beam", signal.SIGINT, True),
        ("beam", signal.SIGTERM, False),
    ],
)
def test_a_signal_stops_the_job_in_one_line_keeping_the_previous_output(
    runner, signum, whole_group, tmp_path
):
    out = tmp_path / "out"
    out.mkdir()
    (out / "train.tfrecord").write_bytes(b"the previous run's records")
    command = data_prep(
        out,
        "--input_format=paragraphs",
        "--dupe_factor=5",
        "--num_workers=2",
        "--batch_chars=65536",
        f"--runner={runner}",
        corpus=BOOKS,
    )

    def working() -> bool:  # a worker has written records under a hidden name
        return any(name.startswith(".") for name in os.listdir(out))

    status, output, session = interrupt_when(
        command, working, signum, tmp_path / "log", whole_group
    )
    assert status == 128 + signum, output[-3000:]
    assert_one_line_ending(output, f"Interrupted: stopped by {signum.name}")
    assert "BrokenPipeError" not in output
    assert sorted(os.listdir(out)) == ["train.tfrecord"]  # no hidden file left
    assert (out / "train.tfrecord").read_bytes() == b"the previous run's records"
    deadline = time.monotonic() + 30  # the workers leave too
    while live_processes_in_session(session) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert live_processes_in_session(session) == []


def test_workers_die_with_a_killed_job_writing_nothing_more(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    command = data_prep(
        out, "--input_format=paragraphs", "--dupe_factor=5", "--num_workers=2", corpus=BOOKS
    )

    def spilling() -> bool:  # the workers are writing their spill files
        return len([n for n in os.listdir(out) if n.startswith(".")]) >= 2

    status, output, session = interrupt_when(command, spilling, signal.SIGKILL, tmp_path / "log")
    assert status == -signal.SIGKILL
    # The kernel ends the workers with the job: none is left by the time the job is reaped, so
    # none writes on or prints a traceback for the results nobody reads.
    assert live_processes_in_session(session) == []
    sizes = {n: (out / n).stat().st_size for n in os.listdir(out)}
    time.sleep(1)
    assert {n: (out / n).stat().st_size for n in os.listdir(out)} == sizes
    assert "Traceback" not in (tmp_path / "log").read_text()


def train_tokenizer(out: pathlib.Path, corpus=CORPUS) -> list[str]:
    return python(
        "-m",
        "pipelines.train_tokenizer",
        f"--input_file={corpus}",
        "--vocab_size=1000",
        f"--output_dir={out}",
        "--num_threads=1",
    )


def test_vocabulary_training_on_a_full_disk_or_a_read_only_directory(tmp_path):
    disk = tmp_path / "disk"
    result = run_on_small_filesystem(train_tokenizer(disk), disk, 64 * 1024, tmp_path / "left")
    assert result.returncode == 1
    if full_disk_labels() == ("DiskFull",):  # SentencePiece names no reason: the space left says
        assert_one_line_ending(result.stderr, f"DiskFull: {disk}: no space left on device")
    else:
        assert_one_line_ending(result.stderr, "SentencePiece training on")
    assert os.listdir(tmp_path / "left") == []
    out = tmp_path / "out"
    out.mkdir()
    result = run_with_read_only(train_tokenizer(out), out)
    assert result.returncode == 1
    assert_one_line_ending(result.stderr, f"PermissionDenied: {out}: permission denied")


def test_vocabulary_training_stops_on_sigterm_leaving_no_model(tmp_path):
    out = tmp_path / "out"
    log = tmp_path / "log"
    status, output, _ = interrupt_when(
        train_tokenizer(out, corpus=BOOKS),
        lambda: b"vocab: training" in log.read_bytes(),
        signal.SIGTERM,
        log,
    )
    assert status == 128 + signal.SIGTERM, output[-3000:]
    assert_one_line_ending(output, "Interrupted: stopped by SIGTERM")
    assert os.listdir(out) == []


def test_the_demo_on_a_full_disk_ends_in_one_line(tmp_path):
    # `python pipelines/pretrain.py` without flags runs the demo through the same `run_task`;
    # here its quick settings, into a directory of the small file system.
    disk = tmp_path / "disk"
    demo = (
        "import sys\n"
        "from pipelines import _cli, demo_pipeline\n"
        "settings = demo_pipeline.DemoSettings.quick(sys.argv.pop())\n"
        "_cli.run_task(lambda argv: demo_pipeline.run(settings))\n"
    )
    command = python("-c", demo, str(disk / "demo"))
    result = run_on_small_filesystem(command, disk, 256 * 1024, tmp_path / "left")
    assert result.returncode == 1
    line = assert_one_line_ending(result.stderr, f"{disk}/demo")
    assert line.startswith(full_disk_labels()), line
    assert hidden_files(tmp_path / "left") == []
