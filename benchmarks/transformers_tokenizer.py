"""How transformers tokenizes and classifies with an `--output_hf` folder, against our own path.

    python benchmarks/transformers_tokenizer.py [--data_dir ../shared/data]
        [--python .venv-clients/transformers/bin/python] [--spm_model_file M]

Writes two folders for the same SentencePiece model: as `--output_hf` writes one now
(`tokenizer.json` tokenizing as ALBERT does, `PreTrainedTokenizerFast`) and as it did before
(`spiece.model` and an `AlbertTokenizer` config, transformers building its own tokenizer). In
transformers' own virtualenv (`tests/app_clients/run_transformers.py`), `AutoTokenizer` loads each
with `use_fast=True` and `use_fast=False`, and the ids of every text are compared with ours
(`[CLS] a [SEP] (b [SEP])`, segment ids included, untruncated): SST-2 dev sentences, MRPC and
QNLI dev pairs, SQuAD v1.1 dev questions and contexts. Then `pipeline("text-classification")`
classifies SST-2 and MRPC dev with a classifier written to the folder (random weights, seeded, its
head scaled up and centred so that about half the texts get each label: the figure is how often
tokenization or the framework moves the prediction, not accuracy) and its predictions and
probabilities are compared with our Keras model's on our ids. Prints a Markdown
table and the first differing texts.
"""

import argparse
import csv
import gzip
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout

import numpy as np  # noqa: E402

from albert_tf.text.tokenization import AlbertTokenizer  # noqa: E402
from benchmarks.machine import describe as describe_machine  # noqa: E402

RUNNER = REPO / "tests" / "app_clients" / "run_transformers.py"
# GLUE dev files: (header rows, text columns).
GLUE = {"SST-2": (1, (0,)), "MRPC": (1, (3, 4)), "QNLI": (1, (1, 2))}
LABELS = {"SST-2": ["negative", "positive"], "MRPC": ["not_equivalent", "equivalent"]}
SEQ = 128


def glue_texts(data_dir: str, task: str) -> list[tuple[str, str | None]]:
    """A GLUE dev set's texts (pairs where the task has two), from `data_dir/glue` or else the
    rows the lift study keeps in the repository (QNLI: its evaluation part only)."""
    header, columns = GLUE[task]
    path = os.path.join(data_dir, "glue", task, "dev.tsv")
    if not os.path.exists(path):
        path = str(REPO / "benchmarks" / "data" / "glue_lift" / task / "dev.tsv")
    with open(path, encoding="utf-8") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[header:]
    return [(r[columns[0]], r[columns[1]] if len(columns) > 1 else None) for r in rows]


def squad_texts(path: str) -> dict[str, list[tuple[str, None]]]:
    """SQuAD's questions and (distinct) contexts, each as one text."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        paragraphs = [p for a in json.load(f)["data"] for p in a["paragraphs"]]
    questions = [(q["question"], None) for p in paragraphs for q in p["qas"]]
    contexts = [(c, None) for c in dict.fromkeys(p["context"] for p in paragraphs)]
    return {"SQuAD v1.1 dev questions": questions, "SQuAD v1.1 dev contexts": contexts}


def our_ids(tokenizer: AlbertTokenizer, a: str, b: str | None) -> list[list[int]]:
    """`[CLS] a [SEP] (b [SEP])` and its segment ids, untruncated."""
    ids = [tokenizer.cls_id, *tokenizer.encode(a), tokenizer.sep_id]
    segments = [0] * len(ids)
    if b is not None:
        second = [*tokenizer.encode(b), tokenizer.sep_id]
        ids, segments = ids + second, segments + [1] * len(second)
    return [ids, segments]


def run_transformers(python: str, request: dict) -> dict:
    """`run_transformers.py`'s answers; one line and exit 1 when it cannot run."""
    if not os.path.isfile(python):
        sys.exit(f"no {python}: create it from requirements-client-transformers.txt (.ci/run does)")
    done = subprocess.run(
        [python, str(RUNNER)], input=json.dumps(request), capture_output=True, text=True
    )
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        sys.exit(f"transformers could not run: {last}")
    return json.loads(done.stdout)


