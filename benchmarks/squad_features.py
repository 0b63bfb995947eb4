"""SQuAD feature building on the full official dev-v2.0 at 384/128/64: ours against the original
algorithm, side by side in one run.

    python benchmarks/squad_features.py [--squad_file dev-v2.0.json] [--sample 300]

Ours: every context tokenized and aligned once (the character LCS computed with bit operations) and
reused by its questions. The original's algorithm: the plain banded LCS, cell by cell in Python,
redone with the tokenization for every question (`reference_alignment`, no paragraph cache) — run
on `--sample` questions spread over the file (its cost per question is flat) and scaled to the
whole file. The features of the sampled questions must be equal field for field (asserted).
"""

import argparse
import dataclasses
import os
import pathlib
import random
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout

from albert_tf.tasks.squad.examples import read_squad_examples  # noqa: E402
from albert_tf.tasks.squad.features import convert_examples_to_features  # noqa: E402
from albert_tf.text.tokenization import AlbertTokenizer  # noqa: E402
from benchmarks.machine import describe as describe_machine  # noqa: E402
from benchmarks.squad_alignment_reference import reference_alignment  # noqa: E402

SETTINGS = dict(max_seq_length=384, doc_stride=128, max_query_length=64, is_training=False)


def _comparable(features):
    # unique_id and example_index count from the start of the list given: compare the rest.
    return [
        {k: v for k, v in dataclasses.asdict(f).items() if k not in ("unique_id", "example_index")}
        for f in features
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--squad_file", default=str(REPO.parent / "shared" / "data" / "squad" / "dev-v2.0.json")
    )
    parser.add_argument(
        "--spm_model_file", default=str(REPO / "tests/fixtures/albert_spm/30k-clean.model")
    )
    parser.add_argument("--sample", type=int, default=300)
    args = parser.parse_args()
    tokenizer = AlbertTokenizer(args.spm_model_file)
    print(f"machine: {describe_machine()}, load average {os.getloadavg()[0]:.1f}")

    started = time.perf_counter()
    examples = read_squad_examples(args.squad_file, is_training=False)
    read_s = time.perf_counter() - started
    started = time.perf_counter()
    ours = convert_examples_to_features(examples, tokenizer, **SETTINGS)
    ours_s = time.perf_counter() - started

    sample = sorted(random.Random(0).sample(range(len(examples)), args.sample))
    chosen = [examples[i] for i in sample]
    started = time.perf_counter()
    original = convert_examples_to_features(
        chosen, tokenizer, **SETTINGS, alignment_fn=reference_alignment, paragraph_cache_size=0
    )
    original_s = time.perf_counter() - started
    ours_on_sample = convert_examples_to_features(chosen, tokenizer, **SETTINGS)
    assert _comparable(original) == _comparable(ours_on_sample), "features differ on the sample"
    by_example = {}
    for feature in ours:
        by_example.setdefault(feature.example_index, []).append(feature)
    assert _comparable([f for i in sample for f in by_example[i]]) == _comparable(original)

    original_full_s = original_s / len(chosen) * len(examples)
    print(f"{args.squad_file}: {len(examples)} questions, {len(ours)} windows at 384/128/64")
    print(f"  reading the JSON            {read_s:7.2f} s")
    print(
        f"  ours, whole file            {ours_s:7.2f} s ({len(examples) / ours_s:,.0f} questions/s)"
    )
    print(
        f"  original algorithm          {original_s:7.2f} s on {len(chosen)} questions "
        f"-> {original_full_s:,.0f} s for the file ({len(chosen) / original_s:,.1f} questions/s)"
    )
    print(
        f"  speed-up: {original_full_s / ours_s:.0f}x (target >= 20x); sampled windows equal: True"
    )


if __name__ == "__main__":
    main()
