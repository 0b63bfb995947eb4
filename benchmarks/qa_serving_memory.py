"""Peak memory and latency of the text-in QA SavedModel against the length of the context.

    python benchmarks/qa_serving_memory.py [--before=/tmp/albert-before] [--cap_gb=6]

The tiny SQuAD v1.1 and v2.0 checkpoints of the original code (tests/fixtures/original_squad;
the tests' windows: sequence 128, stride 32, query 24) are exported as text-in models, by this
checkout and, with `--before`, by another checkout (e.g. `git worktree add /tmp/albert-before
<commit>`), its columns printed beside these. Each request runs in a fresh process that imports
only TensorFlow and tensorflow-text, as TF Serving would run the model: it loads the model,
answers one small request, then the measured one (one question over a context of SQuAD dev
paragraphs cut to the size, or a batch of such contexts); printed are the peak resident memory
above the loaded model (Linux VmHWM, reset after the warm-up) and the request's wall time. A
request whose process passes `--cap_gb` is stopped there and printed as "> cap" (the larger ones
of that column are then skipped). This checkout's models store a `max_context_bytes` above the
largest request, so that every size is measured.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout

from benchmarks.machine import describe as describe_machine  # noqa: E402

HEADS = ("squad_v1", "squad_v2")
QUESTION = "Which NFL team represented the AFC at Super Bowl 50?"

# Run with the exporting checkout first on sys.path: that checkout's code builds the models.
EXPORT_SCRIPT = """
import dataclasses, sys
code, fixtures, out, limit = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
sys.path.insert(0, code)
from albert_tf.export.qa.text import QaSettings, QaTextModel, save_qa_text_model
from albert_tf.export.heads.loading import load_serving_head
from albert_tf.text.tf_tokenization import AlbertPreprocessingLayer

spm = f"{fixtures}/albert_spm/30k-clean.model"
preprocessing = AlbertPreprocessingLayer.from_file(spm, max_seq_length=128)
fields = {f.name for f in dataclasses.fields(QaSettings)}
extra = {"max_context_bytes": limit} if "max_context_bytes" in fields else {}
for kind in ("squad_v1", "squad_v2"):
    folder = f"{fixtures}/original_squad/{kind}_tiny"
    head = load_serving_head(kind, tf1_checkpoint=folder, albert_config_file=folder + "/albert_config.json")
    model = QaTextModel(head, preprocessing, QaSettings(32, 24, **extra))
    save_qa_text_model(model, f"{out}/{kind}", {"spm_model_file": spm})
"""

# TensorFlow and tensorflow-text only, as the model server.
MEASURE_SCRIPT = """
import json, os, sys, threading, time
import tensorflow as tf
import tensorflow_text  # noqa: F401

path, contexts_file, cap = sys.argv[1], sys.argv[2], float(sys.argv[3])
contexts = json.load(open(contexts_file))

def memory():
    with open("/proc/self/status") as f:
        return {l.split(":")[0]: int(l.split()[1]) * 1024 for l in f if l.startswith("Vm")}

serve = tf.saved_model.load(path).signatures["serving_default"]
serve(question=tf.constant(["Who?"]), context=tf.constant(["Rollo did it."]))
question = tf.constant([sys.argv[4]] * len(contexts))
context = tf.constant(contexts)

def watch():
    while True:
        if memory()["VmRSS"] > cap * 2**30:
            print(json.dumps({"capped": True}), flush=True)
            os._exit(3)
        time.sleep(0.02)

