"""The lift study end to end: data, the precision check, pretraining, every checkpoint scored,
the learning-rate grid, the fine-tunes along pretraining, then the results. Each finished stage
is kept as JSON under `<work_dir>/stages/` (`benchmarks.ablations.study.Stages`) and reused by a
later invocation; an interrupted pretraining resumes from its last checkpoint."""

from __future__ import annotations

import math
import os
import re
import statistics
import time

from benchmarks.ablations import data as ablation_data
from benchmarks.ablations.study import (
    WALL_PER_CPU_SECOND,
    Stages,
    _log,
    _minutes,
    _model_scale,
    _run_scale,
)
from benchmarks.lift import bundle, data, report, runs
from benchmarks.lift.settings import REPORTED_TASKS, SEEDED_TASKS, LiftSettings

# CPU-seconds on 2 cores of an AMD EPYC Zen 4 (the ablation study's costs): a pretraining step
# at the default size, a fixed cost per scored checkpoint, a fine-tuning example per epoch by
# task (longer pairs cost more) and a fine-tune's fixed cost, data per MB of text.
STEP_SECONDS = 0.42
SCORE_SECONDS = 25.0
EXAMPLE_SECONDS = {"sst-2": 0.0052, "qnli": 0.010, "mrpc": 0.0095, "rte": 0.011}
FINETUNE_FIXED_SECONDS = 20.0
DATA_SECONDS_PER_MB = 3.0
PRECISION_CHECK_STEPS = 300
# The bounds a grown grid stays within (at 1e-3 some QNLI fine-tunes already never leave the
# majority class).
MIN_GRID_RATE, MAX_GRID_RATE = 1e-5, 1e-2


def finetune_plan(s: LiftSettings) -> list[dict]:
    """Every fine-tune of the study, the headline first: the grid (random init and final
    model, each task's train split), the seeded tasks from the random init and the final model,
    the reported tasks, then the seeded tasks at the other curve points."""
    final = s.num_train_steps

    def curve(steps):
        return [
            {"stage": "curve", "task": t, "step": step, "seed": seed}
            for step in steps
            for t in SEEDED_TASKS
            for seed in s.finetune_seeds
        ]

    plan = [
        {"stage": "grid", "task": t, "step": step, "learning_rate": lr, "seed": seed}
        for t in SEEDED_TASKS
        for step in (0, final)
        for lr in s.learning_rates
        for seed in s.grid_seeds
    ]
    plan += curve((0, final))
    plan += [
        {"stage": "reported", "task": t, "step": step, "seed": s.finetune_seeds[0]}
        for t in REPORTED_TASKS
        for step in (0, final)
    ]
    return plan + curve(step for step in s.curve_steps if step != final)


def _phase_stage(s: LiftSettings, end: int) -> str:
    """The stage marker of the pretraining phase ending at `end` (the first: "pretraining")."""
    return "pretraining" if end == s.phase_ends()[0] else f"pretraining/{end}"


def _name(item: dict, learning_rate: float | None = None) -> str:
    """The stage name of a fine-tune: its rate is in it (a grid item's own, or the rate chosen
    for a curve or reported item), so a result is never reused for another rate."""
    lr = item.get("learning_rate", learning_rate)
    rate = f"-lr{lr:g}" if lr is not None else ""
    return f"{item['stage']}/{item['task']}-step{item['step']}{rate}-seed{item['seed']}"


def next_rate(rate: float, up: bool) -> float:
    """The neighbour of `rate` on the 1-3-10 ladder of learning rates (1e-4, 3e-4, 1e-3, ...)."""
    mantissa = rate / 10 ** math.floor(math.log10(rate) + 1e-9)
    if up:
        step = 3 if mantissa < 2 else 10 / 3
    else:
        step = 1 / 3 if mantissa > 2 else 3 / 10
    return float(f"{rate * step:.0e}")


