"""One job per output directory (a lock that a killed job never leaves behind) and the removal of
what killed runs left: real processes hold the locks, no TensorFlow."""

import errno
import logging
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from albert_tf import output_dirs
from albert_tf.io import make_temporary_dir
from albert_tf.output_dirs import (
    OutputInUseError,
    claim_output_dir,
    find_leftovers,
    is_leftover,
    lock_output_dir,
    remove_leftovers,
)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def hold_lock(directory, seconds=120) -> subprocess.Popen:
    """Another process holding `directory`, as a job would, once it has printed its line."""
    code = (
        "import sys, time\n"
        "from albert_tf.output_dirs import lock_output_dir\n"
        "with lock_output_dir(sys.argv[1]):\n"
        "    print('holding', flush=True)\n"
        f"    time.sleep({seconds})\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code, str(directory)], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    assert process.stdout.readline().strip() == "holding"
    return process


def test_a_second_process_is_refused_naming_the_directory_and_the_holder(tmp_path):
    out = tmp_path / "run"
    holder = hold_lock(out)
    try:
        with pytest.raises(OutputInUseError) as refused:
            with lock_output_dir(out):
                pytest.fail("locked a directory another live process holds")
        message = str(refused.value)
        assert str(out) in message and f"pid {holder.pid} " in message
        assert "\n" not in message
        assert os.listdir(out) == []  # no lock file
    finally:
        holder.kill()
        holder.wait()
    # Killed, the holder left no stale lock: the directory is free at once.
    with lock_output_dir(out):
        pass
    assert os.listdir(out) == []


def _sleep_forever():
    time.sleep(120)


def test_a_forked_child_does_not_keep_its_parents_lock(tmp_path):
    out = tmp_path / "run"
    # The parent holds the lock and forks a long-lived worker, then dies by kill -9: the worker
    # still runs, yet the lock ends with the parent.
    code = (
        "import multiprocessing, sys, time\n"
        "from albert_tf.output_dirs import lock_output_dir\n"
        "from tests.test_output_dirs import _sleep_forever\n"
        "with lock_output_dir(sys.argv[1]):\n"
        "    child = multiprocessing.get_context('fork').Process(target=_sleep_forever)\n"
        "    child.start()\n"
        "    print(child.pid, flush=True)\n"
        "    time.sleep(120)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", code, str(out)], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    child = int(parent.stdout.readline())
    try:
        with pytest.raises(OutputInUseError, match=f"pid {parent.pid} "):
            with lock_output_dir(out):
                pass
        parent.kill()
        parent.wait()
        os.kill(child, 0)  # still alive
        with lock_output_dir(out):
            pass
    finally:
        parent.kill()
        parent.wait()
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_the_holding_process_may_claim_again_and_an_unused_new_directory_goes(tmp_path):
    out = tmp_path / "new" / "run"
    with lock_output_dir(out):
        with lock_output_dir(out) as locked:  # e.g. SQuAD's loop claiming its task's dir
            assert locked
            assert out.is_dir()
        with pytest.raises(OutputInUseError):  # still held after the inner block
            with multiprocessing.get_context("fork").Pool(1) as pool:
                pool.apply(_lock_in_child, (str(out),))
    assert not out.exists()  # created here and left empty: removed again
    with lock_output_dir(out):
        (out / "result.txt").write_text("kept")
    assert (out / "result.txt").read_text() == "kept"


def _lock_in_child(directory):
    with lock_output_dir(directory):
        pass


def test_a_filesystem_without_flock_or_a_remote_path_warns_and_goes_on(
    tmp_path, monkeypatch, caplog
):
    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(output_dirs.fcntl, "flock", no_locks)
    ran = []
    with caplog.at_level(logging.WARNING):
        with lock_output_dir(tmp_path / "nfs"):
            ran.append("local")
        with lock_output_dir("gs://bucket/run"):
            ran.append("remote")
    assert ran == ["local", "remote"]
    assert f"cannot lock {tmp_path / 'nfs'} (No locks available)" in caplog.text
    assert "gs://bucket/run cannot be locked here" in caplog.text

    # Unlocked, what looks left by a killed run may be a live job's: it stays, with a warning.
    (tmp_path / "nfs" / "ckpt-4_temp").mkdir(parents=True)
    with caplog.at_level(logging.WARNING):
        with claim_output_dir(tmp_path / "nfs"):
            assert (tmp_path / "nfs" / "ckpt-4_temp").is_dir()
    assert "kept 1 hidden file(s) or folder(s)" in caplog.text


def test_leftover_names_are_those_of_killed_writers_only():
    left = [
        ".model.ckpt-3.index.tmp-host-name-1234-0a1b2c3d",  # albert_tf.io.atomic_path
        ".albert_pretrainer.keras.tmp-h-1-deadbeef.keras",
        "ckpt-40_temp",  # tf.train.CheckpointManager, killed before the merge
        "optimizer-3_temp",
        "checkpoint.tmp0123456789abcdef0123456789abcdef",
        "ckpt-40.index.tempstate9016718244094733770",
    ]
    kept = [
        "ckpt-40.index",
        "ckpt-40.data-00000-of-00001",
        "checkpoint",
        "model.ckpt-best.index",
        "eval_results.json",
        "my_temp",  # a user's folder
        ".model.ckpt-3.index.tmp-host-1234",  # not the whole name
        "train.tfrecord.tmp-h-1-deadbeef",  # not hidden
    ]
    assert [n for n in left + kept if is_leftover(n)] == left


def test_leftovers_are_removed_with_one_line_of_count_and_size(tmp_path, caplog):
    staging = make_temporary_dir(tmp_path / "model.ckpt-3")  # a TF1 save's staging folder
    with open(os.path.join(staging, "model.ckpt-3.index"), "wb") as f:
        f.write(b"x" * 1500)
    (tmp_path / "ckpt-4_temp").mkdir()
    (tmp_path / "ckpt-4_temp" / "part-00000-of-00001.index").write_bytes(b"y" * 500)
    (tmp_path / "model.ckpt-2.index").write_bytes(b"kept")
    found = find_leftovers(tmp_path)
    assert found == sorted([staging, str(tmp_path / "ckpt-4_temp")])
    with caplog.at_level(logging.WARNING):
        assert remove_leftovers(found) == (2, 2000)
    lines = [r.getMessage() for r in caplog.records if "killed earlier run" in r.getMessage()]
    assert len(lines) == 1 and "removed 2 file(s) or folder(s)" in lines[0]
    assert "(2.0 KB)" in lines[0] and "ckpt-4_temp" in lines[0]
    assert sorted(os.listdir(tmp_path)) == ["model.ckpt-2.index"]
    assert find_leftovers(tmp_path / "missing") == []


def test_claim_removes_leftovers_in_the_named_subfolders_and_skips_other_workers(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "ckpt-4_temp").mkdir()
    (tmp_path / ".eval_results.json.tmp-h-9-0a1b2c3d").write_text("{")
    with claim_output_dir(tmp_path, ("checkpoints",), writes=False):
        assert (tmp_path / "checkpoints" / "ckpt-4_temp").exists()  # not the chief: untouched
    with claim_output_dir(tmp_path, ("checkpoints",)):
        assert sorted(os.listdir(tmp_path)) == ["checkpoints"]
        assert os.listdir(tmp_path / "checkpoints") == []


def test_a_live_writers_temporaries_stay_and_a_dead_ones_go(tmp_path):
    """A multi-worker job's workers write into the chief's directory while it claims it: what a
    live process on this host is writing is never removed, nor, with `other_writers`, what another
    host may be writing; a dead process's temporaries are."""
    host = socket.gethostname()
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], stdout=-1)
    dead_pid = int(ended.stdout)
    writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        live = tmp_path / f".train.tf_record.tmp-{host}-{writer.pid}-0a1b2c3d"
        dead = tmp_path / f".train.tf_record.tmp-{host}-{dead_pid}-0a1b2c3d"
        mine = tmp_path / f".eval.json.tmp-{host}-{os.getpid()}-0a1b2c3d"  # pid came round
        remote = tmp_path / ".predict.tf_record.tmp-other-host-7-0a1b2c3d"
        for path in (live, dead, mine, remote):
            path.write_text("x")
        with claim_output_dir(tmp_path, other_writers=True):
            assert live.exists() and remote.exists()
            assert not dead.exists() and not mine.exists()
        with claim_output_dir(tmp_path):  # one process writes here: another host's is a leftover
            assert live.exists() and not remote.exists()
    finally:
        writer.kill()
        writer.wait()
