"""The lift study's results: the JSON (machine, versions, settings, the held-out curve, every
fine-tune and the seed statistics), the Markdown tables with the trivial baselines beside each
task, and two PNG plots (held-out MLM/SOP by step; downstream accuracy by step with seed bands)."""

from __future__ import annotations

import json
import os
import statistics

from albert_tf.io import write_json, write_text
from benchmarks.ablations import plots, report as ablation_report
from benchmarks.lift.settings import REPO_ROOT, REPORTED_TASKS, SEEDED_TASKS, LiftSettings


def repo_relative(path: str) -> str:
    """`path` relative to the repository root when inside it, else as given."""
    relative = os.path.relpath(path, REPO_ROOT)
    return path if relative.startswith("..") else relative


def _stats(values: list[float]) -> dict:
    percent = [round(100 * v, 2) for v in values]
    spread = statistics.stdev(percent) if len(percent) > 1 else 0.0
    return {"mean": round(statistics.mean(percent), 2), "std": round(spread, 2), "values": percent}


def results(
    s: LiftSettings,
    machine,
    prepared,
    check,
    precision,
    pretrained,
    scores,
    finetunes,
    chosen,
    stages,
) -> dict:
    """Every number of the study, JSON-ready."""
    final = s.num_train_steps
    curve = {}
    for task in SEEDED_TASKS:
        curve[task] = {}
        for step in (0, *s.curve_steps):
            runs = [
                f
                for f in finetunes.values()
                if f["stage"] == "curve" and f["task"] == task and f["step"] == step
            ]
            curve[task][str(step)] = _stats([f["metrics"]["eval_accuracy"] for f in runs])
            curve[task][str(step)]["baseline"] = round(
                100 * runs[0]["baseline"]["eval_accuracy"], 2
            )
    reported = {}
    for task in REPORTED_TASKS:
        for f in finetunes.values():
            if f["stage"] == "reported" and f["task"] == task:
                kind = "pretrained" if f["step"] else "random_init"
                reported.setdefault(task, {})[kind] = {
                    k: round(100 * v, 2) for k, v in f["metrics"].items()
                }
                reported[task]["baseline"] = {
                    k: round(100 * v, 2) for k, v in f["baseline"].items() if k != "num_examples"
                }
    lift = {
        task: {
            "pretrained": curve[task][str(final)]["values"],
            "random_init": curve[task]["0"]["values"],
            "lift": round(curve[task][str(final)]["mean"] - curve[task]["0"]["mean"], 2),
            "baseline": curve[task]["0"]["baseline"],
        }
        for task in SEEDED_TASKS
    }
    return {
        "machine": machine,
        "versions": ablation_report.versions(),
        "settings": s.as_dict(),
        "data": {
            "train_text": prepared["text"]["train"]["files"],
            "heldout_text": prepared["text"]["heldout"]["files"],
            "train_chars": prepared["text"]["train"]["chars"],
            "records": {
                k: {
                    "instances": prepared["records"][k]["instances"],
                    "masking": prepared["records"][k]["masking"],
                }
                for k in ("train", "heldout")
            },
            "glue": prepared["glue"]["tasks"],
        },
        "baselines": prepared["baseline"],
        "precision_check": check,
        "pretraining_precision": precision,
        "held_out_mlm": scores[final]["mlm"],
        "held_out_sop": scores[final]["sop"],
        "held_out_curve": [
            {"step": step, "mlm": v["mlm"], "sop": v["sop"]} for step, v in sorted(scores.items())
        ],
        "learning_rates": {
            f"{t}/{'pretrained' if p else 'random_init'}": lr for (t, p), lr in chosen.items()
        },
        "grid": grid_means(s, finetunes),
        "downstream": lift,
        "downstream_curve": curve,
        "reported": reported,
        "stage_seconds": stage_seconds(stages),
        "finetunes": finetunes,
    }


