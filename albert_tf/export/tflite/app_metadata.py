"""TFLite files that on-device clients run unmodified: MediaPipe Tasks and the TFLite Task Library.

An app does not feed a raw interpreter three id tensors: it hands a `.tflite` file with metadata
to a client library that tokenizes on the device. For a single-text classifier that is MediaPipe
Tasks' `TextClassifier` (Android, iOS, web, Python) or the Task Library's `BertNLClassifier`; for
SQuAD v1.1 the Task Library's `BertQuestionAnswerer`, which feeds [1, 384] inputs. The export's
TFLite files of those heads carry (`with_metadata`): inputs named `ids`, `mask`, `segment_ids`
in the subgraph's order, a SentencePiece tokenizer unit with the client-compatible SentencePiece
model (`albert_tf.text.client_sentencepiece`) packed in, the output `probability` with the label
names, or `start_logits` and `end_logits`.

Before writing, the clients' tokenization (re-implemented) must give our ids on every probe and
verification text, and each file's outputs in LiteRT must be bit-identical with and without the
metadata; a file that fails either is refused like a parity failure. A cased model fails the
export: the clients always lowercase. Other heads (and sentence-pair classifiers, and SQuAD v1
at another length) get no metadata, with the reason in the report.
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
from absl import logging
from ai_edge_litert.interpreter import Interpreter

from albert_tf.checkpoints.hf_config import HF_EXTRA
from albert_tf.config import AlbertConfig
from albert_tf.export import data as export_data
from albert_tf.export.tflite import metadata as metadata
from albert_tf.export.tflite.converter import run_signature
from albert_tf.finetuning.bundle import MANIFEST_KEYS
from albert_tf.io import refuse_unknown_keys
from albert_tf.tasks.glue.processors import parse_label_names
from albert_tf.tasks.glue.processors import TASKS as GLUE_TASKS
from albert_tf.text.client_sentencepiece import (
    CLIENT_PROBE_TEXTS,
    ClientTokenizer,
    client_sentencepiece_model,
    comma_number_mismatches,
    tokenization_mismatches,
)

QA_CLIENT_SEQ_LENGTH = 384  # BertQuestionAnswerer's fixed input length
CLIENTS = {
    "classifier": ("MediaPipe Tasks TextClassifier", "TFLite Task Library BertNLClassifier"),
    "squad_v1": ("TFLite Task Library BertQuestionAnswerer",),
}
INPUT_NAMES = {"input_ids": "ids", "input_mask": "mask", "segment_ids": "segment_ids"}
OUTPUT_NAMES = {"probabilities": "probability", "start_logits": "start_logits"}
OUTPUT_NAMES["end_logits"] = "end_logits"
SENTENCEPIECE_FILE = "sentencepiece.model"
LABELS_FILE = "labels.txt"
CLASSIFIER_INFO_FILE = "classifier_info.json"  # beside a fine-tuned `classifier.keras`
BIT_IDENTICAL_EXAMPLES = 16
_DESCRIPTIONS = {
    "ids": "token ids: [CLS] text [SEP] (a QA client: [CLS] question [SEP] context [SEP]), 0-padded",
    "mask": "1 for each token, 0 for padding",
    "segment_ids": "0 for the first text, 1 for the second",
    "probability": "the probability of each label",
    "start_logits": "per position, the logit of the answer starting there",
    "end_logits": "per position, the logit of the answer ending there",
}


@dataclasses.dataclass(frozen=True)
class AppMetadataSettings:
    """What the TFLite files of an export say to on-device clients.

    Args:
        enabled: write the metadata (`--tflite_metadata`); False: the files as converted, for
            raw-interpreter users.
        labels: a classifier's label names in output order; None: "0", "1", ...
        task_name: the GLUE task a classifier was fine-tuned on (a sentence-pair task gets no
            metadata: the clients feed one text); None: unknown (see `single_text_client`).
        single_text_client: the classifier takes one text (`--single_text_client`): needed for
            the metadata of a classifier whose task is unknown (a `.keras` file without its
            bundle, a transformers folder), refused for a sentence-pair task.
        author, license: the metadata's `author` and `license` lines (empty: none written).

    Example:
        ExportConfig(..., app_metadata=AppMetadataSettings(labels=("negative", "positive"),
                                                           task_name="sst-2"))
    """

    enabled: bool = True
    labels: tuple[str, ...] | None = None
    task_name: str | None = None
    single_text_client: bool = False
    author: str = ""
    license: str = ""


def settings_beside(keras_model: str | None, enabled: bool = True) -> AppMetadataSettings:
    """Settings from the `classifier_info.json` a fine-tuning job writes beside its model: its
    `label_names` (a bundle written before them: its `labels`) and task, read whether or not the
    metadata is `enabled`, since every text model of the export serves the names."""
    path = os.path.join(os.path.dirname(keras_model or ""), CLASSIFIER_INFO_FILE)
    if not keras_model or not os.path.isfile(path):
        return AppMetadataSettings(enabled)
    try:
        with open(path, encoding="utf-8") as f:
            info = json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not a readable classifier info file: {e}") from None
    if isinstance(info, dict):
        refuse_unknown_keys(info, MANIFEST_KEYS, path)
    labels = (info.get("label_names") or info.get("labels")) if isinstance(info, dict) else ()
    if labels is not None and not (
        isinstance(labels, list) and all(isinstance(x, str) for x in labels)
    ):
        raise ValueError(f"{path}: not a classifier info file (an object with a list of labels)")
    return AppMetadataSettings(enabled, tuple(labels) if labels else None, info.get("task_name"))


def settings_of_hf(config: AlbertConfig, enabled: bool = True) -> AppMetadataSettings:
    """Settings of a classifier read from a transformers folder: its `id2label` names, in
    output order, as the labels (whether or not the metadata is `enabled`)."""
    id2label = config.extra.get(HF_EXTRA, {}).get("id2label")
    if not isinstance(id2label, dict):
        return AppMetadataSettings(enabled)
    return AppMetadataSettings(
        enabled, tuple(str(id2label.get(str(i), i)) for i in range(len(id2label)))
    )


def with_label_names(settings: AppMetadataSettings, head, names) -> AppMetadataSettings:
    """`settings` naming the classes of `head` (a `ServingHead`) `names` (`--label_names`): one
    per class, else a `ValueError` in one line."""
    if head.kind != "classifier" or getattr(head.model, "regression", False):
        what = "a regression" if head.kind == "classifier" else f"head={head.kind}"
        raise ValueError(f"--label_names names a classifier's classes; {what} has none")
    count = head.model.num_labels
    current = settings.labels or tuple(str(i) for i in range(count))
    names = parse_label_names(names, current, "the classifier")
    return dataclasses.replace(settings, labels=names)


def default_max_seq_length(head, enabled: bool, given: int | None, default: int) -> int:
    """`given` if not None; else for a SQuAD v1.1 head that has the positions, the 384 that
    `BertQuestionAnswerer` feeds; else `default`."""
    if given is not None:
        return given
    fits = head.config.max_position_embeddings >= QA_CLIENT_SEQ_LENGTH
    return QA_CLIENT_SEQ_LENGTH if enabled and head.kind == "squad_v1" and fits else default


def check_text_inputs(kind: str, settings: AppMetadataSettings) -> None:
    """Refuses (ValueError, one line) single-text client metadata that would be a guess or wrong:
    a classifier of unknown task without `single_text_client` (it may have been trained on
    sentence pairs, which the clients cannot feed), `single_text_client` for a classifier whose
    task takes pairs, or for another head. Called where the metadata would be written."""
    if kind != "classifier":
        if settings.single_text_client:
            raise ValueError(f"--single_text_client describes a classifier, not head={kind}")
        return
    task = GLUE_TASKS.get((settings.task_name or "").lower())
    if task is not None and task.labelled.text_b is not None and settings.single_text_client:
        raise ValueError(
            f"--single_text_client: the classifier was fine-tuned on {task.name}, a sentence-pair "
            "task (classifier_info.json); the clients would feed it one text"
        )
    if task is None and not settings.single_text_client:
        task_said = "no classifier_info.json names its task"
        if settings.task_name:
            task_said = f"task {settings.task_name!r} is no GLUE task"
        raise ValueError(
            f"client metadata for a classifier that may take sentence pairs ({task_said}): the "
            "clients feed one text; give --single_text_client if it was trained on one, or "
            "--tflite_metadata=false"
        )


def check_before_export(head, config, writes_tflite: bool) -> None:
    """`check_text_inputs` for an export (`config`, an `ExportConfig` of `head`) that writes
    TFLite files, before any work: `single_text_client` where it does not fit, and a classifier
    of unknown task whose files would otherwise get client metadata."""
    settings = config.app_metadata
    if not (settings.enabled and writes_tflite):
        return
    if head.kind != "classifier" or settings.single_text_client:
        check_text_inputs(head.kind, settings)
        return
    tokenizer = True if config.spm_model_file else None  # only whether there is one counts
    if _no_metadata_reason(head.kind, settings, config.max_seq_length, tokenizer) is None:
        check_text_inputs(head.kind, settings)


def _no_metadata_reason(kind: str, settings, max_seq_length: int, tokenizer) -> str | None:
    task = GLUE_TASKS.get((settings.task_name or "").lower())
    reasons = {
        "pretrainer": "no on-device client serves a pretrainer (MLM, SOP)",
        "squad_v2": "BertQuestionAnswerer has no 'no answer' (SQuAD v2.0's null score, p_mask)",
        "race": "no on-device client runs multiple choice ([batch, choices, seq] inputs)",
    }
    if not settings.enabled:
        return "--tflite_metadata=false: the files as converted, for raw interpreters"
    if kind not in CLIENTS:
        return reasons.get(kind, f"no on-device client serves a {kind} head")
    if kind == "classifier" and task is not None and task.labelled.text_b is not None:
        return (
            f"{task.name} is a sentence-pair task: the clients feed one text "
            "([CLS] text [SEP], segment 0 only)"
        )
    if kind == "squad_v1" and max_seq_length != QA_CLIENT_SEQ_LENGTH:
        return (
            f"BertQuestionAnswerer feeds [1, {QA_CLIENT_SEQ_LENGTH}] inputs; this export is "
            f"[1, {max_seq_length}] (max_seq_length={QA_CLIENT_SEQ_LENGTH} for it)"
        )
    if tokenizer is None:
        return "the clients tokenize on the device: give spm_model_file to pack its model"
    return None


def _model_info(kind, config, variant, model: bytes, tokenizer_file, labels) -> metadata.ModelInfo:
    inputs, outputs = metadata.subgraph_tensor_names(model)
    files = {}
    if kind == "classifier":
        runner = Interpreter(model_content=model).get_signature_runner()
        classes = int(runner.get_output_details()["probabilities"]["shape"][-1])
        names = labels or tuple(str(i) for i in range(classes))
        if len(names) != classes or any("\n" in n or not n for n in names):
            raise ValueError(f"{classes} label names expected, one line each, got {names}")
        content = "".join(f"{n}\n" for n in names).encode()
        files["probabilities"] = (
            metadata.AssociatedFile(
                LABELS_FILE, "label names", content, metadata.TENSOR_AXIS_LABELS
            ),
        )

    def tensor(name, renames):
        client_name = renames[name]
        return metadata.TensorInfo(client_name, _DESCRIPTIONS[client_name], files.get(name, ()))

    return metadata.ModelInfo(
        name=config.model_name,
        description=(
            f"ALBERT {kind} ({variant}), [1, {config.max_seq_length}] inputs, for "
            f"{' and '.join(CLIENTS[kind])}. Its SentencePiece model normalises text as ALBERT "
            "does (lowercase, accents removed, NFKC) after the clients' ASCII lowercasing."
        ),
        version=str(config.version),
        author=config.app_metadata.author,
        license=config.app_metadata.license,
        inputs=tuple(tensor(n, INPUT_NAMES) for n in inputs),
        outputs=tuple(tensor(n, OUTPUT_NAMES) for n in outputs),
        tokenizer=tokenizer_file,
    )


def _outputs_differ(head, before: bytes, after: bytes, examples) -> list[str]:
    names = head.signature_inputs["serving_default"]
    count = min(BIT_IDENTICAL_EXAMPLES, export_data.num_examples(examples))
    rows = export_data.take(examples, slice(0, count))
    outputs = [
        run_signature(Interpreter(model_content=m), "serving_default", rows, names)
        for m in (before, after)
    ]
    return [k for k in outputs[0] if not np.array_equal(outputs[0][k], outputs[1][k])]


def _client_check(job) -> dict:
    """What one export's TFLite files get (computed once, kept in `job.shared`): the reason they
    get no metadata, or the client tokenizer's file and the texts it reads otherwise than ours.
    Notes it in the report (`job.notes["app_metadata"]`)."""
    if "app_metadata" in job.shared:
        return job.shared["app_metadata"]
    head, config, tokenizer = job.head, job.config, job.tokenizer
    settings = config.app_metadata
    reason = _no_metadata_reason(head.kind, settings, config.max_seq_length, tokenizer)
    note = job.notes["app_metadata"] = {"clients": [] if reason else list(CLIENTS[head.kind])}
    check = job.shared["app_metadata"] = {"reason": reason}
    if reason:
        note["note"] = reason
        logging.info("TFLite files without client metadata: %s", reason)
        return check
    check_text_inputs(head.kind, settings)
    if not config.do_lower_case:
        raise ValueError(
            "the on-device clients lowercase every text, so a cased model (do_lower_case=False) "
            "cannot run in them: export its TFLite files without their metadata "
            "(--tflite_metadata=false)"
        )
    client = ClientTokenizer(client_sentencepiece_model(tokenizer.model_proto))
    singles = [t for pair in job.texts for t in pair if t is not None] + list(CLIENT_PROBE_TEXTS)
    mismatches = tokenization_mismatches(tokenizer, client, singles)
    if head.kind == "squad_v1":  # contexts go to SentencePiece word by word
        mismatches += tokenization_mismatches(tokenizer, client, singles, by_word=True)
    note.update(checked_texts=len(set(singles)), mismatches=mismatches[:20])
    # A probe or verification text holding one of them refuses the file (the mismatches above);
    # the exact set for this vocabulary goes into the report.
    numbers = note["comma_numbers_differing"] = comma_number_mismatches(tokenizer, client)
    if numbers:
        logging.warning(
            "the clients tokenize %d of the numbers 1,000 to 999,999 written with commas "
            "otherwise than ours (e.g. %s): listed in the report's app_metadata note",
            len(numbers),
            ", ".join(numbers[:3]),
        )
    check["mismatches"] = mismatches
    check["tokenizer_file"] = metadata.AssociatedFile(
        SENTENCEPIECE_FILE, "SentencePiece model: ALBERT's preprocessing", client.model_proto
    )
    return check


def attach(model: bytes, job, artifact: str) -> tuple[bytes, dict]:
    """The TFLite formats' post-processing step (`formats.TfliteRecipe.post_process`): `model`
    (the converted file of `artifact`) with its on-device clients' metadata as
    `job.config.app_metadata` asks, and the fields its report record gets.

    A file the clients would read otherwise than our Python path (their tokenization differs on
    a probe or verification text, or its outputs change when the metadata is added) comes back
    with `failures`, which refuse it. Other heads' files come back unchanged (the reason is in
    the report's `app_metadata` note). ValueError for a cased model the clients would lowercase.
    """
    check = _client_check(job)
    if check["reason"]:
        return model, {}
    if check["mismatches"]:
        mismatches = check["mismatches"]
        return model, {
            "failures": [
                f"the clients' tokenization differs from ours on {len(mismatches)} texts, e.g. "
                f"{mismatches[0]} (--tflite_metadata=false writes it for raw interpreters)"
            ]
        }
    info = _model_info(
        job.head.kind,
        job.config,
        artifact,
        model,
        check["tokenizer_file"],
        job.config.app_metadata.labels,
    )
    with_metadata = metadata.with_metadata(model, info)
    fields = {
        "size_bytes_without_metadata": len(model),
        "app_metadata": {
            "inputs": [t.name for t in info.inputs],
            "outputs": [t.name for t in info.outputs],
            "files": [f.name for f in info.files],
            "min_parser_version": info.min_parser_version,
            "bit_identical_examples": min(
                BIT_IDENTICAL_EXAMPLES, export_data.num_examples(job.verification)
            ),
        },
    }
    if changed := _outputs_differ(job.head, model, with_metadata, job.verification):
        fields["failures"] = [f"outputs {changed} changed when the metadata was added"]
    return with_metadata, fields
