"""The Beam runner (FnApiRunner, in memory and 2 worker processes) against the local runner: the same
instances, the same statistics and skips, identical files for any worker count, nothing left under
the final names after a failure or a kill -9, and a clear message without Beam."""

import contextlib
import io
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from albert_tf import records
from data_prep import instances, pipeline, units
from tests.test_data_prep_pipeline import _write_bad_inputs

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
SPM = str(FIXTURES / "albert_spm" / "30k-clean.model")
CORPUS = FIXTURES / "original_data" / "corpus_small.txt"
REPO = pathlib.Path(__file__).resolve().parents[1]
# Settings that differ between runs of the same job, not what the job produced.
RUN_KEYS = ("outputs", "settings", "elapsed_seconds")


def _config(inputs, output_dir, **overrides):
    base = dict(
        input_file=str(inputs),
        output_file=str(output_dir / "train.tfrecord"),
        spm_model_file=SPM,
        dupe_factor=2,
        pair=instances.PairConfig(max_seq_length=128),
        masking=instances.MaskingConfig(max_predictions_per_seq=20),
        num_output_shards=3,
        batch_chars=16 * 1024,
        num_workers=1,
    )
    base.update(overrides)
    return pipeline.DataPrepConfig(**base)


@pytest.fixture(scope="module")
def corpus_files(tmp_path_factory):
    """corpus_small cut into three files (about 200 documents in all), so pools come from several."""
    directory = tmp_path_factory.mktemp("corpus")
    documents = CORPUS.read_text("utf-8").split("\n\n")[:200]
    for i in range(3):
        part = documents[i * 70 : (i + 1) * 70]
        (directory / f"part{i}.txt").write_text("\n\n".join(part) + "\n", "utf-8")
    return f"{directory}/part*.txt"


@pytest.fixture(scope="module")
def local_run(corpus_files, tmp_path_factory):
    out = tmp_path_factory.mktemp("local")
    summary = pipeline.run(_config(corpus_files, out, num_workers=2))
    return summary, _shards(out)


@pytest.fixture(scope="module")
def beam_run(corpus_files, tmp_path_factory):
    out = tmp_path_factory.mktemp("beam")
    summary = pipeline.run_on_beam(_config(corpus_files, out))
    return summary, _shards(out)


