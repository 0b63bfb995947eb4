"""Peak memory per request at the text models' request limit: the text-in QA model beside a
classifier's text model, in one run.

    python benchmarks/text_serving_memory.py [--max_bytes=1000000] [--before=/tmp/albert-before]

Both models are exported with `--max_bytes` as their limit (the QA model's `max_context_bytes`,
the classifier's `max_text_bytes`), sequence 128: the QA model from the original code's tiny
SQuAD v1.1 checkpoint (tests/fixtures/original_squad, the tests' stride 32 and query 24), the
classifier an `AlbertClassifier` of the same tiny config (its weights do not change its memory).
With `--before`, the classifier's text model is also exported by another checkout (e.g.
`git archive <commit> | tar -x -C /tmp/albert-before`), its column printed beside. Requests, of
SQuAD dev paragraphs cut to size: one text at the limit, a pair of two texts at the limit, 100
texts that fill it together, and one text of 10x the limit. Each runs in a fresh process that
imports only TensorFlow and tensorflow-text, as TF Serving would run the model: it loads the
model, serves one small request, then the measured one; printed are the peak resident memory
above the loaded model (Linux VmHWM, reset after the warm-up) and the wall time, or "refused"
when the model stops the request. A process that passes `--cap_gb` is stopped ("> cap").
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
from benchmarks.qa_serving_memory import QUESTION, contexts_of, run_measure_script  # noqa: E402

# Run with the exporting checkout first on sys.path: that checkout's code builds the models.
EXPORT_SCRIPT = """
import inspect, sys
code, fixtures, out, limit, which = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
sys.path.insert(0, code)
import keras
from albert_tf.export import serving_head
from albert_tf.export.heads.loading import load_serving_head
from albert_tf.export.savedmodel import save_with_signatures, text_functions
from albert_tf.modeling.heads.classifier import AlbertClassifier
from albert_tf.text.tf_tokenization import AlbertPreprocessingLayer

spm = f"{fixtures}/albert_spm/30k-clean.model"
folder = f"{fixtures}/original_squad/squad_v1_tiny"
preprocessing = AlbertPreprocessingLayer.from_file(spm, max_seq_length=128)
if "qa" in which.split(","):
    from albert_tf.export.qa.text import QaSettings, QaTextModel, save_qa_text_model

    head = load_serving_head("squad_v1", tf1_checkpoint=folder, albert_config_file=folder + "/albert_config.json")
    model = QaTextModel(head, preprocessing, QaSettings(32, 24, max_context_bytes=limit))
    save_qa_text_model(model, f"{out}/qa", {"spm_model_file": spm})
if "classifier" in which.split(","):
    keras.utils.set_random_seed(1)
    config = load_serving_head(
        "squad_v1", tf1_checkpoint=folder, albert_config_file=folder + "/albert_config.json"
    ).config
    head = serving_head("classifier", AlbertClassifier(config, num_labels=3))
    bounded = "max_text_bytes" in inspect.signature(text_functions).parameters
    functions = text_functions(preprocessing, head, **({"max_text_bytes": limit} if bounded else {}))
    save_with_signatures(f"{out}/classifier", functions, {"spm_model_file": spm})
"""

# TensorFlow and tensorflow-text only, as the model server.
MEASURE_SCRIPT = """
import json, os, sys, threading, time
import tensorflow as tf
import tensorflow_text  # noqa: F401

path, signature, request_file, cap = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
request = json.load(open(request_file))

def memory():
    with open("/proc/self/status") as f:
        return {l.split(":")[0]: int(l.split()[1]) * 1024 for l in f if l.startswith("Vm")}

serve = tf.saved_model.load(path).signatures[signature]
serve(**{k: tf.constant(["Rollo did it."]) for k in request})
inputs = {k: tf.constant(v) for k, v in request.items()}
del request

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
try:
    serve(**inputs)
    refused = None
except tf.errors.InvalidArgumentError as error:
    refused = error.message.split("assertion failed: [")[-1].split("]")[0]
