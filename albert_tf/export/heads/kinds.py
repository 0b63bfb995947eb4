"""The head kinds an export serves: one `HeadSpec` each, by name in `REGISTRY`.

A spec holds everything the export does differently per head: how a Keras model is checked for
it, the signatures it serves (inputs, outputs, and how the model computes them), and which outputs
the int8 parity gates read. `ServingHead`, `serving_head`, the parity figures and the TFLite
conversion look the spec up, and `loading.load_serving_head` builds a head's model from an
original TF1 checkpoint with it; a new head is one more entry here (`--head` lists its name and
summary) and its model. Heads whose inputs are not the three [batch, seq] ids (SQuAD v2's
`p_mask`, RACE's [batch, choices, seq]) also say their shapes and how generic verification
examples become theirs (`task_signatures`); the SQuAD heads add a text-in question-answering
model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import keras

from albert_tf.checkpoints.tf1 import load_tf1_checkpoint
from albert_tf.export.heads import squad_race as task
from albert_tf.modeling.model import BACKBONE_INPUTS

POSITIONS = "masked_lm_positions"


@dataclasses.dataclass(frozen=True)
class Signature:
    """One signature of a head.

    Args:
        inputs: its int32 [batch, ...] input names.
        outputs: the names of the tensors it returns.
        call: (Keras model, {input name: tensor}) -> {output name: tensor}, in inference mode.
    """

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    call: Callable[[keras.Model, dict], dict]


@dataclasses.dataclass(frozen=True)
class ParityKeys:
    """The outputs the int8 gates read (`parity.parity_figures`).

    Args:
        top1: output whose argmax (last axis) an export must reproduce (`top1_agreement`).
        cosine: output whose per-example cosine is measured (`min_cosine`, `mean_cosine`).
        top1_at_masked_positions: count `top1` only where `masked_lm_weights` > 0 (MLM logits at
            padded prediction slots are meaningless).
    """

    top1: str
    cosine: str
    top1_at_masked_positions: bool = False


@dataclasses.dataclass(frozen=True)
class HeadSpec:
    """Everything the export does differently for one head kind.

    Args:
        name: the head kind (`--head`, the report's `head`).
        summary: one line on what the head serves (`export.py --help`).
        check: raises ValueError, naming what is missing, unless a Keras model can serve the head.
        signatures: {name: `Signature`}, in conversion order; `serving_default` takes the
            backbone's inputs first (`serve_examples` and the text models feed it those), then
            any of the head's own (SQuAD v2's `p_mask`).
        parity: the outputs the int8 gates read; each is returned by some signature.
        shares_embedding_table: a dense layer reads the word-embedding table too (the MLM
            decoder): the int8 variants then share one int8 copy (`tflite.converter.convert`).
        input_shapes: (model, seq_length, num_predictions) -> {input: shape without the batch};
            None: [seq_length] for the three ids, [num_predictions] for `masked_lm_positions`.
        adapt_examples: (model, verification examples) -> the head's inputs made from them (the
            three [N, seq] ids and MLM positions); None: used as they are.
        from_tf1: (checkpoint, `AlbertConfig`, **model options) -> the model with every weight
            loaded from an original TF1 checkpoint of this head (options it does not take are
            ignored); None: exported from `.keras` files only.
        tflite_signatures: the signatures TFLite serves; None: all of `signatures`.
        text_models: (head, export config, tokenizer, assets, staging, artifacts) -> {artifact:
            staged path}: builds and verifies the head's own text-in SavedModels in place of the
            generic ones; None: the generic ones.
    """

    name: str
    summary: str
    check: Callable[[keras.Model], None]
    signatures: Mapping[str, Signature]
    parity: ParityKeys
    shares_embedding_table: bool = False
    input_shapes: Callable[..., dict] | None = None
    adapt_examples: Callable[[keras.Model, dict], dict] | None = None
    from_tf1: Callable[..., keras.Model] | None = None
    tflite_signatures: tuple[str, ...] | None = None
    text_models: Callable[..., dict] | None = None

    def __post_init__(self):
        if not self.summary.strip():
            raise ValueError(f"head {self.name!r}: say in its summary what it serves")
        default = self.signatures.get("serving_default")
        if default is None or default.inputs[: len(BACKBONE_INPUTS)] != BACKBONE_INPUTS:
            raise ValueError(f"head {self.name!r}: serving_default must take {BACKBONE_INPUTS}")
        returned = {o for s in self.signatures.values() for o in s.outputs}
        missing = {self.parity.top1, self.parity.cosine} - returned
        if missing:
            raise ValueError(f"head {self.name!r}: parity outputs {sorted(missing)} are not served")
        unknown = set(self.tflite_signatures or ()) - set(self.signatures)
        if unknown:
            raise ValueError(f"head {self.name!r}: TFLite signatures {sorted(unknown)} are unknown")

    def shapes(self, model: keras.Model, seq_length, num_predictions) -> dict[str, list]:
        """{input: shape without the batch} of every input of the head's signatures."""
        if self.input_shapes is not None:
            return self.input_shapes(model, seq_length, num_predictions)
        return dict.fromkeys(BACKBONE_INPUTS, [seq_length]) | {POSITIONS: [num_predictions]}

    @property
    def converted_signatures(self) -> tuple[str, ...]:
        """The signatures the TFLite variants serve."""
        return self.tflite_signatures or tuple(self.signatures)