def grid_extension(s: LiftSettings, finetunes: dict, task: str, pretrained: bool) -> float | None:
    """The rate to add to the grid of (`task`, `pretrained`) when its best rate is the grid's
    highest or lowest (the best may lie beyond it), else None; at most
    `s.grid_extensions` rates are added beyond the configured grid."""
    rates = sorted(
        {
            f["learning_rate"]
            for f in finetunes.values()
            if f["stage"] == "grid" and f["task"] == task and (f["step"] > 0) == pretrained
        }
    )
    if len(rates) < 2 or len(set(rates) - set(s.learning_rates)) >= s.grid_extensions:
        return None
    best = best_rate(s, finetunes, task, pretrained)
    if best == rates[-1] and best < MAX_GRID_RATE:
        return next_rate(best, up=True)
    if best == rates[0] and best > MIN_GRID_RATE:
        return next_rate(best, up=False)
    return None


def _rows_of(s: LiftSettings, item: dict, glue: dict | None) -> int:
    rows = s.train_rows[item["task"]] or 3000
    if glue:
        rows = glue["tasks"][item["task"]]["train_rows"]
    return round(rows * (1 - s.grid_holdout_share)) if item["stage"] == "grid" else rows


def estimate_seconds(s: LiftSettings, stages: Stages, glue: dict | None) -> float:
    """CPU-seconds of what is left, from the costs above scaled to this model and these sets
    (rates a grid adds at its edge not counted; a curve or reported fine-tune counts as done
    when it is stored at the rate the stored grid chooses)."""
    total = 0.0 if stages.done("5_glue") else DATA_SECONDS_PER_MB * min(s.max_train_text_mb, 60)
    starts = (0, *s.phase_ends()[:-1])
    for start, end in zip(starts, s.phase_ends()):
        if not stages.done(_phase_stage(s, end)):
            total += STEP_SECONDS * (end - start) * _run_scale(s)
    checkpoints = s.num_train_steps // s.checkpoint_every + 1
    total += sum(SCORE_SECONDS for k in range(checkpoints) if not stages.done(f"score/{k}"))
    grid = _stored_grid(s, stages)
    for item in finetune_plan(s):
        if not stages.done(_name(item, _rate_for(s, grid, item))):
            work = EXAMPLE_SECONDS[item["task"]] * s.finetune_epochs * _rows_of(s, item, glue)
            total += FINETUNE_FIXED_SECONDS + work * _model_scale(s)
    return total


def _stored_grid(s: LiftSettings, stages: Stages) -> dict:
    """The grid's stored results of this study (random init and final model), as `finetunes`."""
    found = {}
    for name, result in report.stage_results(stages, "grid").items():
        match = re.fullmatch(r"grid/(.+)-step(\d+)-lr(.+)-seed(\d+)", name)
        if match and int(match[2]) in (0, s.num_train_steps):
            found[name] = {
                "stage": "grid",
                "task": match[1],
                "step": int(match[2]),
                "learning_rate": float(match[3]),
                **result,
            }
    return found


def _rate_for(s: LiftSettings, grid: dict, item: dict) -> float | None:
    """The rate of a plan item: a grid item's own; else the one the grid chooses for its task
    (the reported tasks take QNLI's) and start, None while that is not settled."""
    if "learning_rate" in item:
        return item["learning_rate"]
    task = item["task"] if item["task"] in SEEDED_TASKS else SEEDED_TASKS[-1]
    pretrained = item["step"] > 0
    try:
        if grid_extension(s, grid, task, pretrained) is not None:
            return None
        return best_rate(s, grid, task, pretrained)
    except RuntimeError:  # no grid result yet
        return None


def prepare(s: LiftSettings, stages: Stages) -> dict:
    """Text, vocabulary, records, baselines and GLUE folders."""
    text = stages.get("1_text", lambda: ablation_data.prepare_text(s))
    _log(
        f"text: {text['train']['chars'] / 1e6:.1f} M characters of training text from "
        f"{len(text['train']['files'])} files, held-out {text['heldout']['chars'] / 1e6:.2f} M"
    )
    vocab = stages.get("2_vocab", lambda: ablation_data.train_vocabulary(s, text["train"]["path"]))
    records = stages.get("3_records", lambda: data.write_records(s, vocab["spm_model_file"], text))
    _log(
        f"records: train {records['train']['instances']} (unmasked), held-out "
        f"{records['heldout']['instances']}"
    )
    baseline = stages.get(
        "4_baseline",
        lambda: data.baselines(s, records["train"]["path"], records["heldout"]["path"]),
    )
    _log(
        f"baselines: unigram MLM {baseline['unigram_mlm_accuracy']:.3f}, SOP majority "
        f"{baseline['sop_majority_accuracy']:.3f}"
    )
    glue = stages.get("5_glue", lambda: data.write_glue(s))
    for task, rows in glue["tasks"].items():
        _log(f"glue: {task} train {rows['train_rows']}, eval {rows['eval_rows']}")
    return {"text": text, "vocab": vocab, "records": records, "baseline": baseline, "glue": glue}


