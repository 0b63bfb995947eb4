"""Pretraining, fine-tuning and checkpoint conversion on a hostile machine: a disk that fills, an
output directory that cannot be written, SIGTERM and SIGINT. Each ends in one line with a
non-zero exit status, never a traceback; the last checkpoint written stays the latest, whole,
and the next run resumes from it; TensorFlow's staging directories are removed."""

import json
import os
import pathlib
import signal

import pytest
import tensorflow as tf

from albert_tf import AlbertConfig
from tests.hostile import (
    assert_one_line_ending,
    full_disk_labels,
    hidden_files,
    interrupt_when,
    python,
    run,
    run_on_small_filesystem,
    run_with_read_only,
    tmpfs_available,
)
from tests.model_configs import CLASSIFIER_TINY, SAMPLE_VOCAB_TINY

pytestmark = pytest.mark.e2e  # starts the CLIs or runs whole exports

REPO = pathlib.Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
SPM = FIXTURES / "albert_spm" / "30k-clean.model"
RECORDS = FIXTURES / "original_data" / "orig_small_seq128.tfrecord"
SHARED = FIXTURES / "original_checkpoints" / "albert_tiny_shared"
# A checkpoint of these tiny models (30k-piece vocabulary) and its optimizer state take ~6 MB:
# on 10 MB the first fits and the second does not. The RLIMIT_FSIZE stand-in limits each file,
# so there it is 5 MB: the first checkpoint already fails.
DISK = 10 << 20 if tmpfs_available() else 5 << 20


def pretrain(out: pathlib.Path, config: pathlib.Path, *flags: str) -> list[str]:
    return python(
        str(REPO / "pipelines" / "pretrain.py"),
        f"--input_file={RECORDS}",
        f"--output_dir={out}",
        f"--albert_config_file={config}",
        "--max_seq_length=128",
        "--train_batch_size=16",
        "--num_warmup_steps=2",
        "--save_checkpoints_steps=10",
        "--log_every_steps=10",
        *flags,
    )


@pytest.fixture(scope="module")
def config_files(tmp_path_factory) -> dict[str, pathlib.Path]:
    folder = tmp_path_factory.mktemp("configs")
    files = {}
    for name, values in (("pretraining", SAMPLE_VOCAB_TINY), ("classifier", CLASSIFIER_TINY)):
        files[name] = folder / f"{name}.json"
        AlbertConfig(**values).to_json_file(files[name])
    return files


def checkpoints_left(directory: pathlib.Path) -> list[str]:
    """The checkpoints the `checkpoint` file lists, each read back whole."""
    state = tf.train.get_checkpoint_state(str(directory))
    paths = list(state.all_model_checkpoint_paths) if state else []
    for path in paths:
        path = path if os.path.isabs(path) else str(directory / path)
        assert tf.train.load_checkpoint(path).get_variable_to_shape_map()
    return [os.path.basename(p) for p in paths]


def test_pretraining_on_a_full_disk_keeps_the_last_checkpoint(config_files, tmp_path):
    disk, left = tmp_path / "disk", tmp_path / "left"
    command = pretrain(disk / "run", config_files["pretraining"], "--num_train_steps=20")
    result = run_on_small_filesystem(command, disk, DISK, left)
    assert result.returncode == 1
    line = assert_one_line_ending(result.stderr, f"{disk}/run/checkpoints/ckpt-")
    assert line.startswith(full_disk_labels()) and "(checkpoint)" in line
    assert not any(name.endswith("_temp") for name in os.listdir(left / "run" / "checkpoints"))
    if tmpfs_available():  # the first checkpoint fitted: it stays the latest
        assert "ckpt-20 (checkpoint)" in line
        assert checkpoints_left(left / "run" / "checkpoints") == ["ckpt-10"]


