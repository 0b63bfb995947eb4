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

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # run from a checkout

from pipelines import _cli  # first: TensorFlow's log level must be set before it loads
from absl import app, flags

from benchmarks import study_flags
from benchmarks.ablations.settings import StudySettings, select_runs, study_runs
from benchmarks.machine import describe as describe_machine

FLAGS = flags.FLAGS
study_flags.define_study_flags("benchmarks/data/glue, sampled", "runs/paper_ablations")
flags.adopt_module_key_flags(study_flags)  # listed by --help too
flags.DEFINE_list("runs", None, "Runs or groups to do (e.g. sop,nsp-seed2); default: all.")
flags.DEFINE_list("seeds", None, "Seeds of the headline runs (default: 1,2).")
flags.DEFINE_float("max_train_text_mb", None, "Training text read (default: the size's).")


def study_settings() -> StudySettings:
    """The study's settings: the size's defaults with the flags given."""
    overrides = {}
    if FLAGS.seeds:
        overrides["seeds"] = tuple(int(s) for s in FLAGS.seeds)
    if FLAGS.num_train_steps:
        overrides["num_train_steps"] = FLAGS.num_train_steps
        overrides["num_warmup_steps"] = max(1, FLAGS.num_train_steps // 10)
    if FLAGS.max_train_text_mb:
        overrides["max_train_text_mb"] = FLAGS.max_train_text_mb
    return study_flags.settings_from_flags(StudySettings, **overrides)


def main(argv):
    del argv
    from benchmarks.ablations.study import run_study

    study_flags.require_matplotlib()
    settings = study_settings()
    try:
        selected = select_runs(study_runs(settings.seeds), FLAGS.runs)
    except ValueError as error:
        raise app.UsageError(str(error)) from error
    run_study(settings, selected, describe_machine())


if __name__ == "__main__":
    _cli.run_task(main, tensorflow=True)
