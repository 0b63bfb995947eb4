"""Where the Beam job runs: the runner and its options, and, on this machine (the FnApiRunner),
worker processes that leave signals to the launcher.

The FnApiRunner's worker processes run in a process group of their own: a Ctrl-C or a SIGTERM
sent to the launcher's whole process group (a terminal, a service manager) reaches the launcher
alone, which ends the job; its workers leave when it closes their connection, as they do when it
is killed. Otherwise every worker would print a traceback of its own and the launcher's threads
one per worker that exited.
"""

from __future__ import annotations

import logging as std_logging
import shlex
import sys
from collections.abc import Sequence

from apache_beam.options.pipeline_options import PipelineOptions

# Beam's own worker command (`sdk_worker_main`), in a new process group first; `exec`: no shell
# is left in the launcher's group (Beam starts the command through one). The NullHandler: a
# worker's records reach the launcher over Beam's logging service (`beam_logs`); without a
# handler of its own, Beam's first `logging.warning` would give the worker one on stderr, which
# prints every record a second time, tracebacks of a teardown included.
WORKER_COMMAND = f"exec {shlex.quote(sys.executable)} -c " + shlex.quote(
    "import logging, os, runpy; os.setpgrp(); "
    "logging.getLogger().addHandler(logging.NullHandler()); "
    "runpy.run_module('apache_beam.runners.worker.sdk_worker_main', run_name='__main__', "
    "alter_sys=True)"
)


class _NoRunningModeWarning(std_logging.Filter):
    """Drops Beam's warning that several workers want `multi_processing`: they are the worker
    processes of `WORKER_COMMAND`, which that mode would replace with its own command."""

    def filter(self, record: std_logging.LogRecord) -> bool:
        return "direct_running_mode" not in record.getMessage()


def runner_and_options(
    beam_runner: str, pipeline_args: str | Sequence[str], num_workers: int
) -> tuple:
    """The FnApiRunner to run on (None: the options name the runner) and the pipeline options;
    the FnApiRunner with `num_workers` worker processes (one: in this process)."""
    args = shlex.split(pipeline_args) if isinstance(pipeline_args, str) else list(pipeline_args)
    if beam_runner != "FnApiRunner":
        return None, PipelineOptions(args, runner=beam_runner)
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    options = PipelineOptions(args, direct_num_workers=num_workers, direct_running_mode="in_memory")
    if num_workers == 1:
        return FnApiRunner(), options
    from apache_beam.transforms.environments import SubprocessSDKEnvironment

    std_logging.getLogger("apache_beam.runners.portability.fn_api_runner.fn_runner").addFilter(
        _NoRunningModeWarning()
    )
    environment = SubprocessSDKEnvironment.from_command_string(WORKER_COMMAND)
    return FnApiRunner(default_environment=environment), options
