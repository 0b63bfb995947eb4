"""What the SQuAD v1.1, SQuAD v2.0 and RACE heads serve, for their entries in `heads.REGISTRY`.

- `squad_v1`: the three [B, T] inputs -> `start_logits`, `end_logits` [B, T] (unmasked, as the
  original hands them to post-processing).
- `squad_v2`: + `p_mask` [B, T] -> the inference beam (`start_top_log_probs`, `start_top_index`
  [B, k], `end_top_log_probs`, `end_top_index` [B, k·k'], `cls_logits` [B]). Two more signatures
  give the same scores without top-k, and are what TFLite serves: `logits` (-> `start_logits`
  [B, T] before p_mask's -1e30, and `cls_logits`) and `end_logits` (the three inputs +
  `start_positions` [B, k] -> `end_logits` [B, k, T] before p_mask, for those starts). A top-k
  index flips on a near tie under fp16 or int8 rounding, so a quantized beam would fail any
  fixed parity gate; and masked positions' -1e30 would set the gates' output scale. A client
  masks (`x * (1 - p_mask) - 1e30 * p_mask`), takes the log-softmax and the top k itself: two
  model runs per window.
- `race`: the three inputs as [B, C, T] (C choices) -> `logits` [B, C].

Each head's model is also built here from a fine-tuned original TF1 checkpoint (`*_from_tf1`,
`run_squad_v1.py` / `run_squad_v2.py` / `run_race.py`'s, head included).
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from albert_tf.checkpoints.task_heads import load_task_checkpoint
from albert_tf.modeling.heads.multiple_choice import RACE_NUM_CHOICES, AlbertMultipleChoice
from albert_tf.modeling.heads.squad_v1 import AlbertSquadV1
from albert_tf.modeling.heads.squad_v2 import DEFAULT_N_TOP, AlbertSquadV2, AlbertSquadV2Head
from albert_tf.modeling.heads.squad_v2_layers import mask_logits
from albert_tf.modeling.model import BACKBONE_INPUTS

P_MASK = "p_mask"
START_POSITIONS = "start_positions"
V2_INPUTS = (*BACKBONE_INPUTS, P_MASK)
V2_BEAM = ("start_top_log_probs", "start_top_index", "end_top_log_probs", "end_top_index")
V2_TFLITE_SIGNATURES = ("logits", "end_logits")


def _backbone(features: dict) -> dict:
    return {k: features[k] for k in BACKBONE_INPUTS}


def probe_outputs(model: keras.Model, shape: tuple, requirement: str, extra=()) -> dict:
    """`model`'s outputs on zero ids of `shape`; ValueError stating `requirement` (and what the
    model raised) when it cannot take them or returns no dict."""
    inputs = {k: np.zeros(shape, np.int32) for k in (*BACKBONE_INPUTS, *extra)}
    try:
        outputs = model(inputs, training=False)
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{requirement}; it raised {type(e).__name__}: {e}") from None
    if not isinstance(outputs, dict):
        raise ValueError(requirement)
    return outputs


def check_squad_v1(model: keras.Model) -> None:
    """ValueError unless `model` maps the three [B, T] inputs to `start_logits`, `end_logits`."""
    requirement = (
        f"{model.name} is no SQuAD v1.1 model: called on dict(input_ids, input_mask, "
        "segment_ids) it must return a dict with `start_logits` and `end_logits` [batch, seq]"
    )
    outputs = probe_outputs(model, (1, 4), requirement)
    if any(k not in outputs or len(outputs[k].shape) != 2 for k in ("start_logits", "end_logits")):
        raise ValueError(requirement)


def squad_v1_default(model: keras.Model, features: dict) -> dict:
    """SQuAD v1's `serving_default`: start and end logits [B, T] of the three ids."""
    outputs = model(_backbone(features), training=False)
    return {"start_logits": outputs["start_logits"], "end_logits": outputs["end_logits"]}


def check_squad_v2(model: keras.Model) -> None:
    """ValueError unless `model` is an `AlbertSquadV2` (its head's parts serve the logits)."""
    head = getattr(model, "head", None)
    if not (hasattr(model, "backbone") and isinstance(head, AlbertSquadV2Head)):
        raise ValueError(
            f"{model.name} ({type(model).__name__}) is no AlbertSquadV2: it lacks the SQuAD v2.0 "
            "head (start_logits, end_logits, answer_class)"
        )


def _sequence_output(model: keras.Model, features: dict):
    return model.backbone(_backbone(features), training=False)["sequence_output"]


def squad_v2_default(model: keras.Model, features: dict) -> dict:
    """SQuAD v2's `serving_default`: the beam search's outputs and the answer-class logit."""
    outputs = model({k: features[k] for k in V2_INPUTS}, training=False)
    return {k: outputs[k] for k in (*V2_BEAM, "cls_logits")}


def squad_v2_logits(model: keras.Model, features: dict) -> dict:
    """SQuAD v2's `logits` signature (a client's own top-k): start logits [B, T] before
    p_mask, and the answer-class logit."""
    sequence_output = _sequence_output(model, features)
    start_logits = model.head.start_logits(sequence_output)
    start_probs = ops.softmax(mask_logits(start_logits, features[P_MASK]), axis=-1)
    return {
        "start_logits": ops.cast(start_logits, "float32"),
        "cls_logits": model.head.answer_class(sequence_output, start_probs, training=False),
    }


