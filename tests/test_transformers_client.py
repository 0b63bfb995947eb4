"""An `--output_hf` folder in transformers itself, as its users load it: `AutoTokenizer` (fast and
`use_fast=False`) gives our ids and segment ids, and `pipeline("text-classification")` our labels
and probabilities, on the golden texts, the clients' probe texts and GLUE dev texts.

transformers runs in `.venv-clients/transformers/` (`bash .ci/run` creates it from
`requirements-client-transformers.txt`) or where `ALBERT_TRANSFORMERS_PYTHON` points; a missing
client fails the test in one line.
"""

import csv
import json

import keras
import numpy as np
import pytest

from albert_tf import AlbertConfig
from albert_tf.checkpoints.hf import save_hf_model
from albert_tf.modeling.heads.classifier import AlbertClassifier
from albert_tf.text.client_sentencepiece import CLIENT_PROBE_TEXTS
from albert_tf.text.tokenization import AlbertTokenizer
from tests.client_venvs import run_in_client
from tests.conftest import FIXTURES, REPO_ROOT
from tests.model_configs import CLASSIFIER_TINY
from tests.tolerances import SAME_MODEL, assert_close_to_scale

# numerics: torch's probabilities against ours, on whichever kernels; e2e: whole exports
pytestmark = [pytest.mark.numerics, pytest.mark.e2e]

SPM = FIXTURES / "albert_spm" / "30k-clean.model"
RUNNER = REPO_ROOT / "tests" / "app_clients" / "run_transformers.py"
GLUE_DEV = REPO_ROOT / "benchmarks" / "data" / "glue_lift"
LABELS = ["not_equivalent", "equivalent"]
SEQ = 64


def glue_rows(task: str, columns: tuple[int, ...], count: int) -> list:
    with open(GLUE_DEV / task / "dev.tsv", encoding="utf-8") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1 : count + 1]
    return [(r[columns[0]], r[columns[1]] if len(columns) > 1 else None) for r in rows]


def texts() -> list:
    golden = json.loads((FIXTURES / "original_tokenization/tokenization_golden.json").read_text())
    singles = [c["text"] for c in golden["cases"]] + list(CLIENT_PROBE_TEXTS)
    singles.append("The [MASK] sat on [CLS] mats [SEP]")  # text to the original, not special ids
    return (
        [(t, None) for t in dict.fromkeys(singles)]
        + glue_rows("SST-2", (0,), 200)
        + glue_rows("MRPC", (3, 4), 100)
    )


def run_transformers(request: dict) -> dict:
    return run_in_client(
        "transformers", "ALBERT_TRANSFORMERS_PYTHON", RUNNER, request, "transformers"
    )


def our_probabilities(model, cases) -> np.ndarray:
    tokenizer = AlbertTokenizer(SPM)
    packed = [tokenizer.encode_pair(a, b, SEQ) for a, b in cases]
    inputs = {
        k: np.array([getattr(p, k) for p in packed], np.int32)
        for k in ("input_ids", "input_mask", "segment_ids")
    }
    return np.asarray(model.predict(inputs, batch_size=64, verbose=0)["probabilities"])


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    keras.utils.set_random_seed(3)
    config = AlbertConfig(**CLASSIFIER_TINY, initializer_range=0.2)
    model = AlbertClassifier(config, num_labels=2)
    # The untrained head gives every text about the same probabilities: its weights are scaled
    # up and its bias moved to the median margin, so half the texts get each label, most of them
    # clearly, and a wrong id changes the prediction.
    head = model.get_layer("classifier")
    head.output_weights.assign(head.output_weights.numpy() * 100)
    probabilities = our_probabilities(model, texts())
    margins = np.log(probabilities[:, 1]) - np.log(probabilities[:, 0])
    head.output_bias.assign(head.output_bias.numpy() - [0.0, np.median(margins)])
    out = tmp_path_factory.mktemp("hf") / "hub"
    save_hf_model(model, out, label_names=LABELS, spm_model_file=str(SPM))
    return model, out


def test_autotokenizer_gives_our_ids_fast_and_slow(folder):
    _, out = folder
    tokenizer = AlbertTokenizer(SPM)
    cases = texts()
    answers = run_transformers(
        {"folder": str(out), "texts": cases, "use_fast": [True, False], "max_length": None}
    )
    assert set(answers["ids"]) == {"fast", "slow"}
    for path, ids in answers["ids"].items():
        differing = []
        for (a, b), (input_ids, segments) in zip(cases, ids):
            ours = [tokenizer.cls_id, *tokenizer.encode(a), tokenizer.sep_id]
            ours_segments = [0] * len(ours)
            if b is not None:
                second = [*tokenizer.encode(b), tokenizer.sep_id]
                ours, ours_segments = ours + second, ours_segments + [1] * len(second)
            if (input_ids, segments) != (ours, ours_segments):
                differing.append(a[:60])
        assert not differing, f"{path}: {len(differing)} of {len(cases)} differ: {differing[:5]}"


def test_pipeline_predicts_as_we_do_with_label_names(folder):
    model, out = folder
    tokenizer = AlbertTokenizer(SPM)
    # Pairs that fit: truncating a pair, transformers' "longest_first" takes the odd piece from
    # the first text where the original takes it from the second.
    cases = [
        (a, b)
        for a, b in texts()
        if b is None or len(tokenizer.encode(a)) + len(tokenizer.encode(b)) + 3 <= SEQ
    ]
    answers = run_transformers(
        {"folder": str(out), "texts": cases, "max_length": SEQ, "pipeline": True}
    )
    ours = our_probabilities(model, cases)
    predicted = [LABELS[i] for i in ours.argmax(-1)]
    assert min(predicted.count(name) for name in LABELS) > len(cases) // 4
    labels = [p["label"] for p in answers["predictions"]]
    # A near-tie may go either way between two frameworks' float sums.
    decided = np.abs(ours[:, 1] - ours[:, 0]) > 1e3 * SAME_MODEL
    assert decided.mean() > 0.9, decided.mean()
    assert [a for a, d in zip(labels, decided) if d] == [b for b, d in zip(predicted, decided) if d]
    theirs = np.array([p["score"] for p in answers["predictions"]])
    assert_close_to_scale(theirs[decided], ours.max(-1)[decided], SAME_MODEL)
