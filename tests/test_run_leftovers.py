"""What a failed, stopped or killed run leaves for the next one: the holder of an output directory
named in one printable line, an export rerun after its commit point that finds its version whole,
and a fine-tuning run that ends before its first checkpoint leaving a new output directory as it
found it."""

import json
import logging
import os
import pathlib
import shlex
import signal
import socket
import subprocess
import sys
import threading
import types

import numpy as np
import pytest
import tensorflow as tf

from albert_tf import stopping
from albert_tf.config import AlbertConfig
from albert_tf.export.pipeline import ExportConfig, _identity, export_model
from albert_tf.finetuning import loop
from albert_tf.finetuning.new_output_dir import emptied_unless_checkpointed
from albert_tf.output_dirs import OutputInUseError, lock_output_dir, shell_command
from albert_tf.tasks.squad import finetune as squad
from albert_tf.training.callbacks import NonFiniteLossError
from tests import hostile
from tests.model_configs import MICRO
from tests.test_export_publish import _PUBLISH_AND_DIE, published
from tests.test_finetuning_loop import DivergingTask, HasSevenTask, Settings, contains_token_7
from tests.test_squad_finetune import config_v2

pytestmark = pytest.mark.e2e  # starts the CLIs or runs whole exports

REPO = pathlib.Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"

# --- The holder of an output directory, as a shell shows its command line -------------------


def test_a_command_line_is_shown_as_a_shell_would_with_no_control_characters():
    raw = b"python\0-c\0print(1)\0two words\0line\nbreak\0tab\there\0\xff\0caf\xc3\xa9\0it's\0"
    shown = shell_command(raw)
    assert shown == (
        "python -c 'print(1)' 'two words' $'line\\nbreak' $'tab\\there' $'\\xff' 'café' "
        "'it'\"'\"'s'"
    )
    assert shown.isprintable()
    assert shell_command(b"") == "" and shell_command(b"renamed title\0\0\0") == "'renamed title'"


