"""What every CLI in `pipelines/` shares: a quiet TensorFlow start-up and short log lines.

Import this module before anything that imports TensorFlow, and start the CLI with
`_cli.run_task(main)` (which runs `_cli.run(main)` inside `_failures`' one-line endings) instead
of `app.run(main)`.

What the user sees:
  * Log lines are `HH:MM:SS message` (`HH:MM:SS WARNING message` for warnings and errors), and
    TensorFlow's own Python INFO lines (SavedModel assets, checkpoint sharding, ...) are left out.
    `-v 1` (`--verbosity=1`) or more brings back absl's full format
    (`I1123 08:40:00.123456 1234 file.py:12] message`) and TensorFlow's INFO lines.
  * TensorFlow's C++ logging is set to errors only (`TF_CPP_MIN_LOG_LEVEL=2`) unless the user set
    `TF_CPP_MIN_LOG_LEVEL`, which is then left as given. Its start-up lines that no level hides
    (see `STARTUP_NOISE`) are dropped as long as the level hides INFO; `TF_CPP_MIN_LOG_LEVEL=0`
    shows TensorFlow's start-up exactly as it prints it. TFLite still prints one line of its own
    when its first interpreter starts (`INFO: Created TensorFlow Lite XNNPACK delegate for CPU.`)
    and one per calibrated int8 conversion (`fully_quantize: 0, ...`): no setting hides those.
    Nor one error-level line TensorFlow logs on CPUs it turns oneDNN's custom ops on for (e.g. AMD
    Zen 4) when an int64 op first runs (`util.cc:131] oneDNN supports DT_INT64 only on platforms
    with AVX-512. Falling back to the default Eigen-based implementation`): harmless, Eigen runs it.
  * Python warnings known to be harmless (`HARMLESS_WARNINGS`) are not shown.
"""

from __future__ import annotations

import functools
import logging as std_logging
import os
import re
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, MutableMapping

from absl import app, flags, logging

from albert_tf import stopping
from albert_tf.log_filters import PackageRecordsBelow
from pipelines import _failures

# 2 rather than 1: the WARNING lines TensorFlow prints in our runs are notes on its own internals
# (the TFLite converter ignoring options it sets itself, tf.data not optimizing tf.distribute's
# internal generator dataset), once per conversion or input pipeline. What stops a run still
# shows, as an ERROR line or a Python exception. The price: on a GPU machine missing a CUDA
# library, TensorFlow's WARNING that it cannot use the GPU is hidden too; TF_CPP_MIN_LOG_LEVEL=1
# shows it.
DEFAULT_TF_CPP_MIN_LOG_LEVEL = "2"

# Lines the C++ side of TensorFlow prints on start-up whatever TF_CPP_MIN_LOG_LEVEL says: they go
# through absl's C++ logging, which writes everything to stderr until the program initializes it,
# and a Python program never does. Matched whole, one line at a time.
STARTUP_NOISE = (
    # absl's notice that precedes the first such line, from each library holding its own copy.
    re.compile(
        r"WARNING: All log messages before absl::InitializeLog\(\) is called are written "
        r"to STDERR"
    ),
    # TensorFlow's CUDA build on a machine without the CUDA driver library: it runs on the CPU.
    re.compile(
        r"I\d{4} \S+ +\d+ cudart_stub\.cc:\d+\] Could not find cuda drivers on your "
        r"machine, GPU will not be used\."
    ),
    # The notice that oneDNN's kernels are on, printed while TensorFlow's libraries load (once per
    # library that holds a copy) on CPUs it turns them on for by default (AVX512_VNNI, AVX512_BF16,
    # AVX_VNNI or AMX: e.g. AMD Zen 4). An INFO line, like the one above.
    re.compile(r"I\d{4} \S+ +\d+ port\.cc:\d+\] oneDNN custom operations are on\. .*"),
)
# The same missing driver, reported once more as an error when TensorFlow lists its devices.
# Dropped only after the line above: with a driver present, a failing cuInit is worth seeing.
_CUINIT_WITHOUT_DRIVER = re.compile(
    r"E\d{4} \S+ +\d+ cuda_platform\.cc:\d+\] failed call to "
    r"cuInit: .*"
)

# (message regex, category, module regex) of Python warnings that ask nothing of our users.
HARMLESS_WARNINGS = (
    # TensorFlow's TFLite converter calibrates the int8 variants with its own deprecated
    # `tf.lite.Interpreter` (tensorflow/lite/python/optimize/calibrator.py); our code runs and
    # checks every model with ai_edge_litert's interpreter.
    (
        r"\s*Warning: tf\.lite\.Interpreter is deprecated",
        UserWarning,
        r"tensorflow\.lite\.python\.interpreter",
    ),
)


def configure_tensorflow_logging(environ: MutableMapping[str, str] = os.environ) -> str:
    """Set TF_CPP_MIN_LOG_LEVEL to `DEFAULT_TF_CPP_MIN_LOG_LEVEL` unless already set; returns the
    value in effect. Only acts if it runs before TensorFlow is imported."""
    return environ.setdefault("TF_CPP_MIN_LOG_LEVEL", DEFAULT_TF_CPP_MIN_LOG_LEVEL)