seconds = time.perf_counter() - started
peak = memory()["VmHWM"] - loaded
print(json.dumps({"peak_gb": peak / 2**30, "seconds": seconds, "refused": refused}))
"""


def requests(paragraphs: list[str], limit: int) -> dict[str, dict]:
    """{row label: {model: (signature, {field: texts})}}; a model missing from a row has no such
    request (the QA model takes no pairs of long texts)."""
    one, ten = contexts_of(paragraphs, limit, 1), contexts_of(paragraphs, 10 * limit, 1)
    hundred = contexts_of(paragraphs, limit // 100, 100)
    question = [QUESTION]
    return {
        "1 text at the limit": {
            "qa": ("serving_default", {"question": question, "context": one}),
            "classifier": ("serving_default", {"text": one}),
        },
        "pair, both at the limit": {
            "classifier": (
                "pairs",
                {"text_a": one, "text_b": contexts_of(paragraphs, limit, 2)[1:]},
            )
        },
        "100 texts filling it": {
            "qa": ("serving_default", {"question": question * 100, "context": hundred}),
            "classifier": ("serving_default", {"text": hundred}),
        },
        "1 text of 10x the limit": {
            "qa": ("serving_default", {"question": question, "context": ten}),
            "classifier": ("serving_default", {"text": ten}),
        },
    }


def export(code: pathlib.Path, out: str, limit: int, which: str) -> None:
    """Export the `which` models ("qa,classifier") with `code`'s checkout under `out`."""
    fixtures = str(REPO / "tests/fixtures")
    subprocess.run(
        [sys.executable, "-c", EXPORT_SCRIPT, str(code), fixtures, out, str(limit), which],
        check=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        capture_output=True,
    )


def measure(model: str, signature: str, request_file: str, cap_gb: float) -> dict:
    """One request to `model`'s `signature` in a fresh process (MEASURE_SCRIPT's figures)."""
    return run_measure_script(MEASURE_SCRIPT, model, signature, request_file, str(cap_gb))


def cell(result: dict | None) -> str:
    """A table cell: peak and time, "refused", "> cap", or "—" (no such request)."""
    if result is None:
        text = "—"
    elif result.get("capped"):
        text = "> cap"
    elif result["refused"]:
        text = f"refused, {result['peak_gb']:.2f} GB"
    else:
        text = f"{result['peak_gb']:.2f} GB, {result['seconds']:.1f} s"
    return f"{text:>22s}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--max_bytes", type=int, default=5 * 2**20, help="both models' limit")
    parser.add_argument("--before", default=None, help="another checkout's classifier, beside")
    parser.add_argument("--cap_gb", type=float, default=6.0)
    parser.add_argument(
        "--squad_file", default=str(REPO.parent / "shared/data/squad/dev-v1.1.json")
    )
    args = parser.parse_args()
    data = json.loads(pathlib.Path(args.squad_file).read_text())["data"]
    paragraphs = [p["context"] for a in data for p in a["paragraphs"]]
    columns = {"qa": ("QA text", "qa"), "classifier": ("classifier", "classifier")}
    if args.before:
        columns["before"] = ("classifier before", "classifier")
    print(f"machine: {describe_machine()}")
    print(
        f"peak RSS above the loaded model, and wall time, of one request; limit "
        f"{args.max_bytes} bytes (cap {args.cap_gb} GB)"
    )
    rows = requests(paragraphs, args.max_bytes)
    with tempfile.TemporaryDirectory() as tmp:
        export(REPO, os.path.join(tmp, "now"), args.max_bytes, "qa,classifier")
        if args.before:
            export(
                pathlib.Path(args.before), os.path.join(tmp, "before"), args.max_bytes, "classifier"
            )
        results = {}
        for label, by_model in rows.items():
            for column, (_, kind) in columns.items():
                if kind not in by_model:
                    results[label, column] = None
                    continue
                signature, fields = by_model[kind]
                request_file = os.path.join(tmp, "request.json")
                pathlib.Path(request_file).write_text(json.dumps(fields))
                model = os.path.join(tmp, "before" if column == "before" else "now", kind)
                results[label, column] = measure(model, signature, request_file, args.cap_gb)
                print(f"  {label}, {column}: {cell(results[label, column]).strip()}", flush=True)
        print(f"{'request':>24s}" + "".join(f"{title:>24s}" for title, _ in columns.values()))
        for label in rows:
            print(f"{label:>24s}" + "".join(f"  {cell(results[label, c])}" for c in columns))


if __name__ == "__main__":
    main()
