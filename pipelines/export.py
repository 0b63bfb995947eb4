"""Export an ALBERT model for TF Serving (SavedModels) and phones (TFLite), verified on every run.

  python pipelines/export.py --tf1_checkpoint=albert_base/model.ckpt-best \
      --albert_config_file=albert_base/albert_config.json \
      --spm_model_file=albert_base/30k-clean.model --representative_data=corpus.txt \
      --output_dir=exported --model_name=albert_base --version=1 --max_seq_length=128 \
      --formats=saved_model,tflite_fp32,tflite_fp16,tflite_int8_dynamic,tflite_int8

  python pipelines/export.py --keras_model=sst2/export/classifier.keras ...   (a fine-tuned
      classifier: the head, tokenizer and lengths of its bundle)

  python pipelines/export.py --hf_model=albert-base-v2-squad2 --head=squad_v1 ...   (a Hub model)

  python pipelines/export.py --head=squad_v2 --tf1_checkpoint=squad2/model.ckpt-best \
      --albert_config_file=albert_base/albert_config.json \
      --spm_model_file=albert_base/30k-clean.model --max_seq_length=384 --doc_stride=128 \
      --max_query_length=64 --null_score_diff_threshold=-1.2 ...   (SQuAD; race likewise)

Writes `<output_dir>/<model_name>/<version>/` (TF Serving), `<model_name>_preprocessing/` and
`<model_name>_text/` (with --spm_model_file; tf-text ops too, which stock TF Serving links),
`<model_name>_tflite/<version>/` and `export_report_<model_name>_<version>.json`, all or nothing
(albert_tf/export/publish.py): first it finishes or removes what a stopped export of the same
--model_name left in --output_dir, saying so; a rerun of an export stopped after its commit point
then finds its version whole and exits 0, saying so in one line. Exits non-zero if anything failed
verification (it is then not written; the report says why), with one line on bad input, a full
disk or a refused write (status 1), and on SIGINT / SIGTERM (status 130 / 143). With
--head=squad_v1/squad_v2 and --spm_model_file, `<model_name>_text/` is the text-in
question-answering model (question, context -> answer; see albert_tf/export/qa/text.py).
"""

import dataclasses
import pathlib
import sys

sys.path.insert(
    0, str(pathlib.Path(__file__).resolve().parents[1])
)  # run from a checkout, uninstalled

from pipelines import _cli  # first: TensorFlow's log level must be set before it loads
from pipelines import _config_flags
from absl import app, flags, logging

# The heads' registry, which the flags list, is built with TensorFlow: loaded here first, without
# its start-up noise.
_cli.import_tensorflow_quietly()

