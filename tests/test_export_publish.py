"""Export's hard failures: a version is published all or nothing, whatever point a kill hits; what
a stopped export left is finished or removed by the next one, which says so; a full disk, a
refused write and SIGTERM end in one line with nothing half-written under a final name."""

import json
import logging
import os
import pathlib
import signal
import subprocess
import sys

import pytest

from albert_tf.export import publish
from tests import hostile
from tests.conftest import ORIGINAL_CHECKPOINTS, REPO_ROOT

pytestmark = pytest.mark.e2e  # starts the CLIs or runs whole exports

SHARED = ORIGINAL_CHECKPOINTS / "albert_tiny_shared"
# What a staged version holds, by final path under the output directory (relative).
VERSION = {
    "m/3/saved_model.pb": "ids graph",
    "m/3/variables/variables.index": "ids weights",
    "m_text/3/saved_model.pb": "text graph",
    "m_tflite/3/m_fp32.tflite": "fp32",
    "m_tflite/3/m_fp16.tflite": "fp16",
}
UNITS = ["m/3", "m_text/3", "m_tflite/3"]
REPORT = "export_report_m_3.json"

# Stages VERSION as an export does, then publishes it with the calls that change the output
# directory (`os.replace`, `os.rename`, `shutil.rmtree`) counted: the process SIGKILLs itself before
# call `kill_before` (or once it is done, past the last one).
_PUBLISH_AND_DIE = """
import json, os, shutil, signal, sys
from albert_tf.export import publish
out, kill_before = sys.argv[1], int(sys.argv[2])
version = json.loads(sys.argv[3])
finals = [os.path.join(out, u) for u in json.loads(sys.argv[4])] + [os.path.join(out, sys.argv[5])]
staging = publish.Staging(out, "m", 3, finals)
for relative, text in version.items():
    built = os.path.join(staging.path, "work", relative)
    os.makedirs(os.path.dirname(built), exist_ok=True)
    with open(built, "w") as f:
        f.write(text)
for unit in json.loads(sys.argv[4]):
    staging.stage(os.path.join(out, unit), os.path.join(staging.path, "work", unit))
calls = 0
def counted(real):
    def call(*args):
        global calls
        calls += 1
        if calls == kill_before:
            os.kill(os.getpid(), signal.SIGKILL)
        real(*args)
    return call
os.rename, os.replace = counted(os.rename), counted(os.replace)
shutil.rmtree = counted(shutil.rmtree)
staging.commit({"artifacts": {}}, finals[-1])
os.kill(os.getpid(), signal.SIGKILL)
"""
# The commit point (the report written into the staging directory), a rename per version
# directory, the report's, the staging directory's removal.
CALLS = 1 + len(UNITS) + 1 + 1


def published(out: pathlib.Path) -> dict[str, str]:
    return {
        str(p.relative_to(out)): p.read_text()
        for p in out.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(out).parts)
    }


@pytest.mark.parametrize("kill_before", range(1, CALLS + 2))
def test_a_version_killed_at_any_point_is_whole_or_absent_and_the_next_export_finishes_it(
    kill_before, tmp_path, caplog
):
    out = tmp_path / "out"
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            _PUBLISH_AND_DIE,
            str(out),
            str(kill_before),
            json.dumps(VERSION),
            json.dumps(UNITS),
            REPORT,
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert run.returncode == -signal.SIGKILL, run.stderr[-2000:]
    seen = published(out)
    # Every version directory a reader sees is whole, and the report only beside all of them.
    for unit in UNITS:
        inside = {k: v for k, v in VERSION.items() if k.startswith(unit + "/")}
        assert {k: v for k, v in seen.items() if k.startswith(unit + "/")} in ({}, inside)
    if REPORT in seen:
        assert {k: v for k, v in seen.items() if k != REPORT} == VERSION
    left = [out / p.name for p in out.iterdir() if p.name.startswith(".export-m-3-")]
    assert len(left) == (kill_before <= CALLS)
    caplog.set_level(logging.WARNING)
    other = publish.Staging(str(out), "m", 4, [str(out / "m" / "4")])  # the next export
    other.abandon()
    other.close()
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []
    finals = [str(out / u) for u in UNITS] + [str(out / REPORT)]
    if kill_before == 1:  # before the report's write into the staging directory: not committed
        assert published(out) == {}
        assert f"Removed {left[0]}, left by a stopped export" in caplog.text
        publish.Staging(str(out), "m", 3, finals).close()  # the version is free again
        return
    assert {k: v for k, v in published(out).items() if k != REPORT} == VERSION
    assert json.loads((out / REPORT).read_text()) == {"artifacts": {}}
    if kill_before <= CALLS - 1:  # between the renames
        finished = "Finished publishing m version 3, which a stopped export had committed"
        assert finished in caplog.text
    elif kill_before == CALLS:  # all published, the emptied staging directory left
        assert f"Removed {left[0]}, left by a stopped export" in caplog.text
    with pytest.raises(FileExistsError, match="already exported"):
        publish.Staging(str(out), "m", 3, finals)


_HOLD = """
import sys, time
from albert_tf.export import publish
staging = publish.Staging(sys.argv[1], "m", 1, [])
print(staging.path, flush=True)
time.sleep(600)
"""


