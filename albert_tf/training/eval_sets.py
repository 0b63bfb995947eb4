"""Held-out evaluation on several named record sets, e.g. NSP and SOP records of the same text.

`--eval_input_file` keeps its meaning (comma-separated globs, one set) and may instead name sets:
`sop=heldout_sop.tfrecord,nsp=heldout_nsp-*` (a glob without a name continues the set before it:
`sop=a-*,b-*,nsp=c-*`). Each set is scored on its own with the same metrics; the sentence task of
its records comes from data prep's summary beside them (`sentence_task.records_sentence_task`),
or from its name when that is `sop` or `nsp` and no summary says. The results keep every set
apart and add the accuracies by task: MLM over the masked tokens of all sets, SOP over the sets
of SOP records and NSP over those of NSP records. The sets must be all masked or all unmasked.
"""

from __future__ import annotations

import dataclasses
import os
import re

from absl import logging

from albert_tf.io import write_json
from albert_tf.training.input_pipeline import list_input_files
from albert_tf.training.pretraining_options import SettingsError
from albert_tf.training.sentence_task import records_sentence_task

_NAMED = re.compile(r"^([A-Za-z0-9_.-]+)=(.*)$")
SENTENCE_TASK_NAMES = ("sop", "nsp")


@dataclasses.dataclass(frozen=True)
class EvalSet:
    """One held-out record set.

    Args:
      name: the set's name in the results; None for the one unnamed set of a plain flag.
      patterns: its comma-separated globs.

    Example:
      >>> parse_eval_sets("sop=a.tfrecord,nsp=b-*,c-*")[1]
      EvalSet(name='nsp', patterns='b-*,c-*')
    """

    name: str | None
    patterns: str


def parse_eval_sets(value: str) -> list[EvalSet]:
    """The sets `--eval_input_file` names: one unnamed set for plain globs, else one per name."""
    items = [item.strip() for item in value.split(",") if item.strip()]
    if not items:
        raise SettingsError("--eval_input_file is empty")
    named = [_NAMED.match(item) for item in items]
    if not any(named):
        return [EvalSet(None, ",".join(items))]
    if not named[0]:
        raise SettingsError(
            f"--eval_input_file: {items[0]!r} has no name while later sets have one: name "
            f"every set (name=glob,name=glob,...)"
        )
    sets: list[tuple[str, list[str]]] = []
    for item, match in zip(items, named):
        if match:
            name, pattern = match.groups()
            if any(name == existing for existing, _ in sets):
                raise SettingsError(f"--eval_input_file names the set {name!r} twice")
            if not pattern.strip():
                raise SettingsError(f"--eval_input_file: the set {name!r} has no files")
            sets.append((name, [pattern.strip()]))
        else:
            sets[-1][1].append(item)
    return [EvalSet(name, ",".join(patterns)) for name, patterns in sets]


def all_patterns(value: str) -> str:
    """Every glob of `--eval_input_file`, names removed (for checking all held-out files)."""
    return ",".join(s.patterns for s in parse_eval_sets(value))


def set_sentence_task(eval_set: EvalSet) -> str | None:
    """ "sop" or "nsp": what the set's records hold per data prep's summary, else its name if
    that is one of them; None when neither says."""
    task, _ = records_sentence_task(list_input_files(eval_set.patterns))
    if task is None and eval_set.name in SENTENCE_TASK_NAMES:
        task = eval_set.name
    return task


def evaluate_sets(
    evaluate, model, options, step: int, write_dir: str | None, files=None, masking=None
) -> dict:
    """Scores `model` on the held-out data with `evaluate` (the one-set evaluation,
    `pretraining.evaluate`, which gets every argument but `evaluate` itself). A plain
    `eval_input_file` is one call. Named sets are scored apart, each from `files` when given
    (checked or repaired copies, in the order of all the sets' globs); the result holds each
    set's metrics (under `sets`, with its `sentence_task`, `examples` and `masked_tokens`) and
    the accuracies by task (`accuracy`: `mlm`, `sop`, `nsp`; None where no set holds that
    task), `masked_lm_accuracy` being the combined MLM accuracy; written to
    `<write_dir>/eval_results.json` when `write_dir` is given."""
    if not options.eval_input_file or parse_eval_sets(options.eval_input_file)[0].name is None:
        return evaluate(model, options, step, write_dir, files, masking)
    sets = parse_eval_sets(options.eval_input_file)
    copies = dict(zip(list_input_files(all_patterns(options.eval_input_file)), files or []))
    per_set = {}
    for eval_set in sets:
        own = dataclasses.replace(options, eval_input_file=eval_set.patterns)
        set_files = [copies[f] for f in list_input_files(eval_set.patterns)] if files else None
        metrics = evaluate(model, own, step, None, set_files, masking)
        trackers = model.metric_trackers
        # Keras's Mean of [batch, predictions] values weighted by masked_lm_weights counts
        # sum(weights) / predictions: the masked tokens scored, over predictions per sequence.
        weight = float(trackers["masked_lm_accuracy"].count.numpy())
        metrics.update(
            sentence_task=set_sentence_task(eval_set),
            examples=int(trackers["sentence_order_accuracy"].count.numpy()),
            masked_tokens=round(weight * options.max_predictions_per_seq),
        )
        per_set[eval_set.name] = metrics
    accuracy = combined_accuracy(per_set)
    results = {
        "global_step": step,
        "held_out": True,
        "masked_lm_accuracy": accuracy["mlm"],
        "accuracy": accuracy,
        "sets": per_set,
    }
    logging.info(
        "eval at step %d by task: %s",
        step,
        ", ".join(f"{k.upper()} {v:.4f}" for k, v in accuracy.items() if v is not None),
    )
    if write_dir:
        write_json(os.path.join(write_dir, "eval_results.json"), results)
    return results


def combined_accuracy(per_set: dict[str, dict]) -> dict[str, float | None]:
    """MLM accuracy over the masked tokens of all sets; SOP and NSP accuracy over the examples
    of the sets holding that task (None when no set does)."""

    def pooled(rows, key, count):
        total = sum(r[count] for r in rows)
        return sum(r[key] * r[count] for r in rows) / total if total else None

    rows = list(per_set.values())
    accuracy = {"mlm": pooled(rows, "masked_lm_accuracy", "masked_tokens")}
    for task in SENTENCE_TASK_NAMES:
        of_task = [r for r in rows if r["sentence_task"] == task]
        accuracy[task] = pooled(of_task, "sentence_order_accuracy", "examples")
    return accuracy
