"""Convert ALBERT checkpoints: original TF1, our `.keras` files, Hugging Face transformers folders.

  TF1 -> Keras:  python pipelines/convert_checkpoint.py --tf1_checkpoint=albert_base/model.ckpt-best \
                     --albert_config_file=albert_base/albert_config.json --output=albert_base.keras
  Keras -> TF1:  python pipelines/convert_checkpoint.py --keras_model=albert_base.keras \
                     --output=out/model.ckpt   (also writes out/albert_config.json)
  HF -> Keras:   python pipelines/convert_checkpoint.py --hf_model=albert-base-v2 --output=base.keras
                     (a folder transformers' save_pretrained wrote: config.json, model.safetensors)
  Keras -> HF:   python pipelines/convert_checkpoint.py --keras_model=base.keras \
                     --output_hf=out/albert-base --spm_model_file=30k-clean.model

Any source goes to any target: --keras_model or --hf_model with --output=model.ckpt writes a
TF1 checkpoint, --tf1_checkpoint with --output_hf a transformers folder. Bad input stops with one
line naming the file (and the tensor or config key); nothing is written under the output name.
--output_hf always writes the tokenizer (spiece.model, tokenizer_config.json): from
--spm_model_file, else the fine-tuning bundle of --keras_model (with its casing and label names),
else --hf_model's; a source without one is refused.
"""

import os
import pathlib
import sys

sys.path.insert(
    0, str(pathlib.Path(__file__).resolve().parents[1])
)  # run from a checkout, uninstalled

from pipelines import _cli  # first: TensorFlow's log level must be set before it loads
from pipelines import _config_flags
from absl import app, flags, logging

from albert_tf.config import check_preset_or_file
from albert_tf.settings import OUTPUT_DIR, OUTPUT_FILE

FLAGS = flags.FLAGS
flags.DEFINE_string(
    "tf1_checkpoint", None, "Original checkpoint prefix (or its directory) to convert."
)
flags.DEFINE_string("albert_config_file", None, "The `albert_config.json` of --tf1_checkpoint.")
_config_flags.define_preset_flag()
flags.DEFINE_string(
    "keras_model",
    None,
    "One of our `.keras` files (AlbertPretrainer, AlbertModel or a task model) to convert.",
)
flags.DEFINE_string(
    "hf_model",
    None,
    "A Hugging Face transformers ALBERT folder (config.json + model.safetensors, or its "
    "sharded index) to convert.",
)
flags.DEFINE_string(
    "output",
    None,
    "A `.keras` path, or a TF1 checkpoint prefix (from --keras_model, or any path not ending "
    "in .keras from --hf_model).",
)
flags.DEFINE_string(
    "output_hf", None, "A folder to write as transformers' save_pretrained does (not torch)."
)
flags.DEFINE_string(
    "spm_model_file",
    None,
    "With --output_hf: the SentencePiece model to copy into it as spiece.model (default: the "
    "bundle's, for a --keras_model of a fine-tuning bundle; --hf_model's spiece.model). "
    "Required where neither has one: a folder without its tokenizer is refused.",
)
flags.DEFINE_bool(
    "do_lower_case",
    True,
    "With --output_hf: the casing tokenizer_config.json states (default: the bundle's or "
    "--hf_model's own, where they state one).",
)
flags.DEFINE_enum(
    "hf_tokenizer",
    "albert",
    ["albert", "folder"],
    "With --output_hf: albert writes a tokenizer.json that tokenizes as the original ALBERT "
    "does; folder (with --hf_model) keeps that folder's own tokenizer files as they are.",
)
flags.DEFINE_list(
    "label_names",
    None,
    "With --output_hf, for a classifier: its labels in order, as config.json's id2label "
    "(default: the label names of a fine-tuning bundle's classifier_info.json, for its "
    "--keras_model; kept from a transformers source; else LABEL_0, LABEL_1, ...).",
)


def _load(flags_):
    """The model the source flag names."""
    from albert_tf.checkpoints import load_tf1_checkpoint
    from albert_tf.checkpoints.hf import load_hf_model
    from albert_tf.checkpoints.keras_files import load_keras_model

    from albert_tf.config import check_preset_vocab, config_from_preset_or_file

    if flags_.tf1_checkpoint:
        config = config_from_preset_or_file(flags_.preset, flags_.albert_config_file)
        check_preset_vocab(flags_.preset, config, flags_.spm_model_file)
        return load_tf1_checkpoint(flags_.tf1_checkpoint, config)
    if flags_.hf_model:
        from albert_tf.checkpoints.hf_format import warn_if_tokenizer_differs

        if flags_.hf_tokenizer != "folder":  # a kept tokenizer is the user's choice
            warn_if_tokenizer_differs(flags_.hf_model)
        return load_hf_model(flags_.hf_model)
    return load_keras_model(flags_.keras_model, compile=True)