def test_a_running_export_is_left_alone_and_its_version_refused(tmp_path, caplog):
    out = tmp_path / "out"
    out.mkdir()
    (out / ".export-m-1-2-abc").mkdir()  # another model's (named "m-1"): never this one's
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(out)], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        running = holder.stdout.readline().strip()
        with pytest.raises(FileExistsError, match="another export of m version 1 is running"):
            publish.Staging(str(out), "m", 1, [])
        second = publish.Staging(str(out), "m", 2, [])
        second.abandon()
        second.close()
        assert os.path.isdir(running)
    finally:
        holder.kill()
        holder.wait()
    caplog.set_level(logging.WARNING)
    publish.Staging(str(out), "m", 1, []).close()
    assert f"Removed {running}, left by a stopped export" in caplog.text
    assert (out / ".export-m-1-2-abc").is_dir()


def test_output_paths_of_the_wrong_kind_are_refused(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError, match="is a file, where output_dir needs a directory"):
        publish.check_output_paths(str(tmp_path / "file" / "out"), [], str(tmp_path / "r.json"))
    (tmp_path / "m").write_text("x")
    with pytest.raises(NotADirectoryError, match=f"{tmp_path / 'm'} is a file, where a model"):
        publish.check_output_paths(str(tmp_path), [str(tmp_path / "m" / "1")], "r.json")
    (tmp_path / "r.json").mkdir()
    with pytest.raises(IsADirectoryError, match="is a directory, where the export report goes"):
        publish.check_output_paths(str(tmp_path), [], str(tmp_path / "r.json"))


# The export CLI on the original code's tiny checkpoint: seconds of work.
EXPORT_FLAGS = {
    "tf1_checkpoint": SHARED,
    "albert_config_file": SHARED / "albert_config.json",
    "max_seq_length": 16,
    "num_verification_examples": 16,
    "latency_runs": 2,
    "formats": "saved_model,tflite_fp32",
}


def export_cli(out, **flags):
    """The export command into `out`, `flags` replacing or adding to `EXPORT_FLAGS`."""
    flags = {**EXPORT_FLAGS, "output_dir": out, **flags}
    script = str(REPO_ROOT / "pipelines" / "export.py")
    return [sys.executable, script, *(f"--{name}={value}" for name, value in flags.items())]


def test_a_full_disk_ends_in_one_line_with_nothing_left_behind(tmp_path):
    """On a filesystem that fills (`tests/hostile.py`: a 1.5 MB tmpfs of the child's own): the
    ids SavedModel fits and passes, the TFLite source model does not."""
    small, keep = tmp_path / "small", tmp_path / "left"
    out = small / "out"
    run = hostile.run_on_small_filesystem(export_cli(out), small, 1500 * 1024, keep)
    assert run.returncode == 1, run.stderr[-3000:]
    line = hostile.assert_one_line_ending(run.stderr, *hostile.full_disk_labels())
    assert line.startswith(f"{hostile.full_disk_labels()[0]}: {out}/.export-albert-1-")
    assert line.endswith(f"(nothing was written under a final name in {out})")
    assert "Building the ids SavedModel" in run.stderr and "Converting tflite_fp32" in run.stderr
    assert list(keep.iterdir()) == []  # the staging directory and the output directory are gone


@pytest.mark.parametrize(
    "stop",
    [signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.slow)],  # one path, two signals
    ids=["SIGTERM", "SIGINT"],
)
def test_a_signal_ends_in_one_line_and_removes_the_staging_directory(stop, tmp_path):
    out = tmp_path / "out"
    status, output, _ = hostile.interrupt_when(
        export_cli(out, formats="saved_model,tflite_fp32,tflite_fp16"),
        lambda: bool(list(out.glob(".export-albert-1-*/saved_model"))),  # mid-way through
        stop,
        tmp_path / "log",
    )
    assert status == 128 + stop, output[-3000:]
    line = hostile.assert_one_line_ending(output)
    assert line == (
        f"Interrupted: stopped by {stop.name} (nothing was written under a final name in {out})"
    )
    assert not out.exists()


def test_a_signal_during_a_conversion_ends_in_one_line_within_the_grace(tmp_path, monkeypatch):
    """A TFLite conversion is one long call that no signal cuts: the export stops when it ends,
    or is dropped once the grace is over; either way in one line, with nothing left."""
    out, log = tmp_path / "out", tmp_path / "log"
    command = export_cli(out, formats="saved_model,tflite_fp32")

    def converting() -> bool:
        return log.exists() and "Converting tflite_fp32" in log.read_text()

    monkeypatch.setenv("ALBERT_TF_STOP_GRACE_SECONDS", "0.1")
    status, output, _ = hostile.interrupt_when(command, converting, signal.SIGTERM, log)
    assert status == 128 + signal.SIGTERM, output[-3000:]
    line = hostile.assert_one_line_ending(output, "Interrupted: stopped by SIGTERM (")
    assert f"nothing was written under a final name in {out}" in line
    assert not out.exists()


def test_an_output_directory_it_may_not_write_is_one_line_before_any_work(tmp_path):
    out = tmp_path / "read_only"
    out.mkdir()
    run = hostile.run_with_read_only(export_cli(out), out)
    assert run.returncode == 1, run.stderr[-3000:]
    line = hostile.assert_one_line_ending(run.stderr)
    assert line.startswith(f"PermissionDenied: {out}/.export-albert-1-")
    assert line.endswith(f"(nothing was written in {out})")
    assert "Verifying on" not in run.stderr  # refused before any work
    assert list(out.iterdir()) == []