from albert_tf.checkpoints.hf import resolve_do_lower_case, resolve_spm_model_file  # noqa: E402
from albert_tf.checkpoints.hf_format import warn_if_tokenizer_differs  # noqa: E402
from albert_tf.config import AlbertConfig, check_preset_or_file, check_preset_vocab  # noqa: E402
from albert_tf.export import ExportConfig, export_model, load_serving_head  # noqa: E402
from albert_tf.export.tflite.app_metadata import (  # noqa: E402
    default_max_seq_length,
    settings_beside,
    settings_of_hf,
    with_label_names,
)
from albert_tf.export.formats import REGISTRY as FORMATS  # noqa: E402
from albert_tf.export.heads import REGISTRY as HEADS  # noqa: E402
from albert_tf.export.qa.inputs import DEFAULT_MAX_TEXT_BYTES  # noqa: E402
from albert_tf.export.qa.text import QA_HEADS, QaSettings  # noqa: E402
from albert_tf.finetuning.bundle import bundle_manifest  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string(
    "keras_model",
    None,
    "A `.keras` file: AlbertPretrainer, or a classifier (see --head). In a fine-tuning bundle "
    "(its export_dir), the bundle's head, SentencePiece model, casing, sequence length and SQuAD "
    "windows are the defaults of those flags.",
)
flags.DEFINE_string(
    "tf1_checkpoint",
    None,
    "An original TF1 pretraining checkpoint (prefix or directory); needs --albert_config_file. "
    "With --head=squad_v1, squad_v2 or race: a fine-tuned checkpoint of that task (run_squad_v1, "
    "run_squad_v2, run_race), head included.",
)
flags.DEFINE_string(
    "hf_model",
    None,
    "A Hugging Face transformers ALBERT folder (config.json + model.safetensors, e.g. a Hub "
    "model) of the class --head serves: AlbertForPreTraining or AlbertForMaskedLM (pretrainer), "
    "AlbertForSequenceClassification (classifier, its id2label the TFLite labels), "
    "AlbertForQuestionAnswering (squad_v1), AlbertForMultipleChoice (race). Its spiece.model is "
    "the SentencePiece model unless --spm_model_file is given, the do_lower_case of its "
    "tokenizer_config.json, if any, the casing.",
)
flags.DEFINE_string("albert_config_file", None, "The `albert_config.json` of --tf1_checkpoint.")
_config_flags.define_preset_flag()
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
    "Sequence length of the TFLite models, the text models and serve_examples (--head=squad_v1 "
    "with --tflite_metadata: 384 unless given, the length BertQuestionAnswerer feeds, if the "
    "model has the positions).",
)
flags.DEFINE_integer(
    "max_predictions_per_seq",
    None,
    "MLM positions of the TFLite `mlm` signature (default: min(20, --max_seq_length)).",
)
flags.DEFINE_list(
    "formats",
    ["saved_model", "tflite_fp32"],
    "Any of: " + "; ".join(f"{name}: {spec.summary}" for name, spec in FORMATS.items()) + ".",
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
    list(HEADS),
    " ".join(f"{name}: {spec.summary}" for name, spec in HEADS.items()),
)
flags.DEFINE_bool(
    "tflite_metadata",
    True,
    "TFLite files of a single-text classifier and of squad_v1 carry metadata for on-device "
    "clients (MediaPipe Tasks, TFLite Task Library: tokenizer, input/output names, labels from "
    "classifier_info.json beside --keras_model); false: the files as converted.",
)
flags.DEFINE_bool(
    "single_text_client",
    False,
    "--head=classifier: it takes one text, so its TFLite files may carry the single-text "
    "clients' metadata. Needed where its task is unknown (no classifier_info.json beside "
    "--keras_model, a --hf_model), refused for a sentence-pair task.",
)
flags.DEFINE_string("author", "", "The TFLite metadata's author (with --tflite_metadata).")
flags.DEFINE_string(
    "license", "", "The TFLite metadata's license, e.g. Apache-2.0 (with --tflite_metadata)."
)
flags.DEFINE_list(
    "label_names",
    None,
    "--head=classifier: its label names in output order (e.g. bad,good), served as the text "
    "models' `label` and the TFLite labels.txt; default: the `label_names` of classifier_info.json "
    "beside --keras_model, a --hf_model's id2label, else 0,1,...",
)
flags.DEFINE_integer("num_verification_examples", 256, "Examples every artifact is checked on.")
flags.DEFINE_integer(
    "num_calibration_examples",
    100,
    "Examples the calibrated int8 "
    "variants (tflite_int8, tflite_int8_integer_only) are calibrated on.",
)
flags.DEFINE_integer("latency_runs", 50, "Timed TFLite runs per variant and thread count.")
flags.DEFINE_integer("doc_stride", 128, "SQuAD text-in model: pieces between window starts.")
flags.DEFINE_integer("max_query_length", 64, "SQuAD text-in model: question pieces kept.")
flags.DEFINE_integer("n_best_size", 20, "SQuAD text-in model: n-best entries per question.")
flags.DEFINE_integer("max_answer_length", 30, "SQuAD text-in model: longest answer, in pieces.")
flags.DEFINE_float(
    "null_score_diff_threshold",
    0.0,
    "SQuAD v2.0 text-in model: answer \"\" where the null odds are >= this (stored in the model).",
)
flags.DEFINE_integer(
    "max_text_bytes",
    DEFAULT_MAX_TEXT_BYTES,
    "Text models: the most UTF-8 bytes one request may hold in each text field, all its rows "
    "together (text; text_a, text_b; SQuAD: contexts, questions); a request with more, or with "
    "text that is not UTF-8, is refused before tokenization (stored in the models).",
)
flags.DEFINE_alias("max_context_bytes", "max_text_bytes")  # the SQuAD text-in model's name
flags.DEFINE_string(
    "qa_verification_file",
    None,
    "A SQuAD json whose questions the text-in model must answer as the Python path does "
    "(besides built-in probes).",
)
flags.DEFINE_integer(
    "start_n_top", 5, "SQuAD v2.0 from --tf1_checkpoint: starts kept by the model's beam."
)
flags.DEFINE_integer("end_n_top", 5, "SQuAD v2.0 from --tf1_checkpoint: ends kept per start.")
flags.mark_flag_as_required("output_dir")


# The flags whose defaults a fine-tuning bundle's manifest (beside --keras_model) replaces: what
# the model was trained with, which an export at other values would silently mismatch.
BUNDLE_FLAGS = (
    "spm_model_file",
    "do_lower_case",
    "max_seq_length",
    *("doc_stride", "max_query_length", "n_best_size", "max_answer_length"),
)


