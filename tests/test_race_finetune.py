"""RACE fine-tuning: the original checkpoint's dev figures through the CLI, training that resumes
after a crash exactly where it stopped, two replicas against one, and one-line input errors."""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from albert_tf.checkpoints import read_tf1_checkpoint
from albert_tf.finetuning import loop, training
from albert_tf.tasks.race import finetune as race
from albert_tf.tasks.race.examples import LABELS
from tests.tolerances import GOLDEN, SAME_MODEL, TRAINING_STEPS, assert_close_to_scale
from tests.cli_help import flag_defaults

pytestmark = pytest.mark.e2e  # starts the CLIs or runs whole exports

ROOT = pathlib.Path(__file__).resolve().parents[1]
RACE = ROOT / "tests" / "fixtures" / "original_race"
TINY = RACE / "race_tiny"
SPM = ROOT / "tests" / "fixtures" / "albert_spm" / "30k-clean.model"
# The fixture's features: max_seq_length 128, max_qa_length 32.
SHAPE = ["--max_seq_length=128", "--max_qa_length=32"]


def run_cli(*args):
    return subprocess.run(
        [sys.executable, str(ROOT / "pipelines" / "run_race.py"), *args],
        capture_output=True,
        text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        cwd=ROOT,
        timeout=600,
    )


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """The fixture's RACE folder, with its dev split also as the test split."""
    root = tmp_path_factory.mktemp("race")
    shutil.copytree(RACE / "data", root / "data")
    shutil.copytree(RACE / "data" / "RACE" / "dev", root / "data" / "RACE" / "test")
    return root / "data"


# Every flag of the original run_race.py, with its default.
ORIGINAL_FLAGS = {
    **dict.fromkeys(
        ("data_dir", "albert_config_file", "vocab_file", "train_file", "eval_file"), ""
    ),
    **dict.fromkeys(("predict_file", "spm_model_file", "output_dir", "init_checkpoint"), ""),
    **dict.fromkeys(("albert_hub_module_handle", "tpu_name", "tpu_zone", "gcp_project"), ""),
    "master": "",
    "task_name": "race",
    "do_lower_case": "true",
    "dropout_prob": "0.1",
    "max_seq_length": "512",
    "max_qa_length": "128",
    "num_keep_checkpoint": "5",
    "high_only": "false",
    "middle_only": "false",
    "do_train": "true",
    "do_eval": "true",
    "do_predict": "false",
    "train_batch_size": "32",
    "eval_batch_size": "8",
    "predict_batch_size": "8",
    "learning_rate": "1e-05",
    "train_step": "12000",
    "warmup_step": "1000",
    "save_checkpoints_steps": "100",
    "iterations_per_loop": "1000",
    "use_tpu": "false",
    "num_tpu_cores": "8",
}


def test_cli_has_every_original_flag_with_its_default():
    defaults = flag_defaults("run_race.py")
    assert {name: defaults.get(name) for name in ORIGINAL_FLAGS} == ORIGINAL_FLAGS
    assert defaults["recipe"] == "" and defaults["strategy"] == "auto"
    assert defaults["mixed_precision"] == "none"


def test_recipe_is_the_original_release_one():
    assert race.RECIPES["race"] == dict(
        learning_rate=1e-5,
        train_batch_size=32,
        eval_batch_size=8,
        train_step=12000,
        warmup_step=1000,
        save_checkpoints_steps=100,
        max_seq_length=512,
        max_qa_length=128,
    )
    defaults = race.RaceConfig("d", "o", str(SPM))
    assert (defaults.learning_rate, defaults.train_step, defaults.warmup_step) == (
        1e-5,
        12000,
        1000,
    )
    assert defaults.eval_file == os.path.join("o", "eval.tf_record")
    with pytest.raises(ValueError, match="Task not found: mnli"):
        race.RaceConfig("d", "o", str(SPM), task_name="mnli")


