"""Per-text latency of the on-device clients on our exported classifier variants, side by side.

    python benchmarks/client_latency.py [--texts=200] [--rounds=3] [--preset=small]

Exports a classifier (the preset's shape with the released 30k vocabulary, random weights, seq
128) as tflite_fp32, tflite_fp16, tflite_int8_dynamic and tflite_int8 with client metadata, then
times MediaPipe Tasks' `TextClassifier` and the TFLite Task Library's `BertNLClassifier`, each in
its own virtualenv (`.venv-clients/`), classifying SST-2 dev sentences one at a time (model loading
aside), the variants interleaved over `--rounds` rounds; and LiteRT's Python interpreter on our
ids for reference. Prints ms per text (median over rounds) and the ratio to fp32 per client.
"""

import argparse
import csv
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout

import numpy as np  # noqa: E402

from benchmarks.machine import describe as describe_machine  # noqa: E402

SPM = REPO / "tests/fixtures/albert_spm/30k-clean.model"
CORPUS = REPO / "tests/fixtures/original_data/corpus_small.txt"
SST2_DEV = REPO / "benchmarks/data/glue_lift/SST-2/dev.tsv"
VARIANTS = ("tflite_fp32", "tflite_fp16", "tflite_int8_dynamic", "tflite_int8")
CLIENTS = {
    "MediaPipe TextClassifier": ("mediapipe", "mediapipe_text_classifier"),
    "Task Library BertNLClassifier": ("tflite-support", "bert_nl_classifier"),
}
SEQ = 128


def export(preset: str, out: str) -> dict[str, str]:
    import keras

    from albert_tf import AlbertConfig
    from albert_tf.config import preset_shape
    from albert_tf.export import ExportConfig, export_model, serving_head
    from albert_tf.export.tflite.app_metadata import AppMetadataSettings
    from albert_tf.modeling.heads.classifier import AlbertClassifier

    keras.utils.set_random_seed(1)
    config = AlbertConfig(**preset_shape(preset, vocab_size=30000, max_position_embeddings=SEQ))
    report = export_model(
        serving_head("classifier", AlbertClassifier(config, num_labels=2)),
        ExportConfig(
            output_dir=out,
            model_name="sst2",
            max_seq_length=SEQ,
            formats=VARIANTS,
            spm_model_file=str(SPM),
            representative_data=str(CORPUS),
            num_verification_examples=16,
            latency_runs=2,
            app_metadata=AppMetadataSettings(labels=("negative", "positive"), task_name="sst-2"),
        ),
    )
    return {v: report["artifacts"][v]["path"] for v in VARIANTS}


def client_seconds(venv: str, client: str, model: str, texts: list[str]) -> float:
    python = REPO / ".venv-clients" / venv / "bin/python"
    if not python.is_file():
        sys.exit(f"no {python}: create it from requirements-client-{venv}.txt (.ci/run does)")
    done = subprocess.run(
        [str(python), str(REPO / "tests/app_clients/run_client.py")],
        input=json.dumps({"client": client, "model": model, "texts": texts}),
        capture_output=True,
        text=True,
    )
    if done.returncode:
        sys.exit(f"{client} could not run: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    return json.loads(done.stdout)["seconds"]


def litert_seconds(model: str, texts: list[str]) -> float:
    from ai_edge_litert.interpreter import Interpreter

    from albert_tf.text.tokenization import AlbertTokenizer

    tokenizer = AlbertTokenizer(SPM)
    packed = [tokenizer.encode_pair(t, None, SEQ) for t in texts]
    runner = Interpreter(model_path=model).get_signature_runner()
    start = time.perf_counter()
    for p in packed:
        runner(
            input_ids=np.array([p.input_ids], np.int32),
            input_mask=np.array([p.input_mask], np.int32),
            segment_ids=np.array([p.segment_ids], np.int32),
        )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--texts", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--preset", default="small")
    args = parser.parse_args()
    print(describe_machine())
    with open(SST2_DEV, encoding="utf-8") as f:
        texts = [row[0] for row in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)][1:]
    texts = texts[: args.texts]
    with tempfile.TemporaryDirectory() as out:
        paths = export(args.preset, out)
        runners = {name: (lambda m, v=v, c=c: client_seconds(v, c, m, texts))
                   for name, (v, c) in CLIENTS.items()}  # fmt: skip
        runners["LiteRT interpreter (our ids)"] = lambda m: litert_seconds(m, texts)
        timings = {(who, v): [] for who in runners for v in VARIANTS}
        for _ in range(args.rounds):
            for who, run in runners.items():
                for variant in VARIANTS:
                    timings[who, variant].append(1000 * run(paths[variant]) / len(texts))
    print(f"\npreset {args.preset}, vocab 30000, seq {SEQ}; ms per text, median of {args.rounds}")
    print("\n| client | " + " | ".join(VARIANTS) + " |")
    print("|---|" + "---:|" * len(VARIANTS))
    for who in runners:
        fp32 = statistics.median(timings[who, "tflite_fp32"])
        cells = [
            f"{statistics.median(timings[who, v]):.2f} ({statistics.median(timings[who, v]) / fp32:.2f}×)"
            for v in VARIANTS
        ]
        print(f"| {who} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
