"""GLUE label names end to end: the task's names (or --label_names) in classifier_info.json, the
text SavedModels' `label` output, the TFLite labels.txt and a transformers folder's id2label;
--output_hf folders that carry their tokenizer (or are refused); a Hub classifier scored as it is
by run_classifier.py --hf_model --do_eval / --do_predict."""

import json
import os
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import albert_tf.modeling  # noqa: F401  (registers every model class for load_model)
from albert_tf import AlbertClassifier, AlbertConfig
from albert_tf.checkpoints.hf import (
    load_hf_config,
    load_hf_model,
    resolve_do_lower_case,
    resolve_spm_model_file,
)
from albert_tf.export import ExportConfig, export_model, load_serving_head
from albert_tf.export.tflite import metadata as tm
from albert_tf.export.tflite.app_metadata import (
    AppMetadataSettings,
    settings_beside,
    with_label_names,
)
from albert_tf.finetuning.bundle import bundle_manifest
from albert_tf.finetuning import loop
from albert_tf.tasks.glue import finetune as glue_finetune
from albert_tf.tasks.glue.finetune import FinetuneConfig
from albert_tf.tasks.glue.processors import TASKS
from tests.model_configs import CLASSIFIER_TINY
from tests.test_hf_model_flag import two_label_classifier

pytestmark = pytest.mark.e2e  # starts the CLIs or runs whole exports

ROOT = pathlib.Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
GLUE = FIXTURES / "glue"
SPM = FIXTURES / "albert_spm" / "30k-clean.model"
SST2_NAMES = ["negative", "positive"]
SEQ = 24


def run_cli(script: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "pipelines" / script), *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        timeout=600,
    )


def error_lines(result: subprocess.CompletedProcess) -> list[str]:
    return [line for line in result.stderr.splitlines() if "Error" in line or "failed" in line]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> pathlib.Path:
    """An SST-2 fine-tuning bundle of a fresh tiny classifier, as the GLUE job exports it."""
    root = tmp_path_factory.mktemp("bundle")
    config = FinetuneConfig(
        "SST-2", str(GLUE), str(root / "run"), str(SPM), export_dir=str(root / "export")
    )
    config.max_seq_length = SEQ
    albert_config = AlbertConfig(**dict(CLASSIFIER_TINY, num_hidden_layers=1))
    model = AlbertClassifier(albert_config, num_labels=2, seed=3)
    glue_finetune.GlueFinetuneTask(config).export(model, "fresh", albert_config)
    return root / "export"


@pytest.fixture(scope="module")
def exported(bundle, tmp_path_factory) -> pathlib.Path:
    """The bundle's classifier exported (text SavedModels, TFLite with client metadata), its
    labels read from classifier_info.json as export.py reads them."""
    out = tmp_path_factory.mktemp("exported")
    corpus = out / "texts.txt"
    rows = (GLUE / "SST-2" / "train.tsv").read_text().splitlines()[1:17]
    corpus.write_text("".join(row.split("\t")[0] + "\n" for row in rows))
    model_file = str(bundle / "classifier.keras")
    report = export_model(
        load_serving_head("classifier", keras_model=model_file),
        ExportConfig(
            output_dir=str(out),
            model_name="sst",
            max_seq_length=SEQ,
            formats=("saved_model", "tflite_fp32"),
            spm_model_file=str(SPM),
            representative_data=str(corpus),
            num_verification_examples=8,
            latency_runs=1,
            app_metadata=settings_beside(model_file),
        ),
    )
    assert report["artifacts"]["text"]["failures"] == []
    return out


def test_glue_tasks_name_their_labels_in_label_id_order():
    names = {name: task.label_names for name, task in TASKS.items()}
    assert names["sst-2"] == ("negative", "positive")
    assert names["mrpc"] == ("not_equivalent", "equivalent")
    assert names["qqp"] == ("not_duplicate", "duplicate")
    assert names["cola"] == ("unacceptable", "acceptable")
    assert names["wnli"] == ("not_entailment", "entailment")
    assert names["rte"] == names["qnli"] == ("entailment", "not_entailment")
    # MNLI's ids stay the original's: the names are its TSV labels in that order.
    assert names["mnli"] == TASKS["mnli"].labels == ("contradiction", "entailment", "neutral")
    assert names["sts-b"] is None
    assert TASKS["sst-2"].labels == ("0", "1")  # what the TSV files and the GLUE server hold


def test_classifier_info_holds_the_names_beside_the_tsv_labels(bundle):
    info = json.loads((bundle / "classifier_info.json").read_text())
    assert info["label_names"] == SST2_NAMES
    assert info["labels"] == ["0", "1"]  # as bundles written before the names hold them
    text_model = keras.saving.load_model(bundle / "classifier_text.keras")
    assert text_model.label_names == SST2_NAMES
    # A bundle from before the names still loads: its labels are its names.
    old = {k: v for k, v in info.items() if k != "label_names"}
    (bundle.parent / "old").mkdir()
    (bundle.parent / "old" / "classifier_info.json").write_text(json.dumps(old))
    assert settings_beside(str(bundle.parent / "old" / "classifier.keras")).labels == ("0", "1")
    assert settings_beside(str(bundle / "classifier.keras")).labels == tuple(SST2_NAMES)


