"""The request bound of the text models of a non-QA head (a classifier's `<name>_text/` and
`<name>_preprocessing/`): over `max_text_bytes` or not UTF-8 is refused before tokenization with
the QA model's message shape naming the field; at the limit a request is served exactly as the
same graph without the checks serves it. One export, reloaded as TF Serving would load it."""

import json
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import albert_tf.text.tf_tokenization  # noqa: F401  (registers the tf-text ops to load the models)
from albert_tf import AlbertConfig
from albert_tf.export import ExportConfig, export_model, serving_head
from albert_tf.export.qa.inputs import DEFAULT_MAX_TEXT_BYTES
from albert_tf.export.qa.text import QaSettings
from albert_tf.export.savedmodel import TEXT_SETTINGS_FILE
from albert_tf.modeling.heads.classifier import AlbertClassifier
from albert_tf.modeling.model import BACKBONE_INPUTS
from albert_tf.text.tf_tokenization import AlbertPreprocessingLayer
from albert_tf.text.tokenization import AlbertTokenizer
from tests.conftest import FIXTURES, REPO_ROOT
from tests.model_configs import CLASSIFIER_TINY

SPM = FIXTURES / "albert_spm" / "30k-clean.model"
SEQ = 32
LIMIT = 4096  # the export's max_text_bytes: the probe pair of 5,100 bytes is over it
MODELS = ("preprocessing", "text")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(output dir, report, Keras classifier) of one export at `LIMIT`."""
    out = tmp_path_factory.mktemp("bounds")
    keras.utils.set_random_seed(7)
    config = AlbertConfig(
        **dict(CLASSIFIER_TINY, num_hidden_layers=1, intermediate_size=32), initializer_range=0.2
    )
    model = AlbertClassifier(config, num_labels=3)
    report = export_model(
        serving_head("classifier", model),
        ExportConfig(
            output_dir=str(out),
            model_name="cls",
            max_seq_length=SEQ,
            spm_model_file=str(SPM),
            formats=("saved_model",),
            num_verification_examples=16,
            max_text_bytes=LIMIT,
        ),
    )
    return out, report, model


@pytest.fixture(scope="module")
def signatures(exported):
    """{model: its signatures}, reloaded from the export."""
    return {
        name: tf.saved_model.load(str(exported[0] / f"cls_{name}" / "1")).signatures
        for name in MODELS
    }


def refusal(signature, **fields) -> str:
    """The one-line message `signature` refuses the request `fields` (lists of str or bytes) with."""
    with pytest.raises(tf.errors.InvalidArgumentError) as refused:
        signature(**{k: tf.constant(v) for k, v in fields.items()})
    return refused.value.message


def over_limit_message(field: str, rows: str, total: int) -> str:
    """The QA model's message shape (`qa.inputs.bounded_texts`) for this limit."""
    return (
        f"{field}: the {rows} of the request hold {total} bytes, more than "
        f"max_text_bytes={LIMIT} (the limit stored in this model, for all {rows} of a request "
        "together)"
    )


def test_the_limit_is_stored_in_the_models_and_the_report(exported):
    out, report, _ = exported
    assert report["max_text_bytes"] == LIMIT
    for name in MODELS:
        stored = json.loads((out / f"cls_{name}" / "1" / "assets" / TEXT_SETTINGS_FILE).read_text())
        assert stored == {"head": "classifier", "max_seq_length": SEQ, "max_text_bytes": LIMIT}
        assert report["artifacts"][name]["failures"] == [], name
    # The export itself checked that both models refuse the one probe over the limit.
    assert report["artifacts"]["preprocessing"]["figures"]["num_refused_over_limit"] == 1


@pytest.mark.parametrize("name", MODELS)
def test_text_over_the_limit_is_refused_naming_the_field(signatures, name):
    single, pairs = signatures[name]["serving_default"], signatures[name]["pairs"]
    assert over_limit_message("text", "texts", LIMIT + 1) in refusal(
        single, text=["x" * (LIMIT + 1)]
    )
    # All rows of a field together: two texts within the limit each, over it in one request.
    assert over_limit_message("text", "texts", LIMIT + 1) in refusal(
        single, text=["x" * 2049, "é" * 1024]
    )
    assert over_limit_message("text_a", "text_a texts", LIMIT + 1) in refusal(
        pairs, text_a=["x" * (LIMIT + 1)], text_b=["y"]
    )
    assert over_limit_message("text_b", "text_b texts", 3 * LIMIT) in refusal(
        pairs, text_a=["x", "y", "z"], text_b=["y" * LIMIT] * 3
    )


