"""benchmarks/pretraining_lift.py: its plan of fine-tunes, the GLUE folders it writes, and at a
tiny size the whole study end to end through the CLI (results, bundled model, a re-run that
redoes nothing)."""

import dataclasses
import gzip
import json
import pathlib
import shutil
import subprocess
import sys

import pytest

from benchmarks.ablations.study import Stages
from benchmarks.lift import data, report, runs, study
from benchmarks.lift.settings import REPORTED_TASKS, SEEDED_TASKS, LiftSettings

ROOT = pathlib.Path(__file__).resolve().parents[1]
GLUE_FIXTURES = str(ROOT / "tests/fixtures/glue")  # a few rows of each task: fast, not accurate


def test_the_plan_fine_tunes_every_curve_point_with_every_seed(tmp_path):
    s = LiftSettings(work_dir=str(tmp_path))
    plan = study.finetune_plan(s)
    curve = [p for p in plan if p["stage"] == "curve"]
    assert {(p["task"], p["step"], p["seed"]) for p in curve} == {
        (t, step, seed)
        for t in SEEDED_TASKS
        for step in (0, *s.curve_steps)
        for seed in s.finetune_seeds
    }
    assert len(s.curve_steps) >= 4 and len(s.finetune_seeds) == 3
    grid = [p for p in plan if p["stage"] == "grid"]
    assert {p["learning_rate"] for p in grid} == set(s.learning_rates)
    assert {p["step"] for p in grid} == {0, s.num_train_steps}
    # The grid comes first: the rates the other fine-tunes use are chosen from it.
    assert plan[: len(grid)] == grid
    assert {p["task"] for p in plan if p["stage"] == "reported"} == set(REPORTED_TASKS)
    assert len({study._name(p) for p in plan}) == len(plan)
    assert study.estimate_seconds(s, Stages(str(tmp_path)), None) > 0


def test_the_estimate_scales_pretraining_by_its_batch_and_fine_tunes_not(tmp_path):
    s = LiftSettings(work_dir=str(tmp_path))
    stages = Stages(str(tmp_path))
    pretraining = study.STEP_SECONDS * s.num_train_steps * study._run_scale(s)
    rest = study.estimate_seconds(s, stages, None) - pretraining
    assert rest > 0
    wide = dataclasses.replace(s, train_batch_size=4 * s.train_batch_size)
    assert study.estimate_seconds(wide, stages, None) == pytest.approx(4 * pretraining + rest)


def test_curve_steps_must_be_checkpoints(tmp_path):
    with pytest.raises(ValueError, match="multiples of checkpoint_every"):
        LiftSettings(work_dir=str(tmp_path), curve_steps=(1000, 3000))


def test_the_schedule_restarts_where_asked(tmp_path):
    s = LiftSettings(work_dir=str(tmp_path), restart_steps=(16000,))
    assert s.phase_ends() == (16000, 40000)
    assert LiftSettings.tiny(str(tmp_path), str(tmp_path)).phase_ends() == (4, 8)
    assert LiftSettings(work_dir=str(tmp_path)).phase_ends() == (40000,)  # one schedule
    with pytest.raises(ValueError, match="restart steps"):
        LiftSettings(work_dir=str(tmp_path), restart_steps=(3000,))
    # The first phase keeps the stage name a 16k run recorded; later phases name their end.
    assert [study._phase_stage(s, end) for end in s.phase_ends()] == [
        "pretraining",
        "pretraining/40000",
    ]


def test_a_restarted_phase_warms_up_to_its_own_peak_rate(tmp_path, monkeypatch):
    taken = []

    def pretraining_run(s, options):  # records what a phase would train with
        taken.append(options)
        return {"keras_model": None, "tf1_checkpoint": None}

    monkeypatch.setattr(runs, "_pretraining_run", pretraining_run)
    monkeypatch.setattr(runs, "loss_curves", lambda log_dir: [])
    records = {"train": {"path": "train.tfrecord"}, "heldout": {"path": "heldout.tfrecord"}}
    s = LiftSettings(work_dir=str(tmp_path), restart_steps=(16000,), restart_learning_rate=0.003)
    for start, end in zip((0, *s.phase_ends()[:-1]), s.phase_ends()):
        runs.pretrain(s, records, "none", start, end)
    assert [(o.start_warmup_step, o.num_train_steps, o.learning_rate) for o in taken] == [
        (0, 16000, 0.005),
        (16000, 40000, 0.003),
    ]
    restarted = LiftSettings(work_dir=str(tmp_path), restart_steps=(16000,))
    assert restarted.peak_learning_rate(16000) == restarted.learning_rate == 0.005