def choose_precision(s: LiftSettings, stages: Stages, records: dict) -> tuple[str, dict | None]:
    """The pretraining precision: `s.mixed_precision`, or with "auto" bf16 where the CPU has
    bf16 units and it is at least 10% faster than fp32 over the check's steps."""
    if s.mixed_precision != "auto":  # a check made earlier is still reported
        return s.mixed_precision, stages.get("precision", dict) if stages.done(
            "precision"
        ) else None
    if not runs.has_bf16_units():
        _log("precision: this CPU has no bf16 matrix units: fp32")
        return "none", None
    steps = min(PRECISION_CHECK_STEPS, s.num_train_steps)
    check = stages.get("precision", lambda: runs.precision_check(s, records, steps))
    chosen = "bf16" if check["bf16_speedup"] >= 1.1 else "none"
    _log(
        f"precision: bf16 {check['bf16_speedup']:.2f}x the examples/s of fp32 over {steps} "
        f"steps (loss {check['bf16']['loss']:.3f} vs {check['none']['loss']:.3f}): "
        f"{'bf16' if chosen == 'bf16' else 'fp32'}"
    )
    return chosen, check


def run_study(s: LiftSettings, machine: str) -> dict:
    """Everything, with an estimate first and a progress line per stage; writes the results."""
    stages = Stages(s.work_dir)
    glue = None
    if stages.done("5_glue"):
        glue = stages.get("5_glue", dict)
    estimate = estimate_seconds(s, stages, glue)
    _log(
        f"pretraining lift: estimate {_minutes(estimate * WALL_PER_CPU_SECOND)} on 2 idle AMD "
        f"EPYC Zen 4 cores ({_minutes(estimate)} of CPU time; this machine: {machine})"
    )
    started = time.monotonic()
    prepared = prepare(s, stages)
    records, spm = prepared["records"], prepared["vocab"]["spm_model_file"]
    precision, check = choose_precision(s, stages, records)
    start = 0
    for end in s.phase_ends():
        _log(f"pretraining: steps {start}..{end} of {s.train_batch_size}")
        pretrained = stages.get(
            _phase_stage(s, end),
            lambda start=start, end=end: runs.pretrain(s, records, precision, start, end),
        )
        start = end
    scores = {}
    for step in range(0, s.num_train_steps + 1, s.checkpoint_every):
        scores[step] = stages.get(
            f"score/{step // s.checkpoint_every}",
            lambda step=step: runs.score_checkpoint(s, records, step, precision),
        )
        _log(f"step {step}: held-out MLM {scores[step]['mlm']:.3f}, SOP {scores[step]['sop']:.3f}")
    finetunes, chosen = run_finetunes(s, stages, prepared["glue"], scores, spm, started)
    results = report.results(
        s, machine, prepared, check, precision, pretrained, scores, finetunes, chosen, stages
    )
    results["bundled_model"] = report.repo_relative(s.bundle_dir)
    results["bundle"] = bundle.write_bundle(
        s, scores[s.num_train_steps]["keras_model"], spm, records["heldout"]["path"], results
    )
    _log(f"bundled model: {s.bundle_dir}")
    report.write(results, pretrained["curves"], s.results_dir)
    _log(f"results: {os.path.join(s.results_dir, 'pretraining_lift.json')} and .md, plots")
    return results


