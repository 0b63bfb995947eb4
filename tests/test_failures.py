"""pipelines/_failures.py: what ends a CLI becomes one line and an exit status, from Python's
errors, TensorFlow's (by their messages, without importing it) and a worker's passed on as text;
a bug keeps its traceback. The CLIs themselves are run on a full disk, a read-only directory and
under signals in test_data_prep_failures.py and test_training_failures.py."""

import errno
import os
import signal

import pytest
from absl import app

from pipelines import _failures


class ResourceExhaustedError(Exception):
    """Stands in for TensorFlow's error of that name: the same message, from SaveV2."""


def test_a_full_disk_a_read_only_file_system_or_a_permission_names_the_path():
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/out/train.tfrecord")
    assert _failures.describe(full) == ("DiskFull: /out/train.tfrecord: no space left on device", 1)
    denied = PermissionError(errno.EACCES, os.strerror(errno.EACCES), "/out")
    assert _failures.describe(ValueError("wrapped")) == ("ValueError: wrapped", 1)
    try:  # wherever it is in the chain of causes
        try:
            raise denied
        except OSError as cause:
            raise ValueError("output directory is not writable") from cause
    except ValueError as error:
        assert _failures.describe(error) == ("PermissionDenied: /out: permission denied", 1)
    quota = OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))  # a failed write names no file
    assert _failures.describe(quota) == (
        "DiskQuotaExceeded: (file not named): disk quota exceeded",
        1,
    )


def test_tensorflows_messages_name_the_checkpoint_and_its_staging_goes(tmp_path):
    staging = tmp_path / "ckpt-20_temp"
    staging.mkdir()
    (staging / "part-00000-of-00001.data-00000-of-00001.tempstate123").write_bytes(b"x")
    error = ResourceExhaustedError(
        "{{function_node __wrapped__SaveV2_dtypes_2_device_/job:localhost/replica:0/task:0/"
        f"device:CPU:0}}}} {staging}/part-00000-of-00001.data-00000-of-00001.tempstate123; "
        "No space left on device [Op:SaveV2]"
    )
    assert _failures.describe(error) == (
        f"DiskFull: {tmp_path}/ckpt-20 (checkpoint): no space left on device",
        1,
    )
    read_only = ResourceExhaustedError(f"{tmp_path}/logs; Read-only file system")
    assert _failures.describe(read_only) == (
        f"ReadOnlyFileSystem: {tmp_path}/logs: read-only file system",
        1,
    )
    _failures.remove_checkpoint_staging(f"{staging}/part-00000")
    assert not staging.exists()
    # Only a staging directory of TensorFlow's own making is removed.
    other = tmp_path / "mine_temp"
    other.mkdir()
    (other / "notes.txt").write_text("x")
    _failures.remove_checkpoint_staging(f"{other}/part-0")
    assert (other / "notes.txt").exists()


def test_a_workers_error_passed_on_as_text_is_read_back():
    message = (
        "Traceback (most recent call last): ...\nOSError: [Errno 28] No space left on device\n"
        "... OSError: [Errno 28] No space left on device: '/out/.train.beam-1.records-0-1-ab'"
        " [while running 'ProcessPools']"
    )
    assert _failures.describe(RuntimeError(message)) == (
        "DiskFull: /out/.train.beam-1.records-0-1-ab: no space left on device",
        1,
    )


def test_signals_bad_input_and_bugs():
    assert _failures.describe(_failures.Interrupted(signal.SIGTERM)) == (
        "Interrupted: stopped by SIGTERM",
        143,
    )
    assert _failures.describe(KeyboardInterrupt()) == ("Interrupted: stopped by SIGINT", 130)
    try:  # a stop that a context manager's clean-up turned into another error
        try:
            raise _failures.Interrupted(signal.SIGTERM)
        finally:
            raise AssertionError("Nesting violated for default stack")
    except AssertionError as unbalanced:
        assert _failures.describe(unbalanced) == ("Interrupted: stopped by SIGTERM", 143)
    assert _failures.describe(app.UsageError("--output is required")) == (
        "UsageError: --output is required",
        1,
    )
    many_lines = FileNotFoundError("input file not found:\n  'a' matches no file")
    assert _failures.describe(many_lines) == (
        "FileNotFoundError: input file not found: 'a' matches no file",
        1,
    )
    assert _failures.describe(KeyError("a bug")) is None
    assert _failures.describe(RuntimeError("a bug too")) is None


def test_exit_on_failure_logs_one_line_and_exits_with_its_status(caplog):
    def full():
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/out/x")

    with pytest.raises(SystemExit) as stopped:
        _failures.exit_on_failure(full)
    assert stopped.value.code == 1
    assert [r.getMessage() for r in caplog.records] == ["DiskFull: /out/x: no space left on device"]
    with pytest.raises(KeyError):  # a bug: raised as it is, traceback and all
        _failures.exit_on_failure(lambda: {}["missing"])
    assert _failures.exit_on_failure(lambda: 7) == 7