def grid_means(s: LiftSettings, finetunes: dict) -> dict:
    """{"task/random_init" or "task/pretrained": {rate: mean held-out accuracy over the grid
    seeds, in %}}, rates in increasing order."""
    found: dict[str, dict[float, list[float]]] = {}
    for f in finetunes.values():
        if f["stage"] == "grid" and f["step"] in (0, s.num_train_steps):
            key = f"{f['task']}/{'pretrained' if f['step'] else 'random_init'}"
            found.setdefault(key, {}).setdefault(f["learning_rate"], [])
            found[key][f["learning_rate"]].append(f["metrics"]["eval_accuracy"])
    return {
        key: {f"{lr:g}": round(100 * statistics.mean(v), 2) for lr, v in sorted(rates.items())}
        for key, rates in found.items()
    }


STAGE_KINDS = (
    "1_text",
    "2_vocab",
    "3_records",
    "4_baseline",
    "5_glue",
    "precision",
    "pretraining",
    "score",
    "grid",
    "curve",
    "reported",
)


def stage_seconds(stages) -> dict[str, float]:
    """Seconds spent on each kind of stage this study used (`stages.seconds`), however long ago
    each ran; stages of another study in the same work_dir (a longer run, a rate not chosen)
    do not count."""
    return {
        kind: round(sum(t for name, t in stages.seconds.items() if name.split("/")[0] == kind), 1)
        for kind in STAGE_KINDS
    }


def stage_results(stages, folder: str) -> dict:
    """The stored stage results under one folder of the stages (e.g. "grid"), by name (the
    path under the stages folder, no suffix)."""
    found = {}
    for root, _, files in os.walk(os.path.join(stages.directory, folder)):
        for file in files:
            if file.endswith(".json"):
                name = os.path.relpath(os.path.join(root, file), stages.directory)[: -len(".json")]
                with open(os.path.join(root, file), encoding="utf-8") as f:
                    found[name] = json.load(f)
    return found


def markdown(r: dict) -> str:
    """The tables: held-out curve, downstream by pretraining step, the learning-rate grid, the
    reported tasks."""
    s = r["settings"]
    b = r["baselines"]
    lines = [
        "# Pretraining lift: does a model pretrained here transfer?",
        "",
        f"Machine: {r['machine']}. Model E={s['model']['embedding_size']}, "
        f"H={s['model']['hidden_size']}, L={s['model']['num_hidden_layers']} (all shared), "
        f"vocab {s['vocab_size']}, seq {s['max_seq_length']}; {s['num_train_steps']} steps of "
        f"{s['train_batch_size']}, LAMB {s['learning_rate']}"
        + "".join(f" (schedule restarted at step {step})" for step in s.get("restart_steps", ()))
        + (
            f", peak {s['restart_learning_rate']} after a restart"
            if s.get("restart_learning_rate")
            else ""
        )
        + ", dynamic masking, SOP; precision "
        f"{r['pretraining_precision']}. Training text {r['data']['train_chars'] / 1e6:.1f} M "
        "characters.",
        "",
        "## Held-out MLM and SOP accuracy along pretraining",
        "",
        "| step | MLM | SOP |",
        "|---:|---:|---:|",
        *(
            f"| {p['step']} | {100 * p['mlm']:.1f} | {100 * p['sop']:.1f} |"
            for p in r["held_out_curve"]
        ),
        f"| trivial | {100 * b['unigram_mlm_accuracy']:.1f} (unigram) | "
        f"{100 * b['sop_majority_accuracy']:.1f} (majority) |",
        "",
        "## Dev accuracy by pretraining step (mean ± std over fine-tuning seeds)",
        "",
        "| step | " + " | ".join(t.upper() for t in SEEDED_TASKS) + " |",
        "|---:|" + "---:|" * len(SEEDED_TASKS),
    ]
    curve = r["downstream_curve"]
    for step in curve[SEEDED_TASKS[0]]:
        label = "0 (random init)" if step == "0" else step
        cells = [
            f"{curve[t][step]['mean']:.1f} ± {curve[t][step]['std']:.1f}" for t in SEEDED_TASKS
        ]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append(
        "| majority class | "
        + " | ".join(f"{curve[t]['0']['baseline']:.1f}" for t in SEEDED_TASKS)
        + " |"
    )
    grid = r["grid"]
    rates = sorted({lr for by_rate in grid.values() for lr in by_rate}, key=float)
    lines += [
        "",
        "Lift of the final model over the random init: "
        + ", ".join(f"{t.upper()} {r['downstream'][t]['lift']:+.1f} points" for t in SEEDED_TASKS)
        + ". Learning rates (chosen on a split of each train set): "
        + ", ".join(f"{k} {v:g}" for k, v in r["learning_rates"].items())
        + ".",
        "",
        "## Learning-rate grid",
        "",
        f"Accuracy on the held-out {100 * r['settings']['grid_holdout_share']:.0f}% of each "
        f"train set, mean over seeds {r['settings']['grid_seeds']}; every curve point above "
        "uses the rate chosen here for its start (random init or pretrained).",
        "",
        "| task / start | " + " | ".join(rates) + " |",
        "|---|" + "---:|" * len(rates),
        *(
            f"| {key} | "
            + " | ".join(f"{grid[key][lr]:.1f}" if lr in grid[key] else "" for lr in rates)
            + " |"
            for key in grid
        ),
        "",
        "## Reported tasks (one seed, not averaged)",
        "",
        "| task | metric | random init | pretrained | trivial baseline |",
        "|---|---|---:|---:|---:|",
    ]
    for task, values in r["reported"].items():
        for metric in values["pretrained"]:
            lines.append(
                f"| {task.upper()} | {metric} | {values['random_init'][metric]:.1f} | "
                f"{values['pretrained'][metric]:.1f} | {values['baseline'][metric]:.1f} |"
            )
    lines += [
        "",
        "Wall seconds per stage: "
        + ", ".join(f"{k} {v:.0f}" for k, v in r["stage_seconds"].items())
        + ".",
    ]
    return "\n".join(lines) + "\n"


