"""How soon each CLI ends after SIGTERM: the first signal (stop at the next safe point) and a
second one (end at once), at the moment each job is deepest in one long call.

    python benchmarks/signal_latency.py [--before=/tmp/albert-before]

Each job runs on the tests' tiny inputs and is signalled once its log shows it reached the busy
part: pretraining inside one device loop of 100,000 steps (and, with XLA, in its compile),
fine-tuning in its first steps, data prep (local and Beam runners) while its workers write, export
during its TFLite conversion. Printed per job: seconds from the first SIGTERM to the exit, and, in
a second run, from a SIGINT sent 0.3 s after a first SIGTERM to the exit (where the job still ran
then), with the exit statuses. With `--before`, the same jobs run from another checkout (e.g.
`git worktree add /tmp/albert-before <commit>`) beside these, with a 120 s cap.
"""

import argparse
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout

from benchmarks.machine import describe as describe_machine  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures"
SPM = FIXTURES / "albert_spm" / "30k-clean.model"
TINY = FIXTURES / "original_checkpoints" / "albert_tiny_shared"
BOOKS = REPO / "data_prep" / "sample_corpus" / "train" / "*.txt.gz"
# A model whose steps take a few hundred ms on 2 cores: wide enough that a step is not nothing.
SMALL = (
    '{"vocab_size": 30000, "embedding_size": 64, "hidden_size": 256, "num_hidden_layers": 4, '
    '"num_attention_heads": 4, "intermediate_size": 1024, "max_position_embeddings": 128}'
)
LONG_LOOP = [
    "--num_train_steps=100000",
    "--iterations_per_loop=100000",
    "--log_every_steps=100000",
    "--save_checkpoints_steps=100000",
]


def jobs(code: pathlib.Path, work: pathlib.Path) -> dict[str, tuple[list[str], str, float]]:
    """{name: (command, log text that marks the busy part, seconds to wait after it)}."""
    config = work / "small.json"
    config.write_text(SMALL)
    pretrain = [
        f"{code}/pipelines/pretrain.py",
        f"--input_file={FIXTURES / 'original_data' / 'orig_small_seq128.tfrecord'}",
        f"--albert_config_file={config}",
        "--max_seq_length=128",
        "--train_batch_size=32",
        *LONG_LOOP,
    ]
    data_prep = [
        "-m",
        "pipelines.create_pretraining_data",
        f"--input_file={BOOKS}",
        f"--spm_model_file={SPM}",
        "--max_seq_length=128",
        "--input_format=paragraphs",
        "--dupe_factor=20",
        "--num_workers=2",
    ]
    return {
        "pretraining, device loop": (pretrain + ["--jit_compile=false"], "Input pipeline", 5.0),
        "pretraining, XLA compile": (pretrain + ["--jit_compile=true"], "Input pipeline", 1.0),
        "fine-tuning (SST-2)": (
            [
                f"{code}/pipelines/run_classifier.py",
                "--task_name=sst-2",
                f"--data_dir={FIXTURES / 'glue'}",
                f"--spm_model_file={SPM}",
                f"--albert_config_file={config}",
                "--max_seq_length=128",
                "--train_step=100000",
                "--train_batch_size=32",
                "--do_train",
            ],
            "Training sst-2",
            3.0,
        ),
        "data prep, local": (data_prep + ["--runner=local"], "reading", 0.5),
        "data prep, Beam": (data_prep + ["--runner=beam"], "starting data server", 3.0),
        "export, TFLite conversion": (
            [
                f"{code}/pipelines/export.py",
                f"--tf1_checkpoint={TINY}",
                f"--albert_config_file={TINY / 'albert_config.json'}",
                "--max_seq_length=64",
                "--num_verification_examples=16",
                "--latency_runs=2",
                "--formats=saved_model,tflite_fp32",
            ],
            "Converting tflite_fp32",
            0.3,
        ),
    }


def output_flags(name: str, out: pathlib.Path) -> list[str]:
    if name.startswith("data prep"):
        return [f"--output_file={out}/train.tfrecord"]
    return [f"--output_dir={out}"]


def measure(code, name, command, marker, wait, second: bool, cap: float) -> str:
    """One run: the seconds to exit after the (last) signal and the exit status."""
    work = pathlib.Path(tempfile.mkdtemp(prefix="signal-latency-"))
    log_path = work / "log"
    try:
        with open(log_path, "wb") as log:
            job = subprocess.Popen(
                [sys.executable, *command, *output_flags(name, work / "out")],
                cwd=code,
                env={**os.environ, "PYTHONPATH": str(code)},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 300
        while marker not in log_path.read_text(errors="replace"):
            if job.poll() is not None or time.monotonic() > deadline:
                return "never busy"
            time.sleep(0.05)
        time.sleep(wait)
        job.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        if second:
            try:
                job.wait(timeout=0.3)
                return "ended before the second"
            except subprocess.TimeoutExpired:
                job.send_signal(signal.SIGINT)
                sent = time.monotonic()
        try:
            status = job.wait(timeout=cap)
        except subprocess.TimeoutExpired:
            return f"> {cap:.0f} s"
        return f"{time.monotonic() - sent:.2f} s ({128 - status if status < 0 else status})"
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=pathlib.Path, help="another checkout to compare with")
    parser.add_argument("--cap", type=float, default=120.0, help="seconds before giving up")
    parser.add_argument("--only", default="", help="run only the jobs whose name holds this")
    args = parser.parse_args()
    checkouts = {"this checkout": REPO, **({"before": args.before} if args.before else {})}
    print(f"machine: {describe_machine()}")
    header = ["job"] + [f"{c}: {k}" for c in checkouts for k in ("first signal", "second")]
    print(" | ".join(header))
    with tempfile.TemporaryDirectory() as work:
        for name in jobs(REPO, pathlib.Path(work)):
            if args.only not in name:
                continue
            row = [name]
            for code in checkouts.values():
                command, marker, wait = jobs(code, pathlib.Path(work))[name]
                for second in (False, True):
                    row.append(measure(code, name, command, marker, wait, second, args.cap))
            print(" | ".join(row), flush=True)


if __name__ == "__main__":
    main()