def write_folders(
    spm_model_file: str, out: str, tokenizer: AlbertTokenizer, texts: list
) -> dict[str, str]:
    """{"now": a folder with a classifier as `--output_hf` writes it, "before": the same with
    only `spiece.model` and an `AlbertTokenizer` config}."""
    import keras

    from albert_tf.checkpoints.hf import save_hf_model
    from albert_tf.checkpoints.hf_format import TOKENIZER_CONFIG_FILE
    from albert_tf.config import AlbertConfig
    from albert_tf.io import write_json
    from albert_tf.modeling.heads.classifier import AlbertClassifier

    keras.utils.set_random_seed(5)
    # The smoke preset, twice as wide, over the tokenizer's vocabulary and every position used.
    config = AlbertConfig.from_preset(
        "smoke",
        vocab_size=tokenizer.vocab_size,
        embedding_size=64,
        hidden_size=128,
        intermediate_size=256,
        max_position_embeddings=SEQ * 4,
    )
    model = AlbertClassifier(config, num_labels=2)
    head = model.get_layer("classifier")
    head.output_weights.assign(head.output_weights.numpy() * 100)
    probabilities = our_probabilities(model, tokenizer, texts)
    margins = np.log(probabilities[:, 1]) - np.log(probabilities[:, 0])
    head.output_bias.assign(head.output_bias.numpy() - [0.0, np.median(margins)])
    now = save_hf_model(
        model, os.path.join(out, "now"), label_names=LABELS["SST-2"], spm_model_file=spm_model_file
    )
    before = os.path.join(out, "before")
    shutil.copytree(now, before)
    os.remove(os.path.join(before, "tokenizer.json"))
    config_path = os.path.join(before, TOKENIZER_CONFIG_FILE)
    values = json.loads(pathlib.Path(config_path).read_text())
    write_json(config_path, {**values, "tokenizer_class": "AlbertTokenizer"})
    return {"now": now, "before": before, "model": model}


def our_probabilities(model, tokenizer: AlbertTokenizer, texts) -> np.ndarray:
    packed = [tokenizer.encode_pair(a, b, SEQ) for a, b in texts]
    inputs = {
        k: np.array([getattr(p, k) for p in packed], np.int32)
        for k in ("input_ids", "input_mask", "segment_ids")
    }
    return np.asarray(model.predict(inputs, batch_size=64, verbose=0)["probabilities"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data_dir", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument("--python", default=str(REPO / ".venv-clients/transformers/bin/python"))
    parser.add_argument(
        "--spm_model_file", default=str(REPO / "tests/fixtures/albert_spm/30k-clean.model")
    )
    parser.add_argument("--squad_file", default=str(REPO / "tests/fixtures/squad/dev-v1.1.json.gz"))
    parser.add_argument(
        "--ids_only",
        action="store_true",
        help="the ids table only (a transformers environment without torch, e.g. 4.x)",
    )
    args = parser.parse_args()
    print(describe_machine())
    tokenizer = AlbertTokenizer(args.spm_model_file)
    corpora = {f"{t} dev": glue_texts(args.data_dir, t) for t in GLUE}
    corpora.update(squad_texts(args.squad_file))
    out = tempfile.mkdtemp(prefix="hf_tokenizer_")
    try:
        folders = write_folders(
            args.spm_model_file, out, tokenizer, glue_texts(args.data_dir, "SST-2")
        )
        rows, version = [], None
        for name, texts in corpora.items():
            ours = [our_ids(tokenizer, a, b) for a, b in texts]
            cells = []
            for folder in ("before", "now"):
                answers = run_transformers(
                    args.python,
                    {"folder": folders[folder], "texts": texts, "use_fast": [True, False],
                     "max_length": None},
                )  # fmt: skip
                version = answers["version"]
                for path, ids in answers["ids"].items():
                    same = sum(a == b for a, b in zip(ours, ids))
                    cells.append(f"{100 * same / len(texts):.2f}% ({len(texts) - same})")
                    if folder == "now" and path == "fast":
                        for (a, b), x, y in zip(texts, ours, ids):
                            if x != y:
                                print(f"  {name}: {a[:70]!r}: ours {x[0][:12]}, theirs {y[0][:12]}")
                                break
            rows.append(f"| {name} | {len(texts)} | " + " | ".join(cells) + " |")
        print(f"\ntransformers {version}; identical ids (texts differing):\n")
        print(
            "| texts | count | before, fast | before, use_fast=False | now, fast | now, use_fast=False |"
        )  # noqa: E501
        print("|---|---:|---:|---:|---:|---:|")
        print("\n".join(rows))
        if args.ids_only:
            return
        print("\npipeline(\"text-classification\") on the folder against our model on our ids:\n")
        print("| texts | count | same label, before | same label, now | max abs diff P, now |")
        print("|---|---:|---:|---:|---:|")
        for task in ("SST-2", "MRPC"):
            texts = glue_texts(args.data_dir, task)
            ours = our_probabilities(folders["model"], tokenizer, texts)
            cells = []
            for folder in ("before", "now"):
                answers = run_transformers(
                    args.python,
                    {"folder": folders[folder], "texts": texts, "use_fast": [True],
                     "max_length": SEQ, "pipeline": True},
                )  # fmt: skip
                names = [LABELS["SST-2"][i] for i in ours.argmax(-1)]
                labels = [p["label"] for p in answers["predictions"]]
                same = sum(a == b for a, b in zip(names, labels))
                cells.append(f"{100 * same / len(texts):.2f}% ({len(texts) - same})")
                theirs = np.array(
                    [p["score"] if p["label"] == n else 1 - p["score"]
                     for p, n in zip(answers["predictions"], names)]
                )  # fmt: skip
                gap = np.abs(theirs - ours.max(-1)).max()
            print(f"| {task} dev | {len(texts)} | {cells[0]} | {cells[1]} | {gap:.2g} |")
    finally:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
