"""Benchmark: the whole create_pretraining_data job on the 11 Gutenberg novels, as a user runs it.

    python benchmarks/data_prep.py [--corpus_dir DIR] [--spm_model_file MODEL] [--skip_scaling]

Runs the CLI as a subprocess (process start and imports included) with --input_format=paragraphs,
--max_seq_length=128, --dupe_factor=2 and reports wall time, CPU time, instances/s and peak memory
(the sum of RSS over the process tree, sampled every 20 ms, and the largest single process). Then it
lists every file twice (twice the corpus) to show that memory does not grow with the corpus, and runs
--num_workers 1 and 2 to show the speed-up and that the output bytes are identical.

The original script is not run here: ~55 s is the time reported for it on this corpus, kept as a constant.
"""

import argparse
import hashlib
import json
import os
import pathlib
import resource
import subprocess
import sys
import tempfile
import threading
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout

from benchmarks.machine import describe as describe_machine  # noqa: E402

ORIGINAL_SECONDS = 55.0


def _tree_rss_bytes(pid: int) -> tuple[int, int, int]:
    """RSS of a process tree: (sum over the tree, the root's, the largest descendant's); zeros
    once it has exited."""
    total = root = largest = 0
    stack = [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                rss = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
            total += rss
            if p == pid:
                root = rss
            else:
                largest = max(largest, rss)
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    stack.extend(int(c) for c in f.read().split())
        except (OSError, StopIteration):
            continue
    return total, root, largest


def run_job(
    inputs: str, output_dir: str, spm: str, workers: int, extra_flags: tuple[str, ...] = ()
) -> dict:
    """Runs the CLI once; returns timings, memory, the summary and a hash of the output bytes
    (of the one output file; with `--num_output_shards` in `extra_flags`, of all shards in order)."""
    output = os.path.join(output_dir, "train.tfrecord")
    cmd = [
        sys.executable,
        "-m",
        "pipelines.create_pretraining_data",
        f"--input_file={inputs}",
        f"--output_file={output}",
        f"--spm_model_file={spm}",
        "--input_format=paragraphs",
        "--max_seq_length=128",
        "--dupe_factor=2",
        f"--num_workers={workers}",
        *extra_flags,
    ]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    peak = peak_root = peak_child = 0
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stderr: list[bytes] = []
    reader = threading.Thread(target=lambda: stderr.append(proc.stderr.read()))
    reader.start()
    while proc.poll() is None:
        total, root, child = _tree_rss_bytes(proc.pid)
        peak, peak_root, peak_child = max(peak, total), max(peak_root, root), max(peak_child, child)
        time.sleep(0.02)
    wall = time.perf_counter() - start
    reader.join()
    if proc.returncode != 0:
        raise SystemExit(f"job failed ({proc.returncode}):\n{stderr[0].decode()[-3000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    summary = json.loads(pathlib.Path(output_dir, "train.summary.json").read_text())
    return {
        "wall_s": wall,
        "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "peak_tree_rss_mb": peak / 2**20,
        "peak_main_rss_mb": peak_root / 2**20,  # the CLI process (Beam: the runner)
        "peak_worker_rss_mb": peak_child / 2**20,  # the largest process it started
        "max_process_rss_mb": after.ru_maxrss / 1024,  # largest single process so far (kB on Linux)
        "instances": summary["instances"],
        "summary": summary,
        "sha256": hashlib.sha256(
            b"".join(pathlib.Path(o["file"]).read_bytes() for o in summary["outputs"])
        ).hexdigest(),
    }


def _line(label: str, r: dict) -> str:
    return (
        f"{label:<34} {r['wall_s']:7.2f} s wall {r['cpu_s']:7.2f} s CPU  {r['instances']:7d} instances  "
        f"{r['instances'] / r['wall_s']:8.0f} inst/s  peak RSS tree {r['peak_tree_rss_mb']:6.0f} MB"
    )


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
    parser.add_argument("--skip_scaling", action="store_true", help="only the main run")
    args = parser.parse_args()
    corpus = os.path.join(args.corpus_dir, "*.txt")
    cores = len(os.sched_getaffinity(0))
    print(
        f"data_prep benchmark: {corpus} ({len(list(pathlib.Path(args.corpus_dir).glob('*.txt')))} files), "
        f"{describe_machine()}, load average {os.getloadavg()[0]:.1f}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        main_run = run_job(corpus, os.path.join(tmp, "main"), args.spm_model_file, cores)
        print(_line(f"whole job, --num_workers={cores}", main_run))
        s = main_run["summary"]
        print(
            f"  {s['documents']} documents, {s['sentences']} sentences, {s['tokens']} tokens; "
            f"SOP label-1 {s['sop_label_1_share']:.3f}, mean length {s['mean_real_length']:.1f}, "
            f"{s['predictions_per_instance']:.2f} predictions/instance"
        )
        print(
            f"  vs the original (~{ORIGINAL_SECONDS:.0f} s): "
            f"{ORIGINAL_SECONDS / main_run['wall_s']:.1f}x faster; target <= 6 s, <= 1024 MB"
        )
        if args.skip_scaling:
            return
        doubled = run_job(
            f"{corpus},{corpus}", os.path.join(tmp, "doubled"), args.spm_model_file, cores
        )
        print(_line("corpus listed twice", doubled))
        print(
            f"  instances x{doubled['instances'] / main_run['instances']:.2f}, peak RSS tree "
            f"x{doubled['peak_tree_rss_mb'] / main_run['peak_tree_rss_mb']:.2f}"
        )
        one = run_job(corpus, os.path.join(tmp, "w1"), args.spm_model_file, 1)
        two = (
            main_run
            if cores == 2
            else run_job(corpus, os.path.join(tmp, "w2"), args.spm_model_file, 2)
        )
        print(_line("--num_workers=1", one))
        print(_line("--num_workers=2", two))
        print(
            f"  speed-up 1 -> 2 workers: {one['wall_s'] / two['wall_s']:.2f}x wall; "
            f"identical output bytes: {one['sha256'] == two['sha256']}"
        )
        largest = max(one["max_process_rss_mb"], doubled["max_process_rss_mb"])
        print(f"  largest single process RSS over all runs: {largest:.0f} MB")


if __name__ == "__main__":
    main()
