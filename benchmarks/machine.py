"""The machine a benchmark ran on, named in its report: results differ between CPUs."""

import os
import platform


def cpu_model() -> str:
    """The CPU's model name, as /proc/cpuinfo gives it (elsewhere what `platform` knows)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe() -> str:
    """ "<CPU model>, <n> usable cores" for a report's machine line."""
    return f"{cpu_model()}, {len(os.sched_getaffinity(0))} usable cores"
