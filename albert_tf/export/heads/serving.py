"""A head as an export serves it: `ServingHead` (a Keras model as a registered head kind), and the
ids SavedModel's signatures, one path for every registered head (`heads.REGISTRY`).

Each of the head's signatures takes its int32 inputs at any batch size and sequence length
(`HeadSpec.shapes`: [batch, seq] ids, RACE's [batch, choices, seq], SQuAD v2's `p_mask`, ...), checked
in-graph so that a bad request fails with a message naming the input instead of returning garbage;
`serve_examples` takes serialized `tf.Example`s of the `serving_default` inputs as the original's
records hold them (int64 features of the export's `max_seq_length`, each flattened: RACE's over
its choices, [C·T]). The TFLite variants trace the same signatures at batch 1 and fixed lengths,
unchecked (TFLite has no Assert op; its interpreter checks fixed shapes).
"""

from __future__ import annotations

import dataclasses

import keras
import numpy as np
import tensorflow as tf

from albert_tf.config import AlbertConfig
from albert_tf.export.heads.kinds import POSITIONS, HeadSpec, head_spec
from albert_tf.export.heads.squad_race import P_MASK, START_POSITIONS

# Inputs holding positions in the sequence (checked against its length), one row per example.
POSITION_INPUTS = (POSITIONS, START_POSITIONS)


@dataclasses.dataclass
class ServingHead:
    """The Keras model an export serves, as the registered head `kind` (`heads.REGISTRY`).

    Args:
        kind: a registered head kind; its `HeadSpec` says what each signature returns.
        model: the Keras model (checked for the head by `loading.serving_head`).
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
        return batched(lambda **x: self.outputs(signature, x), examples, names, batch_size)


def batched(function, examples: dict, names, batch_size: int = 32) -> dict[str, np.ndarray]:
    """`function(**inputs)` over numpy `examples` (the inputs `names`), `batch_size` rows at a
    time, its outputs concatenated."""
    count = len(examples[names[0]])
    batches = [
        function(**{k: tf.constant(examples[k][i : i + batch_size]) for k in names})
        for i in range(0, count, batch_size)
    ]
    return {k: np.concatenate([b[k].numpy() for b in batches]) for k in batches[0]}


def _value_limits(config: AlbertConfig) -> dict[str, int]:
    """Exclusive upper bound of each per-token input (those shaped like `input_ids`)."""
    return {
        "input_ids": config.vocab_size,
        "segment_ids": config.type_vocab_size,
        "input_mask": 2,
        P_MASK: 2,
    }


def checked_inputs(features: dict, config: AlbertConfig, shapes: dict[str, list]) -> dict:
    """`features` behind in-graph checks, with messages naming the input: the rank `shapes`
    declares (without the batch; lengths free), per-token inputs shaped like `input_ids` and within
    their id ranges, positions within the sequence and of `input_ids`' batch size, and a sequence
    no longer than `max_position_embeddings`."""
    # The signature does not enforce the rank it declares; EnsureShape does, naming the input.
    features = {
        k: tf.ensure_shape(v, [None] * (1 + len(shapes[k])), name=k) for k, v in features.items()
    }
    shape = tf.shape(features["input_ids"])
    checks = [
        tf.debugging.assert_less_equal(
            shape[-1],
            config.max_position_embeddings,
            message=f"seq_length exceeds max_position_embeddings={config.max_position_embeddings}",
        )
    ]
    limits = _value_limits(config)
    for name, value in features.items():
        if name in POSITION_INPUTS:
            checks.append(
                tf.debugging.assert_equal(
                    tf.shape(value)[0],
                    shape[0],
                    message=f"{name} must have the batch size of input_ids",
                )
            )
            limit, shown = shape[-1], "seq_length"
        elif name in limits:
            if name != "input_ids":
                checks.append(
                    tf.debugging.assert_equal(
                        tf.shape(value), shape, message=f"{name} must have the shape of input_ids"
                    )
                )
            limit = shown = limits[name]
        else:
            raise ValueError(f"no in-graph check for input {name!r} (signatures.checked_inputs)")
        checks.append(
            tf.debugging.assert_non_negative(value, message=f"{name} has negative values")
        )
        checks.append(
            tf.debugging.assert_less(value, limit, message=f"{name} has values >= {shown}")
        )
    with tf.control_dependencies(checks):
        return {k: tf.identity(v) for k, v in features.items()}


def signature_function(
    head, signature: str, shapes: dict[str, list], batch: int | None = None, check: bool = True
) -> tf.types.experimental.GenericFunction:
    """A `tf.function` of the `heads.ServingHead`'s `signature` whose int32 inputs are named
    as the head's and shaped [batch, *shapes[input]]; with `check`, behind `checked_inputs`."""
    names = head.signature_inputs[signature]

    def serve(*tensors):
        features = dict(zip(names, tensors))
        if check:
            features = checked_inputs(features, head.config, shapes)
        return head.outputs(signature, features)

    specs = [tf.TensorSpec([batch, *shapes[name]], tf.int32, name=name) for name in names]
    return tf.function(serve, input_signature=specs, autograph=False)


def serving_functions(head, max_seq_length: int) -> dict:
    """The ids SavedModel's functions by signature name: each of the head's signatures at any
    batch size and lengths, checked; and `serve_examples` of records at `max_seq_length`."""
    shapes = head.spec.shapes(head.model, None, None)
    functions = {name: signature_function(head, name, shapes) for name in head.signature_inputs}
    names = head.signature_inputs["serving_default"]
    fixed = head.spec.shapes(head.model, max_seq_length, None)
    spec = {k: tf.io.FixedLenFeature([int(np.prod(fixed[k]))], tf.int64) for k in names}

    def serve_examples(examples):
        parsed = tf.io.parse_example(examples, spec)
        features = {k: tf.reshape(tf.cast(parsed[k], tf.int32), [-1, *fixed[k]]) for k in names}
        return head.outputs("serving_default", checked_inputs(features, head.config, shapes))

    functions["serve_examples"] = tf.function(
        serve_examples,
        input_signature=[tf.TensorSpec([None], tf.string, name="examples")],
        autograph=False,
    )
    return functions
