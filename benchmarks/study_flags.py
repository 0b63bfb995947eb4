"""The flags both pretraining studies take (`paper_ablations.py`, `pretraining_lift.py`): where
the text, GLUE rows, work and results are, the size and the pretraining steps."""

from __future__ import annotations

import importlib.util
import os

from absl import app, flags

FLAGS = flags.FLAGS


def define_study_flags(glue_default: str, work_default: str) -> None:
    """Defines --corpus_dir, --glue_dir, --size, --work_dir, --results_dir, --num_train_steps,
    --train_batch_size; the defaults named in their help."""
    flags.DEFINE_list(
        "corpus_dir",
        None,
        "Text folders, each with train/ and heldout/ (or its last file by name held out); "
        "default: the repository's sample corpus.",
    )
    flags.DEFINE_string("glue_dir", None, f"GLUE folders (default: {glue_default}).")
    flags.DEFINE_enum("size", "study", ["study", "tiny"], "tiny: minutes, to check the script.")
    flags.DEFINE_string("work_dir", None, f"Data and runs (default: {work_default}).")
    flags.DEFINE_string("results_dir", None, "Where results go (default: benchmarks/results).")
    flags.DEFINE_integer("num_train_steps", None, "Pretraining steps (default: the size's).")
    flags.DEFINE_integer(
        "train_batch_size",
        None,
        "Pretraining batch size (default: the size's); larger to fill an accelerator.",
        lower_bound=1,
    )


def settings_from_flags(settings_class, **overrides):
    """`settings_class` at the --size with the flags above and `overrides` applied; a setting
    it refuses (ValueError) is a usage error."""
    base = settings_class()
    work_dir = FLAGS.work_dir or base.work_dir
    results_dir = FLAGS.results_dir or base.results_dir
    if FLAGS.corpus_dir:
        overrides["corpus_dirs"] = tuple(os.path.abspath(d) for d in FLAGS.corpus_dir)
    if FLAGS.glue_dir:
        overrides["glue_dir"] = os.path.abspath(FLAGS.glue_dir)
    if FLAGS.train_batch_size:
        overrides["train_batch_size"] = FLAGS.train_batch_size
    try:
        if FLAGS.size == "tiny":
            return settings_class.tiny(work_dir, results_dir, **overrides)
        return settings_class(work_dir=work_dir, results_dir=results_dir, **overrides)
    except ValueError as error:
        raise app.UsageError(str(error)) from error


def require_matplotlib() -> None:
    """A usage error now, rather than after hours of study, when the plots cannot be drawn."""
    if importlib.util.find_spec("matplotlib") is None:
        raise app.UsageError("the plots need matplotlib: pip install -r requirements-dev.txt")
