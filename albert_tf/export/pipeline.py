"""Export a model (any head of `heads.REGISTRY`) in any formats of `formats.REGISTRY`, verified.

Layout under `output_dir` (TF Serving reads `<name>/<version>/`):

    <model_name>/<version>/                ids SavedModel: stock TF ops only
    <model_name>_preprocessing/<version>/  text -> ids SavedModel (+ tensorflow-text ops)
    <model_name>_text/<version>/           text -> outputs SavedModel (+ tensorflow-text ops;
                                           SQuAD heads: question, context -> answer, `qa.text`)
    <model_name>_tflite/<version>/         <model_name>_{fp32,fp16,int8_dynamic,int8,
                                                         int8_integer_only}.tflite
    <model_name>_keras/<version>/          <model_name>_text.keras: a classifier taking raw
                                           strings (`keras_text`)
    export_report_<model_name>_<version>.json

Everything is built in one staging directory beside them, checked, and published all or nothing
(`publish`): what meets its format's gate (`ParityThresholds`) is renamed into place, the report
last; a variant that does not is left out, with the reason in the report, and `ParityError` is
raised after the verified rest has been published.
"""

from __future__ import annotations

import dataclasses
import os

import tensorflow as tf
from absl import logging

from albert_tf.config import AlbertConfig, resolve_max_predictions_per_seq
from albert_tf.export import data as export_data
from albert_tf.export import formats, publish
from albert_tf.export.tflite import app_metadata
from albert_tf.export.tflite.app_metadata import AppMetadataSettings
from albert_tf.export.parity import ParityThresholds
from albert_tf.export.qa.inputs import DEFAULT_MAX_TEXT_BYTES
from albert_tf.export.qa.text import QaSettings
from albert_tf.export.heads.serving import ServingHead
from albert_tf.output_dirs import disk_size
from albert_tf.text.tokenization import AlbertTokenizer

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
    # The SQuAD heads' text-in model; None: `QaSettings()` at `max_text_bytes`.
    qa: QaSettings | None = None
    # The most UTF-8 bytes a request to a text-in model may hold in each field, all its rows
    # together; more is refused before tokenization (stored in the models and the report).
    max_text_bytes: int = DEFAULT_MAX_TEXT_BYTES
    # Metadata for on-device clients in the TFLite files (`app_metadata`).
    app_metadata: AppMetadataSettings = dataclasses.field(default_factory=AppMetadataSettings)

    def __post_init__(self):
        self.max_predictions_per_seq = resolve_max_predictions_per_seq(
            self.max_predictions_per_seq, self.max_seq_length
        )

    def validate(self, albert_config: AlbertConfig) -> None:
        """Raise ValueError on the first setting that cannot work with `albert_config`."""
        registered = tuple(formats.REGISTRY)
        if not self.formats or any(f not in registered for f in self.formats):
            raise ValueError(
                f"formats must be a non-empty subset of {registered}, got {self.formats}"
            )
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
        for name in ("num_verification_examples", "num_calibration_examples", "latency_runs"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if not isinstance(self.max_text_bytes, int) or self.max_text_bytes < 1:
            raise ValueError(f"max_text_bytes must be a positive int, got {self.max_text_bytes!r}")
        if self.qa is not None:
            self.qa.validate(self.max_seq_length)
            if self.qa.max_context_bytes != self.max_text_bytes:
                raise ValueError(
                    f"qa.max_context_bytes={self.qa.max_context_bytes} differs from "
                    f"max_text_bytes={self.max_text_bytes}: the text models have one request "
                    f"limit, max_text_bytes"
                )
        if calibrated := [f for f in self.formats if formats.REGISTRY[f].calibrated]:
            if not self.representative_data:
                raise ValueError(
                    f"{', '.join(calibrated)}: calibrated on real inputs, so "
                    f"representative_data is needed"
                )

    def destinations(self) -> dict[str, str]:
        """Final path of each artifact this config may write, by key (`report`: the report)."""
        return formats.destinations(self.output_dir, self.model_name, self.version)


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


def _identity(config: ExportConfig, head: ServingHead) -> dict:
    """The report's fields that say which export wrote it (not what it measured): a version
    whose report holds other values was exported from another model or with other settings."""
    return {
        "model_name": config.model_name,
        "version": config.version,
        "head": head.kind,
        "max_seq_length": config.max_seq_length,
        "max_predictions_per_seq": config.max_predictions_per_seq,
        "max_text_bytes": config.max_text_bytes,
        "albert_config": head.config.to_dict(),
        "thresholds": dataclasses.asdict(config.thresholds),
    }


def _report(config: ExportConfig, head: ServingHead, verification, calibration, source) -> dict:
    return {
        **_identity(config, head),
        "tensorflow": tf.__version__,
        "verification": {
            "source": source,
            "num_examples": export_data.num_examples(verification),
            "num_calibration_examples": export_data.num_examples(calibration),
        },
        "artifacts": {},
    }


def _build(job: formats.ExportJob, specs, staging: publish.Staging, places: dict) -> None:
    """Builds every format, then stages each artifact that passed at its final place."""
    for spec in specs:
        for key, built in spec.build(job, spec).items():
            record = job.artifacts[key]
            record.setdefault("size_bytes", disk_size(built))
            if not record["failures"]:
                staging.stage(places[key], built)
                record["path"] = places[key]


def _raise_one_line(error: BaseException, outcome: str):
    """Raises `error` with `outcome` (what became of the staging directory) as a note, which the
    CLI's one-line ending shows beside what ran out or went wrong (`pipelines/_failures.py`)."""
    error.add_note(outcome)
    raise error


def export_model(head: ServingHead, config: ExportConfig) -> dict:
    """Export `head` as `config` asks; returns the report (also written as json).

    A version this same export already published whole (a rerun of one stopped after its
    commit point; `publish.published_version`) is not exported again: its report is returned.
    Raises ValueError on bad settings and OSError on output paths of the wrong kind or a version
    already exported otherwise before writing anything; the OSError of a full or refusing output
    filesystem, with a note saying what became of the staging directory; `ParityError` (after
    publishing everything that passed, and the report) when some artifacts failed verification.
    """
    config.validate(head.config)
    specs = [formats.REGISTRY[name] for name in dict.fromkeys(config.formats)]
    tokenizer = _tokenizer(config, head.config)
    for spec in specs:
        refusal = spec.refusal(head.kind, tokenizer is not None)
        if refusal:  # before any work
            raise ValueError(refusal)
    app_metadata.check_before_export(head, config, any(spec.tflite for spec in specs))
    destinations = config.destinations()
    places = {
        key: destinations[key]
        for spec in specs
        for key in spec.artifacts
        if tokenizer is not None or key not in spec.text_artifacts
    }
    name, version = config.model_name, config.version
    version_directories = sorted(
        {
            destination.version_directory(config.output_dir, name, version)
            for spec in specs
            for key, destination in spec.artifacts.items()
            if key in places
        }
    )
    report_path = destinations[formats.REPORT]
    publish.check_output_paths(config.output_dir, version_directories, report_path)
    try:
        staging = publish.Staging(
            config.output_dir, name, version, [*version_directories, report_path]
        )
    except publish.VersionTaken as error:
        # Maybe this same export's version, stopped after its commit point (Staging has just
        # finished the renames it left): then it is whole in place and nothing is left to do.
        groups = [set(spec.artifacts) & set(places) for spec in specs]
        report = publish.published_version(report_path, _identity(config, head), places, groups)
        if report is None:
            _raise_one_line(error, f"nothing was written in {config.output_dir}")
        logging.info(
            "%s version %d is already exported and complete in %s (%s): nothing to do",
            name,
            version,
            config.output_dir,
            report_path,
        )
        return report
    except OSError as error:
        _raise_one_line(error, f"nothing was written in {config.output_dir}")
    try:
        verification, calibration, texts, source = _examples(config, head, tokenizer)
        if head.spec.adapt_examples is not None:  # the head's own inputs, made from these
            verification = head.spec.adapt_examples(head.model, verification)
            calibration = head.spec.adapt_examples(head.model, calibration)
        if not export_data.num_examples(verification):
            raise ValueError(
                f"{source}: no example to verify on (none fits max_seq_length="
                f"{config.max_seq_length}?)"
            )
        logging.info(
            "Verifying on %d examples from %s", export_data.num_examples(verification), source
        )
        report = _report(config, head, verification, calibration, source)
        job = formats.ExportJob(
            head=head,
            config=config,
            tokenizer=tokenizer,
            verification=verification,
            calibration=calibration,
            texts=PROBE_TEXTS + texts,
            reference={n: head.keras_outputs(verification, n) for n in head.signature_inputs},
            staging=staging.path,
            artifacts=report["artifacts"],
        )
        _build(job, specs, staging, places)
        report.update(job.notes)
        for path in staging.commit(report, report_path):
            logging.info("Wrote %s", path)
    except BaseException as error:
        _raise_one_line(error, staging.abandon())
    finally:
        staging.close()
    refused = {k: a["failures"] for k, a in report["artifacts"].items() if a["failures"]}
    if refused:
        raise ParityError(f"not written, failed verification: {refused} (report: {report_path})")
    return report
