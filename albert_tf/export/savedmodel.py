"""SavedModels for TF Serving: token ids in (core TF ops only), and text in (+ tf-text ops).

The ids model has the signatures of its head (`heads.REGISTRY`): `serving_default` (`input_ids`,
`input_mask`, `segment_ids` int32 [batch, seq] -> the head's outputs) and, for a pretrainer, `mlm`
(+ `masked_lm_positions` -> `mlm_logits`) and `sop` (-> `sop_logits`); and `serve_examples` (a
batch of serialized `tf.Example`s with the three features as int64 [max_seq_length], the original
schema). Inputs are checked in-graph, so a bad request fails with a message naming the input
instead of returning garbage.

The text models wrap `AlbertPreprocessingLayer` (tensorflow-text ops, which the stock TF Serving
model server links, `serving_ops`): a preprocessing model (strings -> the three id tensors) and an
end-to-end model (strings -> the head's outputs), each with `serving_default` (`text`) and `pairs`
(`text_a`, `text_b`).
"""

from __future__ import annotations

import dataclasses
import os

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from albert_tf import records
from albert_tf.config import AlbertConfig
from albert_tf.export.heads import POSITIONS, HeadSpec, head_spec
from albert_tf.export.parity import ParityThresholds, merge_figures, parity_failures, parity_figures
from albert_tf.export.qa_inputs import string_batch
from albert_tf.export.serving_ops import non_stock_ops, tf_serving_failures
from albert_tf.modeling.model import BACKBONE_INPUTS
from albert_tf.training.input_pipeline import feature_spec


@dataclasses.dataclass
class ServingHead:
    """The Keras model an export serves, as the registered head `kind` (`heads.REGISTRY`).

    Args:
        kind: a registered head kind; its `HeadSpec` says what each signature returns.
        model: the Keras model (checked for the head by `pipeline.serving_head`).
        config: the ALBERT config of its backbone.
    """

    kind: str
    model: keras.Model
    config: AlbertConfig
    spec: HeadSpec = dataclasses.field(init=False, repr=False)

    def __post_init__(self):
        self.spec = head_spec(self.kind)

    @property
    def signature_inputs(self) -> dict[str, tuple[str, ...]]:
        """Input names of each model signature (`serve_examples` aside)."""
        return {name: signature.inputs for name, signature in self.spec.signatures.items()}

    def outputs(self, signature: str, features: dict) -> dict:
        """The outputs of `signature` on a dict of int32 input tensors (inference mode)."""
        if signature not in self.spec.signatures:
            raise KeyError(f"no signature {signature!r} for head {self.kind!r}")
        declared = self.spec.signatures[signature]
        outputs = declared.call(self.model, features)
        # The spec's declared outputs are what its parity keys are checked against.
        if set(outputs) != set(declared.outputs):
            raise ValueError(
                f"head {self.kind!r} signature {signature!r} returned {sorted(outputs)}, "
                f"declares {sorted(declared.outputs)}"
            )
        return outputs

    def keras_outputs(
        self, examples: dict[str, np.ndarray], signature: str, batch_size: int = 32
    ) -> dict[str, np.ndarray]:
        """The Keras model's outputs of `signature` on numpy examples, batched."""
        names = self.signature_inputs[signature]
        return _batched(lambda **x: self.outputs(signature, x), examples, names, batch_size)


def _batched(function, examples: dict, names, batch_size: int = 32) -> dict[str, np.ndarray]:
    count = len(examples[names[0]])
    batches = [
        function(**{k: tf.constant(examples[k][i : i + batch_size]) for k in names})
        for i in range(0, count, batch_size)
    ]
    return {k: np.concatenate([b[k].numpy() for b in batches]) for k in batches[0]}


