"""The lift study end to end: data, the precision check, pretraining, every checkpoint scored,
the learning-rate grid, the fine-tunes along pretraining, then the results. Each finished stage
is kept as JSON under `<work_dir>/stages/` (`benchmarks.ablations.study.Stages`) and reused by a
later invocation; an interrupted pretraining resumes from its last checkpoint."""

from __future__ import annotations

import os
import statistics
import time

from benchmarks.ablations import data as ablation_data
from benchmarks.ablations.study import WALL_PER_CPU_SECOND, Stages, _log, _minutes, _run_scale
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


def _name(item: dict) -> str:
    lr = f"-lr{item['learning_rate']:g}" if "learning_rate" in item else ""
    return f"{item['stage']}/{item['task']}-step{item['step']}{lr}-seed{item['seed']}"


def _rows_of(s: LiftSettings, item: dict, glue: dict | None) -> int:
    rows = s.train_rows[item["task"]] or 3000
    if glue:
        rows = glue["tasks"][item["task"]]["train_rows"]
    return round(rows * (1 - s.grid_holdout_share)) if item["stage"] == "grid" else rows


def estimate_seconds(s: LiftSettings, stages: Stages, glue: dict | None) -> float:
    """CPU-seconds of what is left, from the costs above scaled to this model and these sets."""
    scale = _run_scale(s)
    total = 0.0 if stages.done("5_glue") else DATA_SECONDS_PER_MB * min(s.max_train_text_mb, 60)
    starts = (0, *s.phase_ends()[:-1])
    for start, end in zip(starts, s.phase_ends()):
        if not stages.done(_phase_stage(s, end)):
            total += STEP_SECONDS * (end - start) * scale
    checkpoints = s.num_train_steps // s.checkpoint_every + 1
    total += sum(SCORE_SECONDS for k in range(checkpoints) if not stages.done(f"score/{k}"))
    for item in finetune_plan(s):
        if not stages.done(_name(item)):
            work = EXAMPLE_SECONDS[item["task"]] * s.finetune_epochs * _rows_of(s, item, glue)
            total += FINETUNE_FIXED_SECONDS + work * scale
    return total


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
    glue = prepared["glue"]
    finetunes: dict[str, dict] = {}
    chosen: dict[tuple[str, bool], float] = {}
    plan = finetune_plan(s)
    for i, item in enumerate(plan, 1):
        task, step, pretrained_init = item["task"], item["step"], item["step"] > 0
        if item["stage"] == "grid":
            folder, lr = glue["grid_dir"], item["learning_rate"]
        else:
            # The reported tasks take the pair task's rate (QNLI) for the same start.
            grid_task = task if task in SEEDED_TASKS else SEEDED_TASKS[-1]
            folder, lr = (
                glue["glue_dir"],
                chosen.setdefault(
                    (grid_task, pretrained_init),
                    best_rate(s, finetunes, grid_task, pretrained_init),
                ),
            )
        name = _name(item)
        finetunes[name] = {
            **item,
            "learning_rate": lr,
            **stages.get(
                name,
                lambda item=item, folder=folder, lr=lr, name=name: runs.finetune(
                    s,
                    item["task"],
                    folder,
                    _rows_of(s, item, glue),
                    scores[item["step"]]["keras_model"],
                    os.path.join(s.work_dir, "runs", "finetune", name.replace("/", "_")),
                    lr,
                    item["seed"],
                    spm,
                ),
            ),
        }
        left = estimate_seconds(s, stages, glue) * WALL_PER_CPU_SECOND
        _log(
            f"[{i}/{len(plan)}] {name}: accuracy "
            f"{finetunes[name]['metrics']['eval_accuracy']:.3f}; elapsed "
            f"{_minutes(time.monotonic() - started)}, left ~{_minutes(left)}"
        )
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