def squad_v2_end_logits(model: keras.Model, features: dict) -> dict:
    """SQuAD v2's `end_logits` signature: end logits [B, k, T] before p_mask, for the k
    `start_positions` a client chose."""
    sequence_output = _sequence_output(model, features)
    index = ops.expand_dims(ops.cast(features[START_POSITIONS], "int32"), -1)
    start_states = ops.take_along_axis(sequence_output, index, axis=1)
    end_logits = model.head.end_logits(sequence_output, start_states, training=False)
    return {"end_logits": ops.cast(end_logits, "float32")}


def check_race(model: keras.Model) -> None:
    """ValueError unless `model` maps [B, C, T] inputs to `logits` [B, C]."""
    requirement = (
        f"{model.name} is no multiple-choice model: called on dict(input_ids, input_mask, "
        "segment_ids) of [batch, choices, seq] it must return a dict with `logits` "
        "[batch, choices]"
    )
    choices = getattr(model, "num_choices", RACE_NUM_CHOICES)
    outputs = probe_outputs(model, (1, choices, 4), requirement)
    if "logits" not in outputs or tuple(outputs["logits"].shape) != (1, choices):
        raise ValueError(requirement)


def race_default(model: keras.Model, features: dict) -> dict:
    """RACE's `serving_default`: one logit per choice [B, C]."""
    return {"logits": model(_backbone(features), training=False)["logits"]}


def squad_v2_shapes(model: keras.Model, seq_length, predictions) -> dict[str, list]:
    """Input shapes (batch aside) of the v2 signatures at `seq_length` (None: any)."""
    del predictions
    shapes = {k: [seq_length] for k in V2_INPUTS}
    return {**shapes, START_POSITIONS: [model.start_n_top]}


def race_shapes(model: keras.Model, seq_length, predictions) -> dict[str, list]:
    """[choices, seq_length] for each of the three inputs."""
    del predictions
    return {k: [model.num_choices, seq_length] for k in BACKBONE_INPUTS}


def p_mask_of(input_mask: np.ndarray, segment_ids: np.ndarray) -> np.ndarray:
    """The p_mask `convert_examples_to_features` gives `[CLS] A [SEP] B [SEP]`: 0 at [CLS] and on
    B, 1 on A, the [SEP]s and padding."""
    position = np.arange(input_mask.shape[-1])
    last = input_mask.sum(-1, keepdims=True) - 1
    answerable = (position == 0) | ((segment_ids == 1) & (position < last))
    return (~answerable).astype(np.int32)


def squad_v2_examples(model: keras.Model, examples: dict) -> dict:
    """Adds `p_mask` (as `p_mask_of`) and `start_positions` (the model's beam starts), keeping
    the examples with at least `start_n_top` answerable positions: the beam's surplus entries of
    others are the -1e30 mask, which would set the parity scale."""
    p_mask = p_mask_of(examples["input_mask"], examples["segment_ids"])
    keep = (p_mask == 0).sum(-1) >= max(model.start_n_top, model.end_n_top)
    examples = {k: v[keep] for k, v in examples.items()} | {P_MASK: p_mask[keep]}
    starts = []
    for i in range(0, len(p_mask[keep]), 64):
        batch = {k: tf.constant(examples[k][i : i + 64]) for k in V2_INPUTS}
        starts.append(model(batch, training=False)["start_top_index"].numpy())
    width = model.start_n_top
    examples[START_POSITIONS] = (
        np.concatenate(starts).astype(np.int32) if starts else np.zeros((0, width), np.int32)
    )
    return examples


def race_examples(model: keras.Model, examples: dict) -> dict:
    """Every `num_choices` consecutive examples as the choices of one question ([N/C, C, ...])."""
    choices = model.num_choices
    count = len(examples["input_ids"]) // choices * choices
    return {k: v[:count].reshape(-1, choices, *v.shape[1:]) for k, v in examples.items()}


def squad_v1_from_tf1(checkpoint: str, config, **model_options) -> keras.Model:
    """An `AlbertSquadV1` with every weight from a fine-tuned checkpoint."""
    del model_options
    model = AlbertSquadV1(config)
    load_task_checkpoint(model, checkpoint)
    return model


def squad_v2_from_tf1(
    checkpoint: str,
    config,
    start_n_top: int = DEFAULT_N_TOP,
    end_n_top: int = DEFAULT_N_TOP,
    **model_options,
) -> keras.Model:
    """An `AlbertSquadV2` with its beam widths and every weight from a fine-tuned checkpoint."""
    del model_options
    model = AlbertSquadV2(config, start_n_top=start_n_top, end_n_top=end_n_top)
    load_task_checkpoint(model, checkpoint)
    return model


def race_from_tf1(
    checkpoint: str, config, num_choices: int = RACE_NUM_CHOICES, **model_options
) -> keras.Model:
    """An `AlbertMultipleChoice` of `num_choices` with every weight from a fine-tuned checkpoint."""
    del model_options
    model = AlbertMultipleChoice(config, num_choices=num_choices)
    load_task_checkpoint(model, checkpoint)
    return model


def qa_text_models(head, config, tokenizer, assets, staging, artifacts) -> dict[str, str]:
    """The SQuAD heads' text-in SavedModel (`qa.verify.build_qa_text_model`) as the `text`
    artifact, with `config.qa` (or the default `QaSettings` at `config.max_text_bytes`)."""
    # Imported here: it imports savedmodel, which imports the registry, which imports this module.
    from albert_tf.export.qa import text as qa_text, verify as qa_verify

    settings = config.qa or qa_text.QaSettings(max_context_bytes=config.max_text_bytes)
    return qa_verify.build_qa_text_model(
        head,
        tokenizer,
        config.max_seq_length,
        config.do_lower_case,
        settings,
        assets,
        staging,
        artifacts,
    )
