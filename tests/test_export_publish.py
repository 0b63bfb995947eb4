"""Export's hard failures: a version is published all or nothing, whatever point a kill hits; what
a stopped export left is finished or removed by the next one, which says so; a full disk, a
refused write and SIGTERM end in one line with nothing half-written under a final name."""

import dataclasses
import errno
import json
import logging
import os
import pathlib
import shlex
import signal
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from albert_tf.export import publish
from tests.conftest import ORIGINAL_CHECKPOINTS, REPO_ROOT

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


def test_storage_errors_read_as_one_line_naming_the_path():
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/out/.export-m-1-x/a.tflite")
    error = publish.storage_error(full, "nothing was written")
    assert isinstance(error, OSError) and error.errno == errno.ENOSPC
    assert (
        str(error)
        == "no space left on device writing /out/.export-m-1-x/a.tflite: nothing was written"
    )
    tf_error = tf.errors.ResourceExhaustedError(
        None, None, "/out/.export-m-1-x/variables/v.data-00000-of-00001; No space left on device"
    )
    assert str(publish.storage_error(tf_error, "gone")) == (
        "no space left on device writing /out/.export-m-1-x/variables/v.data-00000-of-00001: gone"
    )
    denied = PermissionError(errno.EACCES, "Permission denied", "/out/.export-m-1-y")
    assert (
        str(publish.storage_error(denied, "x")) == "permission denied writing /out/.export-m-1-y: x"
    )
    assert publish.storage_error(FileNotFoundError(errno.ENOENT, "gone", "/x"), "x") is None
    assert publish.storage_error(tf.errors.InvalidArgumentError(None, None, "bad"), "x") is None


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


CLI_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "PATH": "/usr/bin:/bin", "HOME": "/tmp"}


def one_line_failure(stderr: str) -> str:
    """The last line of stderr, after checking that no traceback came before it."""
    assert "Traceback" not in stderr, stderr[-3000:]
    return stderr.strip().splitlines()[-1]


def mount_namespace() -> list[str] | None:
    """How to run a child in a mount namespace of its own, where it may mount a tmpfs: `unshare -m`
    as root, with a user namespace (`-r`) otherwise; None where neither is allowed."""
    for unshare in (["unshare", "-m"], ["unshare", "-r", "-m"]):
        probe = ["sh", "-c", "mount -t tmpfs -o size=16k tmpfs /mnt"]
        if subprocess.run([*unshare, *probe], capture_output=True).returncode == 0:
            return unshare
    return None


def test_a_full_disk_ends_in_one_line_with_nothing_left_behind(tmp_path):
    """On a real filesystem that fills (a 1.5 MB tmpfs of the child's own): the ids SavedModel
    fits and passes, the TFLite source model does not."""
    unshare = mount_namespace()
    if unshare is None:
        pytest.skip("no mount namespace here (unshare) for a small filesystem that fills")
    small = tmp_path / "small"
    small.mkdir()
    out = small / "out"
    script = (
        f"mount -t tmpfs -o size=1500k tmpfs {small} && {shlex.join(export_cli(out))}; "
        f"status=$?; ls -A {small}; exit $status"
    )
    run = subprocess.run(
        [*unshare, "sh", "-c", script], capture_output=True, text=True, cwd=REPO_ROOT, env=CLI_ENV
    )
    assert run.returncode == 1, run.stderr[-3000:]
    line = one_line_failure(run.stderr)
    assert line.startswith(
        f"export failed: no space left on device writing {out}/.export-albert-1-"
    )
    assert line.endswith(f": nothing was written under a final name in {out}")
    assert "Building the ids SavedModel" in run.stderr and "Converting tflite_fp32" in run.stderr
    assert run.stdout.split() == []  # the staging directory and the output directory are gone


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_ends_in_one_line_and_removes_the_staging_directory(stop, tmp_path):
    out = tmp_path / "out"
    job = subprocess.Popen(
        export_cli(out, formats="saved_model,tflite_fp32,tflite_fp16"),
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
        env=CLI_ENV,
        # A job started in the background inherits SIGINT ignored; a terminal's would not be.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        while not list(out.glob(".export-albert-1-*/saved_model")):  # mid-way through the build
            assert job.poll() is None, job.stderr.read()[-3000:]
            time.sleep(0.05)
        job.send_signal(stop)
        _, stderr = job.communicate(timeout=600)
    finally:
        job.kill()
    assert job.returncode == 128 + stop
    assert one_line_failure(stderr) == (
        f"export interrupted by {stop.name}: nothing was written under a final name in {out}"
    )
    assert not out.exists()


def test_an_output_directory_it_may_not_write_is_one_line_before_any_work(tmp_path):
    out = tmp_path / "read_only"
    out.mkdir()
    out.chmod(0o555)
    command = export_cli(out)
    if os.geteuid() == 0:  # root writes anywhere; in a user namespace of its own it may not
        if subprocess.run(["unshare", "-U", "true"]).returncode != 0:
            pytest.skip("root, and no user namespace here (unshare -U) to be refused a write")
        command = ["unshare", "-U", *command]
    run = subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT, env=CLI_ENV)
    assert run.returncode == 1, run.stderr[-3000:]
    line = one_line_failure(run.stderr)
    assert line.startswith(f"export failed: permission denied writing {out}/.export-albert-1-")
    assert line.endswith(f": nothing was written in {out}")
    assert "Verifying on" not in run.stderr  # refused before any work
    assert list(out.iterdir()) == []


