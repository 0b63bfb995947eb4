"""`--hf_model=DIR`: every CLI that takes initial weights starts from a transformers folder
(tests/fixtures/hf_transformers/, copied with a `spiece.model` as a Hub download holds one).

Each CLI runs from a fixture folder and what it writes reproduces transformers' outputs
(`expected.npz`, within the fixtures' tolerance) or holds the folder's tensors: the weights came
from the folder. Then the refusals: both weight sources, no SentencePiece model anywhere, an
export head the folder's class does not serve.
"""

import json
import logging
import os
import pathlib
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from safetensors.numpy import load_file, save_file

import albert_tf.modeling  # noqa: F401  (registers every model class for load_model)
from albert_tf.checkpoints import tf1_weights
from albert_tf.checkpoints.hf import load_hf_config, load_hf_model
from albert_tf.export.tflite import metadata as tm
from albert_tf.export.heads.loading import load_serving_head
from albert_tf.finetuning.loop import checkpoint_step
from albert_tf.finetuning.settings import resolve_albert_config
from albert_tf.modeling.model import AlbertPretrainer
from albert_tf.tasks.glue.finetune import FinetuneConfig
from albert_tf.tasks.race.config import RaceConfig
from albert_tf.tasks.squad.config import SquadConfig
from albert_tf.training.pretraining import load_initial_weights
from albert_tf.training.pretraining_options import PretrainingOptions, SettingsError, validate
from data_prep.vocab import VocabConfig, train_vocab
from tests.conftest import FIXTURES, REPO_ROOT
from tests.test_hf_checkpoints import inputs_of, our_outputs
from tests.tolerances import GOLDEN, assert_close_to_scale

pytestmark = pytest.mark.e2e  # starts the CLIs or runs whole exports

HF = FIXTURES / "hf_transformers"
GLUE = FIXTURES / "glue"
RACE_DATA = FIXTURES / "original_race" / "data"
RECORDS = FIXTURES / "original_data" / "orig_small_seq128.tfrecord"  # seq 128, the 30k vocab
LABELS = ("negative", "positive")
SPM = "spiece.model"


def run(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO_ROOT / "pipelines" / script), *map(str, args)],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        timeout=600,
    )


def assert_outputs_are_transformers(name: str, model, sliced_logits: int | None = None):
    """Every array of fixture `name`'s expected.npz that `model` computes, within GOLDEN."""
    expected = np.load(HF / f"albert_tiny_{name}" / "expected.npz")
    for key, value in our_outputs(name, model).items():
        reference = expected[key][..., :sliced_logits] if key == "logits" else expected[key]
        assert_close_to_scale(value, reference, GOLDEN, err_msg=f"{name}: {key}")


@pytest.fixture(scope="module")
def spiece(tmp_path_factory) -> pathlib.Path:
    """A 300-piece SentencePiece model with ALBERT's fixed ids: every id fits the V=300
    fixtures' embedding table."""
    out = tmp_path_factory.mktemp("spm")
    corpus = FIXTURES / "original_data" / "corpus_small.txt"
    return pathlib.Path(train_vocab(str(corpus), str(out), "spiece", VocabConfig(300)).model_path)


def hub_folder(tmp_path, name: str, spiece: pathlib.Path | None, **config) -> pathlib.Path:
    """A copy of fixture `name` with `spiece` as its spiece.model and config.json values set."""
    out = tmp_path / name
    shutil.copytree(HF / f"albert_tiny_{name}", out)
    if spiece is not None:
        shutil.copyfile(spiece, out / "spiece.model")
    values = {**json.loads((out / "config.json").read_text()), **config}
    (out / "config.json").write_text(json.dumps(values))
    return out


def two_label_classifier(tmp_path, spiece) -> pathlib.Path:
    """The 3-label classifier cut to its first two labels (named), as a binary task's model:
    its logits are the first two columns of the fixture's."""
    out = hub_folder(
        tmp_path,
        "classifier",
        spiece,
        id2label=dict(enumerate(LABELS)),
        label2id={n: i for i, n in enumerate(LABELS)},
    )
    tensors = load_file(out / "model.safetensors")
    for key in ("classifier.weight", "classifier.bias"):
        tensors[key] = np.ascontiguousarray(tensors[key][:2])
    save_file(tensors, out / "model.safetensors", metadata={"format": "pt"})
    return out


