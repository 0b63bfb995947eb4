"""The data-prep job's entry points: `DataPrepConfig`, `run` (this machine) and `run_on_beam`.

`units` holds what any runner shares (the config, seeds, the pool as unit of work and its
processing); `local_runner` runs the pools in worker processes on this machine, `beam_runner` on
Apache Beam (an optional extra).
"""

from __future__ import annotations

from collections.abc import Sequence

from data_prep.local_runner import run
from data_prep.units import DataPrepConfig

# Named explicitly: Beam's default local runner would first download a binary.
BEAM_RUNNERS = ("FnApiRunner", "DataflowRunner", "FlinkRunner", "SparkRunner", "PortableRunner")
BEAM_INSTALL_HINT = "pip install -r requirements-beam.txt"


class MissingExtraError(RuntimeError):
    """An optional extra the job needs is not installed; says what to install."""


def run_on_beam(
    config: DataPrepConfig,
    beam_runner: str = "FnApiRunner",
    pipeline_args: str | Sequence[str] = "",
) -> dict:
    """The same job on Apache Beam (see `data_prep.beam_runner.run`); a clear error without Beam."""
    if beam_runner not in BEAM_RUNNERS:
        raise ValueError(f"--beam_runner must be one of {BEAM_RUNNERS}, got {beam_runner!r}")
    from data_prep import beam_logs

    try:
        with beam_logs.quiet_import():
            from data_prep import beam_runner as beam_job
    except ImportError as e:
        if (e.name or "").split(".")[0] != "apache_beam":
            raise
        raise MissingExtraError(
            f"--runner=beam needs Apache Beam, an optional extra: {BEAM_INSTALL_HINT}"
        ) from e
    return beam_job.run(config, beam_runner, pipeline_args)


__all__ = ["BEAM_RUNNERS", "DataPrepConfig", "MissingExtraError", "run", "run_on_beam"]
