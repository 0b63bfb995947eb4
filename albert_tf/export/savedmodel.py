"""SavedModels for TF Serving: token ids in (core TF ops only), and text in (+ tf-text ops).

The ids model serves the signatures of its head (`heads.REGISTRY`; built by `heads.serving`), e.g. a
pretrainer's `serving_default` (`input_ids`, `input_mask`, `segment_ids` int32 [batch, seq] -> the
sequence and pooled outputs), `mlm` (+ `masked_lm_positions` -> `mlm_logits`) and `sop` (->
`sop_logits`), and `serve_examples` (a batch of serialized `tf.Example`s, the original schema).

The text models wrap `AlbertPreprocessingLayer` (tensorflow-text ops, which the stock TF Serving
model server links, `serving_ops`): a preprocessing model (strings -> the three id tensors) and an
end-to-end model (strings -> the head's outputs), each with `serving_default` (`text`) and `pairs`
(`text_a`, `text_b`). Their requests are checked before tokenization (`qa.inputs.bounded_texts`):
at most `max_text_bytes` UTF-8 bytes per field, all rows together, and valid UTF-8; the limit is
stored in the models (`TEXT_SETTINGS_FILE` among their assets) and in the export report. `build`
makes them all for the `saved_model` format (`formats.SAVED_MODEL`).
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import tensorflow as tf
from absl import logging

from albert_tf import records
from albert_tf.config import AlbertConfig
from albert_tf.export.heads.serving import ServingHead, batched, serving_functions
from albert_tf.export.parity import (
    Int8Limit,
    ParityThresholds,
    RelativeDiffLimit,
    merge_figures,
    parity_figures,
)
from albert_tf.export.qa.inputs import (
    DEFAULT_MAX_TEXT_BYTES,
    bounded_texts,
    requests_within,
    same_batch_size,
    string_batch,
)
from albert_tf.export.serving_ops import non_stock_ops, tf_serving_failures
from albert_tf.modeling.model import BACKBONE_INPUTS
from albert_tf.text.tf_tokenization import AlbertPreprocessingLayer

TEXT_SETTINGS_FILE = "text_settings.json"  # the text models' settings, beside their other assets
MAX_TEXT_BYTES = "max_text_bytes"  # the limit's name in the settings, the report and messages


def save_with_signatures(path: str, functions: dict, assets: dict[str, str]) -> None:
    """Write a SavedModel of `functions` (signature name -> tf.function) with asset files.

    The variables the functions read are tracked as the `tf.Variable`s they capture: tracking the
    Keras model instead saves its `keras.Variable` wrappers, and the TFLite converter then keeps
    them as uninitialised resource variables instead of freezing their values.
    """
    root = tf.Module()
    concrete = {name: function.get_concrete_function() for name, function in functions.items()}
    variables = {}
    for function in concrete.values():
        for variable in function.variables:
            variables.setdefault(id(variable), variable)
    root.model_variables = list(variables.values())
    for name, source in assets.items():
        setattr(root, name, tf.saved_model.Asset(source))
    tf.saved_model.save(root, path, signatures=concrete)


def served_label_names(head: ServingHead, labels) -> tuple[str, ...] | None:
    """The names a classifier's text models serve as `label`: `labels` (the export's, in output
    order) or "0", "1", ...; None for every other head and a regression."""
    if head.kind != "classifier" or getattr(head.model, "regression", False):
        return None
    count = head.model.num_labels
    names = tuple(labels) if labels else tuple(str(i) for i in range(count))
    if len(names) != count:
        raise ValueError(f"{len(names)} label names {list(names)} for a {count}-label classifier")
    return names


def predicted_labels(probabilities: tf.Tensor, label_names) -> tf.Tensor:
    """string [batch]: the name of each row's most probable class."""
    return tf.gather(tf.constant(list(label_names)), tf.argmax(probabilities, axis=-1))