def test_the_holder_of_an_output_directory_is_named_in_one_printable_line(tmp_path):
    out = tmp_path / "run"
    code = (
        "import sys, time\n"
        "from albert_tf.output_dirs import lock_output_dir\n"
        "with lock_output_dir(sys.argv[-1]):\n"
        "    print('holding', flush=True)\n"
        "    time.sleep(120)\n"
    )
    # The program from stdin (`-`): the arguments to show come first on the command line.
    holder = subprocess.Popen(
        [sys.executable, "-", "two words", "a\nnewline", str(out)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        holder.stdin.write(code)
        holder.stdin.close()
        assert holder.stdout.readline().strip() == "holding"
        with pytest.raises(OutputInUseError) as refused:
            with lock_output_dir(out):
                pytest.fail("locked a directory another live process holds")
    finally:
        holder.kill()
        holder.wait()
    message = str(refused.value)
    assert message.isprintable(), repr(message)  # no NUL between the arguments, no newline
    shown = f"{shlex.quote(sys.executable)} - 'two words' $'a\\nnewline' "
    assert f"(pid {holder.pid} on {socket.gethostname()}: {shown}" in message, message


# --- An export rerun after its commit point ----------------------------------------------------

# A version of model "m" with the formats saved_model and tflite_fp32 and no tokenizer.
VERSION = {
    "m/3/saved_model.pb": "ids graph",
    "m/3/variables/variables.index": "ids weights",
    "m_tflite/3/m_fp32.tflite": "fp32",
}
UNITS = ["m/3", "m_tflite/3"]
REPORT = "export_report_m_3.json"
# The report's write into the staging directory (the commit point), a rename per version
# directory, the report's rename, the staging directory's removal.
CALLS = 1 + len(UNITS) + 1 + 1


def stub_head(**changes) -> types.SimpleNamespace:
    """What `export_model` reads of a head before building anything."""
    return types.SimpleNamespace(kind="pretrainer", config=AlbertConfig(**dict(MICRO, **changes)))


def export_config(out: pathlib.Path, **changes) -> ExportConfig:
    return ExportConfig(str(out), model_name="m", version=3, max_seq_length=16, **changes)


def report_of(out: pathlib.Path, head, **failures) -> dict:
    """The report an export of `head` with `export_config` writes (`failures`: by artifact)."""
    places = {"saved_model": out / "m" / "3", "tflite_fp32": out / "m_tflite/3/m_fp32.tflite"}
    artifacts = {
        key: {"failures": failures.get(key, []), "path": str(path), "size_bytes": 9}
        for key, path in places.items()
    }
    return {**_identity(export_config(out), head), "tensorflow": "x", "artifacts": artifacts}


def publish_and_die(out: pathlib.Path, kill_before: int, report: dict) -> None:
    """Publishes VERSION with `report` as an export does, SIGKILLed before its `kill_before`th
    call that changes the output directory (`tests/test_export_publish.py`'s script)."""
    script = _PUBLISH_AND_DIE.replace(
        'staging.commit({"artifacts": {}}, finals[-1])',
        "staging.commit(json.loads(sys.argv[6]), finals[-1])",
    )
    assert script != _PUBLISH_AND_DIE
    args = [str(out), str(kill_before), json.dumps(VERSION), json.dumps(UNITS), REPORT]
    run = subprocess.run(
        [sys.executable, "-c", script, *args, json.dumps(report)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert run.returncode == -signal.SIGKILL, run.stderr[-2000:]


@pytest.mark.parametrize("kill_before", [2, 4, CALLS], ids=["committed", "renamed", "published"])
def test_an_export_killed_after_its_commit_point_is_complete_on_a_rerun(
    kill_before, tmp_path, caplog
):
    out, head = tmp_path / "out", stub_head()
    report = report_of(out, head)
    publish_and_die(out, kill_before, report)
    assert [p.name for p in out.iterdir() if p.name.startswith(".export-m-3-")]  # left behind
    caplog.set_level(logging.INFO, logger="absl")
    assert export_model(head, export_config(out)) == json.loads(json.dumps(report))
    done = [r.getMessage() for r in caplog.records if "already exported" in r.getMessage()]
    assert done == [
        f"m version 3 is already exported and complete in {out} ({out / REPORT}): nothing to do"
    ]
    assert all(r.levelno < logging.ERROR for r in caplog.records)
    # Whatever the kill left undone is done: every version directory in place, no staging left.
    assert published(out) == {**VERSION, REPORT: (out / REPORT).read_text()}
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []


def test_the_export_cli_rerun_after_its_commit_point_ends_well_in_one_line(tmp_path):
    out, shared = tmp_path / "out", FIXTURES / "original_checkpoints" / "albert_tiny_shared"
    head = types.SimpleNamespace(
        kind="pretrainer", config=AlbertConfig.from_json_file(shared / "albert_config.json")
    )
    publish_and_die(out, 3, report_of(out, head))  # killed between its two renames
    result = hostile.run(
        hostile.python(
            str(REPO / "pipelines" / "export.py"),
            f"--tf1_checkpoint={shared}",
            f"--albert_config_file={shared / 'albert_config.json'}",
            f"--output_dir={out}",
            "--model_name=m",
            "--version=3",
            "--max_seq_length=16",
        )
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ERROR" not in result.stderr and "Traceback" not in result.stderr
    # The rename the kill left undone is done, then one line says the version is complete.
    assert "Finished publishing m version 3, which a stopped export had committed" in result.stderr
    done = [line for line in result.stderr.splitlines() if "already exported" in line]
    assert len(done) == 1, result.stderr[-3000:]
    assert done[0].endswith(
        f"m version 3 is already exported and complete in {out} ({out / REPORT}): nothing to do"
    )
    assert published(out) == {**VERSION, REPORT: (out / REPORT).read_text()}


def _without_report(out):
    (out / REPORT).unlink()


def _without_the_tflite_file(out):
    (out / "m_tflite/3/m_fp32.tflite").unlink()


@pytest.mark.parametrize(
    "change, export_changes, head_changes, failures",
    [
        (_without_report, {}, {}, {}),  # version directories that no export of this one wrote
        (_without_the_tflite_file, {}, {}, {}),  # an artifact gone since
        (None, {"formats": ("saved_model", "tflite_fp32", "tflite_fp16")}, {}, {}),  # more asked
        (None, {}, {"hidden_size": 32}, {}),  # another model's
        (None, {}, {}, {"tflite_fp32": ["max |diff| 1.0 > 1e-4"]}),  # refused by its gate
    ],
    ids=["no-report", "incomplete", "other-formats", "other-model", "refused-artifact"],
)
def test_an_export_over_an_incomplete_or_foreign_version_is_still_refused(
    change, export_changes, head_changes, failures, tmp_path
):
    out = tmp_path / "out"
    publish_and_die(out, CALLS + 1, report_of(out, stub_head(), **failures))  # all published
    if change is not None:
        change(out)
    before = published(out)
    with pytest.raises(FileExistsError, match="already exported") as refused:
        export_model(stub_head(**head_changes), export_config(out, **export_changes))
    assert refused.value.__notes__ == [f"nothing was written in {out}"]
    assert published(out) == before


# --- Fine-tuning that ends before its first checkpoint ------------------------------------------


def settings(tmp_path, out: pathlib.Path) -> Settings:
    config_file = tmp_path / "albert_config.json"
    AlbertConfig(**MICRO).to_json_file(config_file)
    return Settings(str(out), albert_config_file=str(config_file))


class DivergingAtOnce(DivergingTask):
    """Scores NaN from the first example on: the loss of step 1 is NaN, by when the run has
    written its config, its settings and its TensorBoard folder."""

    def train_dataset(self):
        features, _ = contains_token_7(64, seed=0)
        scores = np.full(64, np.nan, np.float32)
        data = tf.data.Dataset.from_tensor_slices((features, scores))
        return data.repeat().batch(self.settings.train_batch_size, drop_remainder=True), 64


class InterruptedReadingData(HasSevenTask):
    """Stopped by Ctrl-C while reading its training data, after writing its config."""

    def train_dataset(self):
        assert os.path.exists(os.path.join(self.settings.output_dir, "albert_config.json"))
        raise KeyboardInterrupt


def test_fine_tuning_failing_at_its_first_step_removes_the_new_output_dir(tmp_path):
    out = tmp_path / "new" / "out"
    with pytest.raises(NonFiniteLossError, match="at step 1") as failed:
        loop.run(DivergingAtOnce(settings(tmp_path, out)), True, False, False)
    assert not out.exists()
    assert (tmp_path / "new").is_dir()  # only the directory the run created goes
    assert failed.value.__notes__ == [
        f"removed what it wrote in the new {out}: it had saved no checkpoint"
    ]


def test_fine_tuning_interrupted_in_an_empty_output_dir_leaves_it_empty(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(KeyboardInterrupt):
        loop.run(InterruptedReadingData(settings(tmp_path, out)), True, False, False)
    assert out.is_dir() and os.listdir(out) == []


def test_fine_tuning_failing_in_a_used_output_dir_leaves_what_it_held(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("a user's")
    with pytest.raises(KeyboardInterrupt):
        loop.run(InterruptedReadingData(settings(tmp_path, out)), True, False, False)
    assert sorted(os.listdir(out)) == ["albert_config.json", "notes.txt"]


def test_fine_tuning_failing_after_its_first_checkpoint_keeps_everything_and_resumes(tmp_path):
    out = tmp_path / "out"
    task = DivergingTask(settings(tmp_path, out))  # NaN at step 4, after model.ckpt-3
    kept = ["albert_config.json", "logs", "model.ckpt-3.index", "train_state"]
    with pytest.raises(NonFiniteLossError, match="at step 4") as failed:
        loop.run(task, True, False, False)
    assert not getattr(failed.value, "__notes__", None)
    assert set(kept) <= set(os.listdir(out))
    assert (out / "train_state" / "settings.json").is_file()
    # The rerun in that directory resumes from the checkpoint, fails again, and keeps it all.
    task = DivergingTask(settings(tmp_path, out))
    with pytest.raises(NonFiniteLossError, match="at step 4"):
        loop.run(task, True, False, False)
    assert ("load", str(out / "model.ckpt-3")) in task.calls
    assert set(kept) <= set(os.listdir(out))


def test_squad_failing_before_its_first_checkpoint_removes_its_feature_caches_too(tmp_path):
    """SQuAD caches the predict file's windows in its new output directory before the loop."""
    config = config_v2(tmp_path, init_checkpoint=str(tmp_path / "missing" / "model.ckpt"))
    with pytest.raises(FileNotFoundError, match="missing") as failed:
        squad.run(squad.SquadFinetuneTask(config), do_train=True, do_predict=True)
    assert failed.value.__notes__ == [
        f"removed what it wrote in the new {config.output_dir}: it had saved no checkpoint"
    ]
    assert not os.path.exists(config.output_dir)


def test_a_fine_tuning_job_dropped_before_its_first_checkpoint_removes_its_new_dir(tmp_path):
    """A job still inside one long call when the grace runs out is dropped: the process ends
    without unwinding, after the `stopping.on_drop` undos."""
    out = tmp_path / "out"
    release, job_threads, said = threading.Event(), [], []

    def job():
        job_threads.append(threading.current_thread())
        out.mkdir()  # as the job's lock does
        with emptied_unless_checkpointed(str(out), created=True):
            (out / "albert_config.json").write_text("{}")
            stopping.ask_to_stop(signal.SIGTERM)
            release.wait(30)  # one long call: the Interrupted waits for its end

    class Ended(Exception):
        pass

    def end_process(signum, notes):
        said.extend(notes)
        raise Ended  # stands in for the end of the process

    stopping.reset()
    try:
        with pytest.raises(Ended):
            stopping.run_stoppably(job, on_dropped=end_process, grace_seconds=0.1)
        assert said == [f"removed what it wrote in the new {out}: it had saved no checkpoint"]
        assert not out.exists()
    finally:
        release.set()
        job_threads[0].join(30)
        stopping.reset()


def test_a_fine_tuning_cli_given_bad_training_data_leaves_no_new_output_dir(tmp_path):
    data, out = tmp_path / "glue", tmp_path / "out"
    (data / "SST-2").mkdir(parents=True)
    rows = (FIXTURES / "glue" / "SST-2" / "train.tsv").read_text().splitlines()
    rows.insert(3, "a row without its label")
    (data / "SST-2" / "train.tsv").write_text("\n".join(rows) + "\n")
    config = tmp_path / "albert_config.json"
    AlbertConfig(**dict(MICRO, vocab_size=30000)).to_json_file(config)
    result = hostile.run(
        hostile.python(
            str(REPO / "pipelines" / "run_classifier.py"),
            "--task_name=sst-2",
            f"--data_dir={data}",
            f"--spm_model_file={FIXTURES / 'albert_spm' / '30k-clean.model'}",
            f"--albert_config_file={config}",
            f"--output_dir={out}",
            "--max_seq_length=16",
            "--train_step=2",
            "--train_batch_size=4",
            "--do_train",
            "--do_eval=false",
        )
    )
    assert result.returncode == 1, result.stderr[-3000:]
    line = hostile.assert_one_line_ending(result.stderr, f"{data / 'SST-2' / 'train.tsv'}:4")
    assert line.endswith(f"(removed what it wrote in the new {out}: it had saved no checkpoint)")
    assert not out.exists()