def test_pretraining_refuses_an_output_directory_it_cannot_write(config_files, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    result = run_with_read_only(pretrain(out, config_files["pretraining"]), out)
    assert result.returncode == 1
    assert_one_line_ending(result.stderr, f"PermissionDenied: {out}: permission denied")
    assert os.listdir(out) == []


@pytest.mark.slow  # two pretraining runs: about a minute on 2 cores
def test_pretraining_stopped_by_sigterm_resumes_from_its_last_checkpoint(config_files, tmp_path):
    out = tmp_path / "run"
    command = pretrain(out, config_files["pretraining"], "--num_train_steps=40")
    state = out / "checkpoints" / "checkpoint"
    status, output, _ = interrupt_when(
        command, state.exists, signal.SIGTERM, tmp_path / "log", whole_group=True
    )
    assert status == 128 + signal.SIGTERM
    assert_one_line_ending(output, "Interrupted: stopped by SIGTERM")
    saved = checkpoints_left(out / "checkpoints")
    assert saved and hidden_files(out) == []
    rerun = run(command)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert f"Resuming from {out}/checkpoints/{saved[-1]}" in rerun.stderr
    assert checkpoints_left(out / "checkpoints")[-1] == "ckpt-40"


# One device loop of 100,000 steps (`steps_per_execution`): hours on these cores, so a signal
# that waited for the loop to end would never be seen to act within the test's timeout.
ONE_LONG_LOOP = (
    "--num_train_steps=100000",
    "--iterations_per_loop=100000",
    "--log_every_steps=100000",
    "--save_checkpoints_steps=100000",
)


@pytest.mark.parametrize("xla", ["false", "true"])  # with XLA: a slow first step, the compile
def test_a_signal_stops_pretraining_inside_a_long_device_loop(xla, config_files, tmp_path):
    out = tmp_path / "run"
    command = pretrain(out, config_files["pretraining"], *ONE_LONG_LOOP, f"--jit_compile={xla}")

    def training() -> bool:
        log = tmp_path / "log"
        return log.exists() and "Input pipeline" in log.read_text()

    status, output, _ = interrupt_when(
        command, training, signal.SIGTERM, tmp_path / "log", timeout=120
    )
    assert status == 128 + signal.SIGTERM
    assert_one_line_ending(output, "Interrupted: stopped by SIGTERM")
    assert not (out / "checkpoints" / "checkpoint").exists()
    assert hidden_files(out) == []


def test_a_second_signal_ends_the_job_at_once(config_files, tmp_path):
    out = tmp_path / "run"
    command = pretrain(out, config_files["pretraining"], *ONE_LONG_LOOP, "--jit_compile=true")
    log = tmp_path / "log"

    def training() -> bool:
        return log.exists() and "Input pipeline" in log.read_text()

    # Right behind the first, while the job is on its way out: another kind of signal, as two
    # of one kind so close together are one to the kernel (and Python handles the lower number
    # first when both wait).
    status, output, _ = interrupt_when(
        command, training, signal.SIGINT, log, timeout=120, then=(0, signal.SIGTERM)
    )
    assert status == 128 + signal.SIGTERM
    assert_one_line_ending(output, "Interrupted: stopped at once by a second SIGTERM")
    assert hidden_files(out) == []


def classifier(out: pathlib.Path, config: pathlib.Path, *flags: str) -> list[str]:
    return python(
        str(REPO / "pipelines" / "run_classifier.py"),
        "--task_name=sst-2",
        f"--data_dir={FIXTURES / 'glue'}",
        f"--spm_model_file={SPM}",
        f"--albert_config_file={config}",
        f"--output_dir={out}",
        "--max_seq_length=32",
        "--train_step=6",
        "--save_checkpoints_steps=3",
        "--train_batch_size=8",
        "--do_train",
        *flags,
    )


def test_fine_tuning_on_a_full_disk_keeps_its_checkpoint_and_resumes(config_files, tmp_path):
    disk, left = tmp_path / "disk", tmp_path / "left"
    command = classifier(disk / "run", config_files["classifier"])
    result = run_on_small_filesystem(command, disk, DISK, left)
    assert result.returncode == 1
    line = assert_one_line_ending(result.stderr, f"{disk}/run/")
    assert line.startswith(full_disk_labels()), line
    assert hidden_files(left) == []
    assert not list((left / "run" / "train_state").glob("*_temp"))  # (run/ is gone if no ckpt)
    if not tmpfs_available():
        return
    assert checkpoints_left(left / "run") == ["model.ckpt-3"]  # step 6's state did not fit
    rerun = run(classifier(left / "run", config_files["classifier"]))
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "model.ckpt-6" in checkpoints_left(left / "run")


@pytest.mark.parametrize(
    "script, flags",
    [
        ("run_squad_v2.py", ["--do_predict"]),
        ("run_race.py", [f"--data_dir={FIXTURES / 'original_race' / 'data'}"]),
    ],
)
def test_fine_tuning_refuses_an_output_directory_it_cannot_write(script, flags, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    command = python(
        str(REPO / "pipelines" / script), f"--spm_model_file={SPM}", f"--output_dir={out}", *flags
    )
    result = run_with_read_only(command, out)
    assert result.returncode == 1
    assert_one_line_ending(result.stderr, f"PermissionDenied: {out}: permission denied")


def test_fine_tuning_refuses_a_feature_cache_that_is_a_directory(tmp_path):
    (tmp_path / "cache").mkdir()
    result = run(
        python(
            str(REPO / "pipelines" / "run_squad_v1.py"),
            f"--spm_model_file={SPM}",
            f"--output_dir={tmp_path / 'out'}",
            f"--train_feature_file={tmp_path / 'cache'}",
            "--do_train",
        )
    )
    assert result.returncode == 1
    assert_one_line_ending(result.stderr, f"--train_feature_file={tmp_path / 'cache'} is a dir")
    assert not (tmp_path / "out").exists()


def test_fine_tuning_stopped_by_ctrl_c_keeps_whole_checkpoints(tmp_path):
    out = tmp_path / "out"
    race = FIXTURES / "original_race"
    command = python(
        str(REPO / "pipelines" / "run_race.py"),
        f"--data_dir={race / 'data'}",
        f"--spm_model_file={SPM}",
        f"--albert_config_file={race / 'race_tiny' / 'albert_config.json'}",
        f"--output_dir={out}",
        "--max_seq_length=128",
        "--max_qa_length=32",
        "--train_batch_size=2",
        "--train_step=200",
        "--warmup_step=0",
        "--save_checkpoints_steps=2",
        "--do_eval=false",
    )
    status, output, _ = interrupt_when(
        command,
        lambda: (out / "checkpoint").exists(),
        signal.SIGINT,
        tmp_path / "log",
        whole_group=True,
    )
    assert status == 128 + signal.SIGINT
    assert_one_line_ending(output, "Interrupted: stopped by SIGINT")
    assert checkpoints_left(out) and hidden_files(out) == []


@pytest.mark.slow  # the same one-line ending as every other CLI's, tested above
def test_checkpoint_conversion_on_a_full_disk_or_into_a_read_only_directory(tmp_path):
    def convert(output: pathlib.Path) -> list[str]:
        return python(
            str(REPO / "pipelines" / "convert_checkpoint.py"),
            f"--tf1_checkpoint={SHARED}",
            f"--albert_config_file={SHARED / 'albert_config.json'}",
            f"--output={output}",
        )

    disk = tmp_path / "disk"
    result = run_on_small_filesystem(
        convert(disk / "tiny.keras"), disk, 32 << 10, tmp_path / "left"
    )
    assert result.returncode == 1
    line = assert_one_line_ending(result.stderr, f"{disk}/tiny.keras")
    assert line.startswith(full_disk_labels()), line
    assert os.listdir(tmp_path / "left") == []
    out = tmp_path / "out"
    out.mkdir()
    result = run_with_read_only(convert(out / "tiny.keras"), out)
    assert result.returncode == 1
    assert_one_line_ending(result.stderr, f"PermissionDenied: {out}: permission denied")
    (out / "taken.keras").mkdir()  # a directory where the file should go: refused before loading
    result = run(convert(out / "taken.keras"))
    assert result.returncode == 1
    assert_one_line_ending(result.stderr, f"--output={out / 'taken.keras'} is a directory")
    assert json.loads((SHARED / "albert_config.json").read_text())  # the input is untouched
