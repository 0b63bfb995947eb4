"""Original TF1 checkpoints in and out, by variable name.

`TF1_NAME_RULES` is the one table from our variable paths to the original google-research names
of the backbone and the pretraining heads; a test asserts it covers every variable of every
sharing mode. A task head declares its own rules as the class attribute `TF1_HEAD_RULES` of its
model (checked first), so a new head never edits this table. Parts that `sharing` leaves unshared
have no original name; they are written as `.../transformer/layer_{l}/inner_group_{k}/...`.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping

import numpy as np
import tensorflow as tf

from albert_tf.checkpoints.keras_files import albert_config_of_keras_file, load_keras_model
from albert_tf.checkpoints.tf1_index import check_data_files
from albert_tf.config import AlbertConfig
from albert_tf.io import make_temporary_dir, write_text
from albert_tf.modeling.model import AlbertPretrainer

_BLOCK = r"(group|layer)_(\d+)_inner_group_(\d+)"
_TF1_BLOCK = r"bert/encoder/transformer/\1_\2/inner_group_\3"
# (regex on our `variable.path`, replacement giving the original name), first match wins.
TF1_NAME_RULES: tuple[tuple[str, str], ...] = (
    (
        r"^embeddings/(word_embeddings|token_type_embeddings|position_embeddings)$",
        r"bert/embeddings/\1",
    ),
    (r"^embeddings/LayerNorm/(gamma|beta)$", r"bert/embeddings/LayerNorm/\1"),
    (
        r"^embedding_hidden_mapping_in/(kernel|bias)$",
        r"bert/encoder/embedding_hidden_mapping_in/\1",
    ),
    (
        rf"^{_BLOCK}_attention/(query|key|value)/(kernel|bias)$",
        rf"{_TF1_BLOCK}/attention_1/self/\4/\5",
    ),
    (
        rf"^{_BLOCK}_attention/output_dense/(kernel|bias)$",
        rf"{_TF1_BLOCK}/attention_1/output/dense/\4",
    ),
    (rf"^{_BLOCK}_attention/LayerNorm/(gamma|beta)$", rf"{_TF1_BLOCK}/LayerNorm/\4"),
    (
        rf"^{_BLOCK}_ffn/intermediate_dense/(kernel|bias)$",
        rf"{_TF1_BLOCK}/ffn_1/intermediate/dense/\4",
    ),
    (
        rf"^{_BLOCK}_ffn/output_dense/(kernel|bias)$",
        rf"{_TF1_BLOCK}/ffn_1/intermediate/output/dense/\4",
    ),
    (rf"^{_BLOCK}_ffn/LayerNorm/(gamma|beta)$", rf"{_TF1_BLOCK}/LayerNorm_1/\4"),
    (r"^pooler/(kernel|bias)$", r"bert/pooler/dense/\1"),
    (r"^predictions/dense/(kernel|bias)$", r"cls/predictions/transform/dense/\1"),
    (r"^predictions/LayerNorm/(gamma|beta)$", r"cls/predictions/transform/LayerNorm/\1"),
    (r"^predictions/output_bias$", r"cls/predictions/output_bias"),
    (r"^seq_relationship/(output_weights|output_bias)$", r"cls/seq_relationship/\1"),
)
# Training state in an original checkpoint that is not part of the model.
_SKIPPED = re.compile(r"(/adam_m|/adam_v|/lamb_m|/lamb_v)$|^global_step$")


class CheckpointMismatchError(ValueError):
    """A checkpoint does not fit the model; the message lists every problem."""


def rename(path: str, rules: tuple[tuple[str, str], ...], what: str) -> str:
    """Apply the first rule (regex, replacement) of a name table that matches `path`."""
    for pattern, replacement in rules:
        name, count = re.subn(pattern, replacement, path)
        if count:
            return name
    raise KeyError(f"no {what} name rule for variable {path!r}")


def tf1_name_rules(model) -> tuple[tuple[str, str], ...]:
    """The name table of `model`: its head's `TF1_HEAD_RULES` first, then `TF1_NAME_RULES`."""
    return tuple(getattr(model, "TF1_HEAD_RULES", ())) + TF1_NAME_RULES


def tf1_name(path: str, rules: tuple[tuple[str, str], ...] = TF1_NAME_RULES) -> str:
    """The original TF1 variable name of one of our variable paths."""
    return rename(path, rules, "TF1")


