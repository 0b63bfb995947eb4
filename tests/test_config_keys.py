"""Configs are checked, not trusted: a key no reader knows is refused in one line naming it and
the nearest known key; the keys the original and transformers configs carry are kept; every
config and manifest this repo ships or writes still loads; a flag that would do nothing is
refused."""

import json
import pathlib
import types
import zipfile

import pytest

from albert_tf.checkpoints.hf_config import HF_ACTIVATIONS, HF_DEFAULTS
from albert_tf.config import KEPT_KEYS, AlbertConfig
from albert_tf.finetuning import resume
from albert_tf.finetuning.bundle import MANIFEST_FILES, MANIFEST_KEYS, bundle_manifest
from albert_tf.finetuning.selection import EVAL_RESULTS, CheckpointEvaluator
from albert_tf.io import refuse_unknown_keys
from albert_tf.tasks.race import inputs as race_inputs
from albert_tf.tasks.squad import inputs as squad_inputs
from albert_tf.training.pretraining_options import PretrainingOptions, SettingsError, validate
from tests.hostile import assert_one_line_ending, python, run
from tests.model_configs import SAMPLE_VOCAB_TINY

pytestmark = pytest.mark.e2e  # starts the CLIs or runs whole exports

REPO = pathlib.Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
# The golden files, where this machine has them (the tests pass without them).
SHARED_FIXTURES = REPO.parent / "shared" / "fixtures"
RECORDS = FIXTURES / "original_data" / "orig_small_seq128.tfrecord"
SPM = FIXTURES / "albert_spm" / "30k-clean.model"
# The resume settings of a fine-tuning run an earlier version wrote (its task: "has-7").
OLD_RUN = FIXTURES / "saved_before_keras_heads" / "finetuning_run"
OLD_RUN_SETTINGS = dict(
    learning_rate=0.01,
    max_seq_length=8,
    mixed_precision="none",
    optimizer="adamw",
    seed=7,
    train_batch_size=4,
    train_step=6,
    warmup_step=0,
)


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


def shipped(pattern: str) -> list[pathlib.Path]:
    """The files matching `pattern` under tests/fixtures, pretrained/ and the shared fixtures."""
    roots = (FIXTURES, REPO / "pretrained", SHARED_FIXTURES)
    return [path for root in roots for path in sorted(root.glob(f"**/{pattern}"))]


def shipped_configs() -> list[pathlib.Path]:
    return shipped("albert_config*.json")


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


def test_every_transformers_config_json_the_repo_ships_keeps_its_fields():
    folders = shipped("config.json")
    assert len(folders) >= 5
    for path in folders:
        values = json.loads(path.read_text())
        ours = dict(values, hidden_act=HF_ACTIVATIONS[values.get("hidden_act", "gelu_new")])
        config = AlbertConfig.from_dict(ours, where=str(path))
        assert config.extra["architectures"] == values["architectures"], path
    assert set(HF_DEFAULTS) <= set(KEPT_KEYS)  # what the conversion writes for any model


def test_every_model_config_inside_a_shipped_keras_file_loads():
    checked = 0
    for path in shipped("*.keras"):
        found = []

        def collect(node):
            if isinstance(node, dict):
                for key, value in node.items():
                    if key in ("albert_config", "config") and "hidden_size" in value:
                        found.append(value)
                    collect(value)
            elif isinstance(node, list):
                for value in node:
                    collect(value)

        collect(json.loads(zipfile.ZipFile(path).read("config.json")))
        for values in found:
            AlbertConfig.from_dict(values, where=str(path))
            checked += 1
    assert checked >= 8


def test_every_shipped_run_settings_and_bundle_manifest_loads():
    settings_files = shipped("train_state/settings.json")
    assert settings_files
    for path in settings_files:
        refuse_unknown_keys(json.loads(path.read_text()), ("task", *resume.RESUME_SETTINGS), path)
    for name in MANIFEST_FILES:
        for path in shipped(name):
            refuse_unknown_keys(json.loads(path.read_text()), MANIFEST_KEYS, path)


def _task(output_dir, name="has-7", **settings):
    return types.SimpleNamespace(
        name=name, settings=types.SimpleNamespace(output_dir=str(output_dir), **settings)
    )


def test_run_settings_an_earlier_version_wrote_resume_and_a_misspelt_one_is_refused(tmp_path):
    assert resume.resume_point(_task(OLD_RUN, **OLD_RUN_SETTINGS)) == (
        3,
        str(OLD_RUN / "model.ckpt-3"),
    )
    (tmp_path / "model.ckpt-3.index").write_bytes(b"")
    (tmp_path / "train_state").mkdir()
    settings = json.loads((OLD_RUN / "train_state" / "settings.json").read_text())
    settings["lerning_rate"] = settings.pop("learning_rate")
    path = tmp_path / "train_state" / "settings.json"
    path.write_text(json.dumps(settings))
    with pytest.raises(ValueError) as refused:
        resume.resume_point(_task(tmp_path, **OLD_RUN_SETTINGS))
    assert str(refused.value) == (
        f"{path}: unknown key 'lerning_rate' (did you mean 'learning_rate'?)"
    )