def test_the_text_saved_model_serves_the_predicted_label_name(exported):
    served = tf.saved_model.load(str(exported / "sst_text" / "1"))
    texts = ["a gripping film", "dull and long", "Café au lait", "it is what it is"]
    for signature, inputs in (
        ("serving_default", {"text": tf.constant(texts)}),
        ("pairs", {"text_a": tf.constant(texts), "text_b": tf.constant(texts[::-1])}),
    ):
        outputs = served.signatures[signature](**inputs)
        assert set(outputs) == {"probabilities", "label"}, signature
        expected = [SST2_NAMES[i] for i in outputs["probabilities"].numpy().argmax(-1)]
        assert [x.decode() for x in outputs["label"].numpy()] == expected, signature
    ids_model = tf.saved_model.load(str(exported / "sst" / "1"))
    assert "label" not in ids_model.signatures["serving_default"].structured_outputs


def test_the_tflite_labels_are_the_names(exported):
    model = (exported / "sst_tflite" / "1" / "sst_fp32.tflite").read_bytes()
    assert tm.associated_files(model)["labels.txt"] == b"negative\npositive\n"


def test_label_names_override_the_tasks_and_a_wrong_count_is_refused(tmp_path, bundle):
    config = FinetuneConfig("mrpc", "d", "o", "s", label_names="different, same")
    assert config.class_names == ("different", "same")
    assert FinetuneConfig("mrpc", "d", "o", "s").class_names == ("not_equivalent", "equivalent")
    with pytest.raises(ValueError, match=r"3 names \(a,b,c\) for mrpc's 2 labels"):
        FinetuneConfig("mrpc", "d", "o", "s", label_names="a,b,c")
    with pytest.raises(ValueError, match="sts-b is a regression"):
        FinetuneConfig("sts-b", "d", "o", "s", label_names="a")
    result = run_cli(
        "run_classifier.py",
        "--task_name=SST-2",
        f"--data_dir={GLUE}",
        f"--spm_model_file={SPM}",
        f"--output_dir={tmp_path / 'out'}",
        "--label_names=bad,ok,good",
        "--do_eval",
    )
    assert result.returncode == 1
    (line,) = error_lines(result)
    assert "--label_names: 3 names (bad,ok,good) for sst-2's 2 labels (negative,positive)" in line
    assert "Traceback" not in result.stderr and not (tmp_path / "out").exists()
    # export.py --label_names: the same rule against the classifier's own classes.
    head = load_serving_head("classifier", keras_model=str(bundle / "classifier.keras"))
    settings = settings_beside(str(bundle / "classifier.keras"))
    assert with_label_names(settings, head, ["bad", "good"]).labels == ("bad", "good")
    with pytest.raises(ValueError, match=r"1 names \(bad\) for the classifier's 2 labels"):
        with_label_names(settings, head, ["bad"])
    assert with_label_names(AppMetadataSettings(), head, "x,y").labels == ("x", "y")


