"""Export an ALBERT model for TF Serving (SavedModels) and phones (TFLite), verified on every run.

  python pipelines/export.py --tf1_checkpoint=albert_base/model.ckpt-best \
      --albert_config_file=albert_base/albert_config.json \
      --spm_model_file=albert_base/30k-clean.model --representative_data=corpus.txt \
      --output_dir=exported --model_name=albert_base --version=1 --max_seq_length=128 \
      --formats=saved_model,tflite_fp32,tflite_fp16,tflite_int8_dynamic,tflite_int8

  python pipelines/export.py --keras_model=sst2.keras --head=classifier ...   (a classifier)

Writes `<output_dir>/<model_name>/<version>/` (TF Serving), `<model_name>_preprocessing/` and
`<model_name>_text/` (with --spm_model_file; need tf-text ops), `<model_name>_tflite/<version>/`
and `export_report_<model_name>_<version>.json`. Exits non-zero if anything failed verification
(it is then not written; the report says why).
"""

import pathlib
import sys

sys.path.insert(
    0, str(pathlib.Path(__file__).resolve().parents[1])
)  # run from a checkout, uninstalled

from pipelines import _cli  # first: TensorFlow's log level must be set before it loads
from absl import app, flags, logging

_cli.import_tensorflow_quietly()  # the next line imports it, for --head's choices
from albert_tf.export.heads import REGISTRY  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string(
    "keras_model", None, "A `.keras` file: AlbertPretrainer, or a classifier (see --head)."
)
flags.DEFINE_string(
    "tf1_checkpoint",
    None,
    "An original TF1 pretraining checkpoint (prefix or directory); needs --albert_config_file.",
)
flags.DEFINE_string("albert_config_file", None, "The `albert_config.json` of --tf1_checkpoint.")
flags.DEFINE_string(
    "spm_model_file",
    None,
    "SentencePiece model: adds the text SavedModels and "
    "tokenizer assets, and lets --representative_data be text.",
)
flags.DEFINE_bool("do_lower_case", True, "Lowercase text in the text models (uncased models).")
flags.DEFINE_string("output_dir", None, "Directory to export under.")
flags.DEFINE_string("model_name", "albert", "TF Serving model name (a directory name).")
flags.DEFINE_integer(
    "version", 1, "TF Serving version number; an existing one is never overwritten."
)
flags.DEFINE_integer(
    "max_seq_length",
    128,
    "Sequence length of the TFLite models, the text models and serve_examples.",
)
flags.DEFINE_integer(
    "max_predictions_per_seq",
    None,
    "MLM positions of the TFLite `mlm` signature (default: min(20, --max_seq_length)).",
)
flags.DEFINE_list(
    "formats",
    ["saved_model", "tflite_fp32"],
    "Any of saved_model, tflite_fp32, "
    "tflite_fp16, tflite_int8_dynamic, tflite_int8 (static int8 matmuls, float "
    "elsewhere: XNNPACK runs it whole), tflite_int8_integer_only (every op int8, "
    "for integer-only accelerators).",
)
flags.DEFINE_string(
    "representative_data",
    None,
    "Text (one sentence per line) or pretraining "
    "TFRecords (*.tfrecord): verification examples and int8 calibration.",
)
flags.DEFINE_enum(
    "head",
    "pretrainer",
    list(REGISTRY),
    " ".join(f"{name}: {spec.summary}" for name, spec in REGISTRY.items()),
)
flags.DEFINE_integer("num_verification_examples", 256, "Examples every artifact is checked on.")
flags.DEFINE_integer(
    "num_calibration_examples",
    100,
    "Examples the calibrated int8 "
    "variants (tflite_int8, tflite_int8_integer_only) are calibrated on.",
)
flags.DEFINE_integer("latency_runs", 50, "Timed TFLite runs per variant and thread count.")
flags.mark_flag_as_required("output_dir")


def main(argv):
    del argv
    from albert_tf.export import ExportConfig, ParityError, export_model, load_serving_head

    if bool(FLAGS.keras_model) == bool(FLAGS.tf1_checkpoint):
        raise app.UsageError("give exactly one of --keras_model or --tf1_checkpoint")
    try:
        head = load_serving_head(
            FLAGS.head, FLAGS.keras_model, FLAGS.tf1_checkpoint, FLAGS.albert_config_file
        )
        report = export_model(
            head,
            ExportConfig(
                output_dir=FLAGS.output_dir,
                model_name=FLAGS.model_name,
                version=FLAGS.version,
                max_seq_length=FLAGS.max_seq_length,
                max_predictions_per_seq=FLAGS.max_predictions_per_seq,
                formats=tuple(FLAGS.formats),
                spm_model_file=FLAGS.spm_model_file,
                do_lower_case=FLAGS.do_lower_case,
                representative_data=FLAGS.representative_data,
                num_verification_examples=FLAGS.num_verification_examples,
                num_calibration_examples=FLAGS.num_calibration_examples,
                latency_runs=FLAGS.latency_runs,
            ),
        )
    except (ValueError, OSError, ParityError) as e:  # bad input or refused: no traceback
        raise SystemExit(f"export failed: {e}") from None
    for key, artifact in sorted(report["artifacts"].items()):
        logging.info("%s: %s (%d bytes)", key, artifact["path"], artifact["size_bytes"])


if __name__ == "__main__":
    _cli.run(main, tensorflow=True)