def _encoded(model: keras.Model, features: dict) -> dict:
    return model.backbone({k: features[k] for k in BACKBONE_INPUTS}, training=False)


def _check_pretrainer(model: keras.Model) -> None:
    names = {layer.name for layer in model.layers}
    if not (hasattr(model, "backbone") and {"predictions", "seq_relationship"} <= names):
        raise ValueError(
            f"{model.name} ({type(model).__name__}) is not an AlbertPretrainer: "
            "it lacks the MLM (`predictions`) or SOP (`seq_relationship`) head"
        )


def _pretrainer_default(model: keras.Model, features: dict) -> dict:
    encoded = _encoded(model, features)
    return {
        "sequence_output": encoded["sequence_output"],
        "pooled_output": encoded["pooled_output"],
    }


def _pretrainer_mlm(model: keras.Model, features: dict) -> dict:
    encoded = _encoded(model, features)
    return {
        "mlm_logits": model.get_layer("predictions")(
            encoded["sequence_output"], features[POSITIONS]
        )
    }


def _pretrainer_sop(model: keras.Model, features: dict) -> dict:
    encoded = _encoded(model, features)
    return {"sop_logits": model.get_layer("seq_relationship")(encoded["pooled_output"])}


def _pretrainer_from_tf1(checkpoint: str, config, **model_options) -> keras.Model:
    del model_options  # none: the pretrainer's heads are fixed by the config
    return load_tf1_checkpoint(checkpoint, config)


# An `AlbertPretrainer`: `mlm_logits` [B, P, V] at `masked_lm_positions`, `sop_logits` [B, 2].
PRETRAINER = HeadSpec(
    name="pretrainer",
    summary="serves sequence/pooled outputs, mlm, sop.",
    check=_check_pretrainer,
    signatures={
        "serving_default": Signature(
            BACKBONE_INPUTS, ("sequence_output", "pooled_output"), _pretrainer_default
        ),
        "mlm": Signature((*BACKBONE_INPUTS, POSITIONS), ("mlm_logits",), _pretrainer_mlm),
        "sop": Signature(BACKBONE_INPUTS, ("sop_logits",), _pretrainer_sop),
    },
    parity=ParityKeys(top1="mlm_logits", cosine="pooled_output", top1_at_masked_positions=True),
    shares_embedding_table=True,
    from_tf1=_pretrainer_from_tf1,
)


def _check_classifier(model: keras.Model) -> None:
    requirement = (
        f"{model.name} is no classifier: called on dict(input_ids, input_mask, "
        "segment_ids) it must return a dict with `probabilities` [batch, classes]"
    )
    outputs = task.probe_outputs(model, (1, 4), requirement)
    if "probabilities" not in outputs or len(outputs["probabilities"].shape) != 2:
        raise ValueError(requirement)


def _classifier_default(model: keras.Model, features: dict) -> dict:
    backbone_features = {k: features[k] for k in BACKBONE_INPUTS}
    return {"probabilities": model(backbone_features, training=False)["probabilities"]}