def text_functions(
    preprocessing,
    head: ServingHead | None,
    max_text_bytes: int = DEFAULT_MAX_TEXT_BYTES,
    label_names=None,
) -> dict:
    """`serving_default` (`text`) and `pairs` (`text_a`, `text_b`): string [batch] inputs to the
    three id tensors (`head` None) or to the head's `serving_default` outputs, plus `label` (the
    predicted class's name) where `label_names` are given. A request holding more than
    `max_text_bytes` UTF-8 bytes in a field, or text that is not UTF-8, is refused before
    tokenization (`qa.inputs.bounded_texts`)."""

    def finish(features):
        if head is None:
            return features
        outputs = head.outputs("serving_default", features)
        if label_names is not None:
            outputs["label"] = predicted_labels(outputs["probabilities"], label_names)
        return outputs

    def single(text):
        checked = bounded_texts(
            {"text": string_batch(text, "text")}, max_text_bytes, MAX_TEXT_BYTES
        )
        return finish(preprocessing(checked["text"]))

    def pairs(text_a, text_b):
        text_a, text_b = same_batch_size(
            string_batch(text_a, "text_a"),
            string_batch(text_b, "text_b"),
            "text_a and text_b must have the same batch size",
        )
        checked = bounded_texts(
            {"text_a": text_a, "text_b": text_b}, max_text_bytes, MAX_TEXT_BYTES
        )
        return finish(preprocessing((checked["text_a"], checked["text_b"])))

    text = tf.TensorSpec([None], tf.string, name="text")
    return {
        "serving_default": tf.function(single, input_signature=[text], autograph=False),
        "pairs": tf.function(
            pairs,
            autograph=False,
            input_signature=[
                tf.TensorSpec([None], tf.string, name="text_a"),
                tf.TensorSpec([None], tf.string, name="text_b"),
            ],
        ),
    }


def serialize_examples(
    examples: dict[str, np.ndarray], names: tuple[str, ...] = BACKBONE_INPUTS
) -> np.ndarray:
    """`tf.Example`s with the int64 features `names` (default `input_ids`, `input_mask`,
    `segment_ids`: the original schema), each flattened."""
    return np.array(
        [
            records.encode_example({k: examples[k][i].reshape(-1) for k in names})
            for i in range(len(examples["input_ids"]))
        ],
        dtype=object,
    )


def verify_ids_model(
    path: str,
    head: ServingHead,
    examples,
    reference,
    thresholds: ParityThresholds,
    limit: RelativeDiffLimit | Int8Limit,
) -> dict:
    """Reload the ids SavedModel and compare every signature with the Keras model's `reference`
    (held to `limit`)."""
    loaded = tf.saved_model.load(path)
    weights, keys = examples["masked_lm_weights"], head.spec.parity
    figures = [
        parity_figures(
            reference[name], batched(loaded.signatures[name], examples, names), weights, keys
        )
        for name, names in head.signature_inputs.items()
    ]
    serialized = {
        "examples": serialize_examples(examples, head.signature_inputs["serving_default"])
    }
    figures.append(
        parity_figures(
            reference["serving_default"],
            batched(loaded.signatures["serve_examples"], serialized, ("examples",)),
            weights,
            keys,
        )
    )
    figures = merge_figures(figures)
    failures = limit.failures(figures, thresholds)
    extra_ops = non_stock_ops(path)
    if extra_ops:
        failures.append(f"ops outside core TensorFlow (the ids model must need none): {extra_ops}")
    return {"figures": figures, "failures": failures, "signatures": sorted(loaded.signatures)}


def _text_inputs(signature: str, rows) -> dict[str, np.ndarray]:
    if signature == "serving_default":
        return {"text": np.array([a for a, _ in rows], dtype=object)}
    return {
        "text_a": np.array([a for a, _ in rows], dtype=object),
        "text_b": np.array([b for _, b in rows], dtype=object),
    }