def write(r: dict, curves: list[dict], results_dir: str) -> None:
    """pretraining_lift.json, .md and the two plots into `results_dir`."""
    os.makedirs(results_dir, exist_ok=True)
    plt = plots._pyplot()
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    points = r["held_out_curve"]
    for key, color in (("mlm", "#4c72b0"), ("sop", "#55a868")):
        left.plot(
            [p["step"] for p in points],
            [100 * p[key] for p in points],
            "o-",
            color=color,
            label=f"held-out {key.upper()}",
        )
    left.axhline(
        100 * r["baselines"]["unigram_mlm_accuracy"], color="#4c72b0", ls=":", label="unigram MLM"
    )
    left.set(xlabel="pretraining step", ylabel="accuracy (%)")
    left.legend()
    if curves:
        right.plot([c["step"] for c in curves], [c["mlm_loss"] for c in curves], label="MLM loss")
        right.plot(
            [c["step"] for c in curves], [c["sentence_loss"] for c in curves], label="SOP loss"
        )
        right.set(xlabel="pretraining step", ylabel="training loss")
        right.legend()
    plots._save(figure, os.path.join(results_dir, "pretraining_lift_heldout.png"))
    figure, axes = plt.subplots(1, len(SEEDED_TASKS), figsize=(11, 4))
    for axis, task in zip(axes, SEEDED_TASKS):
        curve = r["downstream_curve"][task]
        steps = [int(k) for k in curve]
        means = [curve[k]["mean"] for k in curve]
        spread = [curve[k]["std"] for k in curve]
        axis.plot(steps, means, "o-", label="dev accuracy (seed mean)")
        axis.fill_between(
            steps,
            [m - d for m, d in zip(means, spread)],
            [m + d for m, d in zip(means, spread)],
            alpha=0.25,
        )
        axis.axhline(curve["0"]["baseline"], color="gray", ls=":", label="majority class")
        axis.set(
            title=task.upper(),
            xlabel="pretraining step (0: random init)",
            ylabel="dev accuracy (%)",
        )
        axis.legend()
    plots._save(figure, os.path.join(results_dir, "pretraining_lift_downstream.png"))
    write_json(os.path.join(results_dir, "pretraining_lift.json"), r, sort_keys=False)
    write_text(os.path.join(results_dir, "pretraining_lift.md"), markdown(r))
