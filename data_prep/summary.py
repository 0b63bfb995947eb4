"""The data-prep job's summary, the same whichever runner produced the records."""

from __future__ import annotations

import dataclasses

from albert_tf import records
from albert_tf.io import write_json
from data_prep import corpus, writer
from data_prep.stats import Stats
from data_prep.units import DataPrepConfig


def job_summary(
    config: DataPrepConfig,
    paths: list[str],
    outputs: list[str],
    counts: list[int],
    stats: Stats,
    skips: corpus.SkipLog,
    elapsed: float,
    runner: str,
) -> dict:
    """The job's summary: inputs, outputs with their counts, settings, statistics, skips."""
    settings = {
        "runner": runner,
        "spm_model_file": config.spm_model_file,
        "do_lower_case": config.do_lower_case,
        "random_seed": config.random_seed,
        "dupe_factor": config.dupe_factor,
        "masking_mode": config.masking_mode,
        **dataclasses.asdict(config.pair),
        **dataclasses.asdict(config.masking),
        **dataclasses.asdict(config.corpus),
        "num_workers": config.num_workers,
        "shuffle_buffer_size": config.shuffle_buffer_size,
        "batch_chars": config.batch_chars,
    }
    return {
        "inputs": paths,
        "outputs": [{"file": p, "instances": n} for p, n in zip(outputs, counts)],
        "settings": settings,
        "masking": masking_block(config),
        **stats.summary(masked=config.masking_mode == "static"),
        "skipped": skips.entries(),
        "skipped_lines": sum(
            e["count"] for e in skips.entries() if e["reason"] not in ("empty_file", "no_text")
        ),
        "elapsed_seconds": round(elapsed, 3),
    }


def masking_block(config: DataPrepConfig) -> dict:
    """What the records hold and how to mask them: `mode` "static" (masked here, these settings
    applied) or "dynamic" (unmasked; the trainer masks with these settings on every read)."""
    dynamic = config.masking_mode == "dynamic"
    return {
        "mode": config.masking_mode,
        "features": list(records.UNMASKED_FEATURE_NAMES if dynamic else records.FEATURE_NAMES),
        **dataclasses.asdict(config.masking),
    }


def write_summary(path: str, summary: dict) -> None:
    """Writes the summary atomically (OutputError naming the file if it cannot)."""
    try:
        write_json(path, summary, sort_keys=False)  # in the order `job_summary` built it
    except OSError as e:
        raise writer.OutputError(f"cannot write summary {path}: {e.strerror or e}") from e
