"""Settings dataclasses that state each command-line flag once: a field made by `setting` holds
its help text, the original script's flag name where it differs from the field's, its choices and,
for paths, what the path names. `pipelines/_config_flags.py` defines the absl flags from these
fields and builds the dataclass from the parsed flags; the dataclasses themselves stay free of
absl, and a field made without `setting` is no flag.

    @dataclasses.dataclass
    class JobConfig:
        output_dir: str = setting(help="Where results go.", path=OUTPUT_DIR)
        seed: int = setting(12345, "Seed of everything.", flag="random_seed")
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

# What an output path setting names, for the checks a command line runs before any work.
OUTPUT_FILE = "output_file"  # a file (or comma-separated files) written: never a directory
OUTPUT_DIR = "output_dir"  # a directory written into
PATH_KINDS = (OUTPUT_FILE, OUTPUT_DIR)
# The compute precisions of every training job (`--mixed_precision`).
MIXED_PRECISIONS = ("none", "bf16", "fp16")
# The original optimizers (`--optimizer`): `albert_tf.training.optimization` builds them.
OPTIMIZERS = ("adamw", "lamb")
# tf.distribute strategies (`--strategy`): `albert_tf.training.distribution` builds them.
STRATEGIES = ("auto", "tpu", "mirrored", "multi_worker", "one_device")


def setting(
    default: Any = dataclasses.MISSING,
    help: str = "",
    *,
    flag: str | None = None,
    choices: Sequence[str] | None = None,
    path: str | None = None,
    case_sensitive: bool = True,
    kw_only: bool = False,
) -> Any:
    """A dataclass field that is also a command-line flag.

    Args:
      default: the field's default, also the flag's; none: a field the caller must give (its
        flag defaults to None).
      help: the flag's help text.
      flag: the flag's name where it is not the field's (the original scripts' `random_seed`
        for a field `seed`).
      choices: the values a string setting takes (an enum flag).
      path: what a path setting names: `OUTPUT_FILE` or `OUTPUT_DIR`.
      case_sensitive: whether `choices` are matched case-sensitively.
      kw_only: a keyword-only field, as a subclass re-declares a field of a keyword-only base
        (to give it another default) without making it positional.
    """
    if not help:
        raise ValueError("a setting needs its help text")
    if path is not None and path not in PATH_KINDS:
        raise ValueError(f"path must be one of {PATH_KINDS}, got {path!r}")
    metadata = {
        "help": help,
        "flag": flag,
        "choices": tuple(choices) if choices is not None else None,
        "path": path,
        "case_sensitive": case_sensitive,
    }
    # MISSING, not False: a field of a keyword-only dataclass stays keyword-only by default.
    return dataclasses.field(
        default=default, metadata=metadata, kw_only=True if kw_only else dataclasses.MISSING
    )


def is_setting(field: dataclasses.Field) -> bool:
    """Whether `field` was made by `setting` (a flag)."""
    return "help" in field.metadata


def flag_name(field: dataclasses.Field) -> str:
    """The flag of a setting: its original name, else the field's."""
    return field.metadata.get("flag") or field.name


def settings_of(config_class: type) -> list[dataclasses.Field]:
    """The fields of a settings dataclass that are flags, in declaration order."""
    return [field for field in dataclasses.fields(config_class) if is_setting(field)]
