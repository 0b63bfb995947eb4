"""Pretraining and fine-tuning hold their output directory: a second job is refused before
any work, with real processes; and a run removes the folder a save killed by kill -9 left."""

import logging
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import pytest

from albert_tf import AlbertConfig
from albert_tf.finetuning import loop
from albert_tf.tasks.squad import finetune as squad
from albert_tf.output_dirs import OutputInUseError, describe_removed
from albert_tf.training.distribution import build_strategy
from albert_tf.training.pretraining import run_pretraining
from tests.model_configs import MICRO
from tests.test_finetuning_loop import HasSevenTask, Settings
from tests.test_output_dirs import hold_lock
from tests.test_pretraining import TINY, cli_args, options, run_cli
from tests.test_squad_finetune import config_v2

pytestmark = pytest.mark.e2e  # starts the CLIs or runs whole exports

REPO = pathlib.Path(__file__).resolve().parents[1]

# Saves one tf.train checkpoint big enough (64 MB) for its write to be caught in the act.
_SAVER = """
import sys
import tensorflow as tf
directory, name = sys.argv[1:]
checkpoint = tf.train.Checkpoint(v=tf.Variable(tf.zeros([16, 1024, 1024])))
manager = tf.train.CheckpointManager(checkpoint, directory, 1, checkpoint_name=name)
print("saving", flush=True)
manager.save(checkpoint_number=1)
"""


def killed_mid_save(directory: pathlib.Path, name: str) -> pathlib.Path:
    """Kills (kill -9) a process while tf.train.CheckpointManager writes `name`-1 into
    `directory`, as a job killed while saving; returns the folder the save left."""
    left = directory / f"{name}-1_temp"
    for _ in range(3):
        saver = subprocess.Popen(
            [sys.executable, "-c", _SAVER, str(directory), name],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert saver.stdout.readline().strip() == "saving"
            deadline = time.monotonic() + 30
            # Killed once the shard is being written into the folder.
            while saver.poll() is None and time.monotonic() < deadline:
                if left.is_dir() and any(left.iterdir()):
                    break
                time.sleep(0.0005)
        finally:
            saver.send_signal(signal.SIGKILL)
            saver.wait()
        if left.is_dir() and any(left.iterdir()) and not (directory / "checkpoint").exists():
            return left
        for path in directory.iterdir():  # caught too early or too late: try again
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    pytest.fail("the save finished each time before the kill")


def removal_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "killed earlier run" in r.getMessage()]


def test_pretraining_is_refused_while_another_job_holds_its_output_dir(tmp_path):
    holder = hold_lock(tmp_path / "run")
    try:
        with pytest.raises(OutputInUseError, match=f"pid {holder.pid} "):
            run_pretraining(
                options(tmp_path / "run"), AlbertConfig(**TINY), build_strategy("one_device")
            )
    finally:
        holder.kill()
        holder.wait()
    assert os.listdir(tmp_path / "run") == []


@pytest.mark.slow  # two CLI processes; test_output_dirs.py holds the lock between two processes
def test_a_second_pretraining_run_into_a_live_runs_output_dir_is_refused(tmp_path):
    args = cli_args(tmp_path)
    state = tmp_path / "run" / "checkpoints" / "checkpoint"
    first = run_cli(*args)
    try:
        deadline = time.time() + 240
        while not state.exists() and time.time() < deadline and first.poll() is None:
            time.sleep(0.05)
        assert first.poll() is None, "the first run ended before the second started"
        output, _ = run_cli(*args).communicate(timeout=300)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    assert "Traceback" not in output
    errors = [line for line in output.splitlines() if "ERROR" in line]
    assert len(errors) == 1, output
    assert (
        f"OutputInUseError: {tmp_path / 'run'} is in use by another job (pid {first.pid} "
        in (errors[0])
    )
    assert "Resuming" not in output and "step" not in output  # refused before any work


def test_pretraining_removes_the_folder_a_killed_save_left(tmp_path, caplog):
    (tmp_path / "checkpoints").mkdir()
    left = killed_mid_save(tmp_path / "checkpoints", "ckpt")
    assert any(left.iterdir())  # the shard being written
    with caplog.at_level(logging.WARNING):
        results = run_pretraining(
            options(tmp_path, num_train_steps=4), AlbertConfig(**TINY), build_strategy("one_device")
        )
    assert results["global_step"] == 4 and results["resumed_from"] is None
    assert not left.exists()
    (line,) = removal_lines(caplog)
    assert line.startswith("removed 1 file(s) or folder(s)") and str(left) in line
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [
        "checkpoint",
        "ckpt-4.data-00000-of-00001",
        "ckpt-4.index",
    ]


def _settings(tmp_path) -> Settings:
    config_file = tmp_path / "albert_config.json"
    AlbertConfig(**MICRO).to_json_file(config_file)
    return Settings(str(tmp_path / "out"), albert_config_file=str(config_file))


def test_fine_tuning_is_refused_while_another_job_holds_its_output_dir(tmp_path):
    settings = _settings(tmp_path)
    holder = hold_lock(settings.output_dir)
    task = HasSevenTask(settings)
    try:
        with pytest.raises(OutputInUseError, match=f"pid {holder.pid} "):
            loop.run(task, do_train=True, do_eval=True, do_predict=True)
    finally:
        holder.kill()
        holder.wait()
    assert task.calls == [("check_predict_inputs",)]  # inputs checked, nothing trained
    assert os.listdir(settings.output_dir) == []


def test_squad_is_refused_before_it_caches_the_predict_files_windows(tmp_path):
    config = config_v2(tmp_path)
    holder = hold_lock(config.output_dir)
    try:
        with pytest.raises(OutputInUseError, match=f"pid {holder.pid} "):
            squad.run(squad.SquadFinetuneTask(config), do_train=True, do_predict=True)
    finally:
        holder.kill()
        holder.wait()
    assert os.listdir(config.output_dir) == []


def test_fine_tuning_removes_the_optimizer_state_folder_a_killed_save_left(tmp_path, caplog):
    settings = _settings(tmp_path)
    state = pathlib.Path(settings.output_dir, "train_state")
    state.mkdir(parents=True)
    left = killed_mid_save(state, "optimizer")
    size = sum(path.stat().st_size for path in left.iterdir())
    with caplog.at_level(logging.WARNING):
        summary = loop.run(HasSevenTask(settings), do_train=True, do_eval=False, do_predict=False)
    assert [os.path.basename(p) for p in summary["checkpoints"]] == ["model.ckpt-3", "model.ckpt-6"]
    assert not left.exists()
    (line,) = removal_lines(caplog)
    assert line == describe_removed(1, size, [str(left)])
