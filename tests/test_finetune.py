"""Fine-tuning: recipes, config resolution, and the CLI end to end on GLUE fixtures."""

import dataclasses
import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest

from albert_tf import AlbertConfig
from albert_tf.finetuning import loop, training
from albert_tf.finetuning.settings import resolve_albert_config
from albert_tf.tasks.glue import finetune as finetuning
from albert_tf.modeling.heads.classifier import AlbertClassifier
from albert_tf.checkpoints import read_tf1_checkpoint
from tests.tolerances import FEW_OPS, TRAINING_STEPS, assert_close_to_scale
from tests.model_configs import CLASSIFIER_TINY

ROOT = pathlib.Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
GLUE = FIXTURES / "glue"
SPM = FIXTURES / "albert_spm" / "30k-clean.model"
TINY = dict(CLASSIFIER_TINY, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)


@pytest.fixture(scope="module")
def tiny_config_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("config") / "albert_config.json"
    AlbertConfig(**TINY).to_json_file(path)
    return path


def test_recipes_are_run_glue_sh():
    table = {
        task: (
            r["learning_rate"],
            r["train_batch_size"],
            r["train_step"],
            r["warmup_step"],
            r["save_checkpoints_steps"],
        )
        for task, r in finetuning.RECIPES.items()
    }
    assert table == {
        "sst-2": (1e-5, 32, 20935, 1256, 100),
        "mnli": (3e-5, 128, 10000, 1000, 100),
        "cola": (1e-5, 16, 5336, 320, 100),
        "qnli": (1e-5, 32, 33112, 1986, 200),
        "qqp": (5e-5, 128, 14000, 1000, 100),
        "rte": (3e-5, 32, 800, 200, 100),
        "sts-b": (2e-5, 16, 3598, 214, 100),
        "mrpc": (2e-5, 32, 800, 200, 100),
    }
    assert all(
        r["max_seq_length"] == 512 and r["optimizer"] == "adamw" and r["do_lower_case"]
        for r in finetuning.RECIPES.values()
    )


def test_config_checks_and_resolution(tmp_path, tiny_config_file):
    with pytest.raises(ValueError, match="warmup_step"):
        finetuning.FinetuneConfig("rte", "d", "o", str(SPM), train_step=10, warmup_step=11)
    with pytest.raises(ValueError, match="unknown GLUE task"):
        finetuning.FinetuneConfig("ax", "d", "o", str(SPM))
    config = finetuning.FinetuneConfig(
        "rte",
        "d",
        str(tmp_path),
        str(SPM),
        max_seq_length=512,
        albert_config_file=str(tiny_config_file),
    )
    with pytest.raises(ValueError, match="only trained up to 64"):
        resolve_albert_config(config)
    model = AlbertClassifier(AlbertConfig(**TINY), num_labels=2)
    model.save(tmp_path / "init.keras")
    from_keras = finetuning.FinetuneConfig(
        "rte",
        "d",
        str(tmp_path),
        str(SPM),
        max_seq_length=64,
        init_checkpoint=str(tmp_path / "init.keras"),
    )
    assert resolve_albert_config(from_keras) == AlbertConfig(**TINY)
    (tmp_path / "other.keras").write_bytes(b"not a zip archive")
    other = dataclasses.replace(from_keras, init_checkpoint=str(tmp_path / "other.keras"))
    with pytest.raises(ValueError, match=r"other.keras: not a .keras archive \(not a zip file\)"):
        resolve_albert_config(other)
    release = FIXTURES / "original_checkpoints" / "albert_tiny_shared"  # albert_config.json beside
    beside = finetuning.FinetuneConfig(
        "rte",
        "d",
        str(tmp_path),
        str(SPM),
        max_seq_length=64,
        init_checkpoint=str(release / "model.ckpt"),
    )
    assert resolve_albert_config(beside) == AlbertConfig.from_json_file(
        release / "albert_config.json"
    )
    (tmp_path / "ckpt").mkdir()  # a whole checkpoint with no albert_config.json beside it
    for name in ("model.ckpt.index", "model.ckpt.data-00000-of-00001"):
        shutil.copy(release / name, tmp_path / "ckpt" / name)
    bare = finetuning.FinetuneConfig(
        "rte",
        "d",
        str(tmp_path / "none"),
        str(SPM),
        init_checkpoint=str(tmp_path / "ckpt" / "model.ckpt"),
    )
    with pytest.raises(ValueError, match="no model config: pass albert_config_file"):
        resolve_albert_config(bare)


