"""The model an export serves, as a registered head (`heads.REGISTRY`): from a `.keras` file of any
head, from an original TF1 checkpoint of a head that builds from one (`HeadSpec.from_tf1`), or
from a Hugging Face transformers folder of the class that head serves (`HF_HEADS`)."""

from __future__ import annotations

import os
from collections.abc import Mapping

import keras

from albert_tf.checkpoints.hf import load_hf_config, load_hf_model
from albert_tf.checkpoints.hf_config import HF_EXTRA
from albert_tf.checkpoints.keras_files import load_keras_model
from albert_tf.config import AlbertConfig
from albert_tf.export.heads.kinds import REGISTRY, TF1_PRETRAINING_HEAD, head_spec
from albert_tf.export.heads.serving import ServingHead
from albert_tf.modeling.model import AlbertModel

# transformers class -> the head kind that serves it.
HF_HEADS = {
    "AlbertForPreTraining": "pretrainer",
    "AlbertForMaskedLM": "pretrainer",
    "AlbertForSequenceClassification": "classifier",
    "AlbertForQuestionAnswering": "squad_v1",
    "AlbertForMultipleChoice": "race",
}


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
    kind: str, model: keras.Model, albert_config_file: str | AlbertConfig | None = None
) -> ServingHead:
    """Wrap `model` as `kind` after checking it has what that head serves (see `heads.REGISTRY`).
    `albert_config_file` (a path, or a config such as a preset's) serves a model holding none."""
    spec = head_spec(kind)
    config = _albert_config_of(model)
    if config is None and albert_config_file:
        config = _config_from(albert_config_file)
    if config is None:
        raise ValueError(
            f"{model.name} holds no AlbertModel to read the ALBERT config from; "
            "give albert_config_file"
        )
    try:
        spec.check(model)
    except ValueError as error:
        raise ValueError(f"{error}; {_heads_that_fit(model, kind)}") from None
    return ServingHead(kind, model, config)


def _heads_that_fit(model: keras.Model, refused: str) -> str:
    """Which other head kinds `model` passes the check of, as `--head` values."""
    fits = []
    for kind, spec in REGISTRY.items():
        if kind == refused:
            continue
        try:
            spec.check(model)
        except Exception:  # a check that cannot even run (a probe of the wrong rank) fails too
            continue
        fits.append(f"--head={kind}")
    if fits:
        return f"it fits {' or '.join(fits)}"
    return f"it fits none of the heads ({', '.join(REGISTRY)})"


def _config_from(source: str | AlbertConfig) -> AlbertConfig:
    """`source` itself, or the config in the file it names."""
    if isinstance(source, AlbertConfig):
        return source
    if not os.path.isfile(source):
        raise FileNotFoundError(f"albert_config_file not found: {source!r}")
    return AlbertConfig.from_json_file(source)


def _from_tf1(
    kind: str,
    checkpoint: str,
    albert_config_file: str | AlbertConfig | None,
    model_options: Mapping,
) -> keras.Model:
    spec = head_spec(kind)
    if spec.from_tf1 is None:
        fine_tuned = tuple(
            k for k, s in REGISTRY.items() if s.from_tf1 and k != TF1_PRETRAINING_HEAD
        )
        raise ValueError(
            f"a fine-tuned TF1 checkpoint exports as one of {fine_tuned} (head included), a "
            f"pretraining one exports as head={TF1_PRETRAINING_HEAD}; not as {kind!r}: export "
            f"{kind} models from their .keras file"
        )
    if not albert_config_file:
        raise ValueError("tf1_checkpoint needs albert_config_file (or a preset)")
    return spec.from_tf1(checkpoint, _config_from(albert_config_file), **model_options)


def _from_hf(kind: str, directory: str) -> keras.Model:
    """The model of a transformers folder whose class `kind` serves (checked before loading)."""
    architecture = load_hf_config(directory).extra[HF_EXTRA]["architectures"][0]
    served = HF_HEADS.get(architecture)
    if served != kind:
        does = f"exports as head={served}" if served else "has no head to serve"
        raise ValueError(
            f"hf_model={directory} holds an {architecture}, which {does}, not head={kind}; "
            f"these export: {', '.join(f'{a} as {k}' for a, k in HF_HEADS.items())}"
        )
    return load_hf_model(directory)


def load_serving_head(
    kind: str,
    keras_model: str | None = None,
    tf1_checkpoint: str | None = None,
    albert_config_file: str | AlbertConfig | None = None,
    model_options: Mapping | None = None,
    hf_model: str | None = None,
) -> ServingHead:
    """The model to export as head `kind`: a `.keras` file (any registered head), an original
    TF1 checkpoint with its `albert_config.json` (or an `AlbertConfig` in its place, e.g.
    `AlbertConfig.from_preset(...)`; a pretraining one for `pretrainer`; one that
    `run_squad_v1.py`, `run_squad_v2.py` or `run_race.py` fine-tuned, head included, for
    `squad_v1`, `squad_v2`, `race`), or a transformers folder of the class `kind` serves
    (`HF_HEADS`; its `config.json` is the config). `model_options` go to the head's `from_tf1`
    (SQuAD v2's `start_n_top`, `end_n_top`; RACE's `num_choices`); a head ignores those it does
    not take.

    Raises ValueError or FileNotFoundError naming what is missing or wrong, and
    `CheckpointMismatchError` naming every variable missing from the checkpoint or of another shape.

    Example:
        >>> head = load_serving_head("squad_v2", tf1_checkpoint="squad2/model.ckpt-best",
        ...                          albert_config_file="albert_base/albert_config.json")
        >>> head = load_serving_head("squad_v1", hf_model="albert-base-v2-squad")
    """
    if sum(map(bool, (keras_model, tf1_checkpoint, hf_model))) != 1:
        raise ValueError("give exactly one of keras_model, tf1_checkpoint or hf_model")
    if hf_model:
        return serving_head(kind, _from_hf(kind, hf_model))
    if tf1_checkpoint:
        model = _from_tf1(kind, tf1_checkpoint, albert_config_file, model_options or {})
        return serving_head(kind, model)
    # Any Keras model may serve as a classifier given albert_config_file (`heads.CLASSIFIER`);
    # without it, the ALBERT config must come from one of our models in it.
    accept = "any" if albert_config_file else "albert_inside"
    model = load_keras_model(keras_model, accept=accept)
    try:
        return serving_head(kind, model, albert_config_file)
    except ValueError as error:
        raise ValueError(f"{keras_model}: {error}") from None