def test_the_grid_passes_over_a_rate_that_leaves_a_seed_at_the_majority_class(tmp_path):
    s = LiftSettings(work_dir=str(tmp_path))

    def run(lr, seed, accuracy):
        return {
            "stage": "grid",
            "task": "sst-2",
            "step": s.num_train_steps,
            "learning_rate": lr,
            "seed": seed,
            "metrics": {"eval_accuracy": accuracy},
            "baseline": {"eval_accuracy": 0.54},
        }

    runs = [run(1e-3, 1, 0.80), run(1e-3, 2, 0.54), run(3e-4, 1, 0.70), run(3e-4, 2, 0.71)]
    finetunes = {str(i): r for i, r in enumerate(runs)}
    assert study.best_rate(s, finetunes, "sst-2", pretrained=True) == 3e-4
    # Where every rate has such a seed, the best mean wins.
    finetunes["2"]["metrics"]["eval_accuracy"] = 0.54
    assert study.best_rate(s, finetunes, "sst-2", pretrained=True) == 1e-3


def _grid_run(s, lr, seed, accuracy, task="sst-2", pretrained=True):
    return {
        "stage": "grid",
        "task": task,
        "step": s.num_train_steps if pretrained else 0,
        "learning_rate": lr,
        "seed": seed,
        "metrics": {"eval_accuracy": accuracy},
        "baseline": {"eval_accuracy": 0.54},
    }


def test_rates_step_along_the_one_three_ten_ladder():
    assert [study.next_rate(r, up=True) for r in (1e-4, 3e-4, 1e-3, 3e-3)] == [
        3e-4,
        1e-3,
        3e-3,
        1e-2,
    ]
    assert [study.next_rate(r, up=False) for r in (1e-4, 3e-4, 1e-3, 3e-5)] == [
        3e-5,
        1e-4,
        3e-4,
        1e-5,
    ]


def test_the_grid_grows_past_an_edge_that_holds_the_best_rate(tmp_path):
    s = LiftSettings(work_dir=str(tmp_path))  # rates 1e-4, 3e-4, 1e-3; two seeds
    accuracy = {1e-4: 0.64, 3e-4: 0.69, 1e-3: 0.74}
    finetunes = {
        f"{lr}-{seed}": _grid_run(s, lr, seed, accuracy[lr]) for lr in accuracy for seed in (1, 2)
    }
    assert study.grid_extension(s, finetunes, "sst-2", pretrained=True) == 3e-3
    # The random init's grid is another: nothing of it yet.
    assert study.grid_extension(s, finetunes, "sst-2", pretrained=False) is None
    # Worse at 3e-3: 1e-3 is inside the grid now, and stays the best.
    finetunes.update({f"3e-3-{seed}": _grid_run(s, 3e-3, seed, 0.70) for seed in (1, 2)})
    assert study.grid_extension(s, finetunes, "sst-2", pretrained=True) is None
    assert study.best_rate(s, finetunes, "sst-2", pretrained=True) == 1e-3
    # Better at 3e-3 and at 1e-2 too: the grid stops after `grid_extensions` added rates.
    for seed in (1, 2):
        finetunes[f"3e-3-{seed}"]["metrics"]["eval_accuracy"] = 0.76
    assert study.grid_extension(s, finetunes, "sst-2", pretrained=True) == 1e-2
    finetunes.update({f"1e-2-{seed}": _grid_run(s, 1e-2, seed, 0.78) for seed in (1, 2)})
    assert s.grid_extensions == 2
    assert study.grid_extension(s, finetunes, "sst-2", pretrained=True) is None
    # The lowest rate best grows the grid downwards.
    low = {f"{lr}-1": _grid_run(s, lr, 1, 0.9 - 100 * lr) for lr in (1e-4, 3e-4, 1e-3)}
    assert study.grid_extension(s, low, "sst-2", pretrained=True) == 3e-5