class _Scorer:
    name = "toy"
    selection_metric = "accuracy"

    def score(self, model):
        return {"accuracy": 0.5}


def test_eval_results_written_here_are_taken_up_and_a_misspelt_key_is_refused(tmp_path):
    written = CheckpointEvaluator(_Scorer(), str(tmp_path), copy_best=False)
    written.evaluate(None, 2, str(tmp_path / "model.ckpt-2"))
    resumed = CheckpointEvaluator(_Scorer(), str(tmp_path), copy_best=False)
    resumed.restore(up_to_step=2)
    assert resumed.steps == [2]
    path = tmp_path / EVAL_RESULTS
    results = json.loads(path.read_text())
    results["histroy"] = results.pop("history")
    path.write_text(json.dumps(results))
    with pytest.raises(ValueError, match=r"unknown key 'histroy' \(did you mean 'history'\?\)$"):
        CheckpointEvaluator(_Scorer(), str(tmp_path), copy_best=False).restore(up_to_step=2)


def test_squad_feature_caches_with_a_misspelt_key_are_refused(tmp_path):
    cache = tmp_path / "train.tf_record"
    squad_inputs.write_cache_settings(str(cache), {"max_seq_length": 64}, 3)
    assert squad_inputs.read_cache_settings(str(cache)) == {"max_seq_length": 64}
    (tmp_path / "train.tf_record.json").write_text('{"setings": {}, "num_features": 3}')
    with pytest.raises(ValueError, match=r"unknown key 'setings' \(did you mean 'settings'\?\)"):
        squad_inputs.read_cache_settings(str(cache))
    left = tmp_path / "predict_left_file.json"
    squad_inputs.write_left_file(str(left), {"max_seq_length": 64}, [])
    assert squad_inputs.read_left_file(str(left), 64) == ({"max_seq_length": 64}, [])
    left.write_text('{"settings": {}, "features": [], "feature": []}')
    with pytest.raises(ValueError, match=r"unknown key 'feature' \(did you mean 'features'\?\)"):
        squad_inputs.read_left_file(str(left), 64)


def test_a_cache_built_under_a_setting_unknown_here_is_rebuilt():
    differences = squad_inputs.settings_differences(
        {"doc_stride": 128, "stride": 64}, {"doc_stride": 128}
    )
    assert differences == ["stride: 64 vs no such setting"]


def test_race_caches_with_a_misspelt_key_are_refused_and_unknown_settings_rebuilt(tmp_path):
    cache = tmp_path / "eval.tf_record"
    cache.write_bytes(b"")
    info = tmp_path / "eval.tf_record.json"
    info.write_text(json.dumps({"settings": {"max_seq_length": 64}, "num_recrods": 0}))

    def never_built():
        raise AssertionError("a refused cache is not rebuilt")

    with pytest.raises(ValueError, match=r"unknown key 'num_recrods' \(did you mean 'num_records'"):
        race_inputs.cached_race_records(str(cache), {"max_seq_length": 64}, never_built, "dev")
    info.write_text(
        json.dumps({"settings": {"max_seq_length": 64, "max_len": 9}, "num_records": 0})
    )
    built = []
    count = race_inputs.cached_race_records(
        str(cache), {"max_seq_length": 64}, lambda: built.append(1) or [], "dev"
    )
    assert (count, built) == (0, [1])
    assert json.loads(info.read_text())["settings"] == {"max_seq_length": 64}


def test_a_json_that_is_no_object_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"^settings.json: not a JSON object$"):
        refuse_unknown_keys(["learning_rate"], {"learning_rate"}, "settings.json")


@pytest.mark.parametrize(
    "script, flags, refused",
    [
        (
            "run_race.py",
            [f"--data_dir={FIXTURES / 'original_race' / 'data'}", "--predict_file=test.tf_record"],
            "--predict_file is set but --do_predict is not: add --do_predict to use it, or drop "
            "--predict_file",
        ),
        (
            "run_squad_v2.py",
            ["--predict_feature_left_file=left.json", "--do_train", "--train_file=t.json"],
            "--predict_feature_left_file is set but --do_predict is not",
        ),
    ],
)
def test_a_cache_of_a_phase_that_is_off_is_refused_in_one_line(tmp_path, script, flags, refused):
    out = tmp_path / "out"
    result = run(
        python(
            str(REPO / "pipelines" / script),
            f"--spm_model_file={SPM}",
            f"--output_dir={out}",
            *flags,
        )
    )
    assert result.returncode == 1
    assert_one_line_ending(result.stderr, refused)
    assert not out.exists()
