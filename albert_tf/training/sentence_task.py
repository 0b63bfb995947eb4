"""Which sentence-level task a pretraining run trains besides MLM, and what the records hold.

The records decide between the two tasks the original data prep writes: sentence order (SOP, its
default) or BERT's next sentence (NSP, `--random_next_sentence`); both label the pair in
`next_sentence_labels` and train the same `seq_relationship` head. Data prep records the choice in
the `.summary.json` it writes beside its outputs (`settings.random_next_sentence`, each output in
`outputs[].file`); that file is how a run tells which task its records are.

`none` trains MLM alone from the same records (the paper's row without a sentence loss): the
sentence loss is dropped, and the pooler and the `seq_relationship` head, which only that loss
trains, are frozen at their initial values. Frozen, not merely left without a gradient: LAMB
still applies weight decay to a weight whose gradient is zero, and its trust ratio makes that a
step of `learning_rate * w`, shrinking the weight by (1 - lr) every step. The model keeps the
original layout, so its checkpoints hold the untrained head like any other run's.
"""

from __future__ import annotations

import glob
import json
import os

from absl import logging

from albert_tf.training.input_pipeline import list_input_files
from albert_tf.training.pretraining_options import SENTENCE_TASKS, SettingsError

# Data prep's default, and the only task of the original ALBERT records.
DEFAULT_RECORDS_TASK = "sop"
# Layers that only the sentence loss trains: the backbone's pooler and the pretrainer's head.
SENTENCE_ONLY_LAYERS = (("backbone", "pooler"), (None, "seq_relationship"))


def records_sentence_task(files: list[str]) -> tuple[str | None, str | None]:
    """("sop" or "nsp", the summary that says so) for TFRecord `files` written by data prep, from
    the `.summary.json` files beside them; (None, None) when no summary lists any of them.

    Raises SettingsError when the files hold both tasks (or a summary cannot be read).
    """
    found: dict[str, str] = {}  # task -> a summary saying it
    summaries: dict[str, list[tuple[str, dict]]] = {}  # directory -> its summaries, read once
    for path in files:
        directory = os.path.dirname(os.path.abspath(path))
        if directory not in summaries:
            summaries[directory] = [
                (s, _read_summary(s))
                for s in sorted(glob.glob(os.path.join(directory, "*.summary.json")))
            ]
        for summary_path, summary in summaries[directory]:
            outputs = {os.path.basename(o.get("file", "")) for o in summary.get("outputs", [])}
            if os.path.basename(path) in outputs:
                settings = summary.get("settings", {})
                task = "nsp" if settings.get("random_next_sentence") else "sop"
                found.setdefault(task, summary_path)
                break
    if len(found) > 1:
        raise SettingsError(
            f"the records hold both sentence tasks: {found['sop']} says SOP, {found['nsp']} "
            f"says NSP (random_next_sentence); one run reads one kind"
        )
    if not found:
        return None, None
    ((task, summary_path),) = found.items()
    return task, summary_path


def _read_summary(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            summary = json.load(f)
    except (OSError, ValueError) as error:
        raise SettingsError(f"cannot read data-prep summary {path}: {error}") from error
    return summary if isinstance(summary, dict) else {}


def resolve_sentence_task(requested: str, input_file: str) -> str:
    """The task a run trains: "sop", "nsp" or "none". "auto" takes the records' task (SOP when
    no data-prep summary names them, as the original); an explicit "sop"/"nsp" must agree with a
    summary that names the records. Logs which task it is and why."""
    if requested not in SENTENCE_TASKS:
        raise SettingsError(f"--sentence_task must be one of {SENTENCE_TASKS}, got {requested!r}")
    records_task, summary = records_sentence_task(list_input_files(input_file))
    if records_task and requested in ("sop", "nsp") and requested != records_task:
        raise SettingsError(
            f"--sentence_task={requested}, but {summary} says the records are "
            f"{records_task.upper()} ones: use --sentence_task={records_task} (or auto)"
        )
    why = (
        f"the records' task per {summary}"
        if records_task
        else "no data-prep summary beside the records: sentence order, the original's"
    )
    if requested == "none":
        task = "none"
        logging.info(
            "sentence task: none (MLM alone; the %s labels are not trained on, the pooler and "
            "seq_relationship head stay at their initial values)",
            (records_task or DEFAULT_RECORDS_TASK).upper(),
        )
    else:
        task = records_task or (requested if requested != "auto" else DEFAULT_RECORDS_TASK)
        logging.info("sentence task: %s (%s)", task.upper(), why)
    return task


def apply_sentence_task(model, task: str) -> None:
    """Sets up `model` (an `AlbertPretrainer`, before it is compiled) to train `task`: for "none"
    the sentence loss is dropped and the layers only it trains are frozen; otherwise nothing."""
    if task != "none":
        return
    model.sentence_loss_weight = 0.0
    for owner, layer_name in SENTENCE_ONLY_LAYERS:
        (getattr(model, owner) if owner else model).get_layer(layer_name).trainable = False
