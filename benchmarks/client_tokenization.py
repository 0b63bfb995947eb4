"""The on-device clients' tokenization against ours, on every text of the golden cases, SQuAD dev
and GLUE dev, with the training SentencePiece model and with the client-compatible one.

    python benchmarks/client_tokenization.py [--data_dir ../shared/data]

The clients' path (`ClientTokenizer`): ASCII lowercase, then SentencePiece, each piece's id;
`BertQuestionAnswerer` encodes a context word by word (split on spaces). Ours: `AlbertTokenizer`
(`preprocess_text`, SentencePiece, the digit-comma rule). Prints, per corpus, how many texts get
other ids than ours through each model, and the first differences; then the numbers 1,000 to
999,999 written with commas that the client-compatible model splits otherwise, as ranges.
"""

import argparse
import csv
import glob
import json
import os
import pathlib
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout

from albert_tf.text.client_sentencepiece import (  # noqa: E402
    ClientTokenizer,
    client_sentencepiece_model,
    comma_number_mismatches,
    tokenization_mismatches,
)
from albert_tf.text.tokenization import AlbertTokenizer  # noqa: E402
from benchmarks.machine import describe as describe_machine  # noqa: E402

# GLUE dev files: (header rows, text columns).
GLUE_COLUMNS = {"CoLA": (0, (3,)), "SST-2": (1, (0,)), "MRPC": (1, (3, 4)), "QNLI": (1, (1, 2))}
GLUE_COLUMNS["RTE"] = GLUE_COLUMNS["QNLI"]


def corpora(data_dir: str) -> dict[str, tuple[list[str], bool]]:
    """{name: (texts, encoded word by word as the QA client does)}."""
    golden = REPO / "tests/fixtures/original_tokenization/tokenization_golden.json"
    found = {"golden cases": ([c["text"] for c in json.loads(golden.read_text())["cases"]], False)}
    for path in sorted(glob.glob(os.path.join(data_dir, "squad", "dev-v*.json"))):
        if "small" in path:
            continue
        name = os.path.basename(path)
        paragraphs = [
            p for a in json.load(open(path, encoding="utf-8"))["data"] for p in a["paragraphs"]
        ]
        found[f"{name} contexts"] = ([p["context"] for p in paragraphs], True)
        found[f"{name} questions"] = ([q["question"] for p in paragraphs for q in p["qas"]], False)
    csv.field_size_limit(1 << 30)
    for task, (header, columns) in GLUE_COLUMNS.items():
        path = os.path.join(data_dir, "glue", task, "dev.tsv")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[header:]
            found[f"GLUE {task} dev"] = ([r[c] for r in rows for c in columns], False)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data_dir", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument(
        "--spm_model_file", default=str(REPO / "tests/fixtures/albert_spm/30k-clean.model")
    )
    args = parser.parse_args()
    print(describe_machine())
    tokenizer = AlbertTokenizer(args.spm_model_file)
    start = time.perf_counter()
    client = ClientTokenizer(client_sentencepiece_model(tokenizer.model_proto))
    print(f"client-compatible model built in {time.perf_counter() - start:.1f} s")
    plain = ClientTokenizer(tokenizer.model_proto)
    for name, (texts, by_word) in corpora(args.data_dir).items():
        counts = []
        for label, model in (("training .model", plain), ("client-compatible", client)):
            lines = tokenization_mismatches(tokenizer, model, texts)
            counts.append(f"{label}: {len(lines)} differ")
            if by_word:
                words = tokenization_mismatches(tokenizer, model, texts, by_word=True)
                counts[-1] += f" ({len(words)} word by word)"
            if model is client:
                for line in lines[:3]:
                    print(f"    {line}")
        print(f"{name}: {len(set(texts))} texts; " + "; ".join(counts))
    numbers = comma_number_mismatches(tokenizer, client)
    print(f"numbers 1,000 to 999,999 with commas: {len(numbers)} of 999,000 differ:")
    print(", ".join(number_ranges(numbers)))


def number_ranges(numbers: list[str]) -> list[str]:
    """Comma-written numbers in order, consecutive runs as "a–b"."""
    values = [int(n.replace(",", "")) for n in numbers]
    runs: list[list[int]] = []
    for value in values:
        if runs and value == runs[-1][1] + 1:
            runs[-1][1] = value
        else:
            runs.append([value, value])
    return [f"{a:,}" if a == b else f"{a:,}–{b:,}" for a, b in runs]


if __name__ == "__main__":
    main()
