r"""Text -> masked SOP instances -> TFRecords, with the flags of the original `create_pretraining_data.py`.

    python -m pipelines.create_pretraining_data --input_file='corpus/*.txt' --output_file=out/train.tfrecord \
        --spm_model_file=30k-clean.model --max_seq_length=128 --dupe_factor=10 --num_workers=2

Every flag of the original keeps its name and default, except that --max_predictions_per_seq follows a
--max_seq_length under 20 down (its default is min(20, --max_seq_length): 20 at the default 512). The
additions are --runner (local or beam, with --beam_runner and --beam_pipeline_options),
--num_workers, --num_output_shards, --input_format, --single_sentence_random_doc,
--masking and the bounds below. A JSON summary is written beside the outputs. This CLI never imports
TensorFlow.

--masking=dynamic writes each instance unmasked, once (--dupe_factor defaults to 1 there), for the
trainer to mask afresh on every read; the masking flags then go to the summary's "masking" block.
"""

import os
import sys

if not __package__:  # run as a script: make the repository root importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pipelines import _cli  # first: TensorFlow's log level must be set before it loads
from pipelines import _config_flags
from absl import app, flags, logging

from albert_tf.config import resolve_max_predictions_per_seq  # TensorFlow-free
from data_prep import pipeline, units

FLAGS = flags.FLAGS

# The original's flags, same names and defaults, and ours, from the job's settings.
_config_flags.define_flags(units.DataPrepConfig)
flags.DEFINE_string(
    "vocab_file",
    None,
    "Accepted for compatibility; unused with --spm_model_file (the "
    "original's WordPiece path is not supported).",
)
flags.DEFINE_string(
    "input_file_mode",
    "r",
    "Accepted for compatibility: inputs are always read as bytes "
    "and decoded as UTF-8 line by line.",
)
flags.DEFINE_integer(
    "num_workers", None, "Worker processes (default: all CPUs). Output does not depend on it."
)
flags.DEFINE_enum(
    "runner",
    "local",
    ["local", "beam"],
    "local: worker processes on this machine. beam: Apache Beam (pip install -r "
    "requirements-beam.txt), on --beam_runner; same instances, fully shuffled by the seed.",
)
flags.DEFINE_enum(
    "beam_runner",
    "FnApiRunner",
    list(pipeline.BEAM_RUNNERS),
    "The Beam runner (--runner=beam). FnApiRunner: this machine, --num_workers processes.",
)
flags.DEFINE_string(
    "beam_pipeline_options",
    "",
    "Further Beam pipeline options, shell-quoted, e.g. '--project=P --region=R "
    "--temp_location=gs://B/tmp --setup_file=./setup.py' (--runner=beam).",
)

flags.mark_flags_as_required(["input_file", "output_file"])


def config_from_flags() -> pipeline.DataPrepConfig:
    """The job's configuration from the parsed flags."""
    if not FLAGS.spm_model_file:
        raise app.UsageError(
            "--spm_model_file is required (the original's WordPiece --vocab_file path is "
            "not supported)"
        )
    if FLAGS.masking == "dynamic" and not FLAGS["dupe_factor"].present:
        # Fresh masks come from the trainer; more passes would only add pairings of the same text.
        FLAGS.dupe_factor = 1
        logging.info("--masking=dynamic: --dupe_factor=1 (pass --dupe_factor for more pairings)")
    if not FLAGS["max_predictions_per_seq"].present:
        FLAGS.max_predictions_per_seq = resolve_max_predictions_per_seq(None, FLAGS.max_seq_length)
    return _config_flags.config_from_flags(
        pipeline.DataPrepConfig, num_workers=FLAGS.num_workers or os.cpu_count() or 1
    )


def main(argv):
    del argv
    config = config_from_flags()
    _config_flags.check_output_paths(config)
    if FLAGS.runner == "beam":
        pipeline.run_on_beam(config, FLAGS.beam_runner, FLAGS.beam_pipeline_options)
    else:
        pipeline.run(config)


def cli() -> None:
    """The `albert-create-pretraining-data` console script: this CLI, as `python pipelines/create_pretraining_data.py`."""
    _cli.run_task(main)


if __name__ == "__main__":
    cli()
