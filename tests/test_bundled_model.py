"""The pretrained model the repository ships (pretrained/albert-small-en, written by
benchmarks/pretraining_lift.py): complete, loadable, and as good on its held-out sample as the
study measured, far above what a model that learnt nothing scores there."""

import json
import pathlib
import subprocess
import sys

import pytest

from benchmarks.lift import bundle

ROOT = pathlib.Path(__file__).resolve().parents[1]
BUNDLE = ROOT / "pretrained" / "albert-small-en"


def metrics() -> dict:
    return json.loads((BUNDLE / bundle.METRICS_FILE).read_text())


def test_the_bundle_is_complete_and_its_card_states_its_numbers():
    for name in (bundle.MODEL_FILE, bundle.CONFIG_FILE, bundle.SPM_FILE, bundle.SAMPLE_FILE):
        assert (BUNDLE / name).stat().st_size > 0, name
    card = (BUNDLE / "MODEL_CARD.md").read_text()
    m = metrics()
    assert f"{100 * m['held_out_mlm']:.1f}%" in card
    assert "Licence" in card and "CC BY-SA" in card
    assert m["held_out_mlm"] > 4 * m["unigram_mlm"]  # well off the unigram plateau
    lift = json.loads((ROOT / "benchmarks/results/pretraining_lift.json").read_text())
    assert lift["bundled_model"] == "pretrained/albert-small-en"
    assert lift["held_out_mlm"] == m["held_out_mlm"]


@pytest.mark.numerics
def test_the_bundled_model_scores_its_held_out_sample_as_recorded():
    m = metrics()
    scored = bundle.score_sample(str(BUNDLE), m["max_seq_length"], m["max_predictions_per_seq"])
    # ~2,400 masked tokens: another CPU's kernels may flip the argmax of a few near ties.
    assert scored["mlm"] == pytest.approx(m["sample_mlm"], rel=0.01)
    assert scored["mlm"] > 4 * m["unigram_mlm"]


def documented_sst2_command(output_dir, learning_rate: float) -> list[str]:
    """The README's "A pretrained model to start from" command (seed 2 of the study's SST-2
    runs from the final model)."""
    return [
        sys.executable,
        str(ROOT / "pipelines" / "run_classifier.py"),
        "--task_name=sst-2",
        "--data_dir=benchmarks/data/glue_lift",
        "--init_checkpoint=pretrained/albert-small-en/albert_pretrainer.keras",
        "--spm_model_file=pretrained/albert-small-en/spiece.model",
        f"--output_dir={output_dir}",
        "--do_train",
        "--do_eval",
        "--max_seq_length=128",
        "--train_batch_size=32",
        f"--learning_rate={learning_rate:g}",
        "--train_step=469",
        "--warmup_step=47",
        "--save_checkpoints_steps=469",
        "--eval_batch_size=64",
        "--random_seed=2",
    ]


# ~2 min on 2 cores: a whole SST-2 fine-tune from the bundled model, through the CLI.
@pytest.mark.slow
def test_the_documented_command_reproduces_the_reported_sst2_score(tmp_path):
    m = metrics()
    command = documented_sst2_command(tmp_path / "sst2", m["learning_rates"]["sst-2/pretrained"])
    readme = (ROOT / "README.md").read_text()
    for argument in command[2:]:
        if "output_dir" not in argument:
            assert argument in readme, f"the README's command lacks {argument}"
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "sst2" / "eval_results.json").read_text())
    accuracy = 100 * results["final"]["metrics"]["eval_accuracy"]
    assert abs(accuracy - m["dev_accuracy"]["sst-2"]["values"][1]) <= 1.5
