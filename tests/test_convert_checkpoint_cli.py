"""pipelines/convert_checkpoint.py: TF1 -> .keras -> TF1 keeps every tensor."""

import pathlib
import subprocess
import sys

import numpy as np

from albert_tf.checkpoints import read_tf1_checkpoint

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
