r"""The ALBERT paper's ablations at a scale two CPU cores afford: sentence task none / NSP / SOP
(Table 5), cross-layer sharing (Table 4), and what pretraining buys downstream.

From real text (books + Wikipedia) it writes one vocabulary and SOP and NSP records of the same
text, pretrains the same small ALBERT (all parameters shared, E=128) with each sentence task and
SOP with the other sharing modes, scores every run's held-out MLM, NSP and SOP accuracy on SOP and
NSP records of the same held-out text (never trained on), and fine-tunes every run and a random
init on SST-2, MRPC, RTE and CoLA (dev metrics and their average). SOP, NSP and the random init
are run with every seed (the headline comparisons: SOP vs NSP on SOP accuracy; pretrained vs
random init downstream), the other rows with the first. Results: benchmarks/results/
paper_ablations.json, .md (the table beside the paper's figures) and three PNG plots.

    # the study (about an hour on 2 idle cores): the Gutenberg novels and English Wikipedia
    python benchmarks/paper_ablations.py \
        --corpus_dir=../shared/data/corpus/gutenberg,../shared/data/corpus/enwiki_2015
    python benchmarks/paper_ablations.py --runs=sop,nsp          # a subset (groups or run names)
    python benchmarks/paper_ablations.py --size=tiny --work_dir=/tmp/t --results_dir=/tmp/t/results

Without --corpus_dir it reads the repository's sample corpus (five novels, one held out). A
re-run reuses every finished stage under --work_dir. English Wikipedia text is CC BY-SA 3.0, by
Wikipedia's contributors (converted to plain text by WikiExtractor; see shared/data/README.md).
"""

import importlib.util
import os
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # run from a checkout

from pipelines import _cli  # first: TensorFlow's log level must be set before it loads
from absl import app, flags

from benchmarks.ablations.settings import StudySettings, select_runs, study_runs
from benchmarks.machine import describe as describe_machine

FLAGS = flags.FLAGS
flags.DEFINE_list(
    "corpus_dir",
    None,
    "Text folders, each with train/ and heldout/ (or its last file by name held out); "
    "default: the repository's sample corpus.",
)
flags.DEFINE_string("glue_dir", None, "GLUE folders (default: benchmarks/data/glue, sampled).")
flags.DEFINE_list("runs", None, "Runs or groups to do (e.g. sop,nsp-seed2); default: all.")
flags.DEFINE_enum("size", "study", ["study", "tiny"], "tiny: minutes, to check the script.")
flags.DEFINE_string("work_dir", None, "Data and runs (default: runs/paper_ablations).")
flags.DEFINE_string("results_dir", None, "Where results go (default: benchmarks/results).")
flags.DEFINE_list("seeds", None, "Seeds of the headline runs (default: 1,2).")
flags.DEFINE_integer("num_train_steps", None, "Pretraining steps (default: the size's).")
flags.DEFINE_float("max_train_text_mb", None, "Training text read (default: the size's).")


def settings_from_flags() -> StudySettings:
    """The study's settings: the size's defaults with the flags given."""
    base = StudySettings()
    work_dir = FLAGS.work_dir or base.work_dir
    results_dir = FLAGS.results_dir or base.results_dir
    overrides = {}
    if FLAGS.corpus_dir:
        overrides["corpus_dirs"] = tuple(os.path.abspath(d) for d in FLAGS.corpus_dir)
    if FLAGS.glue_dir:
        overrides["glue_dir"] = os.path.abspath(FLAGS.glue_dir)
    if FLAGS.seeds:
        overrides["seeds"] = tuple(int(s) for s in FLAGS.seeds)
    if FLAGS.num_train_steps:
        overrides["num_train_steps"] = FLAGS.num_train_steps
        overrides["num_warmup_steps"] = max(1, FLAGS.num_train_steps // 10)
    if FLAGS.max_train_text_mb:
        overrides["max_train_text_mb"] = FLAGS.max_train_text_mb
    if FLAGS.size == "tiny":
        return StudySettings.tiny(work_dir, results_dir, **overrides)
    return StudySettings(work_dir=work_dir, results_dir=results_dir, **overrides)


def main(argv):
    del argv
    from benchmarks.ablations.study import run_study

    if importlib.util.find_spec("matplotlib") is None:  # checked now, not after the whole study
        raise app.UsageError(
            "the study's plots need matplotlib: pip install -r requirements-dev.txt"
        )

    settings = settings_from_flags()
    try:
        selected = select_runs(study_runs(settings.seeds), FLAGS.runs)
    except ValueError as error:
        raise app.UsageError(str(error)) from error
    run_study(settings, selected, describe_machine())


if __name__ == "__main__":
    _cli.run_task(main, tensorflow=True)
