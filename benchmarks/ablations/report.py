"""The study's results: the JSON (machine, versions, settings, every run), the groups' means and
seed spread, the Markdown table beside the paper's figures, and the PNG plots."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess

from benchmarks.ablations.settings import GLUE_TASKS, REPO_ROOT

# The paper's figures (Lan et al., ICLR 2020, ALBERT-base with E=128, all parameters shared):
# Table 5's held-out MLM, NSP and SOP accuracy and downstream average (SQuAD1.1, SQuAD2.0, MNLI,
# SST-2, RACE) per sentence task; Table 4's parameter counts, which the repository reproduces
# (docs/model.md). Of Table 4's accuracies only its finding is stated (attention sharing
# nearly free, FFN sharing costs most).
PAPER_TABLE5 = {
    "none": {"mlm": "54.9", "nsp": "52.4", "sop": "53.3", "avg": "79.0"},
    "nsp": {"mlm": "54.5", "nsp": "90.5", "sop": "52.0", "avg": "79.2"},
    "sop": {"mlm": "54.0", "nsp": "78.9", "sop": "86.5", "avg": "80.1"},
}
PAPER_TABLE4_PARAMS = {"all": "12M", "attention": "64M", "ffn": "38M", "none": "89M"}
INTRINSIC = ("mlm", "nsp", "sop")


def versions() -> dict:
    """Python, TensorFlow, Keras, NumPy and the repository's commit."""
    import keras
    import numpy
    import tensorflow as tf

    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except OSError:
        commit = ""
    return {
        "python": platform.python_version(),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "numpy": numpy.__version__,
        "commit": commit or None,
    }


def spread(values: list[float]) -> dict:
    """Mean, sample standard deviation (None for one value), min, max and n."""
    values = [v for v in values if v is not None]
    if not values:
        return {"mean": None, "std": None, "min": None, "max": None, "n": 0}
    return {
        "mean": statistics.mean(values),
        "std": statistics.stdev(values) if len(values) > 1 else None,
        "min": min(values),
        "max": max(values),
        "n": len(values),
    }


def groups(runs: list[dict]) -> dict:
    """Per group (the runs of one row, over seeds): the spread of every intrinsic accuracy, every
    task metric and the downstream average."""
    by_group: dict[str, list[dict]] = {}
    for run in runs:
        by_group.setdefault(run["name"].rsplit("-seed", 1)[0], []).append(run)
    summary = {}
    for group, members in by_group.items():
        row = {
            "sentence_task": members[0]["sentence_task"],
            "sharing": members[0]["sharing"],
            "seeds": [m["seed"] for m in members],
        }
        row["intrinsic"] = {k: spread([m["intrinsic"][k] for m in members]) for k in INTRINSIC}
        row["downstream"] = {
            k: spread([m["downstream"][k] for m in members]) for k in (*GLUE_TASKS, "avg")
        }
        summary[group] = row
    return summary


# (what, metric path, group a, group b): the comparisons the study is for, as differences a - b
# between runs of the same seed (the same initial weights and record order).
HEADLINES = (
    ("SOP accuracy, SOP - NSP", ("intrinsic", "sop"), "sop", "nsp"),
    ("NSP accuracy, NSP - SOP", ("intrinsic", "nsp"), "nsp", "sop"),
    ("downstream average, SOP - random init", ("downstream", "avg"), "sop", "random_init"),
    ("downstream average, NSP - random init", ("downstream", "avg"), "nsp", "random_init"),
)


def headlines(runs: list[dict]) -> list[dict]:
    """Each headline comparison: the per-seed differences and their spread (seeds where both
    runs exist)."""
    by_name = {r["name"]: r for r in runs}
    found = []
    for what, (part, key), a, b in HEADLINES:
        seeds = sorted(
            int(n.rsplit("-seed", 1)[1])
            for n in by_name
            if n.startswith(f"{a}-seed") and f"{b}-seed{n.rsplit('-seed', 1)[1]}" in by_name
        )
        differences = [
            by_name[f"{a}-seed{seed}"][part][key] - by_name[f"{b}-seed{seed}"][part][key]
            for seed in seeds
        ]
        if differences:
            found.append(
                {"what": what, "seeds": seeds, "differences": differences, **spread(differences)}
            )
    return found