def test_glue_fine_tunes_from_a_folder_its_config_tokenizer_and_head(tmp_path, spiece):
    folder = two_label_classifier(tmp_path, spiece)
    out = tmp_path / "sst2"
    # learning_rate 0: the checkpoint the loop trains and exports is the initialisation.
    result = run(
        "run_classifier.py",
        "--task_name=SST-2",
        f"--data_dir={GLUE}",
        f"--hf_model={folder}",
        f"--output_dir={out}",
        "--max_seq_length=24",
        "--train_step=2",
        "--save_checkpoints_steps=2",
        "--train_batch_size=4",
        "--learning_rate=0",
        "--do_train",
        f"--export_dir={out / 'export'}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"Initialised the backbone and head from {folder}" in result.stderr
    info = json.loads((out / "export" / "classifier_info.json").read_text())
    assert info["spm_model_file"] == "spiece.model" and info["checkpoint"].endswith("ckpt-2")
    assert (out / "export" / "spiece.model").read_bytes() == spiece.read_bytes()
    model = keras.saving.load_model(out / "export" / "classifier.keras")
    assert model.config == load_hf_config(folder)  # no --albert_config_file: the folder's
    assert_outputs_are_transformers("classifier", model, sliced_logits=2)


def test_squad_v1_scores_and_exports_a_question_answering_folder(tmp_path, spiece):
    folder = hub_folder(tmp_path, "qa", spiece)
    squad = {
        "version": "1.1",
        "data": [
            {
                "title": "t",
                "paragraphs": [
                    {
                        "context": "The cat sat on the mat in the house.",
                        "qas": [
                            {
                                "id": "q1",
                                "question": "Where did the cat sit?",
                                "answers": [{"text": "on the mat", "answer_start": 12}],
                            }
                        ],
                    }
                ],
            }
        ],
    }
    (tmp_path / "dev.json").write_text(json.dumps(squad))
    out = tmp_path / "squad"
    result = run(
        "run_squad_v1.py",
        f"--hf_model={folder}",
        f"--output_dir={out}",
        f"--predict_file={tmp_path / 'dev.json'}",
        "--max_seq_length=64",
        "--max_query_length=16",
        "--do_predict",
        f"--export_dir={out / 'export'}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads((out / "eval_results.json").read_text())  # the folder itself, scored
    assert results["final"]["checkpoint"] == str(folder) and results["final"]["step"] == 0
    assert set(json.loads((out / "predictions.json").read_text())) == {"q1"}
    model = keras.saving.load_model(out / "export" / "squad_v1.keras")
    assert_outputs_are_transformers("qa", model)


def test_race_evaluates_and_exports_a_multiple_choice_folder(tmp_path, spiece):
    folder = hub_folder(tmp_path, "mc", spiece)
    out = tmp_path / "race"
    result = run(
        "run_race.py",
        f"--hf_model={folder}",
        f"--data_dir={RACE_DATA}",
        f"--output_dir={out}",
        "--max_seq_length=64",
        "--max_qa_length=16",
        "--do_train=false",
        f"--export_dir={out / 'export'}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads((out / "eval_results.json").read_text())
    assert results["final"]["checkpoint"] == str(folder)
    assert results["final"]["metrics"]["num_examples"] == 9
    model = keras.saving.load_model(out / "export" / "race.keras")
    assert_outputs_are_transformers("mc", model)


def test_pretraining_goes_on_from_a_folder_with_its_config(tmp_path):
    folder = HF / "albert_tiny_pretraining"  # no spiece.model needed: the records hold ids
    out = tmp_path / "run"
    result = run(
        "pretrain.py",
        f"--hf_model={folder}",
        f"--input_file={RECORDS}",
        f"--output_dir={out}",
        "--max_seq_length=128",
        "--train_batch_size=4",
        "--num_train_steps=1",
        "--num_warmup_steps=0",
        "--save_checkpoints_steps=1",
        "--learning_rate=0",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    model = keras.saving.load_model(out / "albert_pretrainer.keras")
    assert model.config == load_hf_config(folder)
    reference = tf1_weights(load_hf_model(folder))
    for name, value in tf1_weights(model).items():
        np.testing.assert_array_equal(value, reference[name], err_msg=name)
    assert_outputs_are_transformers("pretraining", model)


@pytest.mark.slow  # a whole export; the folder's head check and loading are tested apart
def test_export_serves_a_classifier_folder_with_its_tokenizer_and_labels(tmp_path, spiece):
    folder = two_label_classifier(tmp_path, spiece)
    out = tmp_path / "export"
    wrong = run("export.py", f"--hf_model={folder}", "--head=squad_v1", f"--output_dir={out}")
    assert wrong.returncode == 1
    (line,) = [x for x in wrong.stderr.splitlines() if "export failed" in x]
    assert (
        f"hf_model={folder} holds an AlbertForSequenceClassification, which exports as "
        "head=classifier, not head=squad_v1" in line
    )
    assert not out.exists()
    result = run(
        "export.py",
        f"--hf_model={folder}",
        "--head=classifier",
        "--single_text_client",  # a Hub classifier does not say whether it takes pairs
        f"--output_dir={out}",
        "--max_seq_length=24",
        "--formats=saved_model,tflite_fp32",
        "--latency_runs=1",
        "--num_verification_examples=8",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    serving = tf.saved_model.load(str(out / "albert" / "1")).signatures["serving_default"]
    probabilities = serving(**{k: tf.constant(v) for k, v in inputs_of("classifier").items()})
    logits = np.load(HF / "albert_tiny_classifier" / "expected.npz")["logits"][:, :2]
    expected = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    assert_close_to_scale(probabilities["probabilities"].numpy(), expected, GOLDEN)
    tflite = (out / "albert_tflite" / "1" / "albert_fp32.tflite").read_bytes()
    assert tm.associated_files(tflite)["labels.txt"] == b"negative\npositive\n"  # id2label
    text_assets = out / "albert_text" / "1" / "assets"
    assert (text_assets / "spiece.model").read_bytes() == spiece.read_bytes()


def test_init_checkpoint_and_hf_model_exclude_each_other_on_every_cli(tmp_path):
    for script, extra in (
        ("run_classifier.py", ["--task_name=rte", f"--data_dir={GLUE}", "--spm_model_file=s"]),
        ("pretrain.py", [f"--input_file={RECORDS}", "--max_seq_length=128"]),
    ):
        result = run(
            script,
            *extra,
            "--init_checkpoint=x/model.ckpt",
            f"--hf_model={HF / 'albert_tiny_pretraining'}",
            f"--output_dir={tmp_path / script}",
        )
        assert result.returncode == 1, result.stderr[-2000:]
        assert "Traceback" not in result.stderr
        assert "init_checkpoint=x/model.ckpt and " in result.stderr
        assert "both give the initial weights: give one of them" in result.stderr
    options = PretrainingOptions("r", "o", init_checkpoint="a", hf_model="b")
    with pytest.raises(SettingsError, match="--init_checkpoint=a and --hf_model=b both"):
        validate(options, load_hf_config(HF / "albert_tiny_pretraining"), 1)
    for make in (
        lambda **k: FinetuneConfig("rte", "d", "o", "s", **k),
        lambda **k: SquadConfig("v2", "o", "s", **k),
        lambda **k: RaceConfig("d", "o", "s", **k),
    ):
        with pytest.raises(ValueError, match="init_checkpoint=a and hf_model=b both"):
            make(init_checkpoint="a", hf_model="b")
    with pytest.raises(ValueError, match="give exactly one of keras_model, tf1_checkpoint or"):
        load_serving_head("classifier", keras_model="m.keras", hf_model="b")


def test_the_sentencepiece_model_comes_from_the_flag_or_the_folder(tmp_path, spiece):
    bare = HF / "albert_tiny_classifier"  # no spiece.model
    missing = run(
        "run_squad_v1.py", f"--hf_model={bare}", f"--output_dir={tmp_path}", "--do_predict"
    )
    assert missing.returncode == 1
    assert (
        "ValueError: no SentencePiece model: give spm_model_file, or an hf_model folder holding "
        f"spiece.model ({bare} holds none)" in missing.stderr
    )
    assert "Traceback" not in missing.stderr
    with pytest.raises(ValueError, match=r"give spm_model_file, or an hf_model folder[^(]*$"):
        FinetuneConfig("rte", "d", "o")
    folder = hub_folder(tmp_path, "qa", spiece)
    assert SquadConfig("v1", "o", hf_model=str(folder)).spm_model_file == str(folder / SPM)
    assert (folder / SPM).read_bytes() == spiece.read_bytes()
    assert SquadConfig("v1", "o", "mine.model", hf_model=str(folder)).spm_model_file == (
        "mine.model"
    )


def test_the_folders_tokenizer_casing_wins_as_a_hub_modules_did(tmp_path, spiece, caplog):
    folder = hub_folder(tmp_path, "mc", spiece)
    assert RaceConfig("d", "o", hf_model=str(folder)).do_lower_case  # states none: the flag
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False}))
    with caplog.at_level(logging.WARNING):
        config = RaceConfig("d", "o", hf_model=str(folder), do_lower_case=True)
    assert config.do_lower_case is False
    assert "do_lower_case=False, the tokenizer's casing, is used" in caplog.text
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": "no"}))
    with pytest.raises(ValueError, match="tokenizer_config.json: do_lower_case: 'no' is not"):
        RaceConfig("d", "o", hf_model=str(folder))


def test_the_model_config_and_step_of_a_folder(tmp_path, spiece):
    folder = hub_folder(tmp_path, "classifier", spiece)
    config = FinetuneConfig("rte", "d", str(tmp_path), hf_model=str(folder), max_seq_length=24)
    assert resolve_albert_config(config) == load_hf_config(folder)
    assert checkpoint_step(str(folder)) == 0
    as_checkpoint = FinetuneConfig(
        "rte", "d", str(tmp_path), "s", init_checkpoint=str(folder), max_seq_length=24
    )
    with pytest.raises(ValueError, match="is a transformers folder: give it as hf_model"):
        resolve_albert_config(as_checkpoint)


def test_a_masked_lm_folder_leaves_the_sop_head_fresh_and_says_so(tmp_path, caplog):
    source = HF / "albert_tiny_pretraining"
    dropped = ("albert.pooler", "sop_classifier.classifier")
    folder = hub_folder(tmp_path, "pretraining", None, architectures=["AlbertForMaskedLM"])
    tensors = load_file(folder / "model.safetensors")
    kept = {k: v for k, v in tensors.items() if not k.startswith(dropped)}
    assert len(kept) < len(tensors)
    save_file(kept, folder / "model.safetensors", metadata={"format": "pt"})
    model = AlbertPretrainer(load_hf_config(source))
    fresh = tf1_weights(model)
    with caplog.at_level(logging.WARNING):
        load_initial_weights(model, str(folder))
    assert "is an AlbertForMaskedLM, which has no sentence-order (SOP) head" in caplog.text
    reference, loaded = tf1_weights(load_hf_model(source)), tf1_weights(model)
    for name, value in loaded.items():
        from_folder = not name.startswith(("cls/seq_relationship", "bert/pooler"))
        np.testing.assert_array_equal(value, (reference if from_folder else fresh)[name], name)


def test_a_classifier_naming_the_task_labels_in_another_order_is_reordered(tmp_path, spiece):
    from albert_tf.tasks.glue.finetune import GlueFinetuneTask

    folder = two_label_classifier(tmp_path, spiece)
    values = json.loads((folder / "config.json").read_text())
    values["id2label"] = {"0": "Not_Entailment", "1": "entailment"}  # RTE's labels, swapped
    (folder / "config.json").write_text(json.dumps(values))
    stored = load_file(folder / "model.safetensors")
    task = GlueFinetuneTask(FinetuneConfig("rte", "d", str(tmp_path), "s"))
    for load in (task.initialize, task.load):
        model = task.build_model(load_hf_config(folder))
        load(model, str(folder))
        head = model.get_layer("classifier")
        np.testing.assert_array_equal(
            head.output_weights.numpy(), stored["classifier.weight"][::-1]
        )
        np.testing.assert_array_equal(head.output_bias.numpy(), stored["classifier.bias"][::-1])
    values["id2label"] = {"0": "entailment", "1": "not_entailment"}  # the task's order: as it is
    (folder / "config.json").write_text(json.dumps(values))
    model = task.build_model(load_hf_config(folder))
    assert task.initialize(model, str(folder)) is True
    np.testing.assert_array_equal(
        model.get_layer("classifier").output_weights.numpy(), stored["classifier.weight"]
    )