def checked_features(features: dict, config: AlbertConfig) -> dict:
    """`features` behind in-graph checks of shapes and id ranges, with messages naming the input.

    (Only for SavedModels: TFLite has no Assert op, and its fixed input shapes are checked by the
    interpreter.)
    """
    # The signature does not enforce the rank it declares; EnsureShape does, naming the input.
    features = {k: tf.ensure_shape(v, [None, None], name=k) for k, v in features.items()}
    ids = features["input_ids"]
    shape = tf.shape(ids)
    checks = [
        tf.debugging.assert_equal(
            tf.shape(features[k]),
            shape,
            message=f"{k} must have the shape of input_ids [batch, seq_length]",
        )
        for k in ("input_mask", "segment_ids")
    ]
    checks.append(
        tf.debugging.assert_less_equal(
            shape[1],
            config.max_position_embeddings,
            message=f"seq_length exceeds max_position_embeddings={config.max_position_embeddings}",
        )
    )
    for name, limit in (
        ("input_ids", config.vocab_size),
        ("segment_ids", config.type_vocab_size),
        ("input_mask", 2),
    ):
        checks.append(
            tf.debugging.assert_non_negative(features[name], message=f"{name} has negative values")
        )
        checks.append(
            tf.debugging.assert_less(features[name], limit, message=f"{name} has values >= {limit}")
        )
    if POSITIONS in features:
        positions = features[POSITIONS]
        checks.append(
            tf.debugging.assert_equal(
                tf.shape(positions)[0],
                shape[0],
                message=f"{POSITIONS} must have the batch size of input_ids",
            )
        )
        checks.append(
            tf.debugging.assert_non_negative(positions, message=f"{POSITIONS} has negative values")
        )
        checks.append(
            tf.debugging.assert_less(
                positions, shape[1], message=f"{POSITIONS} has values >= seq_length"
            )
        )
    with tf.control_dependencies(checks):
        return {k: tf.identity(v) for k, v in features.items()}


def signature_function(
    head: ServingHead, signature: str, shapes: dict[str, list], check: bool
) -> tf.types.experimental.GenericFunction:
    """A `tf.function` of `signature` whose int32 inputs have the given shapes and names."""
    names = head.signature_inputs[signature]

    def serve(*tensors):
        features = dict(zip(names, tensors))
        if check:
            features = checked_features(features, head.config)
        return head.outputs(signature, features)

    specs = [tf.TensorSpec(shapes[name], tf.int32, name=name) for name in names]
    return tf.function(serve, input_signature=specs, autograph=False)


def save_with_signatures(path: str, functions: dict, assets: dict[str, str]) -> None:
    """Write a SavedModel of `functions` (signature name -> tf.function) with asset files.

    The variables the functions read are tracked as the `tf.Variable`s they capture: tracking the
    Keras model instead saves its `keras.Variable` wrappers, and the TFLite converter then keeps
    them as uninitialised resource variables instead of freezing their values.
    """
    root = tf.__internal__.tracking.AutoTrackable()
    concrete = {name: function.get_concrete_function() for name, function in functions.items()}
    variables = {}
    for function in concrete.values():
        for variable in function.variables:
            variables.setdefault(id(variable), variable)
    root.model_variables = list(variables.values())
    for name, source in assets.items():
        setattr(root, name, tf.saved_model.Asset(source))
    tf.saved_model.save(root, path, signatures=concrete)


def serving_functions(head: ServingHead, max_seq_length: int) -> dict:
    """The ids model's signatures: dynamic [batch, seq] inputs, checked; plus `serve_examples`
    (a head with other inputs builds its own: `HeadSpec.serving_functions`)."""
    if head.spec.serving_functions is not None:
        return head.spec.serving_functions(head, max_seq_length)
    functions = {
        name: signature_function(head, name, dict.fromkeys(inputs, [None, None]), True)
        for name, inputs in head.signature_inputs.items()
    }
    spec = feature_spec(max_seq_length, names=BACKBONE_INPUTS)

    def serve_examples(examples):
        parsed = tf.io.parse_example(examples, spec)
        features = {k: tf.cast(v, tf.int32) for k, v in parsed.items()}
        return head.outputs("serving_default", checked_features(features, head.config))

    functions["serve_examples"] = tf.function(
        serve_examples,
        input_signature=[tf.TensorSpec([None], tf.string, name="examples")],
        autograph=False,
    )
    return functions


