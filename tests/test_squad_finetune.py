"""SQuAD fine-tuning: the original checkpoints' prediction files through the CLIs, training that
scores every checkpoint and predicts with the best, the feature caches, and one-line errors."""

import json
import os
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest

from albert_tf.tasks.squad import finetune as squad
from albert_tf.tasks.squad.inputs import read_left_file
from tests.cli_help import flag_defaults

pytestmark = pytest.mark.e2e  # starts the CLIs or runs whole exports

ROOT = pathlib.Path(__file__).resolve().parents[1]
SQUAD = ROOT / "tests" / "fixtures" / "original_squad"
DEV_V2 = SQUAD / "dev-v2.0-small.json"
TRAIN_V2 = SQUAD / "train-v2.0-small.json"
DEV_V11 = SQUAD / "postprocess_v1.1" / "dev-v1.1-subset.json"  # 55 questions, several answers
SPM = ROOT / "tests" / "fixtures" / "albert_spm" / "30k-clean.model"
# The fixtures' windows: max_seq_length 128, doc_stride 32, max_query_length 24.
SHAPE = ["--max_seq_length=128", "--doc_stride=32", "--max_query_length=24"]
PREDICTION_NUMBERS = ("probability", "start_log_prob", "end_log_prob")


def run_cli(version, *args):
    return subprocess.run(
        [sys.executable, str(ROOT / "pipelines" / f"run_squad_{version}.py"), *args],
        capture_output=True,
        text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        cwd=ROOT,
        timeout=600,
    )


def assert_close(actual, expected, what):
    """Within 1e-5 of the value's size (at least 1): the fixtures' float32 logits through
    post-processing in float64."""
    assert abs(actual - expected) <= 1e-5 * max(1.0, abs(expected)), (what, actual, expected)


# Every flag of the original run_squad_v1.py, with its default; v2 drops the last two of
# `V1_ONLY` and adds `V2_ONLY`.
ORIGINAL_FLAGS = {
    **dict.fromkeys(
        (
            "albert_config_file",
            "vocab_file",
            "spm_model_file",
            "output_dir",
            "train_file",
            "predict_file",
            "train_feature_file",
            "predict_feature_file",
            "predict_feature_left_file",
            "init_checkpoint",
            "albert_hub_module_handle",
            "tpu_name",
            "tpu_zone",
            "gcp_project",
            "master",
        ),
        "",
    ),
    "do_lower_case": "true",
    "max_seq_length": "384",
    "doc_stride": "128",
    "max_query_length": "64",
    "do_train": "false",
    "do_predict": "false",
    "train_batch_size": "32",
    "predict_batch_size": "8",
    "learning_rate": "5e-05",
    "num_train_epochs": "3.0",
    "warmup_proportion": "0.1",
    "save_checkpoints_steps": "1000",
    "iterations_per_loop": "1000",
    "n_best_size": "20",
    "max_answer_length": "30",
    "use_tpu": "false",
    "num_tpu_cores": "8",
}
V1_ONLY = {"use_einsum": "true", "export_dir": ""}
V2_ONLY = {"start_n_top": "5", "end_n_top": "5", "dropout_prob": "0.1"}


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_cli_has_every_original_flag_with_its_default(version):
    defaults = flag_defaults(f"run_squad_{version}.py")
    expected = {**ORIGINAL_FLAGS, **(V1_ONLY if version == "v1" else V2_ONLY)}
    assert {name: defaults.get(name) for name in expected} == expected
    if version == "v2":
        assert "use_einsum" not in defaults
    assert defaults["strategy"] == "auto" and defaults["mixed_precision"] == "none"