# A real export, SIGKILLed between publishing its ids SavedModel and its TFLite directory.
_KILLED_WHILE_PUBLISHING = """
import os, signal, sys
from albert_tf.export import ExportConfig, export_model, load_serving_head
shared, out = sys.argv[1:]
rename = os.rename
def rename_or_die(source, target):
    if target.endswith(os.path.join("albert_tflite", "1")):
        os.kill(os.getpid(), signal.SIGKILL)
    rename(source, target)
os.rename = rename_or_die
head = load_serving_head(
    "pretrainer", tf1_checkpoint=shared, albert_config_file=os.path.join(shared, "albert_config.json")
)
export_model(head, ExportConfig(output_dir=out, max_seq_length=16, latency_runs=2,
                                num_verification_examples=16))
"""


def test_a_real_export_killed_while_publishing_is_finished_by_the_next_one(tmp_path, caplog):
    from albert_tf.export import ExportConfig, export_model, load_serving_head

    out = tmp_path / "out"
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED_WHILE_PUBLISHING, str(SHARED), str(out)],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env=CLI_ENV,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert (out / "albert" / "1" / "saved_model.pb").is_file()
    assert not (out / "albert_tflite" / "1").exists()
    assert not (out / "export_report_albert_1.json").exists()
    head = load_serving_head(
        "pretrainer",
        tf1_checkpoint=str(SHARED),
        albert_config_file=str(SHARED / "albert_config.json"),
    )
    config = ExportConfig(
        output_dir=str(out),
        max_seq_length=16,
        latency_runs=2,
        num_verification_examples=16,
        formats=("tflite_fp32",),
    )
    # Output paths of the wrong kind are refused before any work, the leftover still there.
    (tmp_path / "file").write_text("x")
    (tmp_path / "m_tflite").write_text("x")
    for bad, message in (
        (dict(output_dir=str(tmp_path / "file")), "is a file, where output_dir needs a directory"),
        (dict(model_name="m", output_dir=str(tmp_path)), "m_tflite is a file, where a model"),
    ):
        with pytest.raises(NotADirectoryError, match=message):
            export_model(head, dataclasses.replace(config, **bad))
    assert len(list(out.glob(".export-albert-1-*"))) == 1
    caplog.set_level(logging.WARNING)
    report = export_model(head, dataclasses.replace(config, version=2))
    assert (
        "Finished publishing albert version 1, which a stopped export had committed" in caplog.text
    )
    assert sorted(p.name for p in out.iterdir()) == [
        "albert",
        "albert_tflite",
        "export_report_albert_1.json",
        "export_report_albert_2.json",
    ]
    first = json.loads((out / "export_report_albert_1.json").read_text())
    for key in ("saved_model", "tflite_fp32"):
        assert first["artifacts"][key]["failures"] == []
        assert os.path.exists(first["artifacts"][key]["path"]), key
    assert report["artifacts"]["tflite_fp32"]["path"] == str(
        out / "albert_tflite" / "2" / "albert_fp32.tflite"
    )
    with pytest.raises(FileExistsError, match="already exported"):
        export_model(head, config)
