"""The study's PNG plots (matplotlib, drawn off-screen): intrinsic accuracies by sentence task,
the downstream average by run with its seed spread, and the training curves."""

from __future__ import annotations

import os

from albert_tf.io import atomic_path

INTRINSIC_ORDER = ("random_init", "none", "nsp", "sop")
COLORS = {"mlm": "#4c72b0", "nsp": "#dd8452", "sop": "#55a868"}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only: no display
    import matplotlib.pyplot as plt

    return plt


def _save(figure, path: str) -> str:
    with atomic_path(path, suffix=".png") as staging:
        figure.savefig(staging, dpi=110, bbox_inches="tight")
    return path


def intrinsic_by_task(results: dict, path: str) -> str:
    """Held-out MLM / NSP / SOP accuracy of the all-shared runs, per sentence task: bars at the
    seed mean, one dot per seed."""
    plt = _pyplot()
    runs = [r for r in results["runs"] if r["sharing"] == "all"]
    tasks = [t for t in INTRINSIC_ORDER if any(r["sentence_task"] == t for r in runs)]
    figure, axis = plt.subplots(figsize=(7, 4))
    width = 0.26
    for k, metric in enumerate(("mlm", "nsp", "sop")):
        for i, task in enumerate(tasks):
            values = [
                r["intrinsic"][metric]
                for r in runs
                if r["sentence_task"] == task and r["intrinsic"][metric] is not None
            ]
            if not values:
                continue
            x = i + (k - 1) * width
            axis.bar(x, sum(values) / len(values), width, color=COLORS[metric],
                     label=metric.upper() if i == 0 else None)  # fmt: skip
            axis.scatter([x] * len(values), values, color="black", s=10, zorder=3)
    for task in ("nsp", "sop"):
        majority = results["baselines"].get(f"{task}_majority_accuracy")
        if majority is not None:
            axis.axhline(majority, color=COLORS[task], linestyle=":", linewidth=1.2)
    axis.set_xticks(range(len(tasks)), tasks)
    axis.set_ylabel("held-out accuracy")
    axis.set_title("Held-out accuracy by sentence task (dots: seeds; dotted: majority class)")
    axis.legend()
    path = _save(figure, path)
    plt.close(figure)
    return path


def downstream_by_run(results: dict, path: str) -> str:
    """The GLUE average of every group: bar at the seed mean, whiskers min-max, dots per seed."""
    plt = _pyplot()
    groups = results["groups"]
    names = list(groups)
    figure, axis = plt.subplots(figsize=(max(6, 1.1 * len(names)), 4))
    for i, name in enumerate(names):
        stats = groups[name]["downstream"]["avg"]
        if stats["mean"] is None:
            continue
        axis.bar(i, stats["mean"], 0.6, color="#4c72b0")
        axis.vlines(i, stats["min"], stats["max"], color="black", linewidth=1.5)
        seeds = [
            r["downstream"]["avg"] for r in results["runs"] if r["name"].startswith(f"{name}-seed")
        ]
        axis.scatter([i] * len(seeds), seeds, color="black", s=12, zorder=3)
    axis.set_xticks(range(len(names)), names, rotation=30, ha="right")
    axis.set_ylabel("dev average (SST-2, MRPC, RTE acc.; CoLA MCC)")
    axis.set_title("Downstream average by run (whiskers: seed min-max)")
    path = _save(figure, path)
    plt.close(figure)
    return path


def training_curves(curves: dict[str, list[dict]], path: str) -> str:
    """MLM loss and sentence loss against the step, one line per pretrained run."""
    plt = _pyplot()
    figure, (mlm, sentence) = plt.subplots(1, 2, figsize=(11, 4))
    for name, points in curves.items():
        if not points:
            continue
        steps = [p["step"] for p in points]
        mlm.plot(steps, [p["mlm_loss"] for p in points], label=name, linewidth=1.2)
        sentence.plot(steps, [p["sentence_loss"] for p in points], label=name, linewidth=1.2)
    mlm.set_title("MLM loss (training)")
    sentence.set_title("Sentence (SOP / NSP head) loss; 'none' does not train it")
    for axis in (mlm, sentence):
        axis.set_xlabel("step")
    sentence.legend(fontsize=7)
    path = _save(figure, path)
    plt.close(figure)
    return path


def write_all(results: dict, curves: dict[str, list[dict]], results_dir: str) -> dict[str, str]:
    """All three plots into `results_dir`; returns their paths."""
    os.makedirs(results_dir, exist_ok=True)
    return {
        "intrinsic": intrinsic_by_task(
            results, os.path.join(results_dir, "paper_ablations_intrinsic.png")
        ),
        "downstream": downstream_by_run(
            results, os.path.join(results_dir, "paper_ablations_downstream.png")
        ),
        "curves": training_curves(curves, os.path.join(results_dir, "paper_ablations_curves.png")),
    }