def test_recipes_and_the_original_step_count():
    assert squad.RECIPES["squad_v1"] == squad.RECIPES["squad_v2"]
    recipe = squad.RECIPES["squad_v2"]
    assert (recipe["learning_rate"], recipe["train_batch_size"], recipe["num_train_epochs"]) == (
        5e-5,
        48,
        2.0,
    )
    assert (recipe["max_seq_length"], recipe["doc_stride"], recipe["max_query_length"]) == (
        384,
        128,
        64,
    )
    assert recipe["warmup_proportion"] == 0.1 and recipe["n_best_size"] == 20
    config = squad.SquadConfig("v1", "out", str(SPM), train_batch_size=4, num_train_epochs=3.0)
    assert config.train_feature_file == os.path.join("out", "train.tf_record")
    scheduled = squad.with_schedule(config, 14)  # int(14 / 4 * 3) = 10 steps, int(1.0) warmup
    assert (scheduled.train_step, scheduled.warmup_step) == (10, 1)
    explicit = squad.with_schedule(squad.SquadConfig("v2", "o", str(SPM), train_step=7), 14)
    assert (explicit.train_step, explicit.warmup_step) == (7, 0)
    with pytest.raises(ValueError, match="must be greater than max_query_length"):
        squad.SquadConfig("v1", "o", str(SPM), max_seq_length=64, max_query_length=61)


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_cli_predict_with_the_original_checkpoint_writes_the_original_files(version, tmp_path):
    tiny = SQUAD / f"squad_{version}_tiny"
    out = tmp_path / "out"
    result = run_cli(
        version,
        f"--spm_model_file={SPM}",
        f"--output_dir={out}",
        f"--init_checkpoint={tiny / 'model.ckpt'}",
        f"--predict_file={DEV_V2}",
        "--do_predict",
        "--n_best_size=20",
        "--max_answer_length=30",
        *SHAPE,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    expected = json.loads((tiny / "predictions.json").read_text())
    assert json.loads((out / "predictions.json").read_text()) == expected
    nbest = json.loads((out / "nbest_predictions.json").read_text())
    expected_nbest = json.loads((tiny / "nbest_predictions.json").read_text())
    assert list(nbest) == list(expected_nbest)
    for qid, entries in expected_nbest.items():
        assert [e["text"] for e in nbest[qid]] == [e["text"] for e in entries], qid
        for got, want in zip(nbest[qid], entries):
            for key in PREDICTION_NUMBERS:
                assert_close(got[key], want[key], (qid, key))
    if version == "v1":
        # The v2 dev file has unanswerable questions: no v1.1 score, predictions only.
        assert "predicting without scores" in result.stderr
        assert not (out / "eval_results.json").exists()
        return
    null_odds = json.loads((out / "null_odds.json").read_text())
    expected_odds = json.loads((tiny / "null_odds.json").read_text())
    assert list(null_odds) == list(expected_odds)
    for qid, odds in expected_odds.items():
        assert_close(null_odds[qid], odds, qid)
    # Scored as the original `evaluate_v2`, the checkpoint itself (not copied).
    metrics = json.loads((out / "eval_results.json").read_text())["best"]["metrics"]
    for key, value in json.loads((tiny / "eval_results.json").read_text()).items():
        assert_close(metrics[key], value, key)
    assert (metrics["HasAns_total"], metrics["NoAns_total"]) == (8, 6)
    assert {"best_f1", "best_f1_thresh", "best_exact", "NoAns_f1"} <= set(metrics)
    assert not (out / "model.ckpt-best.index").exists()
    settings, windows = read_left_file(str(out / "predict_left_file.json"), 128)
    assert len(windows) == 39 and settings["doc_stride"] == 32


@pytest.fixture(scope="module")
def trained_v1(tmp_path_factory):
    out = tmp_path_factory.mktemp("squad") / "v1"
    args = [
        "--recipe=squad_v1",
        f"--spm_model_file={SPM}",
        f"--albert_config_file={SQUAD / 'squad_v1_tiny' / 'albert_config.json'}",
        f"--output_dir={out}",
        f"--train_file={TRAIN_V2}",
        f"--predict_file={DEV_V11}",
        "--do_train",
        "--do_predict",
        "--train_batch_size=4",
        "--train_step=4",
        "--save_checkpoints_steps=2",
        "--strategy=mirrored",
        "--mixed_precision=bf16",
        "--iterations_per_loop=10",
        f"--export_dir={out / 'export'}",
        *SHAPE,
    ]
    result = run_cli("v1", *args)
    assert result.returncode == 0, result.stderr[-3000:]
    return out, result.stderr


def test_cli_recipe_and_explicit_flags(trained_v1):
    _, log = trained_v1
    config = next(line for line in log.splitlines() if "Fine-tuning config:" in line)
    assert "learning_rate=5e-05" in config and "num_train_epochs=2.0" in config  # the recipe
    assert "train_batch_size=4" in config and "max_seq_length=128" in config  # explicit
    assert "mixed_precision='bf16'" in config and "strategy mirrored" in log
    assert "--iterations_per_loop is accepted for compatibility" in log
    assert "Gradients do not exist" not in log


def test_cli_scores_every_checkpoint_and_predicts_with_the_best(trained_v1):
    out, _ = trained_v1
    results = json.loads((out / "eval_results.json").read_text())
    assert results["task"] == "squad_v1" and results["selection_metric"] == "f1"
    # Beside the scores, the empty answer's: nothing right in v1.
    assert results["baseline"]["exact_match"] == results["baseline"]["f1"] == 0
    assert [h["step"] for h in results["history"]] == [2, 4]
    assert results["final"]["step"] == 4
    best = max(results["history"], key=lambda h: h["f1"])  # the first of ties, as `>`
    assert results["best"]["step"] == best["step"]
    assert set(results["best"]["metrics"]) == {"exact_match", "f1"}
    assert sorted(p.name for p in out.glob("model.ckpt-*.index")) == sorted(
        {f"model.ckpt-{best['step']}.index", "model.ckpt-4.index", "model.ckpt-best.index"}
    )
    predictions = json.loads((out / "predictions.json").read_text())
    nbest = json.loads((out / "nbest_predictions.json").read_text())
    assert len(predictions) == len(nbest) == 55
    assert all(1 <= len(entries) <= 20 for entries in nbest.values())
    assert all(predictions[q] == nbest[q][0]["text"] for q in predictions)
    assert (out / "train.tf_record").exists() and (out / "train.tf_record.json").exists()


def test_cli_export_is_the_best_checkpoint_as_a_keras_model(trained_v1):
    out, _ = trained_v1
    info = json.loads((out / "export" / "squad_info.json").read_text())
    assert info["checkpoint"].endswith("model.ckpt-best") and info["version"] == "v1"
    assert info["outputs"] == ["end_logits", "start_logits"] and info["doc_stride"] == 32
    model = keras.saving.load_model(out / "export" / info["model_file"], safe_mode=True)
    ids = np.ones((1, 16), np.int32)
    outputs = model({"input_ids": ids, "input_mask": ids, "segment_ids": 0 * ids})
    assert outputs["start_logits"].shape == (1, 16)
    # Beside it, the same model taking strings, with the job's windows and n-best settings.
    text = keras.saving.load_model(out / "export" / "squad_text.keras", safe_mode=True)
    assert text.head_kind == "squad_v1" and text.settings.doc_stride == 32
    answers = text.predict({"question": ["Who did it?"], "context": ["Rollo did it."]}, verbose=0)
    assert answers["answer"].shape == (1,) and isinstance(answers["answer"][0], str)


def config_v2(tmp_path, **overrides):
    settings = dict(
        albert_config_file=str(SQUAD / "squad_v2_tiny" / "albert_config.json"),
        init_checkpoint=str(SQUAD / "squad_v2_tiny" / "model.ckpt"),
        train_file=str(TRAIN_V2),
        predict_file=str(DEV_V2),
        max_seq_length=128,
        doc_stride=32,
        max_query_length=24,
        train_batch_size=4,
        train_step=2,
        save_checkpoints_steps=2,
        learning_rate=1e-3,
        dropout_prob=0.0,
    )
    settings.update(overrides)
    return squad.SquadConfig("v2", str(tmp_path / "v2"), str(SPM), **settings)


def test_v2_trains_with_teacher_forcing_and_reports_every_official_figure(tmp_path):
    summary = squad.run(
        squad.SquadFinetuneTask(config_v2(tmp_path)), do_train=True, do_predict=True
    )
    metrics = summary["eval"]["best"]["metrics"]
    assert {"exact", "f1", "total", "HasAns_f1", "NoAns_f1", "best_f1_thresh"} <= set(metrics)
    assert "null_score_diff_threshold" in metrics and metrics["total"] == 14
    assert set(summary["predictions"]) == {
        "predictions.json",
        "nbest_predictions.json",
        "null_odds.json",
    }


def test_predict_features_are_cached_and_rebuilt_for_other_settings(tmp_path):
    config = config_v2(tmp_path)
    inputs = squad.SquadFinetuneTask(config).predict_inputs()
    left = pathlib.Path(config.predict_feature_left_file)
    stamp = left.stat().st_mtime_ns
    again = squad.SquadFinetuneTask(config).predict_inputs()  # read back, not rebuilt
    assert left.stat().st_mtime_ns == stamp
    assert [f.unique_id for f in again.features] == [f.unique_id for f in inputs.features]
    assert [f.token_is_max_context for f in again.features] == [
        f.token_is_max_context for f in inputs.features
    ]
    wider = squad.SquadFinetuneTask(config_v2(tmp_path, doc_stride=64)).predict_inputs()
    assert len(wider.features) != len(inputs.features)  # rebuilt with the new stride
    assert read_left_file(str(left), 128)[0]["doc_stride"] == 64


def test_a_repeated_question_id_in_the_predict_file_stops_the_job_before_training(tmp_path):
    data = json.loads(DEV_V2.read_text())
    questions = data["data"][0]["paragraphs"][0]["qas"]
    questions[1]["id"] = questions[0]["id"]
    repeated = tmp_path / "dev.json"
    repeated.write_text(json.dumps(data))
    config = config_v2(tmp_path, predict_file=str(repeated))
    with pytest.raises(
        squad.SquadFormatError, match=f"question id {questions[0]['id']!r} appears twice"
    ):
        squad.run(squad.SquadFinetuneTask(config), do_train=True, do_predict=True)
    assert not pathlib.Path(config.output_dir).exists()  # nothing trained or cached


def test_cli_bad_training_answer_is_one_line_error_naming_file_and_question(tmp_path):
    data = json.loads(TRAIN_V2.read_text())
    qa = next(
        qa for p in data["data"][0]["paragraphs"] for qa in p["qas"] if not qa.get("is_impossible")
    )
    qa["answers"][0]["answer_start"] += 1
    bad = tmp_path / "train.json"
    bad.write_text(json.dumps(data))
    result = run_cli(
        "v2",
        f"--spm_model_file={SPM}",
        f"--albert_config_file={SQUAD / 'squad_v2_tiny' / 'albert_config.json'}",
        f"--output_dir={tmp_path / 'out'}",
        f"--train_file={bad}",
        "--do_train",
        *SHAPE,
    )
    assert result.returncode == 1
    assert f"SquadFormatError: {bad}: question {qa['id']!r}: answer" in result.stderr
    assert "Traceback" not in result.stderr
