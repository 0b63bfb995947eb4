"""The data-prep job's entry point: `DataPrepConfig` and `run`, the job on this machine.

`units` holds what any runner shares (the config, seeds, the pool as unit of work and its
processing); `local_runner` runs the pools in worker processes and writes the shards.
"""

from data_prep.local_runner import run
from data_prep.units import DataPrepConfig

__all__ = ["DataPrepConfig", "run"]
