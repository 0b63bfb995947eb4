"""Convert between original TF1 ALBERT checkpoints and our `.keras` files.

  TF1 -> Keras:  python pipelines/convert_checkpoint.py --tf1_checkpoint=albert_base/model.ckpt-best \
                     --albert_config_file=albert_base/albert_config.json --output=albert_base.keras
  Keras -> TF1:  python pipelines/convert_checkpoint.py --keras_model=albert_base.keras \
                     --output=out/model.ckpt   (also writes out/albert_config.json)
"""

import os
import pathlib
import sys

sys.path.insert(
    0, str(pathlib.Path(__file__).resolve().parents[1])
)  # run from a checkout, uninstalled

from pipelines import _cli  # first: TensorFlow's log level must be set before it loads
from absl import app, flags, logging

FLAGS = flags.FLAGS
flags.DEFINE_string(
    "tf1_checkpoint", None, "Original checkpoint prefix (or its directory) to convert to `.keras`."
)
flags.DEFINE_string("albert_config_file", None, "The `albert_config.json` of --tf1_checkpoint.")
flags.DEFINE_string(
    "keras_model",
    None,
    "An `AlbertPretrainer` or `AlbertClassifier` `.keras` file to convert to TF1.",
)
flags.DEFINE_string("output", None, "`.keras` path (from TF1) or TF1 checkpoint prefix (to TF1).")


def main(argv):
    del argv
    import keras

    from albert_tf.io import atomic_path

    import albert_tf.modeling  # noqa: F401  (registers every model class: a classifier's .keras)
    from albert_tf.checkpoints import load_tf1_checkpoint, save_tf1_checkpoint

    if bool(FLAGS.tf1_checkpoint) == bool(FLAGS.keras_model):
        raise app.UsageError("give exactly one of --tf1_checkpoint or --keras_model")
    if not FLAGS.output:
        raise app.UsageError("--output is required")
    if FLAGS.tf1_checkpoint:
        if not FLAGS.albert_config_file:
            raise app.UsageError("--tf1_checkpoint needs --albert_config_file")
        if not FLAGS.output.endswith(".keras"):
            raise app.UsageError(f"--output must end in .keras, got {FLAGS.output}")
        model = load_tf1_checkpoint(FLAGS.tf1_checkpoint, FLAGS.albert_config_file)
        with atomic_path(FLAGS.output, suffix=".keras") as staging:
            model.save(staging)
        logging.info("wrote %s (%d parameters)", FLAGS.output, model.count_params())
    else:
        model = keras.saving.load_model(FLAGS.keras_model)
        prefix = save_tf1_checkpoint(model, FLAGS.output)
        model.config.to_json_file(os.path.join(os.path.dirname(prefix), "albert_config.json"))
        logging.info("wrote TF1 checkpoint %s and albert_config.json beside it", prefix)


if __name__ == "__main__":
    _cli.run(main, tensorflow=True)