def test_output_hf_of_a_bundle_has_its_tokenizer_and_label_names(bundle, tmp_path):
    out = tmp_path / "hub"
    result = run_cli(
        "convert_checkpoint.py",
        f"--keras_model={bundle / 'classifier.keras'}",
        f"--output_hf={out}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    config = json.loads((out / "config.json").read_text())
    assert config["id2label"] == {"0": "negative", "1": "positive"}
    assert config["label2id"] == {"negative": 0, "positive": 1}
    assert (out / "spiece.model").read_bytes() == (bundle / "30k-clean.model").read_bytes()
    tokenizer = json.loads((out / "tokenizer_config.json").read_text())
    # transformers loads tokenizer.json as written with this class (tests/test_transformers_client).
    assert tokenizer["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert json.loads((out / "tokenizer.json").read_text())["model"]["type"] == "Unigram"
    assert tokenizer["model_input_names"] == ["input_ids", "token_type_ids", "attention_mask"]
    assert tokenizer["do_lower_case"] is True and tokenizer["keep_accents"] is False
    assert tokenizer["remove_space"] is True
    special = {k: tokenizer[f"{k}_token"] for k in ("unk", "pad", "cls", "sep", "mask")}
    assert special == {
        "unk": "<unk>",
        "pad": "<pad>",
        "cls": "[CLS]",
        "sep": "[SEP]",
        "mask": "[MASK]",
    }
    # Our --hf_model loader reads the folder back: tokenizer, casing, labels and weights.
    assert resolve_spm_model_file(None, str(out)) == str(out / "spiece.model")
    assert resolve_do_lower_case(False, str(out)) is True
    model = load_hf_model(out)
    assert model.num_labels == 2
    assert load_hf_config(out).extra["huggingface"]["id2label"] == config["id2label"]
    original = keras.saving.load_model(bundle / "classifier.keras")
    np.testing.assert_array_equal(
        model.get_layer("classifier").output_weights.numpy(),
        original.get_layer("classifier").output_weights.numpy(),
    )
    assert bundle_manifest(bundle / "classifier.keras")["spm_model_file"] == str(
        bundle / "30k-clean.model"
    )


def test_output_hf_without_a_tokenizer_is_refused_in_one_line(bundle, tmp_path):
    lone = tmp_path / "lone" / "classifier.keras"  # no bundle beside it
    lone.parent.mkdir()
    lone.write_bytes((bundle / "classifier.keras").read_bytes())
    out = tmp_path / "hub"
    result = run_cli("convert_checkpoint.py", f"--keras_model={lone}", f"--output_hf={out}")
    assert result.returncode == 1
    (line,) = error_lines(result)
    assert "no SentencePiece model" in line and "pass --spm_model_file" in line
    assert "Traceback" not in result.stderr and not out.exists()


@pytest.fixture(scope="module")
def spiece(tmp_path_factory) -> pathlib.Path:
    """The 300-piece SentencePiece model the transformers fixtures' vocabulary fits."""
    from data_prep.vocab import VocabConfig, train_vocab

    out = tmp_path_factory.mktemp("spm")
    corpus = FIXTURES / "original_data" / "corpus_small.txt"
    return pathlib.Path(train_vocab(str(corpus), str(out), "spiece", VocabConfig(300)).model_path)


def test_hf_model_do_eval_and_do_predict_score_the_hub_classifier_as_it_is(tmp_path, spiece):
    folder = two_label_classifier(tmp_path, spiece)
    out = tmp_path / "run"
    config = FinetuneConfig("SST-2", str(GLUE), str(out), hf_model=str(folder), max_seq_length=SEQ)
    summary = loop.run(
        glue_finetune.GlueFinetuneTask(config), do_train=False, do_eval=True, do_predict=True
    )
    results = json.loads((out / "eval_results.json").read_text())
    assert results["best"]["checkpoint"] == str(folder) and results["best"]["step"] == 0
    task = glue_finetune.GlueFinetuneTask(config)
    expected = task.dev_scorer().score(load_hf_model(folder))
    assert results["best"]["metrics"]["eval_accuracy"] == pytest.approx(expected["eval_accuracy"])
    assert summary["eval"]["best"]["metrics"]["eval_loss"] == pytest.approx(expected["eval_loss"])
    submission = (out / "SST-2.tsv").read_text().splitlines()
    assert submission[0] == "index\tprediction" and len(submission) == 9
    assert {row.split("\t")[1] for row in submission[1:]} <= {"0", "1"}  # GLUE's own labels
    assert not list(out.glob("model.ckpt-*"))  # nothing trained, nothing copied


_BUNDLE_DEFAULTS = """
import json, runpy, sys
from absl import flags, logging
export = runpy.run_path("pipelines/export.py", run_name="flags_only")
flags.FLAGS(["export.py", "--output_dir=x", *sys.argv[1:]])
logging.info = lambda message, *args: print(message % args, file=sys.stderr)  # the CLI's line
export["take_bundle_defaults"]()
names = ("head", "spm_model_file", "do_lower_case", "max_seq_length")
print(json.dumps({name: flags.FLAGS[name].value for name in names}))
"""


def test_export_takes_what_the_bundle_was_trained_with_unless_given(bundle):
    """export.py reads the bundle's manifest: the head, tokenizer, casing and sequence length the
    classifier was fine-tuned with are the defaults of those flags; a given flag wins."""

    def flag_values(*argv: str) -> dict:
        run = subprocess.run(
            [sys.executable, "-c", _BUNDLE_DEFAULTS, *argv],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={"TF_CPP_MIN_LOG_LEVEL": "2", "PATH": "/usr/bin:/bin"},
            timeout=120,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        return json.loads(run.stdout.splitlines()[-1]), run.stderr

    model = f"--keras_model={bundle / 'classifier.keras'}"
    taken, said = flag_values(model)
    assert taken == {
        "head": "classifier",
        "spm_model_file": str(bundle / "30k-clean.model"),
        "do_lower_case": True,
        "max_seq_length": SEQ,
    }
    assert "--head=classifier" in said and f"--max_seq_length={SEQ}" in said
    given, _ = flag_values(model, "--max_seq_length=40", "--spm_model_file=x.model")
    assert given == dict(taken, max_seq_length=40, spm_model_file="x.model")
    untouched, _ = flag_values(f"--keras_model={bundle / 'elsewhere.keras'}")
    assert untouched["head"] == "pretrainer" and untouched["max_seq_length"] == 128
