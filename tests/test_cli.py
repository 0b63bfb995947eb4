"""pipelines/_cli.py: short log lines, TensorFlow's start-up noise left out, the user's settings kept."""

import json
import os
import pathlib
import re
import subprocess
import sys

from pipelines import _cli

REPO = pathlib.Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
SHARED = FIXTURES / "original_checkpoints" / "albert_tiny_shared"
SPM = FIXTURES / "albert_spm" / "30k-clean.model"
CORPUS = FIXTURES / "original_data" / "corpus_small.txt"

CPP_OR_ABSL_PREFIX = re.compile(r"^[IWEF]\d{4} ", re.MULTILINE)  # I0000 00:00:... / I1123 08:40:...
FILE_LINE_PREFIX = re.compile(r"\.py:\d+\] ")
SHORT_LINE = r"^\d\d:\d\d:\d\d "


def _run(script: str, *args: str, **env) -> subprocess.CompletedProcess:
    # As a user's shell would run it: without the TF_CPP_MIN_LOG_LEVEL the test session sets.
    environ = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    return subprocess.run(
        [sys.executable, str(REPO / "pipelines" / script), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**environ, **env},
    )


def test_tensorflow_log_level_defaults_to_errors_only_but_the_users_setting_wins():
    environ = {}
    assert _cli.configure_tensorflow_logging(environ) == "2"
    assert environ == {"TF_CPP_MIN_LOG_LEVEL": "2"}
    environ = {"TF_CPP_MIN_LOG_LEVEL": "0"}
    assert _cli.configure_tensorflow_logging(environ) == "0"
    assert environ == {"TF_CPP_MIN_LOG_LEVEL": "0"}


def test_only_the_known_startup_lines_are_dropped():
    banner = (
        "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
    )
    no_driver = (
        "I0000 00:00:1795423136.039159    3609 cudart_stub.cc:31] Could not find cuda "
        "drivers on your machine, GPU will not be used.\n"
    )
    cuinit = (
        "E0000 00:00:1795423203.972110    4279 cuda_platform.cc:52] failed call to cuInit: "
        "INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)\n"
    )
    onednn = (
        "I0000 00:00:1795700932.871672    2527 port.cc:153] oneDNN custom operations are on. "
        "You may see slightly different numerical results due to floating-point round-off "
        "errors from different computation orders. To turn them off, set the environment "
        "variable `TF_ENABLE_ONEDNN_OPTS=0`.\n"
    )
    other = "E0000 00:00:1795423203.972110    4279 some_op.cc:10] a real error\n"
    lines = [banner, onednn, no_driver, onednn, cuinit, other, "text\n"]
    assert _cli.without_startup_noise(lines) == [other, "text\n"]
    # Without the missing-driver line first, a failing cuInit is news: it stays.
    assert _cli.without_startup_noise([banner, cuinit]) == [cuinit]


def test_tensorflow_cli_prints_short_lines_only(tmp_path):
    result = _run(
        "convert_checkpoint.py",
        f"--tf1_checkpoint={SHARED}",
        f"--albert_config_file={SHARED / 'albert_config.json'}",
        f"--output={tmp_path / 'tiny.keras'}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    output = result.stdout + result.stderr
    assert not CPP_OR_ABSL_PREFIX.search(output), output
    assert not FILE_LINE_PREFIX.search(output), output
    assert "absl::InitializeLog" not in output and "UserWarning" not in output, output
    assert re.search(SHORT_LINE + r"wrote .*tiny\.keras \(\d+ parameters\)$", output, re.MULTILINE)


def test_verbosity_brings_back_absl_prefixes(tmp_path):
    flags = [
        f"--input_file={CORPUS}",
        f"--spm_model_file={SPM}",
        "--max_seq_length=16",
        "--dupe_factor=1",
        "--num_workers=1",
    ]
    short = _run("create_pretraining_data.py", *flags, f"--output_file={tmp_path}/a.tfrecord")
    assert short.returncode == 0, short.stderr
    assert re.search(SHORT_LINE + "wrote ", short.stderr, re.MULTILINE), short.stderr
    assert not FILE_LINE_PREFIX.search(short.stderr), short.stderr
    # max_predictions_per_seq follows the short max_seq_length down.
    summary = json.loads((tmp_path / "a.summary.json").read_text())
    assert summary["settings"]["max_predictions_per_seq"] == 16
    verbose = _run(
        "create_pretraining_data.py", *flags, f"--output_file={tmp_path}/b.tfrecord", "-v", "1"
    )
    assert verbose.returncode == 0, verbose.stderr
    assert re.search(
        r"^I\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S+\.py:\d+\] wrote ", verbose.stderr, re.MULTILINE
    ), verbose.stderr