def _hf_tokenizer_and_labels(model) -> dict:
    """save_hf_model's tokenizer and label arguments: the flags, else what the source holds
    (a fine-tuning bundle's manifest beside --keras_model, a --hf_model folder's files). A
    source without a SentencePiece model is refused: transformers would have no tokenizer."""
    from albert_tf.checkpoints.hf import resolve_do_lower_case, resolve_spm_model_file
    from albert_tf.finetuning.bundle import bundle_label_names, bundle_manifest
    from albert_tf.modeling.heads.classifier import AlbertClassifier

    manifest = bundle_manifest(FLAGS.keras_model) or {}
    label_names = FLAGS.label_names
    if not label_names and isinstance(model, AlbertClassifier) and not model.regression:
        label_names = bundle_label_names(manifest)
    if FLAGS.hf_tokenizer == "folder":
        return {"tokenizer_folder": FLAGS.hf_model, "label_names": label_names}
    spm = FLAGS.spm_model_file or manifest.get("spm_model_file")
    spm = resolve_spm_model_file(spm, FLAGS.hf_model)
    if not spm:
        raise ValueError(
            f"--output_hf={FLAGS.output_hf}: no SentencePiece model to write as its tokenizer "
            "(spiece.model) for transformers' AutoTokenizer: pass --spm_model_file"
        )
    do_lower_case = FLAGS.do_lower_case
    if not FLAGS["do_lower_case"].present:
        do_lower_case = manifest.get("do_lower_case", do_lower_case)
        do_lower_case = resolve_do_lower_case(do_lower_case, FLAGS.hf_model)
    return {"spm_model_file": spm, "do_lower_case": do_lower_case, "label_names": label_names}


def _convert():
    from albert_tf.checkpoints import save_tf1_checkpoint
    from albert_tf.checkpoints.hf import resolve_spm_model_file, save_hf_model
    from albert_tf.io import atomic_path

    model = _load(FLAGS)
    if FLAGS.output_hf:
        tokenizer_and_labels = _hf_tokenizer_and_labels(model)
        save_hf_model(model, FLAGS.output_hf, **tokenizer_and_labels)
        if FLAGS.hf_tokenizer == "folder":
            logging.info("kept the tokenizer files of %s", FLAGS.hf_model)
        else:
            logging.info(
                "wrote the tokenizer of %s (do_lower_case=%s)",
                tokenizer_and_labels["spm_model_file"],
                tokenizer_and_labels["do_lower_case"],
            )
    elif FLAGS.output.endswith(".keras"):
        with atomic_path(FLAGS.output, suffix=".keras") as staging:
            model.save(staging)
        logging.info("wrote %s (%d parameters)", FLAGS.output, model.count_params())
        spm = resolve_spm_model_file(None, FLAGS.hf_model)
        if spm:
            logging.info(
                "its SentencePiece model: %s (the --spm_model_file of export and fine-tuning)", spm
            )
    else:
        prefix = save_tf1_checkpoint(model, FLAGS.output)
        model.config.to_json_file(os.path.join(os.path.dirname(prefix), "albert_config.json"))
        logging.info("wrote TF1 checkpoint %s and albert_config.json beside it", prefix)


def main(argv):
    del argv
    sources = [FLAGS.tf1_checkpoint, FLAGS.keras_model, FLAGS.hf_model]
    if sum(map(bool, sources)) != 1:
        raise app.UsageError("give exactly one of --tf1_checkpoint, --keras_model or --hf_model")
    if bool(FLAGS.output) == bool(FLAGS.output_hf):
        raise app.UsageError("give exactly one of --output or --output_hf")
    if FLAGS.hf_tokenizer == "folder" and not (FLAGS.hf_model and FLAGS.output_hf):
        raise app.UsageError("--hf_tokenizer=folder goes with --hf_model and --output_hf")
    if FLAGS.tf1_checkpoint and not (FLAGS.albert_config_file or FLAGS.preset):
        raise app.UsageError("--tf1_checkpoint needs --albert_config_file or --preset")
    check_preset_or_file(FLAGS.preset, FLAGS.albert_config_file)
    if FLAGS.preset and not FLAGS.tf1_checkpoint:
        raise app.UsageError(
            "--preset goes with --tf1_checkpoint (the other sources hold a config)"
        )
    if FLAGS.tf1_checkpoint and FLAGS.output and not FLAGS.output.endswith(".keras"):
        raise app.UsageError(f"--output must end in .keras, got {FLAGS.output}")
    for name in ("spm_model_file", "label_names", "do_lower_case"):
        if FLAGS[name].present and not FLAGS.output_hf:
            raise app.UsageError(f"--{name} goes with --output_hf")
    if FLAGS.output:
        _config_flags.check_output_path("output", OUTPUT_FILE, FLAGS.output)
    else:
        _config_flags.check_output_path("output_hf", OUTPUT_DIR, FLAGS.output_hf)
    _convert()


def cli() -> None:
    """The `albert-convert-checkpoint` console script: this CLI, as `python pipelines/convert_checkpoint.py`."""
    _cli.run_task(main, tensorflow=True)


if __name__ == "__main__":
    cli()
