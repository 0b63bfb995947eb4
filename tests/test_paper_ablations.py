"""benchmarks/paper_ablations.py at a tiny size: two runs end to end (data, pretraining or random
init, held-out NSP/SOP evaluation, four GLUE fine-tunes), the results' fields, and a re-run that
redoes nothing."""

import json
import os
import pathlib
import statistics
import subprocess
import sys

import pytest

from benchmarks.ablations import runs as study_runs_module
from benchmarks.ablations.settings import StudySettings, select_runs, study_runs
from benchmarks.ablations.study import run_study

ROOT = pathlib.Path(__file__).resolve().parents[1]
GLUE_FIXTURES = str(ROOT / "tests/fixtures/glue")  # a few rows of each task: fast, not accurate
RUN_FIELDS = {
    "name",
    "sentence_task",
    "sharing",
    "embedding_size",
    "params",
    "intrinsic",
    "downstream",
    "seed",
    "wall_seconds",
}


def test_the_study_has_every_row_and_selects_by_group_or_name():
    runs = study_runs((1, 2))
    names = [r.name for r in runs]
    assert len(names) == len(set(names)) == 10
    for group in ("random_init", "sop", "nsp"):  # the headline comparisons: every seed
        assert {r.seed for r in runs if r.group == group} == {1, 2}
    rows = {(r.sentence_task, r.sharing) for r in runs}
    assert {("none", "all"), ("nsp", "all"), ("sop", "all"), ("random_init", "all")} <= rows
    assert {("sop", s) for s in ("attention", "ffn", "none")} <= rows
    assert [r.records for r in runs if r.group == "nsp"] == ["nsp", "nsp"]
    assert [r.name for r in select_runs(runs, ["sop", "nsp-seed2"])] == [
        "sop-seed1",
        "sop-seed2",
        "nsp-seed2",
    ]
    with pytest.raises(ValueError, match="no run or group sop-seed3"):
        select_runs(runs, ["sop-seed3"])


def stage_files(work_dir: pathlib.Path) -> dict[str, float]:
    return {str(p): p.stat().st_mtime for p in (work_dir / "stages").rglob("*.json")}


# ~30 s: the study's pieces are tested apart (run selection here, the library in
# test_sentence_task.py); this end-to-end run is for `-m slow`.
@pytest.mark.slow
def test_two_runs_end_to_end_write_the_results_and_resume(tmp_path, capsys):
    settings = StudySettings.tiny(
        str(tmp_path / "work"),
        str(tmp_path / "results"),
        glue_dir=GLUE_FIXTURES,
        max_train_text_mb=0.1,
    )
    selected = select_runs(study_runs(settings.seeds), ["random_init-seed1", "sop-seed1"])
    results = run_study(settings, selected, "test machine")
    printed = capsys.readouterr().out
    assert "estimate" in printed and "[2/2] sop-seed1 done" in printed

    written = json.loads((tmp_path / "results" / "paper_ablations.json").read_text())
    assert written == json.loads(json.dumps(results))
    assert {"machine", "versions", "settings", "runs", "groups", "baselines"} <= set(written)
    assert written["settings"]["num_train_steps"] == settings.num_train_steps
    assert written["versions"]["tensorflow"]
    by_name = {r["name"]: r for r in written["runs"]}
    assert set(by_name) == {"random_init-seed1", "sop-seed1"}
    for run in written["runs"]:
        assert set(run) == RUN_FIELDS
        assert set(run["intrinsic"]) == {"mlm", "nsp", "sop"}
        assert all(0 <= v <= 1 for v in run["intrinsic"].values())
        assert set(run["downstream"]) == {"sst-2", "mrpc", "rte", "cola", "avg"}
        four = [run["downstream"][t] for t in ("sst-2", "mrpc", "rte", "cola")]
        assert run["downstream"]["avg"] == pytest.approx(statistics.mean(four))
        assert run["embedding_size"] == settings.model["embedding_size"]
        assert run["seed"] == 1 and run["wall_seconds"] > 0
    assert by_name["random_init-seed1"]["sentence_task"] == "random_init"
    assert by_name["sop-seed1"]["sentence_task"] == "sop"
    config = study_runs_module.albert_config(settings, selected[1], settings.vocab_size)
    assert by_name["sop-seed1"]["params"] == study_runs_module.backbone_params(config)
    baselines = written["baselines"]
    assert baselines["sop_majority_accuracy"] >= 0.5 and 0 < baselines["unigram_mlm_accuracy"] < 1
    sop = written["groups"]["sop"]
    assert sop["intrinsic"]["sop"]["mean"] == by_name["sop-seed1"]["intrinsic"]["sop"]
    assert sop["intrinsic"]["sop"]["std"] is None and sop["seeds"] == [1]
    (headline,) = written["headlines"]  # the one comparison both runs make: SOP vs random init
    assert headline["what"] == "downstream average, SOP - random init"
    difference = (
        by_name["sop-seed1"]["downstream"]["avg"]
        - by_name["random_init-seed1"]["downstream"]["avg"]
    )
    assert headline["differences"] == [pytest.approx(difference)] and headline["seeds"] == [1]
    table = (tmp_path / "results" / "paper_ablations.md").read_text()
    assert "| sop | sop | all |" in table and "| random_init | random_init | all |" in table
    for name in written["plots"].values():
        assert (tmp_path / "results" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # Again, through the CLI with the same settings as flags: every stage is reused (no stage
    # file rewritten), the same rows come out.
    before = stage_files(tmp_path / "work")
    again = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "paper_ablations.py"),
            "--size=tiny",
            f"--work_dir={tmp_path / 'work'}",
            f"--results_dir={tmp_path / 'results'}",
            f"--glue_dir={GLUE_FIXTURES}",
            "--max_train_text_mb=0.1",
            "--runs=random_init-seed1,sop-seed1",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert again.returncode == 0, again.stderr[-2000:]
    assert "(2 finished earlier)" in again.stdout
    assert stage_files(tmp_path / "work") == before
    rewritten = json.loads((tmp_path / "results" / "paper_ablations.json").read_text())
    assert rewritten["runs"] == written["runs"]
    assert not any(
        name.startswith(".") for _, _, files in os.walk(tmp_path / "results") for name in files
    )