threading.Thread(target=watch, daemon=True).start()
loaded = memory()["VmRSS"]
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # VmHWM := VmRSS
started = time.perf_counter()
answers = serve(question=question, context=context)["answer"].numpy()
seconds = time.perf_counter() - started
peak = memory()["VmHWM"] - loaded
print(json.dumps({"peak_gb": peak / 2**30, "seconds": seconds, "answers": len(answers)}))
"""


def contexts_of(paragraphs: list[str], size: int, count: int) -> list[str]:
    """`count` contexts of `size` UTF-8 bytes of consecutive paragraphs (each from another one)."""
    contexts = []
    for row in range(count):
        parts, length, i = [], 0, row * 97
        while length < size:
            parts.append(paragraphs[i % len(paragraphs)])
            length += len(parts[-1].encode("utf-8")) + 1
            i += 1
        contexts.append(" ".join(parts).encode("utf-8")[:size].decode("utf-8", "ignore"))
    return contexts


def export(code: pathlib.Path, out: str, limit: int) -> None:
    subprocess.run(
        [
            sys.executable,
            "-c",
            EXPORT_SCRIPT,
            str(code),
            str(REPO / "tests/fixtures"),
            out,
            str(limit),
        ],
        check=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        capture_output=True,
    )


def measure(model: str, contexts_file: str, cap_gb: float) -> dict:
    return run_measure_script(MEASURE_SCRIPT, model, contexts_file, str(cap_gb), QUESTION)


def run_measure_script(script: str, model: str, *args: str) -> dict:
    """The figures (the last JSON line printed) of `script` run on `model` in a fresh process."""
    run = subprocess.run(
        [sys.executable, "-c", script, model, *args],
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        capture_output=True,
        text=True,
    )
    lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"measuring {model} failed: {run.stderr[-2000:]}")
    return json.loads(lines[-1])


def cell(result: dict | None) -> str:
    if result is None:
        return f"{'skipped':>17s}"
    if result.get("capped"):
        return f"{'> cap':>17s}"
    return f"{result['peak_gb']:6.2f} GB {result['seconds']:6.1f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="50000,100000,200000,400000,1000000,5000000")
    parser.add_argument("--batch", default="10x100000", help="COUNTxBYTES: one batched request")
    parser.add_argument("--before", default=None, help="another checkout, measured beside")
    parser.add_argument("--cap_gb", type=float, default=6.0)
    parser.add_argument(
        "--squad_file", default=str(REPO.parent / "shared/data/squad/dev-v1.1.json")
    )
    args = parser.parse_args()
    data = json.loads(pathlib.Path(args.squad_file).read_text())["data"]
    paragraphs = [p["context"] for a in data for p in a["paragraphs"]]
    count, batch_size = (int(x) for x in args.batch.split("x"))
    requests = [(1, int(s)) for s in args.sizes.split(",")] + [(count, batch_size)]
    largest = max(n * size for n, size in requests)
    codes = {"after": REPO} | ({"before": pathlib.Path(args.before)} if args.before else {})
    print(f"machine: {describe_machine()}")
    print(f"peak RSS above the loaded model, and wall time, of one request (cap {args.cap_gb} GB)")
    with tempfile.TemporaryDirectory() as tmp:
        for name, code in codes.items():
            export(code, os.path.join(tmp, name), largest)
        results = {}
        for kind in HEADS:
            for name in codes:
                capped = False
                for n, size in requests:
                    if capped and n == 1:
                        results[kind, name, n, size] = None
                        continue
                    contexts_file = os.path.join(tmp, "contexts.json")
                    pathlib.Path(contexts_file).write_text(
                        json.dumps(contexts_of(paragraphs, size, n))
                    )
                    model = os.path.join(tmp, name, kind)
                    result = measure(model, contexts_file, args.cap_gb)
                    results[kind, name, n, size] = result
                    print(f"  {kind} {name} {n} x {size} bytes: {cell(result).strip()}", flush=True)
                    capped |= n == 1 and bool(result.get("capped"))
        header = "".join(f"  {kind} {name:>6s}".ljust(19) for kind in HEADS for name in codes)
        print(f"{'request':>18s}{header}")
        for n, size in requests:
            label = f"{size / 1000:g} KB" if size < 10**6 else f"{size / 10**6:g} MB"
            label = label if n == 1 else f"{n} x {label}"
            row = "".join(
                f"  {cell(results[kind, name, n, size])}" for kind in HEADS for name in codes
            )
            print(f"{label:>18s}{row}")


if __name__ == "__main__":
    main()