# Any Keras model called on a dict of the three int32 [B, T] inputs that returns a dict holding
# `probabilities` [B, C] (e.g. `AlbertClassifier`).
CLASSIFIER = HeadSpec(
    name="classifier",
    summary="a Keras model returning `probabilities`.",
    check=_check_classifier,
    signatures={
        "serving_default": Signature(BACKBONE_INPUTS, ("probabilities",), _classifier_default)
    },
    parity=ParityKeys(top1="probabilities", cosine="probabilities"),
)

# `AlbertSquadV1` or any model like it: `start_logits`, `end_logits` [B, T] for every position.
SQUAD_V1 = HeadSpec(
    name="squad_v1",
    summary="SQuAD v1.1 start/end logits (a text-in QA model with --spm_model_file).",
    check=task.check_squad_v1,
    signatures={
        "serving_default": Signature(
            BACKBONE_INPUTS, ("start_logits", "end_logits"), task.squad_v1_default
        )
    },
    parity=ParityKeys(top1="start_logits", cosine="end_logits"),
    from_tf1=task.squad_v1_from_tf1,
    text_models=task.qa_text_models,
)

# `AlbertSquadV2`: the beam from the ids and `p_mask`; TFLite serves the beam's logits.
SQUAD_V2 = HeadSpec(
    name="squad_v2",
    summary="SQuAD v2.0 beam and cls_logits, p_mask input (a text-in QA model likewise).",
    check=task.check_squad_v2,
    signatures={
        "serving_default": Signature(
            task.V2_INPUTS, (*task.V2_BEAM, "cls_logits"), task.squad_v2_default
        ),
        "logits": Signature(task.V2_INPUTS, ("start_logits", "cls_logits"), task.squad_v2_logits),
        "end_logits": Signature(
            (*BACKBONE_INPUTS, task.START_POSITIONS), ("end_logits",), task.squad_v2_end_logits
        ),
    },
    parity=ParityKeys(top1="start_logits", cosine="end_logits"),
    input_shapes=task.squad_v2_shapes,
    adapt_examples=task.squad_v2_examples,
    from_tf1=task.squad_v2_from_tf1,
    tflite_signatures=task.V2_TFLITE_SIGNATURES,
    text_models=task.qa_text_models,
)

# `AlbertMultipleChoice` or any model like it: [B, C, T] ids -> `logits` [B, C] (a softmax away
# from probabilities; serving those too would make its outputs fit the classifier's parity keys).
RACE = HeadSpec(
    name="race",
    summary="RACE multiple choice: [batch, choices, seq] ids -> logits over the choices.",
    check=task.check_race,
    signatures={"serving_default": Signature(BACKBONE_INPUTS, ("logits",), task.race_default)},
    parity=ParityKeys(top1="logits", cosine="logits"),
    input_shapes=task.race_shapes,
    adapt_examples=task.race_examples,
    from_tf1=task.race_from_tf1,
)

REGISTRY: dict[str, HeadSpec] = {
    spec.name: spec for spec in (PRETRAINER, CLASSIFIER, SQUAD_V1, SQUAD_V2, RACE)
}
HEADS = tuple(REGISTRY)  # the kinds registered here (`--head`'s choices)
# `loading.load_serving_head` builds this head from an original pretraining checkpoint; the other
# heads with `from_tf1`, from fine-tuned ones.
TF1_PRETRAINING_HEAD = "pretrainer"


def head_spec(kind: str) -> HeadSpec:
    """The registered spec of `kind`; ValueError naming the registered kinds otherwise."""
    if kind not in REGISTRY:
        raise ValueError(f"head must be one of {tuple(REGISTRY)}, got {kind!r}")
    return REGISTRY[kind]


def parity_keys_of(outputs) -> ParityKeys | None:
    """The parity keys of the registered heads whose parity outputs are among `outputs` (names);
    None if there are none. ValueError if such heads disagree on them."""
    found = {s.parity for s in REGISTRY.values() if {s.parity.top1, s.parity.cosine} & set(outputs)}
    if len(found) > 1:
        raise ValueError(f"outputs {sorted(outputs)} fit several heads' parity keys: {found}")
    return next(iter(found), None)