def test_a_curve_fine_tune_is_stored_under_its_rate_and_not_reused_for_another(tmp_path):
    s = LiftSettings(work_dir=str(tmp_path))
    stages = Stages(str(tmp_path))
    item = {"stage": "curve", "task": "sst-2", "step": 16000, "seed": 1}
    assert study._name(item, 1e-3) == "curve/sst-2-step16000-lr0.001-seed1"
    # No grid yet: no rate is chosen, so no stored curve run counts as done.
    assert study._rate_for(s, study._stored_grid(s, stages), item) is None
    rates = ((3e-5, 0.6), (1e-4, 0.64), (3e-4, 0.69), (1e-3, 0.74), (3e-3, 0.70))
    for lr, accuracy in rates:
        for seed in s.grid_seeds:
            run = _grid_run(s, lr, seed, accuracy)
            stages.get(study._name(run), lambda run=run: run)
    stored = study._stored_grid(s, stages)
    assert sorted({f["learning_rate"] for f in stored.values()}) == [lr for lr, _ in rates]
    assert study._rate_for(s, stored, item) == 1e-3
    before = study.estimate_seconds(s, stages, None)
    stages.get(study._name(item, 1e-4), lambda: {"metrics": {"eval_accuracy": 0.7}})
    assert study.estimate_seconds(s, stages, None) == before  # another rate's run: still to do
    stages.get(study._name(item, 1e-3), lambda: {"metrics": {"eval_accuracy": 0.7}})
    assert study.estimate_seconds(s, stages, None) < before


def test_glue_folders_sample_train_sets_split_dev_only_tasks_and_never_mix(tmp_path):
    s = LiftSettings(
        work_dir=str(tmp_path),
        glue_dir=GLUE_FIXTURES,
        train_rows={"sst-2": 30, "qnli": 5, "mrpc": None, "rte": None},
    )
    written = data.write_glue(s)
    tasks = written["tasks"]
    assert tasks["sst-2"]["train_rows"] == 30 and tasks["sst-2"]["eval_rows"] == 16
    assert tasks["mrpc"]["train_rows"] == 12  # all of it
    qnli = tmp_path / "glue" / "QNLI"
    train = qnli.joinpath("train.tsv").read_text(encoding="utf-8").splitlines()
    dev = qnli.joinpath("dev.tsv").read_text(encoding="utf-8").splitlines()
    source = pathlib.Path(GLUE_FIXTURES, "QNLI", "dev.tsv").read_text(encoding="utf-8").splitlines()
    assert train[0] == dev[0] == source[0]  # the header on both
    assert len(train) - 1 == 5 and sorted(train[1:] + dev[1:]) == sorted(source[1:])
    assert "not sampled for training" in tasks["qnli"]["evaluation"]
    # The grid's split is of the train set alone: dev rows never choose a learning rate.
    grid = tmp_path / "glue_grid" / "SST-2"
    grid_rows = grid.joinpath("train.tsv").read_bytes().splitlines()[1:]
    grid_rows += grid.joinpath("dev.tsv").read_bytes().splitlines()[1:]
    train_rows = (tmp_path / "glue" / "SST-2" / "train.tsv").read_bytes().splitlines()[1:]
    assert sorted(grid_rows) == sorted(train_rows)
    assert data.write_glue(s) == written  # seeded: the same folders again


