"""Benchmark: the data job on Apache Beam (FnApiRunner, 2 worker processes) against the local runner
(2 worker processes), side by side, and what a corpus of 16 GB or 1 TB would take.

    python benchmarks/data_prep_beam.py [--corpus_dir DIR] [--spm_model_file MODEL] [--rounds 3]

Both run the CLI as a subprocess on the 11 Gutenberg novels (--input_format=paragraphs,
--max_seq_length=128, --dupe_factor=2, --num_output_shards=4), alternating local and Beam for
`--rounds` rounds; reported per round and as medians: wall time and CPU time (user + system of the
whole process tree: on a machine shared with other jobs CPU-seconds compare better than wall time),
their Beam / local ratios (target: wall within 2x), peak RSS of the CLI process and of its largest
worker, and whether the two hold the same multiset of records. Then both on the corpus listed four
times into four times the shards, so a shard keeps its size: the ratio as Beam's fixed cost (its
start-up, its worker processes) weighs less, and whether the RSS of a Beam worker or of the
launching process grows with the corpus (it should not: pools and records go through spill files,
only their names through the runner). Beam's own fixed cost is measured alone too: an empty
pipeline of the same shape on the same 2 worker processes.

The projection for 16 GB and 1 TB multiplies the measured CPU-seconds per MB of text (from the two
corpus sizes, so the fixed cost drops out) for workers of one core; arithmetic, not a run.
"""

import argparse
import math
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout

from benchmarks.data_prep import run_job  # noqa: E402
from benchmarks.machine import describe as describe_machine  # noqa: E402


def _multiset(summary: dict) -> list[bytes]:
    from albert_tf import records

    out = []
    for o in summary["outputs"]:
        with open(o["file"], "rb") as f:
            out.extend(records.iter_framed_records(f))
    return sorted(out)


_EMPTY_PIPELINE = """
import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

options = PipelineOptions(direct_num_workers=2, direct_running_mode="multi_processing")
with beam.Pipeline(runner=FnApiRunner(), options=options) as p:
    _ = (
        p
        | beam.Create(range(10), reshuffle=True)
        | "Read" >> beam.Map(lambda x: x)
        | beam.Reshuffle()
        | "Process" >> beam.Map(lambda x: (x % 2, x))
        | beam.GroupByKey()
        | "Write" >> beam.Map(len)
    )
"""


