"""Data prep with real processes: a second job into the outputs of a live one is refused before any
work, and a run after kill -9 removes what the killed one left (shards and spill files), saying so.
"""

import contextlib
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

from albert_tf.output_dirs import describe_removed
from data_prep import writer
from tests.test_data_prep_beam import _live_processes_in_group

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
SPM = str(FIXTURES / "albert_spm" / "30k-clean.model")
CORPUS = FIXTURES / "original_data" / "corpus_small.txt"
REPO = pathlib.Path(__file__).resolve().parents[1]


def _cli(out, *flags):
    return [
        sys.executable,
        "-m",
        "pipelines.create_pretraining_data",
        f"--input_file={CORPUS}",
        f"--output_file={out}/train.tfrecord",
        f"--spm_model_file={SPM}",
        "--max_seq_length=128",
        "--num_output_shards=2",
        "--batch_chars=16384",
        "--num_workers=2",
        *flags,
    ]


def _hidden(out):
    return sorted(name for name in os.listdir(out) if name.startswith("."))


def test_second_job_is_refused_and_a_rerun_removes_what_a_killed_one_left(tmp_path):
    out = tmp_path / "out"
    log = tmp_path / "first.log"  # a file, not a pipe: a full pipe would stall the job
    with open(log, "wb") as stderr:
        first = subprocess.Popen(
            _cli(out, "--dupe_factor=200"),
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
        )
    try:
        # Working: its shards and a pool's spill file are there.
        deadline = time.monotonic() + 120
        while not (out.exists() and any(".pool-" in name for name in os.listdir(out))):
            assert first.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "no spill file in 120 s"
            time.sleep(0.01)

        second = subprocess.run(
            _cli(out, "--dupe_factor=1"), cwd=REPO, capture_output=True, text=True, timeout=120
        )
        assert second.returncode == 1
        assert "Traceback" not in second.stderr
        errors = [line for line in second.stderr.splitlines() if "ERROR" in line]
        assert len(errors) == 1, second.stderr
        assert f"{out} is in use by another job (pid {first.pid} " in errors[0]
        # Refused before any work: only the first job's files are there.
        assert not [n for n in os.listdir(out) if f"incomplete-{first.pid}" not in n]
        first.send_signal(signal.SIGKILL)  # the launcher only, as the OOM killer would
        first.wait()
        # Its workers finish the pool in hand, then leave; the rerun need not wait for them (the
        # lock ended with the launcher), the count of bytes below does.
        deadline = time.monotonic() + 60
        while _live_processes_in_group(first.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _live_processes_in_group(first.pid) == []
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(first.pid, signal.SIGKILL)
        first.wait()

    left = _hidden(out)  # both shards and at least one spill file
    shards = {"train.tfrecord-00000-of-00002", "train.tfrecord-00001-of-00002"}
    assert len(left) >= 3 and all(writer.is_leftover(n, shards) for n in left), left
    assert [n for n in os.listdir(out) if not n.startswith(".")] == []
    size = sum((out / name).stat().st_size for name in left)

    rerun = subprocess.run(
        _cli(out, "--dupe_factor=1"), cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    removed = [line for line in rerun.stderr.splitlines() if "killed earlier run" in line]
    expected = describe_removed(len(left), size, [])
    assert len(removed) == 1 and expected.rstrip(": ") in removed[0], rerun.stderr
    assert sorted(os.listdir(out)) == [
        "train.summary.json",
        "train.tfrecord-00000-of-00002",
        "train.tfrecord-00001-of-00002",
    ]


def test_both_runners_hidden_files_are_leftovers_under_their_outputs_names_only():
    names = {"train.tfrecord-00000-of-00002", "train.summary.json"}
    left = [
        ".train.tfrecord-00000-of-00002.incomplete-123",  # the local runner's shard
        ".train.tfrecord-00000-of-00002.incomplete-123.pool-0-4",  # and a pool's spill file
        ".train.tfrecord-00000-of-00002.beam-0123456789ab",  # the Beam runner's shard
        ".train.tfrecord-00000-of-00002.beam-0123456789ab.totals.json",
        ".train.tfrecord-00000-of-00002.beam-0123456789ab.pool-0-4-0a1b2c3d",
        ".train.tfrecord-00000-of-00002.beam-0123456789ab.records-1-0-0a1b2c3d",
        ".train.summary.json.tmp-host-77-0a1b2c3d",  # the summary's atomic write
        ".train.summary.json.beam-0123456789ab",  # the summary the Beam runner writes remotely
    ]
    kept = [
        "train.tfrecord-00000-of-00002",
        ".eval.tfrecord.incomplete-123",  # another job's outputs
        ".train.tfrecord-00000-of-00003.incomplete-123",
        ".train.tfrecord-00000-of-00002.incomplete-abc",
        ".train.tfrecord-00000-of-00002.beam-0123456789ab.unknown",
    ]
    assert [n for n in left + kept if writer.is_leftover(n, names)] == left
    assert re.fullmatch(r".*\.pool-2-7", writer.spill_path(".x.incomplete-1", (2, 7)))
