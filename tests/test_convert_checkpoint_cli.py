"""pipelines/convert_checkpoint.py: TF1 -> .keras -> TF1 and through transformers folders keeps
every tensor; bad input stops in one line and writes nothing."""

import json
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

from albert_tf.checkpoints import read_tf1_checkpoint

pytestmark = pytest.mark.e2e  # starts the CLIs or runs whole exports

ROOT = pathlib.Path(__file__).resolve().parents[1]
GROUPED = ROOT / "tests/fixtures/original_checkpoints/albert_tiny_grouped"


def run_cli(*args):
    return subprocess.run(
        [sys.executable, str(ROOT / "pipelines/convert_checkpoint.py"), *args],
        capture_output=True,
        text=True,
        cwd="/",
    )


def test_round_trip_through_the_cli(tmp_path):
    keras_file = tmp_path / "tiny.keras"
    result = run_cli(
        f"--tf1_checkpoint={GROUPED}",
        f"--albert_config_file={GROUPED}/albert_config.json",
        f"--output={keras_file}",
    )
    assert result.returncode == 0, result.stderr
    result = run_cli(f"--keras_model={keras_file}", f"--output={tmp_path}/tf1/model.ckpt")
    assert result.returncode == 0, result.stderr
    original, written = read_tf1_checkpoint(GROUPED), read_tf1_checkpoint(tmp_path / "tf1")
    assert original.keys() == written.keys()
    for name in original:
        np.testing.assert_array_equal(original[name], written[name])
    assert (tmp_path / "tf1" / "albert_config.json").exists()


def test_cli_refuses_ambiguous_or_incomplete_flags(tmp_path):
    result = run_cli(f"--tf1_checkpoint={GROUPED}", f"--output={tmp_path}/x.keras")
    assert result.returncode != 0 and "--albert_config_file" in result.stderr
    result = run_cli(f"--output={tmp_path}/x.keras")
    assert result.returncode != 0 and "exactly one" in result.stderr


def test_a_classifier_keras_file_converts_to_tf1_names(tmp_path):
    from albert_tf import AlbertConfig
    from albert_tf.modeling.heads.classifier import AlbertClassifier
    from tests.contracts import original_tf1_names
    from tests.model_configs import MICRO

    config = AlbertConfig(**MICRO)
    model = AlbertClassifier(config, num_labels=3)
    model.save(tmp_path / "classifier.keras")
    result = run_cli(f"--keras_model={tmp_path / 'classifier.keras'}", f"--output={tmp_path}/c/m")
    assert result.returncode == 0, result.stderr
    written = read_tf1_checkpoint(tmp_path / "c")
    assert set(written) - {"global_step"} == set(original_tf1_names(config, "classifier"))
    np.testing.assert_array_equal(
        written["output_weights"], model.get_layer("classifier").output_weights.numpy()
    )


HF = ROOT / "tests/fixtures/hf_transformers"


def test_tf1_to_transformers_and_back_to_keras_through_the_cli(tmp_path):
    from safetensors.numpy import load_file

    result = run_cli(
        f"--tf1_checkpoint={GROUPED}",
        f"--albert_config_file={GROUPED}/albert_config.json",
        f"--output_hf={tmp_path / 'hf'}",
        f"--spm_model_file={ROOT / 'tests/fixtures/albert_spm/30k-clean.model'}",
    )
    assert result.returncode == 0, result.stderr
    assert {p.name for p in (tmp_path / "hf").iterdir()} == {
        "config.json",
        "model.safetensors",
        "spiece.model",
        "tokenizer.json",
        "tokenizer_config.json",
    }
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    # transformers' fields for this class (the fixture of the same class), less its version.
    like = json.loads((HF / "albert_tiny_groups" / "config.json").read_text())
    assert set(config) == set(like) - {"transformers_version"}
    assert config["hidden_act"] == "gelu_new" and config["architectures"] == [
        "AlbertForPreTraining"
    ]
    tensors = load_file(tmp_path / "hf" / "model.safetensors")
    assert set(tensors) == set(load_file(HF / "albert_tiny_groups" / "model.safetensors"))
    result = run_cli(f"--hf_model={tmp_path / 'hf'}", f"--output={tmp_path / 'back.keras'}")
    assert result.returncode == 0, result.stderr
    assert "spiece.model (the --spm_model_file of export and fine-tuning)" in result.stderr
    result = run_cli(f"--keras_model={tmp_path / 'back.keras'}", f"--output={tmp_path}/tf1/m.ckpt")
    assert result.returncode == 0, result.stderr
    original, written = read_tf1_checkpoint(GROUPED), read_tf1_checkpoint(tmp_path / "tf1")
    assert original.keys() == written.keys()
    for name in original:
        np.testing.assert_array_equal(original[name], written[name])


@pytest.mark.parametrize(
    "change,message",
    [
        ("no_config", "config.json: not found"),
        ("misshaped", "model.safetensors: albert.pooler.weight: shape [32, 16]"),
    ],
)
def test_bad_transformers_folders_stop_in_one_line_and_write_nothing(change, message, tmp_path):
    from safetensors.numpy import load_file, save_file

    source = tmp_path / "source"
    shutil.copytree(HF / "albert_tiny_classifier", source)
    if change == "no_config":
        (source / "config.json").unlink()
    else:
        tensors = load_file(source / "model.safetensors")
        tensors["albert.pooler.weight"] = np.zeros((32, 16), np.float32)
        save_file(tensors, source / "model.safetensors")
    out = tmp_path / "out"
    out.mkdir()
    result = run_cli(f"--hf_model={source}", f"--output={out / 'model.keras'}")
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and message in errors[0] and str(source) in errors[0], result.stderr
    assert "Traceback" not in result.stderr
    assert list(out.iterdir()) == []


def test_cli_refuses_two_outputs_or_a_stray_spm_model(tmp_path):
    result = run_cli(f"--hf_model={HF / 'albert_tiny_qa'}", "--output=x.keras", "--output_hf=y")
    assert result.returncode != 0 and "exactly one of --output or --output_hf" in result.stderr
    result = run_cli(
        f"--hf_model={HF / 'albert_tiny_qa'}", "--output=x.keras", "--spm_model_file=s"
    )
    assert result.returncode != 0 and "--spm_model_file goes with --output_hf" in result.stderr


def test_label_names_reach_config_json(tmp_path):
    from albert_tf.checkpoints.hf import load_hf_model

    load_hf_model(HF / "albert_tiny_classifier").save(tmp_path / "c.keras")
    out = tmp_path / "hf"
    spm = f"--spm_model_file={ROOT / 'tests/fixtures/albert_spm/30k-clean.model'}"
    result = run_cli(
        f"--keras_model={tmp_path / 'c.keras'}",
        f"--output_hf={out}",
        "--label_names=neg,neu,pos",
        spm,
    )
    assert result.returncode == 0, result.stderr
    config = json.loads((out / "config.json").read_text())
    assert config["id2label"] == {"0": "neg", "1": "neu", "2": "pos"}
    assert config["label2id"] == {"neg": 0, "neu": 1, "pos": 2}
    result = run_cli(
        f"--keras_model={tmp_path / 'c.keras'}",
        f"--output_hf={tmp_path / 'x'}",
        "--label_names=a,b",
        spm,
    )
    assert result.returncode == 1 and "2 label names for 3 labels" in result.stderr
    assert not (tmp_path / "x").exists()