def _cell(stats: dict, scale: float = 100.0) -> str:
    if stats["mean"] is None:
        return "–"
    text = f"{stats['mean'] * scale:.1f}"
    if stats["n"] > 1:
        text += f" ± {stats['std'] * scale:.1f}"
    return text


def markdown(results: dict) -> str:
    """The measured table (group means ± seed standard deviation, in %) beside the paper's."""
    s = results["settings"]
    model = s["model"]
    lines = [
        "# Paper ablations at small scale (measured)",
        "",
        f"Machine: {results['machine']}. Wall time {results['wall_seconds'] / 60:.0f} min "
        f"(all stages). Model: E={model['embedding_size']} H={model['hidden_size']} "
        f"L={model['num_hidden_layers']}, seq {s['max_seq_length']}, batch "
        f"{s['train_batch_size']}, {s['num_train_steps']} steps, vocab {s['vocab_size']}. "
        f"Corpus: {', '.join(os.path.basename(d.rstrip('/')) for d in s['corpus_dirs'])}.",
        "",
        "Values in %: mean ± standard deviation over seeds where a row has several (n in the "
        "last column). Intrinsic: held-out MLM accuracy over the masked tokens of both held-out "
        "record sets, NSP and SOP accuracy on NSP and SOP records of the same held-out text. "
        "Downstream: dev metrics after fine-tuning (SST-2, MRPC, RTE accuracy; CoLA Matthews "
        "correlation × 100) and their average.",
        "",
        "| run | sentence task | sharing | params | MLM | NSP | SOP | SST-2 | MRPC | RTE | CoLA "
        "| avg | seeds |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    params = {r["name"].rsplit("-seed", 1)[0]: r["params"] for r in results["runs"]}
    for group, row in results["groups"].items():
        cells = [_cell(row["intrinsic"][k]) for k in INTRINSIC]
        cells += [_cell(row["downstream"][k]) for k in (*GLUE_TASKS, "avg")]
        lines.append(
            f"| {group} | {row['sentence_task']} | {row['sharing']} | {params[group] / 1e6:.2f}M "
            f"| {' | '.join(cells)} | {len(row['seeds'])} |"
        )
    if results.get("headlines"):
        lines += [
            "",
            "Headline comparisons, differences between runs of the same seed (points of %):",
            "",
        ]
        for h in results["headlines"]:
            each = ", ".join(
                f"seed {s} {d * 100:+.1f}" for s, d in zip(h["seeds"], h["differences"])
            )
            std = f" ± {h['std'] * 100:.1f}" if h["std"] is not None else ""
            lines.append(f"- {h['what']}: mean {h['mean'] * 100:+.1f}{std} ({each})")
    baselines = results.get("baselines", {})
    if "unigram_mlm_accuracy" in baselines:
        lines += [
            "",
            f"Baselines: held-out MLM accuracy of always the most frequent masked token "
            f"{baselines['unigram_mlm_accuracy'] * 100:.1f}; always the majority label of the "
            f"scored held-out examples: NSP {baselines['nsp_majority_accuracy'] * 100:.1f}, SOP "
            f"{baselines['sop_majority_accuracy'] * 100:.1f} (label 1, 'swapped' or 'random "
            f"document', on {baselines['nsp_label_1_share'] * 100:.1f}% and "
            f"{baselines['sop_label_1_share'] * 100:.1f}% of them).",
        ]
    lines += [
        "",
        "The paper (ALBERT-base, E=128, all shared): Table 5, downstream average over "
        "SQuAD1.1, SQuAD2.0, MNLI, SST-2 and RACE:",
        "",
        "| sentence task | MLM | NSP | SOP | avg |",
        "|---|---|---|---|---|",
    ]
    for task, row in PAPER_TABLE5.items():
        lines.append(f"| {task} | {row['mlm']} | {row['nsp']} | {row['sop']} | {row['avg']} |")
    lines += [
        "",
        "Table 4 (ALBERT-base, E=128): parameters "
        + ", ".join(f"{k} shared {v}" for k, v in PAPER_TABLE4_PARAMS.items())
        + "; sharing attention costs almost no accuracy, sharing the FFN costs most.",
    ]
    return "\n".join(lines) + "\n"