def text_functions(preprocessing, head: ServingHead | None) -> dict:
    """`serving_default` (`text`) and `pairs` (`text_a`, `text_b`): string [batch] inputs to the
    three id tensors (`head` None) or to the head's `serving_default` outputs."""

    def finish(features):
        return features if head is None else head.outputs("serving_default", features)

    def single(text):
        return finish(preprocessing(string_batch(text, "text")))

    def pairs(text_a, text_b):
        text_a, text_b = string_batch(text_a, "text_a"), string_batch(text_b, "text_b")
        check = tf.debugging.assert_equal(
            tf.shape(text_a),
            tf.shape(text_b),
            message="text_a and text_b must have the same batch size",
        )
        with tf.control_dependencies([check]):
            return finish(preprocessing((tf.identity(text_a), tf.identity(text_b))))

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
    path: str, head: ServingHead, examples, reference, thresholds: ParityThresholds
) -> dict:
    """Reload the ids SavedModel and compare every signature with the Keras model's `reference`."""
    loaded = tf.saved_model.load(path)
    weights, keys = examples["masked_lm_weights"], head.spec.parity
    figures = [
        parity_figures(
            reference[name], _batched(loaded.signatures[name], examples, names), weights, keys
        )
        for name, names in head.signature_inputs.items()
    ]
    serialized = {
        "examples": serialize_examples(examples, head.signature_inputs["serving_default"])
    }
    figures.append(
        parity_figures(
            reference["serving_default"],
            _batched(loaded.signatures["serve_examples"], serialized, ("examples",)),
            weights,
            keys,
        )
    )
    figures = merge_figures(figures)
    failures = parity_failures("saved_model", figures, thresholds)
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


def verify_text_models(
    preprocessing_path: str,
    text_path: str,
    head: ServingHead,
    tokenizer,
    max_seq_length: int,
    texts,
    thresholds: ParityThresholds,
) -> dict:
    """Preprocessing ids must equal `tokenizer`'s exactly; text-model outputs must equal the Keras
    model's on those ids. `texts` are (text_a, text_b or None): `serving_default` gets every
    text_a, `pairs` every pair with a text_b."""
    preprocessing = tf.saved_model.load(preprocessing_path)
    text_model = tf.saved_model.load(text_path)
    id_failures, text_figures = [], []
    for signature, rows in (
        ("serving_default", [(a, None) for a, _ in texts]),
        ("pairs", [(a, b) for a, b in texts if b is not None]),
    ):
        packed = [tokenizer.encode_pair(a, b, max_seq_length) for a, b in rows]
        expected = {k: np.array([getattr(p, k) for p in packed], np.int32) for k in BACKBONE_INPUTS}
        inputs = _text_inputs(signature, rows)
        got = _batched(preprocessing.signatures[signature], inputs, tuple(inputs))
        wrong = [
            i
            for i in range(len(rows))
            if any((got[k][i] != expected[k][i]).any() for k in BACKBONE_INPUTS)
        ]
        if wrong:
            id_failures.append(
                f"{signature}: {len(wrong)} of {len(rows)} texts get other ids than "
                f"AlbertTokenizer, e.g. {rows[wrong[0]]!r:.200}"
            )
        outputs = _batched(text_model.signatures[signature], inputs, tuple(inputs))
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
            "figures": {"num_texts": len(texts)},
            "failures": id_failures + tf_serving_failures(preprocessing_path),
        },
        "text": {
            "figures": text_figures,
            "failures": parity_failures("saved_model", text_figures, thresholds)
            + tf_serving_failures(text_path),
        },
    }


def build_saved_models(
    head: ServingHead,
    max_seq_length: int,
    preprocessing_layer,
    tokenizer,
    examples,
    texts,
    reference,
    assets: dict[str, str],
    staging: str,
    thresholds: ParityThresholds,
    artifacts: dict,
) -> dict[str, str]:
    """Build and verify the ids SavedModel (and, with a `preprocessing_layer`, the text models)
    under `staging`; record each in `artifacts`; return {key: staged path} of those that passed."""
    staged = {"saved_model": os.path.join(staging, "saved_model")}
    logging.info("Building the ids SavedModel")
    save_with_signatures(staged["saved_model"], serving_functions(head, max_seq_length), assets)
    artifacts["saved_model"] = verify_ids_model(
        staged["saved_model"], head, examples, reference, thresholds
    )
    if preprocessing_layer is not None:
        logging.info("Building the text SavedModels")
        staged["preprocessing"] = os.path.join(staging, "preprocessing")
        staged["text"] = os.path.join(staging, "text")
        save_with_signatures(
            staged["preprocessing"], text_functions(preprocessing_layer, None), assets
        )
        save_with_signatures(staged["text"], text_functions(preprocessing_layer, head), assets)
        artifacts.update(
            verify_text_models(
                staged["preprocessing"],
                staged["text"],
                head,
                tokenizer,
                max_seq_length,
                texts,
                thresholds,
            )
        )
    for key, path in staged.items():
        artifacts[key]["size_bytes"] = sum(
            os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files
        )
    return {k: p for k, p in staged.items() if not artifacts[k]["failures"]}
