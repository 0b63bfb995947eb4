"""Hugging Face transformers ALBERT checkpoints in and out, without torch.

| transformers class | ours |
|---|---|
| `AlbertForPreTraining`, `AlbertForMaskedLM` (no pooler, no SOP head) | `AlbertPretrainer` |
| `AlbertModel` | `AlbertModel` |
| `AlbertForSequenceClassification` | `AlbertClassifier` (regression when `problem_type` says so) |
| `AlbertForQuestionAnswering` (no pooler) | `AlbertSquadV1` (the original's `cls/squad` head) |
| `AlbertForMultipleChoice` | `AlbertMultipleChoice` |

Tensors go through the original TF1 names (`hf_format.hf_keys`), the config through
`hf_config`. Example:

    >>> model = load_hf_model("albert-base-v2")        # a folder save_pretrained wrote
    >>> save_hf_model(model, "out/albert-base-v2")      # config.json + model.safetensors
"""

from __future__ import annotations

import os
import shutil

import keras
import numpy as np
from absl import logging

from albert_tf.checkpoints.hf_config import (
    HF_EXTRA,
    QUESTION_ANSWERING,
    SEQUENCE_CLASSIFICATION,
    check_same_model,
    hf_config_values,
    hf_labels,
    read_hf_config,
)
from albert_tf.checkpoints.hf_format import (
    CONFIG_FILE,
    FLOAT_DTYPES,
    INDEX_FILE,
    SPM_FILE,
    TIED_KEYS,
    TOKENIZER_CONFIG_FILE,
    TOKENIZER_FILES,
    TOKENIZER_JSON_FILE,
    WEIGHTS_FILE,
    HfFolder,
    HfFormatError,
    HfKey,
    hf_keys,
    is_hf_folder,
    resolve_do_lower_case,
    resolve_spm_model_file,
    tokenizer_config_values,
    write_safetensors,
)
from albert_tf.checkpoints.hf_tokenizer import tokenizer_json
from albert_tf.checkpoints.tf1 import head_tf1_names, tf1_variable_map
from albert_tf.config import AlbertConfig
from albert_tf.io import atomic_path, write_json
from albert_tf.modeling.heads.classifier import AlbertClassifier
from albert_tf.modeling.heads.multiple_choice import DEFAULT_DROPOUT, AlbertMultipleChoice
from albert_tf.modeling.heads.squad_v1 import AlbertSquadV1
from albert_tf.modeling.model import AlbertModel, AlbertPretrainer
from albert_tf.text.tokenization import AlbertTokenizer

__all__ = [
    "HfFormatError",
    "hf_architectures",
    "initialize_from_hf",
    "is_hf_folder",
    "load_hf_config",
    "load_hf_model",
    "resolve_do_lower_case",
    "resolve_spm_model_file",
    "save_hf_model",
]


# One small builder per class, from the config (its `extra` holds config.json's other fields).
def _build_pretrainer(config: AlbertConfig) -> keras.Model:
    return AlbertPretrainer(config)


def _build_backbone(config: AlbertConfig) -> keras.Model:
    return AlbertModel(config)


def _build_classifier(config: AlbertConfig) -> keras.Model:
    num_labels, regression = hf_labels(config.extra[HF_EXTRA])
    return AlbertClassifier(config, num_labels=num_labels, regression=regression)


def _build_squad(config: AlbertConfig) -> keras.Model:
    return AlbertSquadV1(config)


def _build_multiple_choice(config: AlbertConfig) -> keras.Model:
    dropout = config.extra[HF_EXTRA].get("classifier_dropout_prob")
    return AlbertMultipleChoice(
        config, dropout_prob=DEFAULT_DROPOUT if dropout is None else dropout
    )


# transformers class -> the builder of our model for it.
BUILDERS = {
    "AlbertForPreTraining": _build_pretrainer,
    "AlbertForMaskedLM": _build_pretrainer,
    "AlbertModel": _build_backbone,
    SEQUENCE_CLASSIFICATION: _build_classifier,
    QUESTION_ANSWERING: _build_squad,
    "AlbertForMultipleChoice": _build_multiple_choice,
}
# Our class -> the transformers classes it can be written as, the default first.
WRITABLE = (
    (AlbertPretrainer, ("AlbertForPreTraining", "AlbertForMaskedLM", "AlbertModel")),
    (AlbertModel, ("AlbertModel",)),
    (AlbertClassifier, (SEQUENCE_CLASSIFICATION,)),
    (AlbertSquadV1, (QUESTION_ANSWERING,)),
    (AlbertMultipleChoice, ("AlbertForMultipleChoice",)),
)


def load_hf_config(directory: str | os.PathLike) -> AlbertConfig:
    """The `AlbertConfig` of a transformers ALBERT folder (its other fields in `extra`), checked
    as `load_hf_model` checks it: for a job that builds its own model from the folder."""
    return read_hf_config(HfFolder(directory), tuple(BUILDERS))[0]


