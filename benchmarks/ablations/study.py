"""The study end to end: data, every run (pretraining or random init, held-out evaluation, four
GLUE fine-tunes), then the results. Each finished stage is kept as JSON under
`<work_dir>/stages/` and reused by a later invocation: a finished run is not redone, an
interrupted pretraining resumes from its last checkpoint, an interrupted fine-tune is redone."""

from __future__ import annotations

import json
import os
import time

from albert_tf.io import write_json, write_text
from benchmarks.ablations import data, plots, report, runs
from benchmarks.ablations.settings import GLUE_TASKS, RunSpec, StudySettings

# Seconds on 2 cores of an AMD EPYC (Zen 4, no AMX) with the machine otherwise idle, for the
# default model (E=H=128, L=4, seq 128, batch 32): a pretraining step; a fine-tuning example
# through forward + backward at the tasks' lengths; a run's fixed costs (evaluation, export, the
# four fine-tunes' set-up and dev scoring); the data (text, vocabulary, four record sets).
STEP_SECONDS = 0.8
FINETUNE_EXAMPLE_SECONDS = {"sst-2": 0.008, "mrpc": 0.02, "rte": 0.025, "cola": 0.004}
RUN_OVERHEAD_SECONDS = 70.0
DATA_SECONDS_PER_MB = 12.0


def _log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


class Stages:
    """Results of finished stages, one JSON file each under `<work_dir>/stages/`."""

    def __init__(self, work_dir: str):
        self.directory = os.path.join(work_dir, "stages")

    def path(self, name: str) -> str:
        return os.path.join(self.directory, f"{name}.json")

    def done(self, name: str) -> bool:
        return os.path.isfile(self.path(name))

    def get(self, name: str, work) -> dict:
        """The stage's stored result, or `work()`'s (stored, with its seconds) when not done."""
        if self.done(name):
            with open(self.path(name), encoding="utf-8") as f:
                return json.load(f)
        started = time.monotonic()
        result = work()
        result["seconds"] = round(time.monotonic() - started, 1)
        os.makedirs(os.path.dirname(self.path(name)), exist_ok=True)
        write_json(self.path(name), result)
        return result


def _run_scale(s: StudySettings) -> float:
    """This model's step cost relative to the default's (tokens x layers x width squared)."""
    tokens = s.train_batch_size * s.max_seq_length / (32 * 128)
    width = (s.model["hidden_size"] / 128) ** 2
    return tokens * s.model["num_hidden_layers"] / 4 * width


def estimate_seconds(s: StudySettings, todo: list[RunSpec], data_done: bool) -> float:
    """Wall-time estimate of the runs left (and of the data, if not done yet)."""
    scale = _run_scale(s)
    finetune = sum(
        FINETUNE_EXAMPLE_SECONDS[t] * s.finetune[t].train_step * s.finetune[t].train_batch_size
        for t in GLUE_TASKS
    )
    total = 0.0 if data_done else DATA_SECONDS_PER_MB * s.max_train_text_mb + 30
    for run in todo:
        steps = 0 if run.sentence_task == "random_init" else s.num_train_steps
        total += STEP_SECONDS * steps * scale + (finetune * scale) + RUN_OVERHEAD_SECONDS
    return total


def prepare_data(s: StudySettings, stages: Stages) -> dict:
    """Text, vocabulary, SOP and NSP records (train and held-out), the unigram baseline."""
    text = stages.get("1_text", lambda: data.prepare_text(s))
    _log(
        f"text: {text['train']['chars'] / 1e6:.1f} M characters of training text from "
        f"{len(text['train']['files'])} files, held-out {text['heldout']['chars'] / 1e6:.2f} M"
    )
    vocab = stages.get("2_vocab", lambda: data.train_vocabulary(s, text["train"]["path"]))
    records = stages.get("3_records", lambda: data.write_records(s, vocab["spm_model_file"], text))
    _log(
        "records: "
        + ", ".join(
            f"{split} {task} {records[split][task]['instances']}"
            for split in ("train", "heldout")
            for task in ("sop", "nsp")
        )
    )
    baseline = stages.get(
        "4_baseline",
        lambda: data.baselines(
            s,
            records["train"]["sop"]["path"],
            {t: records["heldout"][t]["path"] for t in ("sop", "nsp")},
        ),
    )
    _log(
        f"baselines: unigram MLM {baseline['unigram_mlm_accuracy']:.3f}; majority class on the "
        f"scored held-out NSP {baseline['nsp_majority_accuracy']:.3f}, SOP "
        f"{baseline['sop_majority_accuracy']:.3f}"
    )
    return {"text": text, "vocab": vocab, "records": records, "baseline": baseline}