def run_finetunes(
    s: LiftSettings, stages: Stages, glue: dict, scores: dict, spm: str, started: float
) -> tuple[dict, dict]:
    """The plan's fine-tunes: the grid first (grown past its edge where the best rate is there),
    then every other at the rate chosen for its task and start. Returns every result by stage
    name and the chosen rates by (task, pretrained)."""
    finetunes: dict[str, dict] = {}
    plan = finetune_plan(s)

    def finetune(item: dict, learning_rate: float, progress: str) -> None:
        grid = item["stage"] == "grid"
        name = _name(item, learning_rate)
        finetunes[name] = {
            **item,
            "learning_rate": learning_rate,
            **stages.get(
                name,
                lambda: runs.finetune(
                    s,
                    item["task"],
                    glue["grid_dir"] if grid else glue["glue_dir"],
                    _rows_of(s, item, glue),
                    scores[item["step"]]["keras_model"],
                    os.path.join(s.work_dir, "runs", "finetune", name.replace("/", "_")),
                    learning_rate,
                    item["seed"],
                    spm,
                ),
            ),
        }
        left = estimate_seconds(s, stages, glue) * WALL_PER_CPU_SECOND
        _log(
            f"[{progress}] {name}: accuracy "
            f"{finetunes[name]['metrics']['eval_accuracy']:.3f}; elapsed "
            f"{_minutes(time.monotonic() - started)}, left ~{_minutes(left)}"
        )

    grid_items = [item for item in plan if item["stage"] == "grid"]
    for i, item in enumerate(grid_items, 1):
        finetune(item, item["learning_rate"], f"{i}/{len(plan)}")
    chosen: dict[tuple[str, bool], float] = {}
    for task in SEEDED_TASKS:
        for pretrained_init in (False, True):
            # A best rate at the grid's edge may not be the best: the grid grows past it.
            while (extra := grid_extension(s, finetunes, task, pretrained_init)) is not None:
                _log(
                    f"grid: {task} ({'pretrained' if pretrained_init else 'random init'}) best "
                    f"at the edge of the grid: adding {extra:g}"
                )
                step = s.num_train_steps if pretrained_init else 0
                for seed in s.grid_seeds:
                    item = {"stage": "grid", "task": task, "step": step, "seed": seed}
                    finetune({**item, "learning_rate": extra}, extra, "grid extension")
            chosen[(task, pretrained_init)] = best_rate(s, finetunes, task, pretrained_init)
    for i, item in enumerate(plan[len(grid_items) :], len(grid_items) + 1):
        # The reported tasks take the pair task's rate (QNLI) for the same start.
        grid_task = item["task"] if item["task"] in SEEDED_TASKS else SEEDED_TASKS[-1]
        finetune(item, chosen[(grid_task, item["step"] > 0)], f"{i}/{len(plan)}")
    return finetunes, chosen


def best_rate(s: LiftSettings, finetunes: dict, task: str, pretrained: bool) -> float:
    """The grid's learning rate with the best mean held-out-train accuracy over the grid seeds
    (the lower on a tie), passing over a rate with any seed at the majority class unless every
    rate has one."""
    by_rate: dict[float, list[tuple[float, float]]] = {}
    for f in finetunes.values():
        if f["stage"] == "grid" and f["task"] == task and (f["step"] > 0) == pretrained:
            majority = (f.get("baseline") or {}).get("eval_accuracy", 0.0)
            by_rate.setdefault(f["learning_rate"], []).append(
                (f["metrics"]["eval_accuracy"], majority)
            )
    if not by_rate:
        raise RuntimeError(
            f"no grid result for {task} ({'pretrained' if pretrained else 'random'})"
        )
    stable = {
        lr: runs
        for lr, runs in by_rate.items()
        if all(accuracy > majority + 0.005 for accuracy, majority in runs)
    } or by_rate
    return -max((statistics.mean(a for a, _ in runs), -lr) for lr, runs in stable.items())[1]


def seed_stats(values: list[float]) -> dict:
    """Mean and sample standard deviation (0 for one value), in %."""
    percent = [100 * v for v in values]
    return {
        "mean": statistics.mean(percent),
        "std": statistics.stdev(percent) if len(percent) > 1 else 0.0,
        "values": percent,
    }