def _empty_pipeline_seconds() -> float:
    """Wall time of a Python process running an empty pipeline on 2 FnApiRunner workers."""
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", _EMPTY_PIPELINE], check=True, capture_output=True, cwd=REPO
    )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--corpus_dir", default=str(REPO.parent / "shared" / "data" / "corpus" / "gutenberg")
    )
    parser.add_argument(
        "--spm_model_file",
        default=str(REPO / "tests" / "fixtures" / "albert_spm" / "30k-clean.model"),
    )
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    files = sorted(pathlib.Path(args.corpus_dir).glob("*.txt"))
    corpus = os.path.join(args.corpus_dir, "*.txt")
    megabytes = sum(f.stat().st_size for f in files) / 1e6
    shards = ("--num_output_shards=4",)
    beam = shards + ("--runner=beam", "--beam_runner=FnApiRunner")
    print(f"machine: {describe_machine()}, load average {os.getloadavg()[0]:.1f}")
    print(f"corpus: {corpus} ({len(files)} files, {megabytes:.1f} MB), seq 128, dupe 2, 2 workers")
    runs = {"local": [], "beam": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for name, flags in (("local", shards), ("beam", beam)):
                out = os.path.join(tmp, f"{name}{r}")
                result = run_job(corpus, out, args.spm_model_file, 2, flags)
                runs[name].append(result)
                print(
                    f"  round {r} {name:5s} wall {result['wall_s']:5.1f} s, CPU {result['cpu_s']:5.1f} s"
                    f" (load average {os.getloadavg()[0]:.1f})",
                    flush=True,
                )
        same = _multiset(runs["local"][-1]["summary"]) == _multiset(runs["beam"][-1]["summary"])
        identical = len({r["sha256"] for r in runs["beam"]}) == 1
        # Four times the shards too, so that a shard (which one worker sorts) keeps its size.
        bigger = {
            name: run_job(
                ",".join([corpus] * 4),
                os.path.join(tmp, f"{name}_x4"),
                args.spm_model_file,
                2,
                flags + ("--num_output_shards=16",),
            )
            for name, flags in (("local", shards), ("beam", beam))
        }
    wall = {k: statistics.median(r["wall_s"] for r in v) for k, v in runs.items()}
    cpu = {k: statistics.median(r["cpu_s"] for r in v) for k, v in runs.items()}
    for name, results in runs.items():
        print(
            f"  {name:6s} median wall {wall[name]:.1f} s, median CPU {cpu[name]:.1f} s, "
            f"{results[-1]['instances']} instances, peak RSS: CLI process "
            f"{max(r['peak_main_rss_mb'] for r in results):.0f} MB, largest worker "
            f"{max(r['peak_worker_rss_mb'] for r in results):.0f} MB"
        )
    print(
        f"  Beam / local: wall {wall['beam'] / wall['local']:.2f}x (target <= 2x), "
        f"CPU {cpu['beam'] / cpu['local']:.2f}x"
    )
    empty = statistics.median(_empty_pipeline_seconds() for _ in range(args.rounds))
    print(
        f"  Beam's own fixed cost: an empty pipeline of this shape on 2 worker processes takes "
        f"{empty:.1f} s (median of {args.rounds}); the job on Beam less that: "
        f"{wall['beam'] - empty:.1f} s against the local runner's {wall['local']:.1f} s"
    )
    print(f"  same multiset of records: {same}; Beam runs byte-identical: {identical}")
    ratio_x4 = bigger["beam"]["wall_s"] / bigger["local"]["wall_s"]
    worker_x1 = max(r["peak_worker_rss_mb"] for r in runs["beam"])
    main_x1 = max(r["peak_main_rss_mb"] for r in runs["beam"])
    print(
        f"  corpus listed 4 times ({4 * megabytes:.0f} MB, 16 shards): local {bigger['local']['wall_s']:.1f} s, "
        f"Beam {bigger['beam']['wall_s']:.1f} s ({ratio_x4:.2f}x, CPU {bigger['local']['cpu_s']:.1f} "
        f"vs {bigger['beam']['cpu_s']:.1f} s); Beam's largest worker "
        f"{bigger['beam']['peak_worker_rss_mb']:.0f} MB (x1: {worker_x1:.0f} MB), "
        f"its CLI process (the FnApiRunner) "
        f"{bigger['beam']['peak_main_rss_mb']:.0f} MB (x1: {main_x1:.0f} MB)"
    )
    # The fixed cost (start-up, worker processes, pipeline set-up) and the cost per MB, from the
    # two corpus sizes; per MB is what a cluster of one-core workers divides.
    per_mb = (bigger["beam"]["cpu_s"] - cpu["beam"]) / (3 * megabytes)
    fixed = cpu["beam"] - per_mb * megabytes
    documents = runs["beam"][-1]["summary"]["documents"]
    per_document_ms = 1e3 * per_mb * megabytes / documents
    print(
        f"  Beam: {fixed:.1f} CPU-s fixed + {per_mb:.2f} CPU-s per MB of text, "
        f"{per_document_ms:.1f} CPU-ms per document ({documents} documents; dupe 2, seq 128)"
    )
    for label, mb in (("16 GB", 16e3), ("1 TB", 1e6)):
        cpu_hours = per_mb * mb / 3600
        for workers in (32, 256):
            print(
                f"  {label}: {cpu_hours:,.0f} CPU-hours; on {workers} one-core workers "
                f"~{math.ceil(cpu_hours / workers * 60):,} min"
            )


if __name__ == "__main__":
    main()
