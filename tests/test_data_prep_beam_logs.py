"""What a Beam job on this machine prints: its own lines as the local runner prints them, none of
Beam's plumbing, and nothing from a worker torn down mid-bundle."""

import logging
import os
import pathlib
import re
import subprocess
import sys

import apache_beam
import pytest

from data_prep import beam_logs
from tests.test_data_prep_pipeline import _write_bad_inputs

REPO = pathlib.Path(__file__).resolve().parents[1]
SPM = REPO / "tests" / "fixtures" / "albert_spm" / "30k-clean.model"
BEAM = pathlib.Path(apache_beam.__file__).parent
STAMP = re.compile(r"^\d\d:\d\d:\d\d ")


def _data_prep(inputs: pathlib.Path, out: pathlib.Path, runner: str) -> list[str]:
    """Runs the CLI with two workers; its stderr lines without their time stamps."""
    ran = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipelines.create_pretraining_data",
            f"--input_file={inputs}/*",
            f"--output_file={out}/train.tfrecord",
            f"--spm_model_file={SPM}",
            "--max_seq_length=128",
            "--dupe_factor=1",
            "--num_workers=2",
            f"--runner={runner}",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    lines = ran.stderr.splitlines()
    assert all(STAMP.match(line) for line in lines), ran.stderr[-3000:]
    return [STAMP.sub("", line) for line in lines]


@pytest.mark.e2e
def test_two_beam_workers_print_the_local_runners_warnings_and_nothing_of_beams(tmp_path):
    _write_bad_inputs(tmp_path / "in")
    local = _data_prep(tmp_path / "in", tmp_path / "local", "local")
    beam = _data_prep(tmp_path / "in", tmp_path / "beam", "beam")
    warnings = [line for line in local if line.startswith("WARNING ")]
    assert len(warnings) >= 4, local  # the bad file's skips
    # The workers' warnings came over Beam's logging service, worded as the local runner's; the
    # order across files is the workers'.
    assert sorted(beam[:-1]) == sorted(warnings), beam
    assert re.fullmatch(
        r"wrote \d+ instances to 1 file\(s\) in .* on Beam \(FnApiRunner\)", beam[-1]
    )


def _relayed(message: str, path: pathlib.Path, severity: str) -> str:
    """A record as a worker sends it and the launcher's relay logs it."""
    from apache_beam.portability.api import beam_fn_api_pb2

    entry = beam_fn_api_pb2.LogEntry(
        severity=getattr(beam_fn_api_pb2.LogEntry.Severity, severity),
        message=message,
        log_location=f"{path}:42",
        thread="MainThread",
    )
    entry.timestamp.seconds = 1_700_000_000
    return str(entry).replace("\n", " ")


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


@pytest.fixture
def collected():
    handler, root = _Collect(), logging.getLogger()
    root.addHandler(handler)
    level = root.level
    root.setLevel(logging.DEBUG)
    try:
        yield handler.records
    finally:
        root.setLevel(level)
        root.removeHandler(handler)


def test_relayed_worker_records_are_logged_as_they_were_unless_beam_plumbing(collected):
    relay = logging.getLogger(beam_logs.RELAY_LOGGER)
    teardown = (
        "Error processing instruction bundle_5. Original traceback is\nTraceback ...\nKeyError"
    )
    sent = [
        ("skipped (nul_byte)", REPO / "data_prep" / "corpus.py", "WARN"),
        ("reading a.txt (1/2)", REPO / "data_prep" / "units.py", "INFO"),
        (teardown, BEAM / "runners" / "worker" / "sdk_worker.py", "ERROR"),
        ("Operation ongoing for 300 s", BEAM / "runners" / "worker" / "sdk_worker.py", "WARN"),
        (
            "No semi_persistent_directory",
            BEAM / "runners" / "worker" / "sdk_worker_main.py",
            "WARN",
        ),
        ("Python sdk harness exiting.", BEAM / "runners" / "worker" / "sdk_worker_main.py", "INFO"),
    ]
    with beam_logs.quiet_local_job("FnApiRunner"):
        for message, path, severity in sent:
            relay.log(logging.INFO, "Worker: %s", _relayed(message, path, severity))
        plumbing = {"msg": "starting control server on port 1", "levelno": logging.INFO}
        plumbing["pathname"] = str(BEAM / "runners" / "portability" / "fn_api_runner" / "x.py")
        logging.getLogger("apache_beam.runners").handle(logging.makeLogRecord(plumbing))
    kept = [(r.getMessage(), r.levelname, r.pathname, r.lineno) for r in collected]
    assert kept == [
        ("skipped (nul_byte)", "WARNING", str(REPO / "data_prep" / "corpus.py"), 42),
        ("reading a.txt (1/2)", "INFO", str(REPO / "data_prep" / "units.py"), 42),
        ("Operation ongoing for 300 s", "WARNING", str(BEAM / "runners/worker/sdk_worker.py"), 42),
    ]
    assert collected[0].created == 1_700_000_000


def test_other_runners_and_debug_logging_keep_beams_lines(collected):
    from absl import logging as absl_logging

    relay = logging.getLogger(beam_logs.RELAY_LOGGER)
    line = _relayed("Python sdk harness exiting.", BEAM / "sdk_worker_main.py", "INFO")
    with beam_logs.quiet_local_job("DataflowRunner"):
        relay.info("Worker: %s", line)
    verbosity = absl_logging.get_verbosity()
    absl_logging.set_verbosity(absl_logging.DEBUG)
    try:
        with beam_logs.quiet_local_job("FnApiRunner"):
            relay.info("Worker: %s", line)
    finally:
        absl_logging.set_verbosity(verbosity)
    assert [r.getMessage() for r in collected] == [f"Worker: {line}"] * 2