def test_glue_folders_read_gzipped_train_sets_as_the_shipped_ones_are(tmp_path):
    zipped = tmp_path / "zipped"
    shutil.copytree(GLUE_FIXTURES, zipped)
    for train in zipped.glob("*/train.tsv"):
        train.with_suffix(".tsv.gz").write_bytes(gzip.compress(train.read_bytes()))
        train.unlink()
    written = {}
    for name, source in (("plain", GLUE_FIXTURES), ("from_gzip", str(zipped))):
        written[name] = data.write_glue(
            LiftSettings(work_dir=str(tmp_path / name), glue_dir=source)
        )
    assert written["plain"]["tasks"] == written["from_gzip"]["tasks"]
    plain = sorted((tmp_path / "plain").rglob("*.tsv"))
    assert len(plain) == 16  # 4 tasks, train and dev, in glue/ and glue_grid/
    for f in plain:
        assert (
            f.read_bytes()
            == (tmp_path / "from_gzip" / f.relative_to(tmp_path / "plain")).read_bytes()
        )


def stage_files(work_dir: pathlib.Path) -> dict[str, float]:
    return {str(p): p.stat().st_mtime for p in (work_dir / "stages").rglob("*.json")}


def run_python(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    """This Python on `args`, in the repository root, its output captured."""
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout
    )


def run_cli(tmp_path: pathlib.Path) -> subprocess.CompletedProcess:
    return run_python(
        str(ROOT / "benchmarks" / "pretraining_lift.py"),
        "--size=tiny",
        f"--work_dir={tmp_path / 'work'}",
        f"--results_dir={tmp_path / 'results'}",
        f"--glue_dir={GLUE_FIXTURES}",
        timeout=900,
    )