def _shards(directory: pathlib.Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def _records(shards: dict[str, bytes]) -> list[bytes]:
    """The framed records of the shards, shard by shard."""
    out = []
    for name, data in shards.items():
        if name.startswith("train.tfrecord-"):
            out.extend(records.iter_framed_records(io.BytesIO(data)))
    return out


def test_beam_gives_the_local_runners_instances_and_summary(local_run, beam_run):
    (local_summary, local_shards), (beam_summary, beam_shards) = local_run, beam_run
    names = [f"train.tfrecord-0000{i}-of-00003" for i in range(3)]
    assert sorted(beam_shards) == sorted(local_shards) == sorted(names + ["train.summary.json"])
    local_records, beam_records = _records(local_shards), _records(beam_shards)
    assert len(beam_records) == local_summary["instances"] > 300
    # The same multiset of records; the order differs (a full shuffle against a bounded buffer).
    assert sorted(beam_records) == sorted(local_records)
    assert beam_records != local_records
    without_run = lambda s: {k: v for k, v in s.items() if k not in RUN_KEYS}  # noqa: E731
    assert without_run(beam_summary) == without_run(local_summary)
    assert beam_summary["settings"]["runner"] == "beam"
    assert beam_summary["settings"]["beam_runner"] == "FnApiRunner"
    assert [o["instances"] for o in beam_summary["outputs"]] == [
        len(_records({n: beam_shards[n]})) for n in names
    ]


def test_two_worker_processes_write_identical_files(corpus_files, beam_run, tmp_path):
    summary = pipeline.run_on_beam(_config(corpus_files, tmp_path, num_workers=2))
    shards = _shards(tmp_path)
    assert {n: d for n, d in shards.items() if n != "train.summary.json"} == {
        n: d for n, d in beam_run[1].items() if n != "train.summary.json"
    }
    assert summary["instances"] == beam_run[0]["instances"]


def test_bad_input_is_counted_as_in_the_local_runner(tmp_path):
    _write_bad_inputs(tmp_path / "in")
    inputs = f"{tmp_path}/in/*"
    local = pipeline.run(_config(inputs, tmp_path / "local", num_output_shards=1))
    beam = pipeline.run_on_beam(_config(inputs, tmp_path / "beam", num_output_shards=1))
    assert beam["skipped"] == local["skipped"] and beam["skipped_lines"] == 3
    assert beam["documents"] == local["documents"] == 34
    assert beam["instances"] == local["instances"]


def test_failure_leaves_previous_outputs_and_no_hidden_files(corpus_files, tmp_path, monkeypatch):
    (tmp_path / "train.tfrecord-00000-of-00003").write_bytes(b"previous run")
    original = units.PoolProcessor.instance_records

    def fail_on_a_late_pool(self, pool, stats):
        if pool.key == (2, 1):
            raise RuntimeError("disk on fire")
        return original(self, pool, stats)

    monkeypatch.setattr(units.PoolProcessor, "instance_records", fail_on_a_late_pool)
    with pytest.raises(Exception, match="disk on fire"):
        pipeline.run_on_beam(_config(corpus_files, tmp_path))
    assert _shards(tmp_path) == {"train.tfrecord-00000-of-00003": b"previous run"}


def test_cli_runs_beam_without_tensorflow_and_says_what_to_install_without_beam(
    corpus_files, tmp_path
):
    flags = [
        f"--input_file={corpus_files.replace('part*', 'part0')}",
        f"--output_file={tmp_path}/out/train.tfrecord",
        f"--spm_model_file={SPM}",
        "--max_seq_length=128",
        "--dupe_factor=1",
        "--runner=beam",
        "--num_workers=1",
    ]
    code = (
        "import sys, runpy\n"
        "sys.argv = ['create_pretraining_data'] + sys.argv[1:]\n"
        "try:\n"
        "    runpy.run_module('pipelines.create_pretraining_data', run_name='__main__')\n"
        "except SystemExit as e:\n"
        "    print('exit', e.code)\n"
        "print('tensorflow loaded:', any(m.split('.')[0] in ('tensorflow', 'keras')"
        " for m in sys.modules))\n"
    )
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    )
    ran = subprocess.run(
        [sys.executable, "-c", code, *flags], capture_output=True, text=True, cwd=REPO, env=env
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    # absl's app.run ends a successful main with SystemExit(None) or 0.
    assert ran.stdout.split("\n")[0] in ("exit 0", "exit None"), ran.stdout + ran.stderr[-2000:]
    assert "tensorflow loaded: False" in ran.stdout
    assert (tmp_path / "out" / "train.tfrecord").stat().st_size > 0
    # Without Beam: the message names the extra to install.
    blocked = "import sys; sys.modules['apache_beam'] = None\n" + code
    ran = subprocess.run(
        [sys.executable, "-c", blocked, *flags], capture_output=True, text=True, cwd=REPO, env=env
    )
    assert "exit 1" in ran.stdout, ran.stdout + ran.stderr[-2000:]
    assert "pip install -r requirements-beam.txt" in ran.stderr
    assert "Traceback" not in ran.stderr


def _live_processes_in_group(group: int) -> list[str]:
    """The processes of a process group that have not exited (zombies left out), from /proc."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            state, _, pgrp = (
                pathlib.Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[:3]
            )
            if int(pgrp) == group and state != "Z":
                found.append(
                    pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                )
    return found


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="finds the job's processes in /proc")
def test_kill_9_while_writing_leaves_no_final_output_and_the_rerun_cleans_up(
    corpus_files, beam_run, tmp_path
):
    out = tmp_path / "out"
    out.mkdir()
    # A previous run's files under two of the final names; the other shards do not exist yet.
    previous = {"train.tfrecord-00000-of-00003": b"previous shard", "train.summary.json": b"{}"}
    for name, data in previous.items():
        (out / name).write_bytes(data)
    cli = [
        sys.executable,
        "-m",
        "pipelines.create_pretraining_data",
        f"--input_file={corpus_files}",
        f"--output_file={out}/train.tfrecord",
        f"--spm_model_file={SPM}",
        "--max_seq_length=128",
        "--max_predictions_per_seq=20",
        "--dupe_factor=2",
        "--num_output_shards=3",
        "--batch_chars=16384",
        "--runner=beam",
        "--beam_runner=FnApiRunner",
        "--num_workers=2",
    ]
    log = tmp_path / "killed_run.log"  # a file, not a pipe: a full pipe would stall the job
    with open(log, "wb") as stderr:
        job = subprocess.Popen(
            cli, cwd=REPO, stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True
        )
    try:
        # Killed once a worker has written a pool's records (the pools' spill files are there
        # too): the shards are written, renamed and summed up over the next second or so.
        deadline = time.monotonic() + 120
        while not any(".records-" in name for name in os.listdir(out)):
            assert job.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "no records file in 120 s"
            time.sleep(0.005)
        os.kill(job.pid, signal.SIGKILL)  # the launcher only: its workers must leave by themselves
        job.wait()
        deadline = time.monotonic() + 30
        while _live_processes_in_group(job.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _live_processes_in_group(job.pid) == []
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    left = _shards(out)
    assert {name: left[name] for name in left if not name.startswith(".")} == previous
    hidden = [name for name in left if name.startswith(".")]
    assert hidden and all(".beam-" in name for name in hidden), hidden
    assert any(".pool-" in name for name in hidden), hidden

    # The rerun deletes what the killed run left and writes what an uninterrupted run writes.
    rerun = subprocess.run(cli, cwd=REPO, capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    rewritten, expected = _shards(out), dict(beam_run[1])
    assert rewritten.keys() == expected.keys()
    summary = json.loads(rewritten.pop("train.summary.json"))
    assert summary["instances"] == beam_run[0]["instances"]
    del expected["train.summary.json"]
    assert rewritten == expected