@pytest.mark.parametrize("name", MODELS)
def test_text_that_is_not_utf8_is_refused_naming_the_row(signatures, name):
    single, pairs = signatures[name]["serving_default"], signatures[name]["pairs"]
    assert "text[1] is not valid UTF-8" in refusal(single, text=[b"fine", b"caf\xe9"])
    assert "text_a[0] is not valid UTF-8" in refusal(
        pairs, text_a=[b"\xed\xa0\x80 surrogate"], text_b=[b"fine"]
    )
    assert "text_b[2] is not valid UTF-8" in refusal(
        pairs, text_a=[b"a", b"b", b"c"], text_b=[b"a", b"b", b"\xff"]
    )


def test_requests_at_the_limit_are_served_as_without_the_checks(exported, signatures):
    """Bit for bit the outputs of the graph the checks were added to (preprocessing, then the
    head), with ids equal to the Python tokenizer's."""
    preprocessing = AlbertPreprocessingLayer.from_file(str(SPM), max_seq_length=SEQ)
    tokenizer = AlbertTokenizer(SPM)
    at_limit = ("Café au lait, naïve résumé. " * 200).encode("utf-8")[:LIMIT].decode("utf-8")
    at_limit += "x" * (LIMIT - len(at_limit.encode("utf-8")))
    requests = {
        "serving_default": {"text": [at_limit]},
        "serving_default_rows": {"text": ["A man inspects the uniform.", "", "x" * (LIMIT - 27)]},
        "pairs": {"text_a": [at_limit, ""], "text_b": ["", "x" * LIMIT]},
    }
    head = serving_head("classifier", exported[2])

    @tf.function(autograph=False)
    def unchecked(texts):
        features = preprocessing(texts)
        return features, head.outputs("serving_default", features)

    for request, fields in requests.items():
        signature = request.removesuffix("_rows")
        rows = list(fields.values())
        assert all(sum(len(t.encode("utf-8")) for t in r) <= LIMIT for r in rows)
        ids, probabilities = unchecked(
            tf.constant(rows[0]) if len(rows) == 1 else tuple(tf.constant(r) for r in rows)
        )
        inputs = {k: tf.constant(v) for k, v in fields.items()}
        got_ids = signatures["preprocessing"][signature](**inputs)
        got = signatures["text"][signature](**inputs)["probabilities"].numpy()
        np.testing.assert_array_equal(got, probabilities["probabilities"].numpy(), err_msg=request)
        for key in BACKBONE_INPUTS:
            np.testing.assert_array_equal(got_ids[key], ids[key], err_msg=f"{request} {key}")
        for row, texts in enumerate(zip(*rows)):
            packed = tokenizer.encode_pair(texts[0], texts[1] if len(texts) == 2 else None, SEQ)
            for key in BACKBONE_INPUTS:
                assert got_ids[key][row].numpy().tolist() == getattr(packed, key), (request, key)


def test_one_limit_for_every_text_model():
    config = AlbertConfig(**CLASSIFIER_TINY)
    assert ExportConfig(output_dir="x").max_text_bytes == DEFAULT_MAX_TEXT_BYTES
    assert QaSettings().max_context_bytes == DEFAULT_MAX_TEXT_BYTES
    with pytest.raises(ValueError, match="max_text_bytes must be a positive int, got 0"):
        ExportConfig(output_dir="x", max_seq_length=SEQ, max_text_bytes=0).validate(config)
    with pytest.raises(ValueError, match="qa.max_context_bytes=10 differs from max_text_bytes=20"):
        ExportConfig(
            output_dir="x",
            max_seq_length=SEQ,
            max_text_bytes=20,
            qa=QaSettings(max_query_length=8, max_context_bytes=10),
        ).validate(config)


_FLAGS = """
import json, runpy, sys
from absl import flags
runpy.run_path("pipelines/export.py", run_name="flags_only")
values = {}
for flag in ("--max_text_bytes=4096", "--max_context_bytes=77"):
    flags.FLAGS.unparse_flags()
    flags.FLAGS(["export.py", "--output_dir=x", flag])
    values[flag] = flags.FLAGS.max_text_bytes
flags.FLAGS.unparse_flags()
flags.FLAGS(["export.py", "--output_dir=x"])
values["default"] = flags.FLAGS.max_text_bytes
print(json.dumps(values))
"""


def test_cli_flag_and_its_qa_name_set_the_one_limit():
    run = subprocess.run(
        [sys.executable, "-c", _FLAGS],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={"TF_CPP_MIN_LOG_LEVEL": "2", "PATH": "/usr/bin:/bin"},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout.splitlines()[-1]) == {
        "--max_text_bytes=4096": 4096,
        "--max_context_bytes=77": 77,
        "default": DEFAULT_MAX_TEXT_BYTES,
    }
