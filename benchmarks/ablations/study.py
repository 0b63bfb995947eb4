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
from benchmarks.ablations.settings import FINETUNE_RECIPES, GLUE_TASKS, RunSpec, StudySettings

# Costs of the default study, measured as CPU-seconds of the process on 2 cores of an AMD EPYC
# (Zen 4, AVX-512, no AMX) while other jobs loaded the machine, which they do not inflate the way
# they inflate wall time. A pretraining step (E=H=128,
# L=4, seq 128, batch 32, LAMB); a run's fixed cost (model built, held-out evaluation of both sets,
# exports); the random init's (evaluation, exports); each GLUE fine-tune at its default recipe
# (training, the dev set scored, checkpoints); the data per MB of training text (text, vocabulary,
# four record sets, baselines).
STEP_SECONDS = 0.42
PRETRAIN_FIXED_SECONDS = 50.0
RANDOM_INIT_SECONDS = 30.0
FINETUNE_SECONDS = {"sst-2": 50.0, "mrpc": 61.0, "rte": 70.0, "cola": 26.0}
DATA_SECONDS_PER_MB = 3.75
# What any stage costs however small the model: TensorFlow tracing the steps, building the model.
MIN_STAGE_SECONDS = 8.0
# Wall seconds per CPU-second on the idle machine, where TensorFlow keeps both cores partly busy:
# the whole default study took 57 min wall at low load for the 100 CPU-min these costs add up to.
WALL_PER_CPU_SECOND = 0.57


def _log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


class Stages:
    """Results of finished stages, one JSON file each under `<work_dir>/stages/`."""

    def __init__(self, work_dir: str):
        self.directory = os.path.join(work_dir, "stages")
        # What each stage this run asked for took when it ran: a work_dir may also hold other
        # studies' stages, which are not this run's time.
        self.seconds: dict[str, float] = {}

    def path(self, name: str) -> str:
        return os.path.join(self.directory, f"{name}.json")

    def done(self, name: str) -> bool:
        return os.path.isfile(self.path(name))

    def get(self, name: str, work) -> dict:
        """The stage's stored result, or `work()`'s (stored, with its seconds) when not done."""
        if self.done(name):
            with open(self.path(name), encoding="utf-8") as f:
                result = json.load(f)
        else:
            started = time.monotonic()
            result = work()
            result["seconds"] = round(time.monotonic() - started, 1)
            os.makedirs(os.path.dirname(self.path(name)), exist_ok=True)
            write_json(self.path(name), result)
        self.seconds[name] = result.get("seconds", 0.0)
        return result


def _model_scale(s: StudySettings) -> float:
    """This model's cost per example relative to the default's (length x layers x width
    squared): what scales its fine-tunes and evaluations."""
    width = (s.model["hidden_size"] / 128) ** 2
    return s.max_seq_length / 128 * s.model["num_hidden_layers"] / 4 * width


def _run_scale(s: StudySettings) -> float:
    """This model's pretraining step cost relative to the default's (its batch of 32 too)."""
    return _model_scale(s) * s.train_batch_size / 32


def estimate_seconds(s: StudySettings, todo: list[RunSpec], data_done: bool) -> float:
    """Time estimate of the runs left (and of the data, if not done yet), from the costs above
    scaled to this model and these recipes."""
    scale = _model_scale(s)
    finetune = sum(
        max(
            MIN_STAGE_SECONDS,
            FINETUNE_SECONDS[t]
            * scale
            * (s.finetune[t].train_step * s.finetune[t].train_batch_size)
            / (FINETUNE_RECIPES[t].train_step * FINETUNE_RECIPES[t].train_batch_size),
        )
        for t in GLUE_TASKS
    )
    total = 0.0 if data_done else DATA_SECONDS_PER_MB * s.max_train_text_mb
    for run in todo:
        total += finetune + max(MIN_STAGE_SECONDS, RANDOM_INIT_SECONDS * scale)
        if run.sentence_task != "random_init":
            total += STEP_SECONDS * s.num_train_steps * _run_scale(s)
            total += max(MIN_STAGE_SECONDS, (PRETRAIN_FIXED_SECONDS - RANDOM_INIT_SECONDS) * scale)
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
    }


def run_study(s: StudySettings, selected: list[RunSpec], machine: str) -> dict:
    """Everything, with an estimate first and a progress line per stage; writes the results."""
    stages = Stages(s.work_dir)
    todo = [r for r in selected if not stages.done(f"{r.name}/{GLUE_TASKS[-1]}")]
    estimate = estimate_seconds(s, todo, stages.done("4_baseline"))
    _log(
        f"paper ablations: {len(selected)} runs ({len(selected) - len(todo)} finished earlier), "
        f"estimate {_minutes(estimate * WALL_PER_CPU_SECOND)} on 2 idle AMD EPYC Zen 4 cores "
        f"({_minutes(estimate)} of CPU time; this machine: {machine})"
    )
    started = time.monotonic()
    prepared = prepare_data(s, stages)
    rows = []
    for i, run in enumerate(selected, 1):
        _log(f"[{i}/{len(selected)}] {run.name} ({run.sentence_task}, sharing {run.sharing})")
        rows.append(do_run(s, stages, run, prepared))
        left = [r for r in selected[i:] if r in todo]
        elapsed = time.monotonic() - started
        # The estimate of what is left, scaled by how the work done so far compared with its own.
        done = estimate - estimate_seconds(s, left, True)
        pace = elapsed / done if done > 60 else WALL_PER_CPU_SECOND
        _log(
            f"[{i}/{len(selected)}] {run.name} done; elapsed {_minutes(elapsed)}, "
            f"left ~{_minutes(estimate_seconds(s, left, True) * pace)}"
        )
    curves = {r["name"]: r.pop("_curves") for r in rows}
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
        # The work of every stage, over all invocations that did it (a resumed study adds up).
        "wall_seconds": round(
            sum(prepared[k]["seconds"] for k in ("text", "vocab", "records", "baseline"))
            + sum(r["wall_seconds"] for r in rows),
            1,
        ),
        "this_invocation_seconds": round(time.monotonic() - started, 1),
        "runs": rows,
        "groups": report.groups(rows),
        "headlines": report.headlines(rows),
    }
    os.makedirs(s.results_dir, exist_ok=True)
    written = plots.write_all(results, curves, s.results_dir)
    results["plots"] = {kind: os.path.basename(path) for kind, path in written.items()}
    write_json(os.path.join(s.results_dir, "paper_ablations.json"), results, sort_keys=False)
    write_text(os.path.join(s.results_dir, "paper_ablations.md"), report.markdown(results))
    _log(f"results: {os.path.join(s.results_dir, 'paper_ablations.json')} and .md, plots")
    return results
