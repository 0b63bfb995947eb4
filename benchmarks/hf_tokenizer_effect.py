"""What transformers' tokenizer does to a converted model's predictions, beside a one-piece edit.

    python benchmarks/hf_tokenizer_effect.py

On the 420 golden texts, transformers' tokenizers-backed ALBERT tokenizer (what 5.x always gives,
and 4.x by default) gives other ids than the original on about 120 (tests/fixtures/hf_transformers/
README.md). This feeds those texts, as `[CLS] text [SEP]`, to the converted 30000-piece fixture
model (`albert_tiny_pretraining`, the only fixture whose vocabulary holds real ids; the classifier
fixture has 300 pieces) once with the original's ids and once with each transformers variant's,
and prints how far its pooled output moves, against how far apart the pooled outputs of two
different texts lie, and how often a classifier's prediction flips: the converted classifier
fixture's 3-class head (its `classifier` weights; hidden size 32, as this model's) on that pooled
output. For scale, the same figures for a minimal edit of the original's ids: the text's last
piece dropped (mostly the final full stop).

The fixtures' weights are random (transformers' init plus noise), so the figures say how much this
input difference moves a network of this shape, not how a trained model's accuracy changes. On
these random weights every text gets the same class (from this head and from the model's own SOP
head alike), so no flip can show: the pooled output's move is the figure that means something.
"""

import json
import pathlib
import sys

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout

from albert_tf.checkpoints.hf import load_hf_model  # noqa: E402
from benchmarks.machine import describe as describe_machine  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures"
VARIANTS = ("hf5_from_hf4_tokenizer_json", "hf5_from_spiece_model", "hf4_fast")
MAX_PIECES = 126  # [CLS] + pieces + [SEP] within the fixture's 128 positions


def batch(rows: list[list[int]]) -> dict[str, np.ndarray]:
    rows = [[2, *row[:MAX_PIECES], 3] for row in rows]
    length = max(map(len, rows))
    ids = np.zeros((len(rows), length), np.int32)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
    return {"input_ids": ids, "input_mask": (ids > 0).astype(np.int32), "segment_ids": 0 * ids}


def pooled(model, rows) -> np.ndarray:
    x = batch(rows)
    x["masked_lm_positions"] = np.zeros((len(rows), 1), np.int32)
    return np.asarray(model(x)["pooled_output"], np.float64)


def compare(model, head, reference_rows, other_rows) -> str:
    """Flips of the 3-class head's prediction and the pooled output's move, against the spread
    of pooled outputs between different texts."""
    ref, other = pooled(model, reference_rows), pooled(model, other_rows)
    weights, bias = head
    flips = int(
        np.sum((ref @ weights.T + bias).argmax(-1) != (other @ weights.T + bias).argmax(-1))
    )
    classes = np.bincount((ref @ weights.T + bias).argmax(-1), minlength=len(bias))
    move = np.linalg.norm(ref - other, axis=-1)
    between = np.linalg.norm(ref[:, None] - ref[None], axis=-1)[np.triu_indices(len(ref), 1)]
    return (
        f"classifier prediction flipped {flips:3d}/{len(ref)} (classes {classes.tolist()}); "
        f"pooled output moved {np.median(move):.3f} median, {move.max():.3f} max, against "
        f"{np.median(between):.3f} median between two texts"
    )


def main() -> None:
    print(describe_machine())
    golden = json.loads((FIXTURES / "original_tokenization/tokenization_golden.json").read_text())
    original = [case["ids"] for case in golden["cases"]]
    theirs = json.loads((FIXTURES / "hf_transformers/tokenizer_ids.json").read_text())["cases"]
    model = load_hf_model(FIXTURES / "hf_transformers/albert_tiny_pretraining")
    classifier = load_hf_model(FIXTURES / "hf_transformers/albert_tiny_classifier")
    head = tuple(v.numpy() for v in classifier.get_layer("classifier").weights)
    for variant in VARIANTS:
        differ = [k for k, case in enumerate(theirs) if case[variant] != original[k]]
        print(f"{variant}: ids differ on {len(differ)} of {len(original)} texts")
        print(
            "  transformers' ids vs the original's:",
            compare(
                model, head, [original[k] for k in differ], [theirs[k][variant] for k in differ]
            ),
        )
    differ = [k for k, case in enumerate(theirs) if case[VARIANTS[0]] != original[k]]
    rows = [original[k] for k in differ]
    print(f"scale, on the {VARIANTS[0]} cases: the original's ids less their last piece:")
    print("  ", compare(model, head, rows, [row[:-1] for row in rows]))


if __name__ == "__main__":
    main()
