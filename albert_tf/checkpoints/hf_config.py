"""transformers' ALBERT `config.json` to `AlbertConfig` and back.

The model fields have the same names in both. transformers' `gelu_new` is the original's tanh
`gelu`; its plain `gelu` (exact erf) is our `gelu_erf`. The fields `AlbertConfig` does not model
(label names, `problem_type`, token ids, `classifier_dropout_prob`, ...) are kept in its
`extra["huggingface"]`, so they survive `.keras` files and TF1 exports and come back out.
"""

from __future__ import annotations

from albert_tf.checkpoints.hf_format import HfFolder, HfFormatError

# HF_EXTRA: the `AlbertConfig.extra` key holding config.json's other fields (defined with the
# config, which keeps it when read back).
from albert_tf.config import HF_EXTRA, SIZE_FIELDS, AlbertConfig

# transformers' activation name -> ours; anything else is refused by name.
HF_ACTIVATIONS = {
    "gelu_new": "gelu",
    "gelu": "gelu_erf",
    "relu": "relu",
    "tanh": "tanh",
    "linear": "linear",
}
OUR_ACTIVATIONS = {ours: theirs for theirs, ours in HF_ACTIVATIONS.items()}
# The fields transformers' config.json holds under our names.
MODEL_FIELDS = (
    *SIZE_FIELDS,
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "initializer_range",
)
# The fields that decide what a model computes from its weights (the rest: training only).
SHAPE_FIELDS = (*SIZE_FIELDS, "hidden_act", "sharing")
LAYER_NORM_EPS = 1e-12  # the original's, hard-coded
# What transformers' AlbertConfig writes by default, for models that never came from it.
HF_DEFAULTS = {
    "bos_token_id": 2,
    "classifier_dropout_prob": 0.1,
    "eos_token_id": 3,
    "pad_token_id": 0,
    "tie_word_embeddings": True,
}
SEQUENCE_CLASSIFICATION = "AlbertForSequenceClassification"
QUESTION_ANSWERING = "AlbertForQuestionAnswering"


def hf_labels(values: dict) -> tuple[int, bool]:
    """(num_labels, regression) as transformers reads them from config.json's values."""
    id2label = values.get("id2label")
    num_labels = len(id2label) if isinstance(id2label, dict) else values.get("num_labels", 2)
    problem = values.get("problem_type")
    return num_labels, problem == "regression" or (problem is None and num_labels == 1)


def read_hf_config(folder: HfFolder, architectures: tuple[str, ...]) -> tuple[AlbertConfig, str]:
    """(`AlbertConfig`, transformers class) of a folder's `config.json`, the class one of
    `architectures`; `HfFormatError` naming the file and the key for anything not reproducible."""
    values, path = folder.values, folder.config_path

    def refuse(key, why):
        raise HfFormatError(f"{path}: {key}: {values.get(key)!r} {why}")

    if values.get("model_type") != "albert":
        refuse("model_type", "is not 'albert'")
    names = values.get("architectures")
    if not isinstance(names, list) or len(names) != 1:
        refuse("architectures", "should name one transformers ALBERT class")
    if names[0] not in architectures:
        refuse("architectures", f"has no counterpart here; these convert: {list(architectures)}")
    if values.get("hidden_act", "gelu_new") not in HF_ACTIVATIONS:
        refuse("hidden_act", f"has no counterpart here; these convert: {list(HF_ACTIVATIONS)}")
    if values.get("layer_norm_eps", LAYER_NORM_EPS) != LAYER_NORM_EPS:
        refuse("layer_norm_eps", f"differs from the original's {LAYER_NORM_EPS}")
    if values.get("position_embedding_type", "absolute") != "absolute":
        refuse("position_embedding_type", "is not 'absolute', the original's")
    num_labels, regression = hf_labels(values)
    if not isinstance(num_labels, int) or num_labels < 1:
        refuse("id2label", "gives no positive number of labels")
    if names[0] == SEQUENCE_CLASSIFICATION:
        if values.get("problem_type") not in (None, "regression", "single_label_classification"):
            refuse("problem_type", "has no counterpart here (softmax or regression heads only)")
        if regression and num_labels != 1:
            refuse("problem_type", f"with {num_labels} labels: regression here takes one")
    if names[0] == QUESTION_ANSWERING and num_labels != 2:
        refuse("id2label", "should have 2 entries (start and end logits)")
    stored = {k: v for k, v in values.items() if k not in MODEL_FIELDS and k != "hidden_act"}
    try:
        config = AlbertConfig(
            **{k: values[k] for k in MODEL_FIELDS if k in values},
            hidden_act=HF_ACTIVATIONS[values.get("hidden_act", "gelu_new")],
            extra={HF_EXTRA: stored},
        )
    except (TypeError, ValueError) as e:
        raise HfFormatError(f"{path}: {e}") from None
    return config, names[0]


def check_same_model(config: AlbertConfig, model_config: AlbertConfig, path: str) -> None:
    """`HfFormatError` naming the first field in which a folder's config gives another model."""
    for field in SHAPE_FIELDS:
        theirs, ours = getattr(config, field), getattr(model_config, field)
        if theirs != ours:
            raise HfFormatError(f"{path}: {field}: {theirs!r} (as ours), the model has {ours!r}")


def hf_config_values(
    config: AlbertConfig,
    architecture: str,
    num_labels: int | None = None,
    regression: bool = False,
    label_names: list[str] | None = None,
    classifier_dropout: float | None = None,
) -> dict:
    """config.json's values as transformers writes them for `architecture`: the stored fields,
    transformers' defaults for the rest, the model fields, and labels for a classifier."""
    if config.sharing != "all":
        raise ValueError(
            f"transformers' ALBERT shares every layer of a group; sharing={config.sharing!r} "
            "has no transformers form"
        )
    stored = dict(config.extra.get(HF_EXTRA, {}))
    values = {**HF_DEFAULTS, **stored}
    values.update({field: getattr(config, field) for field in MODEL_FIELDS})
    values.update(
        hidden_act=OUR_ACTIVATIONS[config.hidden_act],
        layer_norm_eps=LAYER_NORM_EPS,
        model_type="albert",
        architectures=[architecture],
    )
    # We write float32 tensors; older configs name the dtype `torch_dtype`.
    values["torch_dtype" if "torch_dtype" in values else "dtype"] = "float32"
    if classifier_dropout is not None:
        values["classifier_dropout_prob"] = classifier_dropout
    if architecture == SEQUENCE_CLASSIFICATION:
        old = stored.get("id2label")
        old = old if isinstance(old, dict) and len(old) == num_labels else {}
        names = label_names or [old.get(str(i), f"LABEL_{i}") for i in range(num_labels)]
        if len(names) != num_labels:
            raise ValueError(f"{len(names)} label names for {num_labels} labels")
        values.pop("id2label", None), values.pop("label2id", None)
        if "num_labels" in values:  # older configs carry it beside id2label
            values["num_labels"] = num_labels
        if names != ["LABEL_0", "LABEL_1"]:  # transformers leaves out its two default labels
            values["id2label"] = {str(i): name for i, name in enumerate(names)}
            values["label2id"] = {name: i for i, name in enumerate(names)}
        if regression:
            values["problem_type"] = "regression"
        elif values.get("problem_type") == "regression":
            del values["problem_type"]
    return values
