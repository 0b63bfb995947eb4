"""absl flags from a settings dataclass (`albert_tf.settings`), and the dataclass from the flags.

Each field made by `setting` becomes one flag: its type gives the flag's kind (bool, int, float,
str; `X | None` too), `choices` an enum, the field's default the flag's default (a field without
a default: None). A field whose type is itself a settings dataclass (data prep's `pair`) adds its
fields' flags. Nothing here imports TensorFlow.

    define_flags(FinetuneConfig)                     # at import, before absl parses argv
    apply_recipe(RECIPES["mrpc"])                    # in main: explicit flags win
    config = config_from_flags(FinetuneConfig)
"""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
import types
import typing
from collections.abc import Iterable, Iterator, Mapping

from absl import flags

from albert_tf.config import PRESET_HELP, PRESETS
from albert_tf.settings import OUTPUT_DIR, OUTPUT_FILE, flag_name, is_setting

FLAGS = flags.FLAGS


def _nested(kind) -> bool:
    return isinstance(kind, type) and dataclasses.is_dataclass(kind)


def _settings(config_class: type) -> Iterator[tuple[dataclasses.Field, object]]:
    """(field, type) of every setting of `config_class`, those of nested dataclasses included."""
    hints = typing.get_type_hints(config_class)
    for field in dataclasses.fields(config_class):
        if _nested(hints[field.name]):
            yield from _settings(hints[field.name])
        elif is_setting(field):
            yield field, hints[field.name]


def _base_type(kind) -> type:
    """`int` for `int` and `int | None`."""
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        (kind,) = [a for a in typing.get_args(kind) if a is not type(None)]
    return kind


def _flag(field: dataclasses.Field, kind) -> flags.Flag:
    name, help_text = flag_name(field), field.metadata["help"]
    default = None if field.default is dataclasses.MISSING else field.default
    base, choices = _base_type(kind), field.metadata.get("choices")
    if base is bool:
        return flags.BooleanFlag(name, default, help_text)
    if choices:
        case_sensitive = field.metadata.get("case_sensitive", True)
        return flags.EnumFlag(
            name, default, help_text, list(choices), case_sensitive=case_sensitive
        )
    parsers = {int: flags.IntegerParser, float: flags.FloatParser, str: flags.ArgumentParser}
    if base not in parsers:
        raise TypeError(f"setting {field.name}: no flag for type {kind}")
    return flags.Flag(parsers[base](), flags.ArgumentSerializer(), name, default, help_text)


def define_flags(
    config_class: type, skip: Iterable[str] = (), flag_values: flags.FlagValues = FLAGS
) -> list[str]:
    """Defines a flag for every setting of `config_class` but the fields named in `skip`, as
    flags of the main module (`--help` lists them); returns the flag names."""
    skip, names = set(skip), []
    for field, kind in _settings(config_class):
        if field.name in skip:
            continue
        flags.DEFINE_flag(_flag(field, kind), flag_values, module_name=sys.argv[0])
        names.append(flag_name(field))
    return names


def define_preset_flag(flag_values: flags.FlagValues = FLAGS) -> None:
    """`--preset`, a named model shape, for a CLI whose `--albert_config_file` is a flag of its
    own (the fine-tuning CLIs get theirs from the settings' `preset`)."""
    flags.DEFINE_enum(
        "preset", None, list(PRESETS), PRESET_HELP, flag_values, module_name=sys.argv[0]
    )


def flag_defaults(config_class: type) -> dict[str, object]:
    """{flag name: default} of every setting: what `define_flags` gives each flag."""
    return {
        flag_name(field): None if field.default is dataclasses.MISSING else field.default
        for field, _ in _settings(config_class)
    }


def config_from_flags(config_class: type, flag_values: flags.FlagValues = FLAGS, **given):
    """`config_class` from the parsed flags; `given` sets fields that are no flag here (a
    setting whose flag is not defined keeps its default)."""
    hints = typing.get_type_hints(config_class)
    values = dict(given)
    for field in dataclasses.fields(config_class):
        if field.name in values:
            continue
        if _nested(hints[field.name]):
            values[field.name] = config_from_flags(hints[field.name], flag_values)
        elif is_setting(field) and flag_name(field) in flag_values:
            values[field.name] = flag_values[flag_name(field)].value
    return config_class(**values)


def apply_recipe(recipe: Mapping[str, object], flag_values: flags.FlagValues = FLAGS) -> list[str]:
    """Sets each flag of `recipe` ({flag name: value}) that the command line did not give:
    flags given explicitly win. Returns the names it set."""
    applied = []
    for name, value in recipe.items():
        if not flag_values[name].present:
            setattr(flag_values, name, value)
            applied.append(name)
    return applied


def output_paths(config) -> list[tuple[str, str, str]]:
    """(flag, kind, path) of every output setting of `config` that holds a path (comma-separated
    file lists split)."""
    found = []
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if dataclasses.is_dataclass(value):
            found += output_paths(value)
        elif is_setting(field) and field.metadata.get("path") and value:
            kind = field.metadata["path"]
            paths = str(value).split(",") if kind == OUTPUT_FILE else [str(value)]
            found += [(flag_name(field), kind, p.strip()) for p in paths if p.strip()]
    return found


def check_output_paths(config) -> None:
    """`check_output_path` for every output setting of `config`, before any work."""
    for flag, kind, path in output_paths(config):
        check_output_path(flag, kind, path)


def check_output_path(flag: str, kind: str, path: str) -> None:
    """Refuses an output file (`OUTPUT_FILE`) that is an existing directory, an output directory
    (`OUTPUT_DIR`) that is a file, and a place that cannot be written (read-only, no
    permission): OSError naming the flag and the path. Remote paths (gs://...) are left to their
    writers."""
    if "://" in path:
        return
    if kind == OUTPUT_FILE and os.path.isdir(path):
        raise IsADirectoryError(f"--{flag}={path} is a directory; give the name of a file to write")
    if kind == OUTPUT_DIR and os.path.exists(path) and not os.path.isdir(path):
        raise NotADirectoryError(f"--{flag}={path} is a file; give a directory")
    _check_writable(os.path.abspath(path) if kind == OUTPUT_DIR else _parent(path))


def _parent(path: str) -> str:
    return os.path.dirname(os.path.abspath(path))


def _check_writable(directory: str) -> None:
    """Creates and deletes a hidden file in `directory`, or in the nearest ancestor that exists
    (whatever a missing directory would be created in)."""
    while not os.path.isdir(directory) and os.path.dirname(directory) != directory:
        directory = os.path.dirname(directory)
    try:
        handle, probe = tempfile.mkstemp(prefix=".write-check-", dir=directory)
    except OSError as error:
        raise OSError(error.errno, error.strerror, directory) from None
    os.close(handle)
    os.remove(probe)