def head_of_bundle(manifest: dict) -> str | None:
    """The --head that serves the model a fine-tuning manifest describes."""
    if "version" in manifest:
        return f"squad_{manifest['version']}"
    if "max_qa_length" in manifest:
        return "race"
    return "classifier" if "task_name" in manifest else None


def take_bundle_defaults() -> None:
    """Sets the flags not given to what the fine-tuning bundle beside --keras_model recorded
    (its head, tokenizer, casing, sequence length, SQuAD windows), saying which in one line."""
    manifest = bundle_manifest(FLAGS.keras_model) or {}
    recorded = {name: manifest.get(name) for name in BUNDLE_FLAGS}
    recorded["head"] = head_of_bundle(manifest)
    taken = {
        name: value
        for name, value in recorded.items()
        if value is not None and not FLAGS[name].present
    }
    for name, value in taken.items():
        FLAGS[name].value = value
    if taken:
        said = " ".join(f"--{name}={value}" for name, value in taken.items())
        logging.info("from the fine-tuning bundle of %s: %s", FLAGS.keras_model, said)


def main(argv):
    del argv
    sources = (FLAGS.keras_model, FLAGS.tf1_checkpoint, FLAGS.hf_model)
    if sum(map(bool, sources)) != 1:
        raise app.UsageError("give exactly one of --keras_model, --tf1_checkpoint or --hf_model")
    check_preset_or_file(FLAGS.preset, FLAGS.albert_config_file)
    take_bundle_defaults()
    model_config = FLAGS.albert_config_file
    if FLAGS.preset:
        model_config = AlbertConfig.from_preset(FLAGS.preset)
        check_preset_vocab(FLAGS.preset, model_config, FLAGS.spm_model_file)
    head = load_serving_head(
        FLAGS.head,
        FLAGS.keras_model,
        FLAGS.tf1_checkpoint,
        model_config,
        model_options={"start_n_top": FLAGS.start_n_top, "end_n_top": FLAGS.end_n_top},
        hf_model=FLAGS.hf_model,
    )
    spm_model_file, do_lower_case = FLAGS.spm_model_file, FLAGS.do_lower_case
    if FLAGS.hf_model:
        warn_if_tokenizer_differs(FLAGS.hf_model)
        spm_model_file = resolve_spm_model_file(spm_model_file, FLAGS.hf_model)
        do_lower_case = resolve_do_lower_case(do_lower_case, FLAGS.hf_model)
    if FLAGS.hf_model and FLAGS.head == "classifier":
        app_metadata = settings_of_hf(head.config, FLAGS.tflite_metadata)
    else:
        app_metadata = settings_beside(
            FLAGS.keras_model if FLAGS.head == "classifier" else None, FLAGS.tflite_metadata
        )
    if FLAGS.label_names:
        app_metadata = with_label_names(app_metadata, head, FLAGS.label_names)
    app_metadata = dataclasses.replace(
        app_metadata,
        single_text_client=FLAGS.single_text_client,
        author=FLAGS.author,
        license=FLAGS.license,
    )
    qa = None
    if FLAGS.head in QA_HEADS:
        qa = QaSettings(
            doc_stride=FLAGS.doc_stride,
            max_query_length=FLAGS.max_query_length,
            n_best_size=FLAGS.n_best_size,
            max_answer_length=FLAGS.max_answer_length,
            null_score_diff_threshold=FLAGS.null_score_diff_threshold,
            verification_file=FLAGS.qa_verification_file,
            max_context_bytes=FLAGS.max_text_bytes,
        )
    report = export_model(
        head,
        ExportConfig(
            output_dir=FLAGS.output_dir,
            model_name=FLAGS.model_name,
            version=FLAGS.version,
            max_seq_length=default_max_seq_length(
                head,
                FLAGS.tflite_metadata,
                FLAGS.max_seq_length if FLAGS["max_seq_length"].present else None,
                FLAGS.max_seq_length,
            ),
            max_predictions_per_seq=FLAGS.max_predictions_per_seq,
            formats=tuple(FLAGS.formats),
            spm_model_file=spm_model_file,
            do_lower_case=do_lower_case,
            representative_data=FLAGS.representative_data,
            num_verification_examples=FLAGS.num_verification_examples,
            num_calibration_examples=FLAGS.num_calibration_examples,
            latency_runs=FLAGS.latency_runs,
            qa=qa,
            max_text_bytes=FLAGS.max_text_bytes,
            app_metadata=app_metadata,
        ),
    )
    for key, artifact in sorted(report["artifacts"].items()):
        logging.info("%s: %s (%d bytes)", key, artifact["path"], artifact["size_bytes"])


def cli() -> None:
    """The `albert-export` console script: this CLI, as `python pipelines/export.py`."""
    _cli.run_task(main, tensorflow=True, bad_input="export failed")


if __name__ == "__main__":
    cli()