def head_tf1_names(model) -> frozenset[str]:
    """The original names of the variables that `model`'s `TF1_HEAD_RULES` name (its task head)."""
    head_rules = tuple(getattr(model, "TF1_HEAD_RULES", ()))
    return frozenset(
        tf1_name(v.path, head_rules)
        for v in model.weights
        if any(re.search(pattern, v.path) for pattern, _ in head_rules)
    )


def check_weights(
    expected: Mapping[str, tuple],
    found: Mapping[str, tuple],
    source: str,
    what: str,
    allow_unexpected: bool = False,
) -> None:
    """Raises `CheckpointMismatchError` listing every name of `expected` {name: shape} missing
    from `found`, every shape mismatch and (unless `allow_unexpected`) every name of `found` that
    is not expected; returns if there is none."""
    expected = {name: tuple(shape) for name, shape in expected.items()}
    found = {name: tuple(shape) for name, shape in found.items()}
    problems = [
        f"missing from checkpoint: {name} {shape}"
        for name, shape in sorted(expected.items())
        if name not in found
    ]
    if not allow_unexpected:
        problems += [
            f"unexpected in checkpoint: {name} {shape}"
            for name, shape in sorted(found.items())
            if name not in expected
        ]
    problems += [
        f"shape mismatch: {name} checkpoint {found[name]} vs model {shape}"
        for name, shape in sorted(expected.items())
        if name in found and found[name] != shape
    ]
    if problems:
        raise CheckpointMismatchError(
            f"{source} does not match the {what} ({len(problems)} problems):\n  "
            + "\n  ".join(problems)
        )


def tf1_variable_map(model) -> dict[str, tf.Variable]:
    """{original TF1 name: variable} for every weight of one of our models (pretrainer, backbone
    or a task model), named by `tf1_name_rules(model)`."""
    rules = tf1_name_rules(model)
    names = {}
    for variable in model.weights:
        name = tf1_name(variable.path, rules)
        if name in names:
            raise ValueError(f"two variables map to {name!r}: {names[name].path}, {variable.path}")
        names[name] = variable
    return names


