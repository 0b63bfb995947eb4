r"""Does a model pretrained here transfer? Pretrains a small ALBERT (the paper-ablation study's
shape at H=256) long enough to leave the unigram plateau, scores held-out MLM and SOP at every
checkpoint, and fine-tunes the random init and checkpoints along pretraining on SST-2 and QNLI
(three seeds each, the learning rate chosen on a split of each train set, never on dev), with
MRPC and RTE reported beside their trivial baselines. Results:
benchmarks/results/pretraining_lift.json, .md and two PNG plots; the final model is what the
repository ships in pretrained/.

    # the study (about 7.5 hours on 2 cores with bf16 units, 5 of them pretraining): Gutenberg
    # and Wikipedia
    python benchmarks/pretraining_lift.py \
        --corpus_dir=../shared/data/corpus/gutenberg,../shared/data/corpus/enwiki_2015 \
        --glue_dir=../shared/data/glue
    python benchmarks/pretraining_lift.py --size=tiny --work_dir=/tmp/t --results_dir=/tmp/t/r

Without --corpus_dir it reads the repository's sample corpus; without --glue_dir the GLUE rows
the study wrote from the full GLUE files (benchmarks/data/glue_lift, its README says how). QNLI,
of which only GLUE's dev set is at hand, has that set split once, seeded, into 4,000 rows for
training and the rest for evaluation. A re-run reuses every finished stage under --work_dir.
"""

import dataclasses
import os
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # run from a checkout

from pipelines import _cli  # first: TensorFlow's log level must be set before it loads
from absl import app, flags

from albert_tf.config import AlbertConfig
from benchmarks import study_flags
from benchmarks.lift.settings import LiftSettings
from benchmarks.machine import describe as describe_machine

FLAGS = flags.FLAGS
study_flags.define_study_flags("benchmarks/data/glue_lift", "runs/pretraining_lift")
flags.adopt_module_key_flags(study_flags)  # listed by --help too
flags.DEFINE_list("curve_steps", None, "Checkpoints fine-tuned (default: the size's).")
flags.DEFINE_list(
    "restart_steps",
    None,
    "Steps where the learning-rate schedule starts again (warmup, then decay to 0 at the next "
    "one or at --num_train_steps); a longer run continues a finished one this way; empty: "
    "one schedule (default: the size's).",
)
flags.DEFINE_float(
    "restart_learning_rate",
    None,
    "Peak LAMB rate of the phases after a restart (default: the first phase's).",
)
flags.DEFINE_enum(
    "mixed_precision",
    None,
    ["auto", "none", "bf16"],
    "Pretraining precision; auto: bf16 where the CPU has bf16 units and a short check finds "
    "it at least 10%% faster (default: the size's; auto at --size=study).",
)
flags.DEFINE_string(
    "albert_config_file",
    None,
    "The model to pretrain, as an albert_config.json; its vocab_size is the size of the "
    "vocabulary the study trains (default: the size's model).",
)
flags.DEFINE_float(
    "learning_rate", None, "Peak LAMB rate of the first phase (default: the size's)."
)
flags.DEFINE_string(
    "bundle_dir",
    None,
    "Where the final model is written as the repository ships it (default: the size's; at "
    "--size=study that is pretrained/albert-small-en, the bundled model itself).",
)


def lift_settings() -> LiftSettings:
    """The study's settings: the size's defaults with the flags given."""
    overrides = {}
    if FLAGS.num_train_steps:
        overrides["num_train_steps"] = FLAGS.num_train_steps
    if FLAGS.curve_steps:
        overrides["curve_steps"] = tuple(int(s) for s in FLAGS.curve_steps)
    if FLAGS.restart_steps is not None:  # given empty: one schedule, no restart
        overrides["restart_steps"] = tuple(int(s) for s in FLAGS.restart_steps)
    if FLAGS.restart_learning_rate is not None:
        overrides["restart_learning_rate"] = FLAGS.restart_learning_rate
    if FLAGS.mixed_precision:
        overrides["mixed_precision"] = FLAGS.mixed_precision
    if FLAGS.learning_rate is not None:
        overrides["learning_rate"] = FLAGS.learning_rate
    if FLAGS.bundle_dir:
        overrides["bundle_dir"] = os.path.abspath(FLAGS.bundle_dir)
    if FLAGS.albert_config_file:
        try:
            model = dataclasses.asdict(AlbertConfig.from_json_file(FLAGS.albert_config_file))
        except (OSError, ValueError) as error:
            raise app.UsageError(f"--albert_config_file: {error}") from None
        overrides["vocab_size"] = model.pop("vocab_size")
        overrides["model"] = model
    return study_flags.settings_from_flags(LiftSettings, **overrides)


def main(argv):
    del argv
    from benchmarks.lift.study import run_study

    study_flags.require_matplotlib()
    run_study(lift_settings(), describe_machine())


if __name__ == "__main__":
    _cli.run_task(main, tensorflow=True)
