"""`.keras` files given as a model, checked before Keras loads them.

Keras reports a `.keras` file it cannot open as "File not found" even when the file is there but is
no zip file or is cut short, and loads another library's model without a word, which then fails
far from the file (a variable with no TF1 name, a model with no ALBERT config). Here each of those
is one ValueError that names the file and says what is wrong with it.
"""

from __future__ import annotations

import json
import os
import zipfile

import keras

from albert_tf.config import AlbertConfig

# Our model classes register under this package: their `registered_name` is `albert_tf>Class`.
ALBERT_PACKAGE = "albert_tf"
# The signature a zip file starts with (its first local file header).
_ZIP_START = b"PK\x03\x04"
# What `load_keras_model` accepts: one of our models (whose variables have TF1 names); a model
# with one of our models or layers inside (the export's generic classifier); any Keras model.
ACCEPTED = ("albert", "albert_inside", "any")


def _is_albert(config) -> bool:
    return isinstance(config, dict) and str(config.get("registered_name") or "").startswith(
        f"{ALBERT_PACKAGE}>"
    )


def _holds_albert(config) -> bool:
    if isinstance(config, dict):
        return _is_albert(config) or any(_holds_albert(v) for v in config.values())
    if isinstance(config, list):
        return any(_holds_albert(v) for v in config)
    return False


def model_class(config: dict) -> str:
    """The class a `.keras` file's config.json names, with its module (`keras.Sequential`)."""
    module, name = config.get("module"), config.get("class_name")
    if str(module).startswith("keras.src."):
        module = "keras"  # Keras's models are public at its top level (`keras.src` is private)
    return f"{module}.{name}" if module else str(name)


def _not_a_zip(path: str) -> str:
    with open(path, "rb") as file:
        start = file.read(len(_ZIP_START))
    if not start:
        return f"{path}: an empty file, not a .keras archive"
    if start == _ZIP_START:
        # A zip file's directory is at its end: one that starts as a zip file but has no
        # directory was cut short.
        return f"{path}: truncated .keras archive (it starts as a zip file, its end is missing)"
    return f"{path}: not a .keras archive (not a zip file)"


def read_keras_config(path: str | os.PathLike) -> dict:
    """The model config (config.json) of the `.keras` file at `path`.

    Raises FileNotFoundError if there is no such file, and ValueError naming the file when it is
    not a zip file, is cut short, or holds no readable config.json.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"Keras model file not found: {path}")
    if os.path.isdir(path):
        raise ValueError(f"{path}: a directory, not a .keras archive")
    try:
        with zipfile.ZipFile(path) as archive:
            if "config.json" not in archive.namelist():
                raise ValueError(f"{path}: not a .keras archive (a zip file without config.json)")
            config = json.loads(archive.read("config.json"))
    except zipfile.BadZipFile as error:
        if not zipfile.is_zipfile(path):
            raise ValueError(_not_a_zip(path)) from None
        raise ValueError(f"{path}: damaged .keras archive ({error})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(
            f"{path}: damaged .keras archive: its config.json is not JSON ({error})"
        ) from None
    if not isinstance(config, dict):
        raise ValueError(f"{path}: damaged .keras archive: its config.json holds no model config")
    return config


def _foreign(path: str, config: dict) -> ValueError:
    return ValueError(
        f"{path}: holds a {model_class(config)} model, not an ALBERT model saved by albert_tf"
    )


def load_keras_model(
    path: str | os.PathLike, accept: str = "albert", compile: bool = False
) -> keras.Model:
    """The model of the `.keras` file at `path`, after `read_keras_config`'s checks.

    `accept` (one of `ACCEPTED`): "albert" takes only our model classes (AlbertPretrainer,
    AlbertModel, the task models), "albert_inside" also a model with one of our models or layers
    in it, "any" any Keras model. ValueError names the file and what it holds otherwise, or what
    Keras raised loading it.
    """
    if accept not in ACCEPTED:
        raise ValueError(f"accept must be one of {ACCEPTED}, got {accept!r}")
    path = os.fspath(path)
    config = read_keras_config(path)
    if (accept == "albert" and not _is_albert(config)) or (
        accept == "albert_inside" and not _holds_albert(config)
    ):
        raise _foreign(path, config)
    import albert_tf.modeling  # noqa: F401  (registers every model class for load_model)

    try:
        return keras.saving.load_model(path, compile=compile, safe_mode=True)
    except (ValueError, OSError, KeyError, TypeError) as error:
        raise ValueError(
            f"{path}: cannot load the .keras archive ({type(error).__name__}: {error})"
        ) from error


def albert_config_of_keras_file(path: str | os.PathLike) -> AlbertConfig:
    """The `AlbertConfig` stored in one of our `.keras` files, read without loading the model;
    errors as `load_keras_model`'s."""
    path = os.fspath(path)
    config = read_keras_config(path)
    if not _is_albert(config):
        raise _foreign(path, config)
    try:
        return AlbertConfig.from_dict(config["config"]["albert_config"])
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(
            f"{path}: its {model_class(config)} has no valid albert_config "
            f"({type(error).__name__}: {error})"
        ) from None
