"""Export a model (any head of `heads.REGISTRY`) for TF Serving and TFLite, verified against it.

Layout under `output_dir` (TF Serving reads `<name>/<version>/`):

    <model_name>/<version>/                ids SavedModel: stock TF ops only
    <model_name>_preprocessing/<version>/  text -> ids SavedModel (+ tensorflow-text ops)
    <model_name>_text/<version>/           text -> outputs SavedModel (+ tensorflow-text ops;
                                           SQuAD heads: question, context -> answer, `qa_text`)
    <model_name>_tflite/<version>/         <model_name>_{fp32,fp16,int8_dynamic,int8,
                                                         int8_integer_only}.tflite
    export_report_<model_name>_<version>.json

Everything is built in a staging directory beside them, checked, and renamed into place only once
it meets its `ParityThresholds`; a variant that does not is left out, with the reason in the
report, and `ParityError` is raised after the verified rest has been written.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile

import keras
import tensorflow as tf
from absl import logging

from albert_tf.checkpoints.tf1 import load_tf1_checkpoint
from albert_tf.config import AlbertConfig, resolve_max_predictions_per_seq
from albert_tf.export import data as export_data
from albert_tf.export.app_metadata import AppMetadataSettings, add_app_metadata
from albert_tf.export.heads import head_spec
from albert_tf.export.parity import ParityThresholds
from albert_tf.export.qa_text import QaSettings
from albert_tf.io import write_json
from albert_tf.export.savedmodel import ServingHead, build_saved_models
from albert_tf.export.tflite import CALIBRATED_VARIANTS, VARIANTS, build_tflite_variants
from albert_tf.modeling.model import AlbertModel
from albert_tf.text.tf_tokenization import AlbertPreprocessingLayer
from albert_tf.text.tokenization import AlbertTokenizer

FORMATS = ("saved_model", *VARIANTS)
# `load_tf1_checkpoint` builds an `AlbertPretrainer` from an original pretraining checkpoint.
TF1_CHECKPOINT_HEAD = "pretrainer"
# Checked on every export with a tokenizer, whatever the data: empty, accented, digit-comma,
# quote/whitespace normalisation, and texts far over any max_seq_length (truncated).
PROBE_TEXTS = [
    ("The quick brown fox jumps over the lazy dog.", None),
    ("", None),
    ("Café au lait, naïve résumé — déjà vu.", "In 1990, 2001, and 2019, prices rose 3.5%."),
    ("  ``Quoted''\ttext\u3000with  odd   spacing ", ""),
    ("word " * 600, "another sentence " * 300),
]


class ParityError(RuntimeError):
    """Some requested artifacts failed verification and were not written (see the report)."""


@dataclasses.dataclass
class ExportConfig:
    """Where and what to export. See the module docstring for the layout."""

    output_dir: str
    model_name: str = "albert"
    version: int = 1
    max_seq_length: int = 128
    max_predictions_per_seq: int | None = None  # None: min(20, max_seq_length)
    formats: tuple[str, ...] = ("saved_model", "tflite_fp32")
    spm_model_file: str | None = None  # enables the text models and the tokenizer assets
    do_lower_case: bool = True
    representative_data: str | None = None  # text or pretraining TFRecords; else random ids
    num_verification_examples: int = 256
    num_calibration_examples: int = 100
    latency_runs: int = 50
    seed: int = 12345
    thresholds: ParityThresholds = dataclasses.field(default_factory=ParityThresholds)
    qa: QaSettings | None = None  # the SQuAD heads' text-in model; None: `QaSettings()`
    # Metadata for on-device clients in the TFLite files (`app_metadata`).
    app_metadata: AppMetadataSettings = dataclasses.field(default_factory=AppMetadataSettings)

    def __post_init__(self):
        self.max_predictions_per_seq = resolve_max_predictions_per_seq(
            self.max_predictions_per_seq, self.max_seq_length
        )

    def validate(self, albert_config: AlbertConfig) -> None:
        """Raise ValueError on the first setting that cannot work with `albert_config`."""
        unknown = [f for f in self.formats if f not in FORMATS]
        if unknown or not self.formats:
            raise ValueError(f"formats must be a non-empty subset of {FORMATS}, got {self.formats}")
        if not self.model_name or os.sep in self.model_name or self.model_name.startswith("."):
            raise ValueError(f"model_name must be a plain directory name, got {self.model_name!r}")
        if not isinstance(self.version, int) or self.version < 1:
            raise ValueError(
                f"version must be a positive int (TF Serving's version directory), "
                f"got {self.version!r}"
            )
        if not 3 <= self.max_seq_length <= albert_config.max_position_embeddings:
            raise ValueError(
                f"max_seq_length={self.max_seq_length} must be in [3, "
                f"max_position_embeddings={albert_config.max_position_embeddings}]"
            )
        if not 1 <= self.max_predictions_per_seq <= self.max_seq_length:
            raise ValueError(
                f"max_predictions_per_seq={self.max_predictions_per_seq} must be in "
                f"[1, max_seq_length={self.max_seq_length}]"
            )
        if self.qa is not None:
            self.qa.validate(self.max_seq_length)
        if calibrated := [f for f in self.formats if f in CALIBRATED_VARIANTS]:
            if not self.representative_data:
                raise ValueError(
                    f"{', '.join(calibrated)}: calibrated on real inputs, so "
                    f"representative_data is needed"
                )

    def destinations(self) -> dict[str, str]:
        """Final path of each artifact this config may write, by key."""
        out, name, version = self.output_dir, self.model_name, str(self.version)
        paths = {
            "saved_model": os.path.join(out, name, version),
            "preprocessing": os.path.join(out, f"{name}_preprocessing", version),
            "text": os.path.join(out, f"{name}_text", version),
            "report": os.path.join(out, f"export_report_{name}_{version}.json"),
        }
        for variant in VARIANTS:
            paths[variant] = os.path.join(
                out, f"{name}_tflite", version, f"{name}_{variant.removeprefix('tflite_')}.tflite"
            )
        return paths


def _albert_config_of(model: keras.Model) -> AlbertConfig | None:
    """The config of `model` or of the first `AlbertModel` nested in it."""
    if isinstance(getattr(model, "config", None), AlbertConfig):
        return model.config
    for layer in getattr(model, "layers", []):
        config = _albert_config_of(layer) if isinstance(layer, (AlbertModel, keras.Model)) else None
        if config is not None:
            return config
    return None


def serving_head(
    kind: str, model: keras.Model, albert_config_file: str | None = None
) -> ServingHead:
    """Wrap `model` as `kind` after checking it has what that head serves (see `heads.REGISTRY`)."""
    spec = head_spec(kind)
    config = _albert_config_of(model)
    if config is None and albert_config_file:
        config = AlbertConfig.from_json_file(albert_config_file)
    if config is None:
        raise ValueError(
            f"{model.name} holds no AlbertModel to read the ALBERT config from; "
            "give albert_config_file"
        )
    spec.check(model)
    return ServingHead(kind, model, config)


def load_serving_head(
    kind: str,
    keras_model: str | None = None,
    tf1_checkpoint: str | None = None,
    albert_config_file: str | None = None,
) -> ServingHead:
    """The model to export: a `.keras` file (any registered head), or an original TF1
    pretraining checkpoint with its `albert_config.json`."""
    if bool(keras_model) == bool(tf1_checkpoint):
        raise ValueError("give exactly one of keras_model or tf1_checkpoint")
    if tf1_checkpoint:
        if kind != TF1_CHECKPOINT_HEAD:
            raise ValueError(
                f"a TF1 checkpoint exports as head={TF1_CHECKPOINT_HEAD}; export fine-tuned "
                "classifiers from their .keras file"
            )
        if not albert_config_file:
            raise ValueError("tf1_checkpoint needs albert_config_file")
        return serving_head(kind, load_tf1_checkpoint(tf1_checkpoint, albert_config_file))
    import albert_tf.modeling  # noqa: F401  (registers every model class for load_model)

    if not os.path.isfile(keras_model):
        raise FileNotFoundError(f"Keras model file not found: {keras_model}")
    return serving_head(
        kind, keras.saving.load_model(keras_model, compile=False), albert_config_file
    )


def _tokenizer(config: ExportConfig, albert_config: AlbertConfig) -> AlbertTokenizer | None:
    if not config.spm_model_file:
        return None
    tokenizer = AlbertTokenizer(config.spm_model_file, do_lower_case=config.do_lower_case)
    if tokenizer.vocab_size != albert_config.vocab_size:
        raise ValueError(
            f"{config.spm_model_file} has {tokenizer.vocab_size} pieces but the "
            f"model's vocab_size is {albert_config.vocab_size}"
        )
    return tokenizer


def _examples(config: ExportConfig, head: ServingHead, tokenizer):
    """(verification examples, calibration examples, their texts, description of the source)."""
    wanted = config.num_verification_examples + config.num_calibration_examples
    if config.representative_data:
        examples, texts = export_data.load_examples(
            config.representative_data,
            tokenizer,
            config.max_seq_length,
            config.max_predictions_per_seq,
            wanted,
            config.seed,
        )
        source = config.representative_data
    else:
        examples, texts = (
            export_data.random_examples(
                head.config.vocab_size,
                config.max_seq_length,
                config.max_predictions_per_seq,
                wanted,
                config.seed,
            ),
            [],
        )
        source = "random token ids (no representative_data)"
        logging.warning(
            "No representative data: verifying on %s; pass real text for meaningful int8 checks",
            source,
        )
    count = export_data.num_examples(examples)
    verify = min(config.num_verification_examples, count)
    if verify < config.num_verification_examples:
        logging.warning(
            "%s has %d examples, fewer than the %d asked for verification",
            source,
            count,
            config.num_verification_examples,
        )
    verification = export_data.take(examples, slice(0, verify))
    # Calibrate on examples not verified on when there are enough.
    calibration = (
        export_data.take(examples, slice(verify, None)) if count > verify else verification
    )
    return verification, calibration, texts[:verify], source


def _write_assets(directory: str, head: ServingHead, config: ExportConfig) -> dict[str, str]:
    os.makedirs(directory)
    head.config.to_json_file(os.path.join(directory, "albert_config.json"))
    assets = {"albert_config_file": os.path.join(directory, "albert_config.json")}
    if config.spm_model_file:
        with open(os.path.join(directory, "do_lower_case.txt"), "w", encoding="utf-8") as f:
            f.write(f"{str(config.do_lower_case).lower()}\n")
        assets["do_lower_case_file"] = os.path.join(directory, "do_lower_case.txt")
        assets["spm_model_file"] = shutil.copy(config.spm_model_file, directory)
    return assets


def export_model(head: ServingHead, config: ExportConfig) -> dict:
    """Export `head` as `config` asks; returns the report (also written as json).

    Raises ValueError on bad settings before writing anything, and `ParityError` (after writing
    everything that passed, and the report) when some artifacts failed verification.
    """
    config.validate(head.config)
    tokenizer = _tokenizer(config, head.config)
    destinations = config.destinations()
    taken = [
        p
        for k, p in destinations.items()
        if os.path.exists(p)
        and (
            k in config.formats
            or k == "report"
            or (k in ("preprocessing", "text") and tokenizer and "saved_model" in config.formats)
        )
    ]
    if taken:
        raise FileExistsError(f"already exported (choose another version): {taken}")
    verification, calibration, texts, source = _examples(config, head, tokenizer)
    if head.spec.adapt_examples is not None:  # the head's own inputs, made from these
        verification = head.spec.adapt_examples(head.model, verification)
        calibration = head.spec.adapt_examples(head.model, calibration)
    logging.info("Verifying on %d examples from %s", export_data.num_examples(verification), source)
    reference = {name: head.keras_outputs(verification, name) for name in head.signature_inputs}
    report = {
        "model_name": config.model_name,
        "version": config.version,
        "head": head.kind,
        "max_seq_length": config.max_seq_length,
        "max_predictions_per_seq": config.max_predictions_per_seq,
        "albert_config": head.config.to_dict(),
        "tensorflow": tf.__version__,
        "verification": {
            "source": source,
            "num_examples": export_data.num_examples(verification),
            "num_calibration_examples": export_data.num_examples(calibration),
        },
        "thresholds": dataclasses.asdict(config.thresholds),
        "artifacts": {},
    }
    os.makedirs(config.output_dir, exist_ok=True)
    staging = tempfile.mkdtemp(
        prefix=f".export-{config.model_name}-{config.version}-", dir=config.output_dir
    )
    try:
        passed = {}
        if "saved_model" in config.formats:
            assets = _write_assets(os.path.join(staging, "assets_source"), head, config)
            own_text_models = tokenizer is not None and head.spec.text_models is not None
            preprocessing = (
                None
                if tokenizer is None or own_text_models
                else AlbertPreprocessingLayer(
                    tokenizer.model_proto,
                    max_seq_length=config.max_seq_length,
                    do_lower_case=config.do_lower_case,
                )
            )
            passed.update(
                build_saved_models(
                    head,
                    config.max_seq_length,
                    preprocessing,
                    tokenizer,
                    verification,
                    PROBE_TEXTS + texts,
                    reference,
                    assets,
                    staging,
                    config.thresholds,
                    report["artifacts"],
                )
            )
            if own_text_models:
                passed.update(
                    head.spec.text_models(
                        head, config, tokenizer, assets, staging, report["artifacts"]
                    )
                )
        variants = [f for f in config.formats if f in VARIANTS]
        if variants:
            passed.update(
                build_tflite_variants(
                    head,
                    variants,
                    config.max_seq_length,
                    config.max_predictions_per_seq,
                    verification,
                    calibration,
                    reference,
                    staging,
                    config.thresholds,
                    config.latency_runs,
                    report["artifacts"],
                )
            )
            add_app_metadata(
                head, config, tokenizer, PROBE_TEXTS + texts, verification, passed, report
            )
        for key, staged in passed.items():
            os.makedirs(os.path.dirname(destinations[key]), exist_ok=True)
            os.rename(staged, destinations[key])
            report["artifacts"][key]["path"] = destinations[key]
            logging.info("Wrote %s", destinations[key])
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    write_json(destinations["report"], report)
    refused = {k: a["failures"] for k, a in report["artifacts"].items() if a["failures"]}
    if refused:
        raise ParityError(
            f"not written, failed verification: {refused} (report: {destinations['report']})"
        )
    return report