def resolve_checkpoint_prefix(path: str | os.PathLike) -> str:
    """A checkpoint prefix from a prefix or a directory.

    A directory resolves through its `checkpoint` state file, else to its only checkpoint (the
    release tarballs ship a lone `model.ckpt-best` without a state file).
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        prefix = tf.train.latest_checkpoint(path)
        if prefix is not None:
            return prefix
        prefixes = sorted(
            os.path.join(path, f[: -len(".index")])
            for f in os.listdir(path)
            if f.endswith(".index")
        )
        if len(prefixes) != 1:
            raise FileNotFoundError(
                f"cannot choose a checkpoint in directory {path}: no `checkpoint` state file and "
                f"{len(prefixes)} candidates {prefixes}; pass the prefix itself"
            )
        return prefixes[0]
    if not tf.io.gfile.exists(path + ".index"):
        raise FileNotFoundError(f"checkpoint not found: {path} (expected {path}.index)")
    return path


def load_tf1_checkpoint(path: str | os.PathLike, config: AlbertConfig | str) -> AlbertPretrainer:
    """Build an `AlbertPretrainer` and load an original google-research checkpoint into it.

    Optimizer slots (`adam_m`/`adam_v`) and `global_step` are skipped. Raises
    `CheckpointMismatchError` naming every missing variable, unexpected variable and shape mismatch.
    """
    if not isinstance(config, AlbertConfig):
        config = AlbertConfig.from_json_file(config)
    prefix = resolve_checkpoint_prefix(path)
    model = AlbertPretrainer(config)
    assign_tf1_checkpoint(model, prefix)
    return model


def assign_tf1_checkpoint(model, prefix: str) -> None:
    """Assign every variable of `model` from the TF1 checkpoint at `prefix` (all or nothing)."""
    assign_tf1_weights(model, read_tf1_checkpoint(prefix), prefix)


def assign_tf1_weights(model, tensors: dict[str, np.ndarray], source: str) -> None:
    """Assign every variable of `model` from {original name: array} (all or nothing).

    Raises `CheckpointMismatchError` naming every missing variable, unexpected variable and
    shape mismatch of `source`.
    """
    targets = tf1_variable_map(model)
    check_weights(
        {name: v.shape for name, v in targets.items()},
        {name: np.shape(value) for name, value in tensors.items()},
        f"checkpoint {source}",
        "config",
    )
    for name, variable in targets.items():
        variable.assign(tensors[name])


def save_tf1_checkpoint(model, path: str | os.PathLike, global_step: int | None = None) -> str:
    """Write `model`'s weights under the original names as a TF1 checkpoint at prefix `path`.

    The files are written to a temporary directory and moved into place, with a `checkpoint`
    state file, so the original TF1 tools (and `tf.train.latest_checkpoint`) can consume them.
    Returns the prefix.
    """
    path = os.path.abspath(os.fspath(path))
    directory, basename = os.path.split(path)
    os.makedirs(directory, exist_ok=True)
    variables = tf1_variable_map(model)
    names = sorted(variables)
    tensors = [tf.convert_to_tensor(variables[n]) for n in names]
    if global_step is not None:
        names.append("global_step")
        tensors.append(tf.constant(global_step, tf.int64))
    staging = make_temporary_dir(path)  # what a kill leaves, the next run removes
    try:
        tf.raw_ops.SaveV2(
            prefix=os.path.join(staging, basename),
            tensor_names=names,
            shape_and_slices=[""] * len(names),
            tensors=tensors,
        )
        # The index last: a prefix whose .index exists has its data files in place.
        for filename in sorted(os.listdir(staging), key=lambda f: f.endswith(".index")):
            os.replace(os.path.join(staging, filename), os.path.join(directory, filename))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    # The `checkpoint` state file that TF1's Saver and `tf.train.latest_checkpoint` read.
    write_text(
        os.path.join(directory, "checkpoint"),
        f'model_checkpoint_path: "{basename}"\nall_model_checkpoint_paths: "{basename}"\n',
    )
    return path


def open_tf1_checkpoint(path: str | os.PathLike):
    """(prefix, TensorFlow's reader) of the TF1 checkpoint at `path` (prefix or directory), once
    its `.index` and data files check whole (`tf1_index.check_data_files`)."""
    prefix = resolve_checkpoint_prefix(path)
    check_data_files(prefix)
    return prefix, tf.train.load_checkpoint(prefix)


def read_tf1_checkpoint(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """All model tensors of a TF1 checkpoint by name (optimizer slots and step skipped).

    A checkpoint whose `.index` is unreadable or whose data files are missing, cut short or
    corrupt raises ValueError naming the file (and the tensor that could not be read)."""
    prefix, reader = open_tf1_checkpoint(path)
    tensors = {}
    for name in reader.get_variable_to_shape_map():
        if _SKIPPED.search(name):
            continue
        try:
            tensors[name] = reader.get_tensor(name)
        except (IndexError, tf.errors.OpError) as error:
            # Damage the sizes do not show (a checksum mismatch): TensorFlow names no file.
            raise ValueError(
                f"{prefix}: cannot read tensor {name} from the checkpoint's data files "
                f"({type(error).__name__}: {error})"
            ) from None
    return tensors


def tf1_weights(model) -> dict[str, np.ndarray]:
    """{original name: value} of one of our models' weights."""
    return {name: v.numpy() for name, v in tf1_variable_map(model).items()}


def read_weights(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """{original name: array} from a TF1 checkpoint (prefix or directory) or one of our `.keras`
    files (`AlbertPretrainer`, `AlbertModel` or a task model). A missing file raises
    FileNotFoundError; a damaged one, or another library's model, ValueError naming the file."""
    path = os.fspath(path)
    if path.endswith(".keras"):
        model = load_keras_model(path)
        try:
            return tf1_weights(model)
        except KeyError as error:  # one of our classes, but a variable of no known name
            raise ValueError(f"{path}: {error.args[0]}") from None
    return read_tf1_checkpoint(path)


def check_weights_file(path: str | os.PathLike) -> None:
    """Raises what `read_weights` would for a missing, damaged or foreign file (a `.keras` file
    of another library, a TF1 checkpoint with data files missing or cut short), reading only the
    `.keras` file's config or the checkpoint's `.index`."""
    path = os.fspath(path)
    if path.endswith(".keras"):
        albert_config_of_keras_file(path)
    else:
        check_data_files(resolve_checkpoint_prefix(path))
