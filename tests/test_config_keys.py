"""Configs are checked, not trusted: a key no reader knows is refused in one line naming it and
the nearest known key; the keys the original and transformers configs carry are kept; every
config and manifest this repo ships or writes still loads; a flag that would do nothing is
refused."""

import json
import pathlib

import pytest

from albert_tf.config import KEPT_KEYS, AlbertConfig
from albert_tf.finetuning.bundle_manifest import MANIFEST_KEYS, bundle_manifest
from albert_tf.io import refuse_unknown_keys
from albert_tf.training.pretraining_options import PretrainingOptions, SettingsError, validate
from tests.hostile import assert_one_line_ending, python, run
from tests.model_configs import SAMPLE_VOCAB_TINY

REPO = pathlib.Path(__file__).resolve().parents[1]
RECORDS = REPO / "tests" / "fixtures" / "original_data" / "orig_small_seq128.tfrecord"


def test_a_misspelt_key_is_refused_with_the_nearest_known_one(tmp_path):
    path = tmp_path / "albert_config.json"
    path.write_text(json.dumps({**SAMPLE_VOCAB_TINY, "hiden_size": 64}))
    with pytest.raises(ValueError) as refused:
        AlbertConfig.from_json_file(path)
    assert str(refused.value) == f"{path}: unknown key 'hiden_size' (did you mean 'hidden_size'?)"
    with pytest.raises(ValueError, match=r"unknown key 'colour'$"):  # nothing near it
        AlbertConfig.from_dict({"colour": "blue"})


def test_the_keys_the_original_and_transformers_configs_carry_are_kept():
    carried = {key: 1 for key in KEPT_KEYS}
    config = AlbertConfig.from_dict({**SAMPLE_VOCAB_TINY, **carried})
    assert config.extra == carried
    assert AlbertConfig.from_dict(config.to_dict()) == config


def shipped_configs() -> list[pathlib.Path]:
    found = sorted(REPO.glob("tests/fixtures/**/albert_config*.json"))
    found += sorted(REPO.glob("pretrained/*/albert_config.json"))
    shared = REPO.parent / "shared" / "fixtures"  # the golden files, where this machine has them
    return found + sorted(shared.glob("**/albert_config*.json"))


def test_every_config_the_repo_ships_loads():
    configs = shipped_configs()
    assert len(configs) >= 5
    for path in configs:
        AlbertConfig.from_json_file(path)


def test_a_bundle_manifest_with_an_unknown_key_is_refused(tmp_path):
    info = {"task_name": "sst-2", "labels": ["0", "1"], "model_file": "classifier.keras"}
    (tmp_path / "classifier.keras").write_bytes(b"")
    (tmp_path / "classifier_info.json").write_text(json.dumps(info))
    assert bundle_manifest(tmp_path / "classifier.keras")["task_name"] == "sst-2"
    (tmp_path / "classifier_info.json").write_text(json.dumps({**info, "lables": ["a", "b"]}))
    with pytest.raises(ValueError, match=r"classifier_info.json: unknown key 'lables' \(did you "):
        bundle_manifest(tmp_path / "classifier.keras")
    assert {"label_names", "labels", "max_seq_length", "doc_stride"} <= MANIFEST_KEYS


def test_the_shared_check_names_where_and_suggests():
    refuse_unknown_keys({"learning_rate": 1}, {"learning_rate"}, "settings.json")
    with pytest.raises(ValueError, match=r"^settings.json: unknown key 'lerning_rate' \(did you"):
        refuse_unknown_keys({"lerning_rate": 1}, {"learning_rate"}, "settings.json")


def test_an_eval_input_without_evaluation_is_refused():
    options = PretrainingOptions(
        "train.tfrecord", "out", eval_input_file="heldout.tfrecord", max_seq_length=128
    )
    with pytest.raises(SettingsError, match="--eval_input_file is set but --do_eval is not"):
        validate(options, AlbertConfig(**SAMPLE_VOCAB_TINY), replicas=1)


def test_pretraining_refuses_a_misspelt_config_key_in_one_line_before_any_work(tmp_path):
    config = tmp_path / "albert_config.json"
    config.write_text(json.dumps({**SAMPLE_VOCAB_TINY, "hiden_size": 64}))
    out = tmp_path / "run"
    result = run(
        python(
            str(REPO / "pipelines" / "pretrain.py"),
            f"--input_file={RECORDS}",
            f"--output_dir={out}",
            f"--albert_config_file={config}",
            "--max_seq_length=128",
        )
    )
    assert result.returncode == 1
    assert_one_line_ending(result.stderr, "unknown key 'hiden_size'", "did you mean 'hidden_size'")
    assert not out.exists()


def test_an_input_of_a_phase_that_is_off_is_refused_in_one_line(tmp_path):
    out = tmp_path / "out"
    result = run(
        python(
            str(REPO / "pipelines" / "run_squad_v1.py"),
            f"--spm_model_file={REPO / 'tests' / 'fixtures' / 'albert_spm' / '30k-clean.model'}",
            f"--output_dir={out}",
            "--train_file=train-v1.1.json",
            "--predict_file=dev-v1.1.json",
            "--do_predict",
        )
    )
    assert result.returncode == 1
    assert_one_line_ending(
        result.stderr, "--train_file is set but --do_train is not: add --do_train to use it"
    )
    assert not out.exists()