def _served(function, signature: str, rows, requests) -> dict[str, np.ndarray]:
    """`function`'s outputs on `rows`, one call per request of row indices, concatenated."""
    outputs = [
        function(**_text_inputs(signature, [rows[i] for i in request])) for request in requests
    ]
    return {k: np.concatenate([o[k].numpy() for o in outputs]) for k in outputs[0]}


def _served_over_limit(function, signature: str, rows, max_text_bytes: int) -> list:
    """The `rows` (each over the limit) that `function` answers instead of refusing them with
    the limit's message."""
    served = []
    for row in rows:
        try:
            function(**_text_inputs(signature, [row]))
            served.append(row)
        except tf.errors.InvalidArgumentError as error:
            if f"more than {MAX_TEXT_BYTES}={max_text_bytes} " not in error.message:
                served.append(row)
    return served


def verify_text_models(
    preprocessing_path: str,
    text_path: str,
    head: ServingHead,
    tokenizer,
    max_seq_length: int,
    texts,
    thresholds: ParityThresholds,
    limit: RelativeDiffLimit | Int8Limit,
    max_text_bytes: int = DEFAULT_MAX_TEXT_BYTES,
    label_names=None,
) -> dict:
    """Preprocessing ids must equal `tokenizer`'s exactly; text-model outputs must equal the Keras
    model's on those ids, and its `label`s (with `label_names`) name their argmax. `texts` are
    (text_a, text_b or None): `serving_default` gets every text_a, `pairs` every pair with a
    text_b, in requests within `max_text_bytes` (the limit the models store); both models must
    refuse, with the limit's message, every text over it."""
    models = {
        "preprocessing": tf.saved_model.load(preprocessing_path),
        "text": tf.saved_model.load(text_path),
    }
    failures = {name: [] for name in models}
    text_figures, refused = [], 0
    for signature, rows in (
        ("serving_default", [(a, None) for a, _ in texts]),
        ("pairs", [(a, b) for a, b in texts if b is not None]),
    ):
        requests, over = requests_within(rows, max_text_bytes)
        for name, model in models.items():
            served = _served_over_limit(
                model.signatures[signature], signature, [rows[i] for i in over], max_text_bytes
            )
            if served:
                failures[name].append(
                    f"{signature}: {len(served)} requests over {MAX_TEXT_BYTES}={max_text_bytes} "
                    f"not refused by the limit, e.g. {served[0]!r:.200}"
                )
        refused += len(over)
        if not requests:  # a limit below every pair: only the refusals are checked
            continue
        order = [i for request in requests for i in request]
        packed = [tokenizer.encode_pair(*rows[i], max_seq_length) for i in order]
        expected = {k: np.array([getattr(p, k) for p in packed], np.int32) for k in BACKBONE_INPUTS}
        got = _served(models["preprocessing"].signatures[signature], signature, rows, requests)
        wrong = [
            j
            for j in range(len(order))
            if any((got[k][j] != expected[k][j]).any() for k in BACKBONE_INPUTS)
        ]
        if wrong:
            failures["preprocessing"].append(
                f"{signature}: {len(wrong)} of {len(order)} texts get other ids than "
                f"AlbertTokenizer, e.g. {rows[order[wrong[0]]]!r:.200}"
            )
        outputs = _served(models["text"].signatures[signature], signature, rows, requests)
        if label_names is not None:
            named = [label_names[i] for i in outputs["probabilities"].argmax(-1)]
            if [x.decode("utf-8") for x in outputs.get("label", [])] != named:
                failures["text"].append(f"{signature}: labels are not the names of the argmax")
        text_figures.append(
            parity_figures(
                head.keras_outputs(expected, "serving_default"),
                outputs,
                np.zeros(0),
                head.spec.parity,
            )
        )
    text_figures = merge_figures(text_figures)
    return {
        "preprocessing": {
            "figures": {"num_texts": len(texts), "num_refused_over_limit": refused},
            "failures": failures["preprocessing"] + tf_serving_failures(preprocessing_path),
        },
        "text": {
            "figures": text_figures,
            "failures": failures["text"]
            + limit.failures(text_figures, thresholds)
            + tf_serving_failures(text_path),
        },
    }