def load_hf_model(directory: str | os.PathLike) -> keras.Model:
    """Our model of a transformers ALBERT folder (`config.json` + `model.safetensors` or shards).

    Raises `HfFormatError`, one line naming the file and the key, for a folder without
    `config.json`, another `model_type`, a class, activation or setting this project cannot
    reproduce, a missing or misshaped tensor, or a dtype other than float32/float16/bfloat16.
    """
    folder = HfFolder(directory)
    config, architecture = read_hf_config(folder, tuple(BUILDERS))
    model = BUILDERS[architecture](config)
    _assign(model, folder, config, architecture, require_head=True)
    return model


def initialize_from_hf(
    model: keras.Model, directory: str | os.PathLike, require_head: bool = False
) -> bool:
    """Assigns any of our models from a transformers folder; returns whether its head loaded.

    The folder's config must give the model's shapes and activation. The backbone is required;
    the task head (`TF1_HEAD_RULES`) too with `require_head`, else it loads only when the folder
    holds all of it with the same shapes. What the folder's class lacks (the pooler of a QA
    model, the SOP head of a masked LM) keeps its initialisation, with a warning.
    """
    folder = HfFolder(directory)
    config, architecture = read_hf_config(folder, tuple(BUILDERS))
    check_same_model(config, model.config, folder.config_path)
    return _assign(model, folder, config, architecture, require_head)


def _assign(model, folder: HfFolder, config, architecture: str, require_head: bool) -> bool:
    targets, head = tf1_variable_map(model), head_tf1_names(model)
    keys = hf_keys(config, architecture, frozenset(folder.entries))
    if require_head and head - {k.tf1_name for k in keys}:
        raise HfFormatError(
            f"{folder.config_path}: architectures: {architecture} has no "
            f"{type(model).__name__} head"
        )
    present, problems = [], []
    for k in keys:
        if k.tf1_name is not None and k.tf1_name not in targets:
            continue  # a head of theirs that this model lacks
        kind, problem = _problem(folder, k, _hf_shape(k, targets, config))
        # An optional part may be absent; a head not required may be absent or misshaped.
        skippable = (k.optional and kind == "missing") or (
            k.tf1_name in head and not require_head and kind in ("missing", "shape")
        )
        if problem is None:
            present.append(k)
        elif not skippable:
            problems.append(problem)
    if problems:
        more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
        raise HfFormatError(problems[0] + more)
    _check_tied(folder)
    values = {}
    for k in present:
        value = _value(folder, k, config)
        if k.tf1_name is not None:
            values[k.tf1_name] = value
    head_loaded = bool(head) and head <= values.keys()
    for name, variable in targets.items():
        if name in values and (name not in head or head_loaded):
            variable.assign(values[name])
    kept = sorted(n for n in targets if n not in values and n not in head)
    if kept:
        logging.warning(
            "%s (%s) has no %s: kept as initialised", folder.directory, architecture, kept
        )
    ignored = sorted(set(folder.entries) - {k.key for k in keys} - set(TIED_KEYS))
    if ignored:
        logging.info("%s: ignored %d tensors, e.g. %s", folder.directory, len(ignored), ignored[0])
    return head_loaded


def _hf_shape(k: HfKey, targets, config: AlbertConfig) -> tuple[int, ...]:
    if k.tf1_name is None:  # the identity projection where E = H
        return (config.hidden_size,) * (2 if k.transpose else 1)
    shape = tuple(targets[k.tf1_name].shape)
    return shape[::-1] if k.transpose else shape


def _problem(folder: HfFolder, k: HfKey, shape: tuple[int, ...]) -> tuple[str, str | None]:
    """(kind, one-line message) of what is wrong with tensor `k`; (None, None) if nothing."""
    if k.key not in folder.entries:
        return "missing", (
            f"{folder.weights_path}: {k.key}: missing (config.json's class and sizes have it)"
        )
    path, dtype, found = folder.entries[k.key]
    if dtype not in FLOAT_DTYPES:
        return "dtype", f"{path}: {k.key}: dtype {dtype}, not one of {', '.join(FLOAT_DTYPES)}"
    if found != shape:
        return "shape", f"{path}: {k.key}: shape {list(found)}, config.json gives {list(shape)}"
    return None, None


def _value(folder: HfFolder, k: HfKey, config: AlbertConfig) -> np.ndarray:
    value = folder.tensor(k.key)
    if k.tf1_name is None:
        identity = np.eye(config.hidden_size) if k.transpose else np.zeros(config.hidden_size)
        if not np.array_equal(value, identity):
            raise HfFormatError(
                f"{folder.entries[k.key][0]}: {k.key}: not the identity, which it must be where "
                "embedding_size = hidden_size (the original has no projection there)"
            )
    return value.T if k.transpose else value


def _check_tied(folder: HfFolder) -> None:
    # The decoder keys transformers leaves out; a file holding them must hold the tied values.
    for key, source in TIED_KEYS.items():
        if {key, source} <= folder.entries.keys() and not np.array_equal(
            folder.tensor(key), folder.tensor(source)
        ):
            raise HfFormatError(
                f"{folder.entries[key][0]}: {key}: differs from {source}, to which the original "
                "(and this model) ties it"
            )