def test_cli_eval_and_predict_of_the_original_checkpoint_reproduce_its_figures(data_dir, tmp_path):
    out = tmp_path / "out"
    result = run_cli(
        f"--data_dir={data_dir}",
        f"--spm_model_file={SPM}",
        f"--output_dir={out}",
        f"--init_checkpoint={TINY / 'model.ckpt'}",
        "--nodo_train",
        "--do_predict",
        *SHAPE,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    expected = np.load(TINY / "expected.npz")
    features = json.loads((RACE / "features_dev_seq128_qa32.json").read_text())["features"]
    labels = np.array([f["label_id"] for f in features])
    correct = expected["logits"].argmax(-1) == labels
    results = json.loads((out / "eval_results.json").read_text())
    metrics = results["final"]["metrics"]
    assert_close_to_scale(metrics["eval_loss"], expected["loss"], GOLDEN)
    assert metrics["eval_accuracy"] == pytest.approx(correct.mean(), rel=1e-12)
    # Beside it, always the option most often right in this dev set.
    majority = np.bincount(labels, minlength=4).max() / len(labels)
    assert results["baseline"]["eval_accuracy"] == pytest.approx(majority, rel=1e-12)
    # The fixture reads middle (3 questions) before high (6).
    assert metrics["middle_num_examples"] == 3 and metrics["high_num_examples"] == 6
    assert metrics["middle_accuracy"] == pytest.approx(correct[:3].mean(), rel=1e-12)
    assert metrics["high_accuracy"] == pytest.approx(correct[3:].mean(), rel=1e-12)
    assert not (out / "model.ckpt-best.index").exists()  # the init checkpoint is not copied
    # The test split (here the dev questions) through --do_predict.
    results = dict(
        line.split(" = ", 1) for line in (out / "predict_results.txt").read_text().splitlines()
    )
    assert float(results["eval_accuracy"]) == pytest.approx(correct.mean(), rel=1e-12)
    rows = [r.split("\t") for r in (out / "test_predictions.tsv").read_text().splitlines()[1:]]
    assert [r[2] for r in rows] == [LABELS[i] for i in expected["logits"].argmax(-1)]
    assert [r[3] for r in rows] == [LABELS[i] for i in labels]


def make_config(data_dir, out, **overrides):
    settings = dict(
        init_checkpoint=str(TINY / "model.ckpt"),
        max_seq_length=128,
        max_qa_length=32,
        dropout_prob=0.0,  # with the fixture's dropout-free backbone: deterministic training
        train_batch_size=4,
        train_step=4,
        warmup_step=1,
        save_checkpoints_steps=2,
        learning_rate=1e-2,
        keep_all_checkpoints=True,
        log_every_steps=1,
    )
    settings.update(overrides)
    return race.RaceConfig(str(data_dir), str(out), str(SPM), **settings)


def test_rerun_after_a_crash_resumes_exactly_where_it_stopped(data_dir, tmp_path, monkeypatch):
    uninterrupted = loop.run(
        race.RaceFinetuneTask(make_config(data_dir, tmp_path / "whole", train_step=6)),
        True,
        True,
        False,
    )

    saved = training.save_tf1_checkpoint

    def crash_after_step_4(model, path, global_step=None):
        prefix = saved(model, path, global_step)
        if global_step == 4:
            raise KeyboardInterrupt("killed after saving step 4, before evaluating it")
        return prefix

    monkeypatch.setattr(training, "save_tf1_checkpoint", crash_after_step_4)
    out = tmp_path / "crashed"
    config = make_config(data_dir, out, train_step=6)
    with pytest.raises(KeyboardInterrupt):
        loop.run(race.RaceFinetuneTask(config), True, True, False)
    assert [h["step"] for h in json.loads((out / "eval_results.json").read_text())["history"]] == [
        2
    ]
    monkeypatch.setattr(training, "save_tf1_checkpoint", saved)

    resumed = loop.run(race.RaceFinetuneTask(config), True, True, False)
    # Steps 5-6 were trained; step 2's score was taken up, step 4 scored on resuming.
    assert [os.path.basename(p) for p in resumed["checkpoints"]] == ["model.ckpt-6"]
    assert [h["step"] for h in resumed["eval"]["history"]] == [2, 4, 6]
    # Optimizer moments, step and batches continued: the same weights as without the crash.
    whole = read_tf1_checkpoint(tmp_path / "whole" / "model.ckpt-6")
    again = read_tf1_checkpoint(out / "model.ckpt-6")
    for name in whole:
        assert_close_to_scale(again[name], whole[name], SAME_MODEL, err_msg=name)
    for a, b in zip(resumed["eval"]["history"], uninterrupted["eval"]["history"]):
        assert_close_to_scale(a["eval_loss"], b["eval_loss"], SAME_MODEL)

    # The same command once more: nothing left to train. Other settings: refused.
    assert loop.run(race.RaceFinetuneTask(config), True, False, False)["checkpoints"] == []
    with pytest.raises(FileExistsError, match="learning_rate 0.01 then, 0.02 now"):
        loop.run(
            race.RaceFinetuneTask(make_config(data_dir, out, train_step=6, learning_rate=2e-2)),
            True,
            False,
            False,
        )


@pytest.mark.slow  # 15 s; the SQuAD CLI tests fine-tune under mirrored too
def test_mirrored_over_two_devices_matches_one_device(data_dir, tmp_path):
    # Logical devices must be configured before TensorFlow starts: a fresh process.
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        import tensorflow as tf
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        from tests.test_race_finetune import make_config
        from albert_tf.finetuning import loop
        from albert_tf.tasks.race import finetune as race
        from albert_tf.training.distribution import build_strategy
        for kind in ("one_device", "mirrored"):
            strategy = build_strategy(kind)
            assert strategy.num_replicas_in_sync == (2 if kind == "mirrored" else 1)
            config = make_config({str(data_dir)!r}, {str(tmp_path)!r} + "/" + kind, train_step=2)
            loop.run(race.RaceFinetuneTask(config), True, False, False, strategy=strategy)
    """)
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=600, cwd=ROOT
    )
    assert result.returncode == 0, result.stderr[-3000:]
    one = read_tf1_checkpoint(tmp_path / "one_device" / "model.ckpt-2")
    mirrored = read_tf1_checkpoint(tmp_path / "mirrored" / "model.ckpt-2")
    for name in one:
        assert_close_to_scale(mirrored[name], one[name], TRAINING_STEPS, err_msg=name)


def test_cli_bad_line_is_one_line_error_naming_file_and_line(tmp_path):
    for split, level in (
        ("train", "middle"),
        ("train", "high"),
        ("dev", "middle"),
        ("dev", "high"),
    ):
        (tmp_path / "RACE" / split / level).mkdir(parents=True)
        shutil.copy(
            RACE / "data" / "RACE" / split / level / "all.txt", tmp_path / "RACE" / split / level
        )
    bad = tmp_path / "RACE" / "train" / "high" / "all.txt"
    record = json.loads(bad.read_text().splitlines()[0])
    record["answers"][0] = "E"
    bad.write_text(json.dumps(record) + "\n")
    result = run_cli(
        f"--data_dir={tmp_path}",
        f"--spm_model_file={SPM}",
        f"--output_dir={tmp_path / 'out'}",
        f"--albert_config_file={TINY / 'albert_config.json'}",
        *SHAPE,
    )
    assert result.returncode == 1
    assert f"RaceFormatError: {bad}:1: article {record['id']!r}, question 0: answer 'E'" in (
        result.stderr
    )
    assert "Traceback" not in result.stderr