def silence_harmless_warnings() -> None:
    """Ignore exactly the warnings in `HARMLESS_WARNINGS`; every other warning still shows."""
    for message, category, module in HARMLESS_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category, module=module)


def without_startup_noise(lines: Iterable[str]) -> list[str]:
    """`lines` (each with its newline) less TensorFlow's start-up noise (`STARTUP_NOISE`)."""
    kept, no_driver = [], False
    for line in lines:
        text = line.rstrip("\r\n")
        if any(pattern.fullmatch(text) for pattern in STARTUP_NOISE):
            no_driver = no_driver or "cudart_stub" in text
            continue
        if no_driver and _CUINIT_WITHOUT_DRIVER.fullmatch(text):
            continue
        kept.append(line)
    return kept


def _hides_cpp_info(environ: MutableMapping[str, str] = os.environ) -> bool:
    try:
        return int(environ.get("TF_CPP_MIN_LOG_LEVEL", "0")) >= 1
    except ValueError:
        return False


def import_tensorflow_quietly() -> None:
    """Import TensorFlow and let it find its devices, with its start-up noise left out of stderr.

    Everything else TensorFlow writes meanwhile is passed on unchanged once the import is done, or
    fails. Does nothing if TensorFlow is already imported; imports it plainly if the user asked
    for TensorFlow's INFO lines (TF_CPP_MIN_LOG_LEVEL=0) or stderr cannot be redirected.
    """
    if "tensorflow" in sys.modules:
        return
    try:
        saved_stderr = os.dup(2) if _hides_cpp_info() else None
    except OSError:
        saved_stderr = None
    if saved_stderr is None:
        import tensorflow  # noqa: F401

        return
    # The C++ side writes to file descriptor 2 directly, so that is what is redirected; a file
    # rather than a pipe, which would block once full while nothing reads it.
    with tempfile.TemporaryFile() as captured:
        sys.stderr.flush()
        os.dup2(captured.fileno(), 2)
        try:
            import tensorflow as tf

            tf.config.list_physical_devices()  # where the CUDA driver is looked for
        finally:
            sys.stderr.flush()
            os.dup2(saved_stderr, 2)
            os.close(saved_stderr)
            captured.seek(0)
            text = captured.read().decode("utf-8", errors="replace")
            sys.stderr.write("".join(without_startup_noise(text.splitlines(keepends=True))))
            sys.stderr.flush()


class ShortFormatter(std_logging.Formatter):
    """`HH:MM:SS message`, with the level name before the message unless it is INFO."""

    def format(self, record: std_logging.LogRecord) -> str:
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
        level = "" if record.levelno == std_logging.INFO else f"{record.levelname} "
        return f"{stamp} {level}{super().format(record)}"


def configure_logging() -> None:
    """Short log lines and no TensorFlow INFO lines, unless `--verbosity` is above 0 (needs the
    flags parsed: `run` calls it after parsing)."""
    if flags.FLAGS["verbosity"].value > 0:
        return
    handler = logging.get_absl_handler()
    handler.setFormatter(ShortFormatter())
    # Much of TensorFlow logs through absl, as our code does: where a record comes from, not its
    # logger's name, tells them apart.
    handler.addFilter(PackageRecordsBelow("tensorflow"))
    # TensorFlow's other Python logger (tf.get_logger()), which also reaches absl's handler.
    std_logging.getLogger("tensorflow").setLevel(std_logging.WARNING)


def list_helper_flags_in_help(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Makes the flags that the shared modules of `pipelines/` defined (distribution flags, the
    settings' flags) key flags of the main module, so that `--help` lists them with its own."""
    for module, defined in flag_values.flags_by_module_dict().items():
        if module.startswith("pipelines."):
            for flag in defined:
                flag_values.register_key_flag_for_module(sys.argv[0], flag)


def run_task(
    main: Callable[[list[str]], object], *, tensorflow: bool = False, bad_input: str | None = None
) -> None:
    """The one entry point of every CLI: `run(main)` where SIGTERM / SIGINT stop the job cleanly
    and every known failure, bad input, full disk or missing permission ends as one line and a
    non-zero exit status (`_failures`), those met while TensorFlow loads (with `tensorflow`)
    included. `bad_input` labels the bad-input line in place of the error's type."""
    list_helper_flags_in_help()
    _failures.stop_on_signals()

    def stoppable_main(argv: list[str]) -> object:
        # In a thread of its own, so that a signal acts while it sits in a TensorFlow call.
        job = functools.partial(main, argv)
        return stopping.run_stoppably(job, on_dropped=_failures.drop_the_job)

    try:
        _failures.exit_on_failure(
            lambda: run(
                lambda argv: _failures.exit_on_failure(lambda: stoppable_main(argv), bad_input),
                tensorflow=tensorflow,
            ),
            bad_input,
        )
    except SystemExit as ending:
        _failures.end_process(ending)


def run(main: Callable[[list[str]], object], *, tensorflow: bool = False) -> None:
    """`app.run(main)` with `configure_logging` applied after flag parsing; with `tensorflow`,
    TensorFlow is then imported quietly before `main` (not for `--help` or a flag error)."""
    app.call_after_init(configure_logging)
    if tensorflow:
        app.call_after_init(import_tensorflow_quietly)
    app.run(main)


configure_tensorflow_logging()
silence_harmless_warnings()
