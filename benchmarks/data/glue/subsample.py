"""Writes this folder from the full GLUE files: each dev set whole, a seeded sample of each train set.

    python benchmarks/data/glue/subsample.py --source=../shared/data/glue

Bytes are copied as they are (BOM, line endings, a missing final newline); a train sample keeps
the header line (SST-2, MRPC, RTE; CoLA has none) and the sampled rows in their file order, and is
stored gzipped (`train.tsv.gz`, which the GLUE reader takes as `train.tsv`) to keep the checkout
small.
"""

import argparse
import gzip
import hashlib
import pathlib
import random

HERE = pathlib.Path(__file__).resolve().parent
# task folder -> (train rows sampled, whether the file starts with a header line)
TRAIN_ROWS = {
    "SST-2": (2000, True),
    "MRPC": (1000, True),
    "RTE": (1000, True),
    "CoLA": (2000, False),
}
SEED = 12345


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", required=True, help="GLUE root with the full task folders")
    source = pathlib.Path(parser.parse_args().source)
    for task, (rows, header) in TRAIN_ROWS.items():
        (HERE / task).mkdir(exist_ok=True)
        dev = (source / task / "dev.tsv").read_bytes()
        (HERE / task / "dev.tsv").write_bytes(dev)
        train = (source / task / "train.tsv").read_bytes()
        lines = train.splitlines(keepends=True)
        head, body = (lines[:1], lines[1:]) if header else ([], lines)
        keep = sorted(random.Random(SEED).sample(range(len(body)), rows))
        sample = b"".join(head + [body[i] for i in keep])
        (HERE / task / "train.tsv.gz").write_bytes(gzip.compress(sample, 9, mtime=0))
        for name, data in (("train", train), ("dev", dev)):
            print(f"{task}/{name}.tsv source sha256 {hashlib.sha256(data).hexdigest()[:16]}")


if __name__ == "__main__":
    main()
