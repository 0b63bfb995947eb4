"""albert-tf: ALBERT (Lan et al., 2019) on Keras 3 / TensorFlow 2, faithful to the original code."""

import importlib

from albert_tf.registration import register_when_keras_loads

__all__ = [
    "AlbertConfig",
    "AlbertModel",
    "AlbertPretrainer",
    "AlbertClassifier",
    "AlbertTextClassifier",
]
__version__ = "0.1.0"

# Lazy (PEP 562): `albert_tf.text.tokenization`, `albert_tf.records` and `albert_tf.config` must not
# pay for importing Keras and TensorFlow, which data-prep workers and CLIs would otherwise load for
# nothing.
_LAZY = {
    "AlbertConfig": "albert_tf.config",
    "AlbertModel": "albert_tf.modeling.model",
    "AlbertPretrainer": "albert_tf.modeling.model",
    "AlbertClassifier": "albert_tf.modeling.heads.classifier",
    "AlbertTextClassifier": "albert_tf.modeling.heads.text_classifier",
}


def lazy_attributes(package: str, table: dict[str, str], defined: dict):
    """`__getattr__` and `__dir__` (PEP 562) for `package`, whose names in `table` ({name: module})
    are loaded from their module when first used; `defined` is the package's `globals()`."""

    def __getattr__(name):
        if name in table:
            return getattr(importlib.import_module(table[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__():
        return sorted([*defined, *table])

    return __getattr__, __dir__


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())

# So that `keras.saving.load_model` reads the library's `.keras` files after `import albert_tf`.
register_when_keras_loads()