def write_text_settings(directory: str, head: ServingHead, max_seq_length: int, max_text_bytes):
    """Write the text models' settings (`TEXT_SETTINGS_FILE`: head, `max_seq_length` and the
    request limit `max_text_bytes`) in `directory`; returns its path, an asset of those models."""
    path = os.path.join(directory, TEXT_SETTINGS_FILE)
    settings = {"head": head.kind, "max_seq_length": max_seq_length, MAX_TEXT_BYTES: max_text_bytes}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(settings, f, indent=2)
    return path


def write_assets(directory: str, config: AlbertConfig, spm_model_file, do_lower_case) -> dict:
    """The files every SavedModel carries, by asset name: `albert_config.json`, and with a
    SentencePiece model that model and `do_lower_case.txt`."""
    os.makedirs(directory)
    config.to_json_file(os.path.join(directory, "albert_config.json"))
    assets = {"albert_config_file": os.path.join(directory, "albert_config.json")}
    if spm_model_file:
        with open(os.path.join(directory, "do_lower_case.txt"), "w", encoding="utf-8") as f:
            f.write(f"{str(do_lower_case).lower()}\n")
        assets["do_lower_case_file"] = os.path.join(directory, "do_lower_case.txt")
        assets["spm_model_file"] = shutil.copy(spm_model_file, directory)
    return assets


def build(job, spec) -> dict[str, str]:
    """The `saved_model` format (a `formats.FormatSpec`) of a `formats.ExportJob`: the ids
    SavedModel and, with a tokenizer, the text models (the head's own where it has them,
    `HeadSpec.text_models`), built under `job.staging`, verified (`spec.parity`) and recorded in
    `job.artifacts`. Returns {artifact: staged path}."""
    head, config, staging = job.head, job.config, job.staging
    assets = write_assets(
        os.path.join(staging, "assets_source"),
        head.config,
        config.spm_model_file,
        config.do_lower_case,
    )
    staged = {"saved_model": os.path.join(staging, "saved_model")}
    logging.info("Building the ids SavedModel")
    save_with_signatures(
        staged["saved_model"], serving_functions(head, config.max_seq_length), assets
    )
    job.artifacts["saved_model"] = verify_ids_model(
        staged["saved_model"], head, job.verification, job.reference, job.thresholds, spec.parity
    )
    if job.tokenizer is None:
        return staged
    if head.spec.text_models is not None:
        text = head.spec.text_models(head, config, job.tokenizer, assets, staging, job.artifacts)
        return staged | text
    logging.info("Building the text SavedModels")
    preprocessing = AlbertPreprocessingLayer(
        job.tokenizer.model_proto,
        max_seq_length=config.max_seq_length,
        do_lower_case=config.do_lower_case,
    )
    staged["preprocessing"] = os.path.join(staging, "preprocessing")
    staged["text"] = os.path.join(staging, "text")
    limit = config.max_text_bytes
    settings = write_text_settings(
        os.path.dirname(assets["albert_config_file"]), head, config.max_seq_length, limit
    )
    text_assets = {**assets, "text_settings_file": settings}
    label_names = served_label_names(head, config.app_metadata.labels)
    for key, model_head in (("preprocessing", None), ("text", head)):
        functions = text_functions(preprocessing, model_head, limit, label_names)
        save_with_signatures(staged[key], functions, text_assets)
    job.artifacts.update(
        verify_text_models(
            staged["preprocessing"],
            staged["text"],
            head,
            job.tokenizer,
            config.max_seq_length,
            job.texts,
            job.thresholds,
            spec.parity,
            limit,
            label_names,
        )
    )
    return staged