def do_run(s: StudySettings, stages: Stages, run: RunSpec, prepared: dict) -> dict:
    """Pretraining (or the random init) and the four fine-tunes of one run; its results row."""
    spm = prepared["vocab"]["spm_model_file"]
    config = runs.albert_config(s, run, s.vocab_size)
    started = time.monotonic()
    pretrained = stages.get(
        f"{run.name}/pretraining", lambda: runs.pretrain(s, run, prepared["records"], s.vocab_size)
    )
    intrinsic = pretrained["intrinsic"]
    _log(
        f"  {run.name}: held-out "
        + ", ".join(f"{k.upper()} {v:.3f}" for k, v in intrinsic.items() if v is not None)
    )
    scores = {}
    for task in GLUE_TASKS:
        scores[task] = stages.get(
            f"{run.name}/{task}",
            lambda task=task: runs.finetune(s, run, task, pretrained["keras_model"], spm),
        )
        _log(f"  {run.name}: {task} {scores[task]['metric']} {scores[task]['value']:.3f}")
    seconds = pretrained["seconds"] + sum(v["seconds"] for v in scores.values())
    return {
        "name": run.name,
        "sentence_task": run.sentence_task,
        "sharing": run.sharing,
        "embedding_size": config.embedding_size,
        "params": runs.backbone_params(config),
        "intrinsic": intrinsic,
        "downstream": runs.downstream_average(scores),
        "seed": run.seed,
        "wall_seconds": round(seconds, 1),
        "_curves": pretrained["curves"],
        "_this_invocation": time.monotonic() - started,
    }


def run_study(s: StudySettings, selected: list[RunSpec], machine: str) -> dict:
    """Everything, with an estimate first and a progress line per stage; writes the results."""
    stages = Stages(s.work_dir)
    todo = [r for r in selected if not stages.done(f"{r.name}/{GLUE_TASKS[-1]}")]
    estimate = estimate_seconds(s, todo, stages.done("4_baseline"))
    _log(
        f"paper ablations: {len(selected)} runs ({len(selected) - len(todo)} finished earlier), "
        f"estimate {_minutes(estimate)} on 2 idle Zen 4 cores ({machine})"
    )
    started = time.monotonic()
    prepared = prepare_data(s, stages)
    rows = []
    for i, run in enumerate(selected, 1):
        _log(f"[{i}/{len(selected)}] {run.name} ({run.sentence_task}, sharing {run.sharing})")
        rows.append(do_run(s, stages, run, prepared))
        left = [r for r in selected[i:] if r in todo]
        elapsed = time.monotonic() - started
        _log(
            f"[{i}/{len(selected)}] {run.name} done; elapsed {_minutes(elapsed)}, "
            f"left ~{_minutes(estimate_seconds(s, left, True))}"
        )
    curves = {r["name"]: r.pop("_curves") for r in rows}
    for row in rows:
        row.pop("_this_invocation")
    results = {
        "machine": machine,
        "versions": report.versions(),
        "settings": s.as_dict(),
        "data": {
            "train_text": prepared["text"]["train"]["files"],
            "heldout_text": prepared["text"]["heldout"]["files"],
            "records": {
                split: {
                    task: {k: v for k, v in prepared["records"][split][task].items() if k != "path"}
                    for task in ("sop", "nsp")
                }
                for split in ("train", "heldout")
            },
        },
        "baselines": {**prepared["baseline"], "sentence_chance": 0.5},
        "wall_seconds": round(time.monotonic() - started, 1),
        "runs": rows,
        "groups": report.groups(rows),
    }
    os.makedirs(s.results_dir, exist_ok=True)
    written = plots.write_all(results, curves, s.results_dir)
    results["plots"] = {kind: os.path.basename(path) for kind, path in written.items()}
    write_json(os.path.join(s.results_dir, "paper_ablations.json"), results, sort_keys=False)
    write_text(os.path.join(s.results_dir, "paper_ablations.md"), report.markdown(results))
    _log(f"results: {os.path.join(s.results_dir, 'paper_ablations.json')} and .md, plots")
    return results
