"""ALBERT pretraining: the original `run_pretraining.py` flags on Keras 3 + tf.distribute.

  python pipelines/pretrain.py                     # no flags: the whole demo pipeline on the
                                                   # bundled sample corpus (see README)
  python pipelines/pretrain.py --input_file=data/*.tfrecord --output_dir=runs/base \
      --albert_config_file=albert_config.json --tpu=my-tpu --train_batch_size=4096
  python pipelines/pretrain.py --input_file=data/*.tfrecord --output_dir=runs/more \
      --hf_model=albert-base-v2 ...          # go on from a Hugging Face transformers folder

Running the same command again resumes from the last checkpoint in --output_dir.
"""

import json
import pathlib
import sys

sys.path.insert(
    0, str(pathlib.Path(__file__).resolve().parents[1])
)  # run from a checkout, uninstalled

from pipelines import _cli  # first: TensorFlow's log level must be set before it loads
from pipelines import _config_flags, _distribution_flags
from absl import app, flags, logging

from albert_tf.training.pretraining_options import PretrainingOptions  # TensorFlow-free

FLAGS = flags.FLAGS
# The original run_pretraining.py flags (same names and defaults) and ours, from the settings;
# then the model's config and the TPU and distribution flags.
_config_flags.define_flags(PretrainingOptions)
flags.DEFINE_string(
    "albert_config_file",
    None,
    "The albert_config.json of the model to train (default with --hf_model: its config.json).",
)
_config_flags.define_preset_flag()
flags.DEFINE_string("tpu", None, "TPU to train on: name, grpc:// address or 'local'.")
_distribution_flags.define_tpu_and_distribution_flags()
# The original's other two flags, refused unless left at their defaults.
flags.DEFINE_bool(
    "init_from_group0",
    False,
    "Not supported (the original's initialisation of every layer group from group 0 of "
    "--init_checkpoint); initialise from a checkpoint of the same num_hidden_groups.",
)
flags.DEFINE_float(
    "masked_lm_budget",
    0,
    "Not supported (the original's switch to in-graph masking of unmasked records): use "
    "--masking=dynamic with --masked_lm_prob.",
)
REQUIRED = ("input_file", "output_dir", "albert_config_file")


def main(argv):
    del argv
    if all(FLAGS[name].value is None for name in (*REQUIRED, "hf_model", "preset")):
        from pipelines import demo_pipeline

        demo_pipeline.run()
        return
    for name in REQUIRED:
        if name == "albert_config_file" and (FLAGS.hf_model or FLAGS.preset):
            continue  # the folder's config.json, or the preset's shape
        if not FLAGS[name].value:
            raise app.UsageError(f"--{name} is required (or give no flags at all for the demo)")
    for name in ("init_from_group0", "masked_lm_budget"):
        if FLAGS[name].value:
            raise app.UsageError(f"--{name}={FLAGS[name].value}: {FLAGS[name].help}")
    _distribution_flags.note_ignored_flags(("num_tpu_cores",))

    from albert_tf.config import AlbertConfig, check_preset_or_file
    from albert_tf.training.pretraining import run_pretraining
    from albert_tf.training.pretraining_options import SettingsError

    options = _config_flags.config_from_flags(PretrainingOptions)
    _config_flags.check_output_paths(options)
    check_preset_or_file(FLAGS.preset, FLAGS.albert_config_file)
    if FLAGS.preset:
        config = AlbertConfig.from_preset(FLAGS.preset)
    elif FLAGS.albert_config_file:
        try:
            config = AlbertConfig.from_json_file(FLAGS.albert_config_file)
        except ValueError as error:
            raise SettingsError(f"--albert_config_file: {error}") from error
    else:
        from albert_tf.checkpoints.hf import load_hf_config

        config = load_hf_config(FLAGS.hf_model)
    results = run_pretraining(options, config, _distribution_flags.strategy_from_flags())
    logging.info("done: %s", json.dumps(results, indent=2, sort_keys=True, default=str))


def cli() -> None:
    """The `albert-pretrain` console script: this CLI, as `python pipelines/pretrain.py`."""
    _cli.run_task(main, tensorflow=True)


if __name__ == "__main__":
    cli()