def hf_architectures(model: keras.Model) -> tuple[str, ...]:
    """The transformers classes `model` can be written as, its default first."""
    for cls, architectures in WRITABLE:
        if isinstance(model, cls):
            return architectures
    raise ValueError(
        f"{type(model).__name__} has no transformers counterpart; these convert: "
        f"{[cls.__name__ for cls, _ in WRITABLE]}"
    )


def save_hf_model(
    model: keras.Model,
    directory: str | os.PathLike,
    architecture: str | None = None,
    label_names: list[str] | None = None,
    spm_model_file: str | None = None,
    do_lower_case: bool = True,
    tokenizer_folder: str | None = None,
) -> str:
    """Writes `model` as transformers' `save_pretrained` would: `config.json` +
    `model.safetensors` (float32, the class's exact key set, tied decoder keys left out, an
    identity `embedding_hidden_mapping_in` where E = H), and with `spm_model_file` the tokenizer
    `AutoTokenizer` loads: `spiece.model`, `tokenizer.json` tokenizing as ALBERT does
    (`hf_tokenizer.tokenizer_json`) and `tokenizer_config.json` (casing `do_lower_case`, as
    `hf_format.tokenizer_config_values`). `tokenizer_folder` instead: a transformers folder whose
    own tokenizer files are copied as they are.

    `architecture` defaults to the class the model was read as (kept in its config), else
    `hf_architectures(model)[0]`. Everything is checked before anything is written; a new folder
    appears whole (staged under a hidden name), an existing one gets each file replaced whole.
    Returns the directory.
    """
    choices = hf_architectures(model)
    stored = (model.config.extra.get(HF_EXTRA, {}).get("architectures") or [None])[0]
    architecture = architecture or (stored if stored in choices else choices[0])
    if architecture not in choices:
        raise ValueError(f"{type(model).__name__} writes as one of {choices}, not {architecture}")
    if label_names and architecture != SEQUENCE_CLASSIFICATION:
        raise ValueError(f"label names are for a sequence classifier, not {architecture}")
    values = hf_config_values(
        model.config,
        architecture,
        num_labels=getattr(model, "num_labels", None),
        regression=getattr(model, "regression", False),
        label_names=label_names,
        classifier_dropout=getattr(model, "dropout_prob", None),
    )
    targets, hidden = tf1_variable_map(model), model.config.hidden_size
    tensors = {}
    for k in hf_keys(model.config, architecture):
        if k.optional:
            continue
        if k.tf1_name is None:
            value = np.eye(hidden) if k.transpose else np.zeros(hidden)
        else:
            value = np.asarray(targets[k.tf1_name].numpy())
            value = value.T if k.transpose else value
        tensors[k.key] = value.astype(np.float32)
    if spm_model_file and not os.path.isfile(spm_model_file):
        raise FileNotFoundError(f"SentencePiece model not found: {spm_model_file}")
    directory = os.fspath(directory)
    tokenizer = {}  # file name: its source path, or the JSON value written
    if tokenizer_folder:
        for name in (SPM_FILE, *TOKENIZER_FILES):
            if os.path.isfile(os.path.join(tokenizer_folder, name)):
                tokenizer[name] = os.path.join(tokenizer_folder, name)
        if not tokenizer:
            raise FileNotFoundError(f"{tokenizer_folder}: no tokenizer files to keep")
    elif spm_model_file:
        tokenizer = {
            SPM_FILE: spm_model_file,
            TOKENIZER_JSON_FILE: tokenizer_json(AlbertTokenizer(spm_model_file, do_lower_case)),
            TOKENIZER_CONFIG_FILE: tokenizer_config_values(
                do_lower_case, model.config.max_position_embeddings
            ),
        }
    if os.path.isdir(directory) and os.listdir(directory):
        _write_files(directory, values, tensors, tokenizer)
        if os.path.exists(os.path.join(directory, INDEX_FILE)):
            logging.warning("%s: an older %s is still there", directory, INDEX_FILE)
    else:
        with atomic_path(directory) as staging:
            os.makedirs(staging)
            _write_files(staging, values, tensors, tokenizer)
    logging.info("wrote %s (%s, %d tensors)", directory, architecture, len(tensors))
    return directory


def _write_files(directory: str, values: dict, tensors: dict, tokenizer: dict):
    write_safetensors(os.path.join(directory, WEIGHTS_FILE), tensors)
    write_json(os.path.join(directory, CONFIG_FILE), values)
    for name, content in tokenizer.items():
        if isinstance(content, dict):
            write_json(os.path.join(directory, name), content)
        elif os.path.abspath(content) != os.path.abspath(os.path.join(directory, name)):
            with atomic_path(os.path.join(directory, name)) as staging:
                shutil.copyfile(content, staging)
