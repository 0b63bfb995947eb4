"""A GLUE job's settings: `FinetuneConfig` (the original `run_classifier.py` flags) and the
release's `run_glue.sh` recipes."""

from __future__ import annotations

import dataclasses

from albert_tf.finetuning.settings import (
    FinetuneSettings,
    check_positive,
    check_warmup,
    spm_model_file_setting,
)
from albert_tf.settings import OUTPUT_DIR, setting
from albert_tf.tasks.glue import processors as glue

# run_glue.sh: every task also used --max_seq_length=512 --optimizer=adamw --do_lower_case.
_RECIPE_COMMON = dict(max_seq_length=512, optimizer="adamw", do_lower_case=True)
RECIPES: dict[str, dict] = {
    task: dict(
        _RECIPE_COMMON,
        learning_rate=lr,
        train_batch_size=batch,
        train_step=steps,
        warmup_step=warmup,
        save_checkpoints_steps=every,
    )
    for task, lr, batch, steps, warmup, every in (
        ("sst-2", 1e-5, 32, 20935, 1256, 100),
        ("mnli", 3e-5, 128, 10000, 1000, 100),
        ("cola", 1e-5, 16, 5336, 320, 100),
        ("qnli", 1e-5, 32, 33112, 1986, 200),
        ("qqp", 5e-5, 128, 14000, 1000, 100),
        ("rte", 3e-5, 32, 800, 200, 100),
        ("sts-b", 2e-5, 16, 3598, 214, 100),
        ("mrpc", 2e-5, 32, 800, 200, 100),
    )
}


def parse_label_names(given, labels, what: str) -> tuple[str, ...]:
    """`given` (comma-separated, or a sequence) as one name per entry of `labels` (None: a
    regression, which has no names); a `ValueError` in one line otherwise."""
    names = given.split(",") if isinstance(given, str) else list(given)
    names = tuple(str(name).strip() for name in names)
    if labels is None:
        raise ValueError(f"--label_names: {what} is a regression (one score): it has no labels")
    if len(names) != len(labels) or not all(names):
        raise ValueError(
            f"--label_names: {len(names)} names ({','.join(names)}) for {what}'s "
            f"{len(labels)} labels ({','.join(labels)})"
        )
    return names


@dataclasses.dataclass
class FinetuneConfig(FinetuneSettings):
    """One fine-tuning job; defaults are the original `run_classifier.py` flag defaults (each
    field is that flag, `pipelines/run_classifier.py` defines them from here).

    Args:
      task_name: GLUE task (`processors.TASKS`, case-insensitive).
      data_dir, output_dir, spm_model_file, ...: the original flags of the same names.

    Example:
      config = FinetuneConfig("mrpc", "glue", "out/mrpc", "30k-clean.model", **RECIPES["mrpc"])
    """

    task_name: str = setting(
        help=f"GLUE task: {', '.join(sorted(glue.TASKS))} (case-insensitive). Defaults to --recipe."
    )
    data_dir: str = setting(
        help="GLUE root holding the task folders (SST-2/train.tsv, ...), as the original; the "
        "task folder itself also works."
    )
    output_dir: str = setting(
        help="Where checkpoints, eval results and predictions go.", path=OUTPUT_DIR
    )
    spm_model_file: str | None = spm_model_file_setting()
    eval_batch_size: int = setting(8, "Batch size for eval.")
    export_dir: str | None = setting(
        None,
        "Save classifier.keras (outputs `logits`, `probabilities`) with its config, "
        "SentencePiece model and classifier_info.json here, for pipelines/export.py "
        "--head=classifier.",
        path=OUTPUT_DIR,
        kw_only=True,
    )
    skip_malformed_rows: bool = setting(
        False,
        "Skip (and count) TSV rows with a wrong column count, an unknown label or bytes that "
        "are not UTF-8 instead of stopping with file:line.",
    )
    label_names: str | None = setting(
        None,
        "The task's label names in label-id order, comma-separated (e.g. bad,good for SST-2), "
        "for classifier_info.json, the text classifier and the exports; default: the task's "
        "own (SST-2 negative,positive, MRPC not_equivalent,equivalent, ...).",
    )
    dynamic_padding: bool = setting(
        True,
        "Pad each batch to its longest example instead of max_seq_length (same outputs up to "
        "rounding, much faster on short texts); not in training under --jit_compile.",
    )

    @property
    def class_names(self) -> tuple[str, ...] | None:
        """What each label id means: `label_names` if given, else the task's own; None for a
        regression task (STS-B)."""
        if not self.label_names:
            return self.task.label_names
        return parse_label_names(self.label_names, self.task.label_names, self.task.name)

    @property
    def pad_dynamically(self) -> bool:
        """Dynamic padding, except under XLA (which would compile every batch width)."""
        return self.dynamic_padding and not self.jit_compile

    def __post_init__(self):
        super().__post_init__()
        self.task = glue.get_task(self.task_name)
        if self.label_names:  # a wrong count or a regression task fails here, before any work
            parse_label_names(self.label_names, self.task.label_names, self.task.name)
        check_positive(self, ("train_step", "eval_batch_size"))
        check_warmup(self.warmup_step, self.train_step)