def run_cli(*args):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run(
        [sys.executable, str(ROOT / "pipelines" / "finetune.py"), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=600,
    )


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory, tiny_config_file):
    out = tmp_path_factory.mktemp("finetune") / "sst2"
    result = run_cli(
        "--recipe=SST-2",
        f"--data_dir={GLUE}",
        f"--spm_model_file={SPM}",
        f"--albert_config_file={tiny_config_file}",
        f"--output_dir={out}",
        "--max_seq_length=32",
        "--train_step=6",
        "--warmup_step=2",
        "--save_checkpoints_steps=3",
        "--train_batch_size=8",
        "--eval_batch_size=5",
        "--do_train",
        "--do_eval",
        "--do_predict",
        f"--export_dir={out / 'export'}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return out, result.stderr


@pytest.mark.e2e
def test_cli_recipe_with_explicit_overrides(cli_run):
    _, log = cli_run
    config_line = next(line for line in log.splitlines() if "Fine-tuning config:" in line)
    assert "task_name='sst-2'" in config_line
    assert "learning_rate=1e-05" in config_line  # from the recipe
    assert "train_step=6" in config_line and "warmup_step=2" in config_line  # given explicitly
    assert "max_seq_length=32" in config_line and "save_checkpoints_steps=3" in config_line


def test_cli_eval_results_label_final_and_best(cli_run):
    out, _ = cli_run
    results = json.loads((out / "eval_results.json").read_text())
    assert results["selection_metric"] == "eval_accuracy"
    assert [h["step"] for h in results["history"]] == [3, 6]
    assert results["final"]["step"] == 6
    best = max(results["history"], key=lambda h: h["eval_accuracy"])
    assert results["best"]["step"] == best["step"]
    assert results["best"]["metrics"]["eval_accuracy"] == best["eval_accuracy"]
    assert results["final"]["metrics"]["num_examples"] == 16
    assert "best" in results["note"] and "final" in results["note"]
    # Beside every score, what a model that learnt nothing scores: the most frequent dev label.
    labels = [line.rsplit("\t", 1)[1].strip() for line in (GLUE / "SST-2/dev.tsv").open()][1:]
    majority = max(labels.count("0"), labels.count("1")) / len(labels)
    assert results["baseline"]["eval_accuracy"] == pytest.approx(majority)
    assert "a model that learnt nothing scores eval_accuracy=" in cli_run[1]
    assert "a model that learnt nothing: {" in cli_run[1]  # and once more under the summary
    # Only the best, the final and model.ckpt-best remain.
    indexes = sorted(p.name for p in out.glob("*.index"))
    assert indexes == sorted(
        {
            f"model.ckpt-{results['best']['step']}.index",
            "model.ckpt-6.index",
            "model.ckpt-best.index",
        }
    )


def test_cli_predictions_are_a_glue_submission(cli_run):
    out, _ = cli_run
    lines = (out / "SST-2.tsv").read_text().splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == 9
    rows = [line.split("\t") for line in lines[1:]]
    assert [r[0] for r in rows] == [str(i) for i in range(8)]
    assert {r[1] for r in rows} <= {"0", "1"}
    probabilities = np.loadtxt(out / "test_results.tsv", delimiter="\t")
    assert probabilities.shape == (8, 2)
    assert_close_to_scale(probabilities.sum(1), np.ones(len(probabilities)), FEW_OPS)
    assert [str(p) for p in probabilities.argmax(1)] == [r[1] for r in rows]


def test_cli_export_is_a_safe_keras_classifier(cli_run):
    export = cli_run[0] / "export"
    info = json.loads((export / "classifier_info.json").read_text())
    assert info["labels"] == ["0", "1"] and info["max_seq_length"] == 32
    assert info["checkpoint"].endswith("model.ckpt-best") and info["spm_model_file"] == SPM.name
    assert (export / SPM.name).read_bytes() == SPM.read_bytes()
    model = keras.saving.load_model(export / "classifier.keras", safe_mode=True)
    batch = {k: np.ones((1, 8), np.int32) for k in ("input_ids", "input_mask", "segment_ids")}
    assert model(batch)["probabilities"].shape == (1, 2)


def test_eval_only_rescores_the_saved_checkpoints(cli_run, tmp_path):
    out = tmp_path / "copy"
    shutil.copytree(cli_run[0], out)
    trained = json.loads((out / "eval_results.json").read_text())
    config = finetuning.FinetuneConfig(
        "sst-2",
        str(GLUE),
        str(out),
        str(SPM),
        max_seq_length=32,
        eval_batch_size=5,
        keep_all_checkpoints=True,
    )
    summary = loop.run(
        finetuning.GlueFinetuneTask(config), do_train=False, do_eval=True, do_predict=False
    )
    assert summary["eval"]["final"]["step"] == 6
    assert summary["eval"]["final"]["metrics"] == pytest.approx(trained["final"]["metrics"])
    with pytest.raises(FileExistsError, match="already holds model.ckpt"):
        training.prepare(finetuning.GlueFinetuneTask(config), AlbertConfig(**TINY))


@pytest.mark.e2e
def test_regression_task_end_to_end(tmp_path, tiny_config_file):
    header = (
        "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"
    )
    rows = [
        f"{i}\tg\tf\ty\to\ts\ts\tthe cat sat {i % 3} .\ta dog ran .\t{i % 5}.000" for i in range(12)
    ]
    (tmp_path / "STS-B").mkdir()
    for name in ("train.tsv", "dev.tsv"):
        (tmp_path / "STS-B" / name).write_text("\n".join([header, *rows]) + "\n")
    (tmp_path / "STS-B" / "test.tsv").write_text(
        "\n".join([header.rsplit("\t", 1)[0], *(r.rsplit("\t", 1)[0] for r in rows[:3])]) + "\n"
    )
    config = finetuning.FinetuneConfig(
        "sts-b",
        str(tmp_path),
        str(tmp_path / "out"),
        str(SPM),
        albert_config_file=str(tiny_config_file),
        max_seq_length=32,
        train_step=4,
        save_checkpoints_steps=4,
        train_batch_size=4,
        learning_rate=1e-3,
    )
    summary = loop.run(
        finetuning.GlueFinetuneTask(config), do_train=True, do_eval=True, do_predict=True
    )
    assert summary["eval"]["selection_metric"] == "pearson"
    assert set(summary["eval"]["best"]["metrics"]) >= {"pearson", "spearman", "MSE"}
    lines = (tmp_path / "out" / "STS-B.tsv").read_text().splitlines()
    assert lines[0] == "index\tprediction" and [l.split("\t")[0] for l in lines[1:]] == [
        "0",
        "1",
        "2",
    ]
    assert all(np.isfinite(float(l.split("\t")[1])) for l in lines[1:])


@pytest.mark.e2e
def test_cli_bad_rows_fail_with_file_and_line_or_are_counted(tmp_path, tiny_config_file):
    (tmp_path / "SST-2").mkdir()
    bad = tmp_path / "SST-2" / "train.tsv"
    bad.write_text("sentence\tlabel\ngood .\t1\nodd .\tpositive\n")
    (tmp_path / "SST-2" / "test.tsv").write_text("index\tsentence\n0\tfine .\n1\ttoo\tmany\n")
    common = [
        f"--data_dir={tmp_path}",
        f"--spm_model_file={SPM}",
        "--task_name=sst-2",
        f"--albert_config_file={tiny_config_file}",
        "--max_seq_length=32",
    ]
    failed = run_cli(*common, f"--output_dir={tmp_path / 'a'}", "--do_train")
    assert failed.returncode == 1
    assert f"MalformedRowError: {bad}:3: unknown label 'positive'" in failed.stderr
    assert "Traceback" not in failed.stderr
    skipped = run_cli(
        *common, f"--output_dir={tmp_path / 'b'}", "--do_predict", "--skip_malformed_rows"
    )
    assert "test.tsv: skipped 1 malformed rows (first: line 3: expected 2" in skipped.stderr
    # Then prediction stops cleanly: nothing was trained in that output_dir.
    assert skipped.returncode == 1 and "no checkpoint in" in skipped.stderr


def test_a_malformed_test_or_dev_file_stops_the_job_before_training(tmp_path, tiny_config_file):
    (tmp_path / "SST-2").mkdir()
    (tmp_path / "SST-2" / "train.tsv").write_text("sentence\tlabel\ngood .\t1\nbad .\t0\n")
    (tmp_path / "SST-2" / "dev.tsv").write_text("sentence\tlabel\ngood .\t1\nbad .\t0\n")
    test = tmp_path / "SST-2" / "test.tsv"
    test.write_text("index\tsentence\n0\tfine .\n1\ttoo\tmany\n")
    config = finetuning.FinetuneConfig(
        "sst-2",
        str(tmp_path),
        str(tmp_path / "out"),
        str(SPM),
        albert_config_file=str(tiny_config_file),
        max_seq_length=32,
        train_step=4,
        save_checkpoints_steps=2,
        train_batch_size=2,
    )
    with pytest.raises(finetuning.glue.MalformedRowError, match=f"^{test}:3: expected 2 "):
        loop.run(finetuning.GlueFinetuneTask(config), do_train=True, do_eval=False, do_predict=True)
    assert not (tmp_path / "out").exists()  # nothing trained, nothing written

    test.write_text("index\tsentence\n0\tfine .\n")
    dev = tmp_path / "SST-2" / "dev.tsv"
    dev.write_text("sentence\tlabel\ngood .\t1\nbad .\tnegative\n")
    with pytest.raises(finetuning.glue.MalformedRowError, match=f"^{dev}:3: unknown label"):
        loop.run(finetuning.GlueFinetuneTask(config), do_train=True, do_eval=True, do_predict=True)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # two CLI trainings: ~45 s on 2 cores
def test_cli_mirrored_over_two_devices_matches_one_device(tmp_path, tiny_config_file):
    # The CLI itself, with two logical CPU devices set before TensorFlow starts, and dropout off
    # (the head's 0.1 is the original's, fixed): nothing random is left in a step, so the two
    # replicas' summed gradients must give the one-device weights.
    two_cpus = textwrap.dedent("""
        import runpy, sys
        import keras
        import tensorflow as tf
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        keras.layers.Dropout.call = lambda self, inputs, training=False: inputs
        sys.argv = sys.argv[1:]
        runpy.run_path(sys.argv[0], run_name="__main__")
    """)
    weights = {}
    for kind in ("one_device", "mirrored"):
        flags = [
            "--task_name=sst-2",
            f"--data_dir={GLUE}",
            f"--spm_model_file={SPM}",
            f"--albert_config_file={tiny_config_file}",
            f"--output_dir={tmp_path / kind}",
            "--max_seq_length=32",
            "--train_step=2",
            "--save_checkpoints_steps=2",
            "--train_batch_size=8",
            "--learning_rate=1e-3",
            "--nodynamic_padding",
            "--do_train",
            f"--strategy={kind}",
        ]
        result = subprocess.run(
            [sys.executable, "-c", two_cpus, str(ROOT / "pipelines" / "run_classifier.py"), *flags],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=ROOT,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        replicas = 2 if kind == "mirrored" else 1
        assert f"strategy {kind} " in result.stderr and f"{replicas} replica(s)" in result.stderr
        weights[kind] = read_tf1_checkpoint(tmp_path / kind / "model.ckpt-2")
    assert weights["one_device"].keys() == weights["mirrored"].keys()
    for name, expected in weights["one_device"].items():
        assert_close_to_scale(weights["mirrored"][name], expected, TRAINING_STEPS, err_msg=name)