# ~1.5 min on 2 cores: the pieces are tested apart above and in the library's tests.
@pytest.mark.slow
def test_tiny_study_end_to_end_writes_results_and_bundle_and_resumes(tmp_path):
    first = run_cli(tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "estimate" in first.stdout and "results:" in first.stdout
    results = json.loads((tmp_path / "results" / "pretraining_lift.json").read_text())
    s = LiftSettings.tiny(str(tmp_path / "work"), str(tmp_path / "results"))
    assert 0 <= results["held_out_mlm"] <= 1
    assert [p["step"] for p in results["held_out_curve"]] == list(
        range(0, s.num_train_steps + 1, s.checkpoint_every)
    )
    for task in SEEDED_TASKS:
        lift = results["downstream"][task]
        assert len(lift["pretrained"]) == len(lift["random_init"]) == len(s.finetune_seeds)
        assert all(0 <= v <= 100 for v in lift["pretrained"] + lift["random_init"])
        assert 0 < lift["baseline"] <= 100
        assert set(results["downstream_curve"][task]) == {str(k) for k in (0, *s.curve_steps)}
    assert set(results["reported"]) == set(REPORTED_TASKS)
    assert "f1" in results["reported"]["mrpc"]["baseline"]
    bundle = pathlib.Path(results["bundled_model"])
    assert bundle == tmp_path / "results" / "bundled_model"
    for name in ("albert_pretrainer.keras", "albert_config.json", "spiece.model", "MODEL_CARD.md"):
        assert (bundle / name).is_file()
    assert (
        results["bundle"]["sample_mlm"]
        == json.loads((bundle / "metrics.json").read_text())["sample_mlm"]
    )
    grid = results["grid"]
    assert set(grid) == {f"{t}/{k}" for t in SEEDED_TASKS for k in ("random_init", "pretrained")}
    for key, by_rate in grid.items():
        assert {f"{lr:g}" for lr in s.learning_rates} <= set(by_rate)
        assert len(by_rate) <= len(s.learning_rates) + s.grid_extensions
        assert f"{results['learning_rates'][key]:g}" in by_rate
    for name, run in results["finetunes"].items():  # every fine-tune is named by its rate
        assert f"-lr{run['learning_rate']:g}-" in name
    table = (tmp_path / "results" / "pretraining_lift.md").read_text()
    assert "majority class" in table and "unigram" in table and "Learning-rate grid" in table
    for name in ("pretraining_lift_heldout.png", "pretraining_lift_downstream.png"):
        assert (tmp_path / "results" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    before = stage_files(tmp_path / "work")
    again = run_cli(tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert stage_files(tmp_path / "work") == before  # every stage reused
    rerun = json.loads((tmp_path / "results" / "pretraining_lift.json").read_text())
    assert rerun["downstream"] == results["downstream"]


def test_stage_seconds_count_only_the_stages_this_study_used(tmp_path):
    earlier = Stages(str(tmp_path))  # a longer study ran in the same work_dir before
    for name, seconds in (("pretraining", 100), ("pretraining/80000", 500), ("score/40", 7)):
        pathlib.Path(earlier.path(name)).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(earlier.path(name)).write_text(json.dumps({"seconds": seconds}))
    now = Stages(str(tmp_path))
    now.get("pretraining", dict)  # stored: read back, not run again
    now.get("score/40", dict)
    seconds = report.stage_seconds(now)
    assert seconds["pretraining"] == 100 and seconds["score"] == 7
    assert seconds["grid"] == 0 and set(seconds) == set(report.STAGE_KINDS)


_LIFT_SETTINGS = """
import json, runpy, sys
from absl import flags
lift = runpy.run_path("benchmarks/pretraining_lift.py", run_name="flags_only")
flags.FLAGS(["pretraining_lift.py", *sys.argv[1:]])
s = lift["lift_settings"]()
print(json.dumps({"vocab": s.vocab_size, "model": s.model, "lr": s.learning_rate,
                  "bundle_dir": s.bundle_dir, "work_dir": s.work_dir,
                  "restarts": s.restart_steps, "batch": s.train_batch_size}))
"""


def test_the_model_rate_and_bundle_folder_come_from_flags(tmp_path):
    """--albert_config_file sets the model and the vocabulary size the study trains,
    --learning_rate the first phase's peak, --restart_steps where the schedule starts again,
    --train_batch_size the pretraining batch and --bundle_dir where the final model goes: here
    the H=128 study's, none of them the defaults."""
    h128 = ROOT / "benchmarks/results/pretraining_lift_h128_config.json"
    config = dict(json.loads(h128.read_text()), vocab_size=6000)
    (tmp_path / "h128.json").write_text(json.dumps(config))
    argv = [
        f"--albert_config_file={tmp_path / 'h128.json'}",
        "--learning_rate=0.01",
        "--restart_steps=16000",
        "--train_batch_size=256",
        f"--bundle_dir={tmp_path / 'bundle'}",
        f"--work_dir={tmp_path / 'work'}",
    ]
    run = run_python("-c", _LIFT_SETTINGS, *argv)
    assert run.returncode == 0, run.stderr[-3000:]
    s = json.loads(run.stdout.splitlines()[-1])
    assert s["vocab"] == 6000 and s["lr"] == 0.01 and s["restarts"] == [16000]
    assert s["batch"] == 256
    assert s["bundle_dir"] == str(tmp_path / "bundle")
    assert (s["model"]["hidden_size"], s["model"]["intermediate_size"]) == (128, 512)
    assert s["model"]["embedding_size"] == 128 and "vocab_size" not in s["model"]
    model = runs.albert_config(LiftSettings(work_dir=s["work_dir"], model=s["model"]))
    assert model.hidden_size == 128 and model.num_attention_heads == 2
    # Empty: one schedule, as by default.
    run = run_python("-c", _LIFT_SETTINGS, "--restart_steps=", f"--work_dir={tmp_path / 'w'}")
    assert run.returncode == 0 and json.loads(run.stdout.splitlines()[-1])["restarts"] == []


def test_an_unknown_key_in_the_model_config_is_a_one_line_error(tmp_path):
    (tmp_path / "bad.json").write_text(json.dumps({"hidden_size": 256, "hiden_layers": 4}))
    run = run_python(
        str(ROOT / "benchmarks" / "pretraining_lift.py"),
        f"--albert_config_file={tmp_path / 'bad.json'}",
        f"--work_dir={tmp_path / 'work'}",
    )
    assert run.returncode != 0 and "Traceback" not in run.stderr
    assert "bad.json" in run.stderr and "hiden_layers" in run.stderr
    assert not (tmp_path / "work").exists()  # refused before anything was written
