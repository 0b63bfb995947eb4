"""albert-tf: ALBERT (Lan et al., 2019) on Keras 3 / TensorFlow 2, faithful to the original code."""

import importlib

__all__ = ["AlbertConfig", "AlbertModel", "AlbertPretrainer", "AlbertClassifier"]
__version__ = "0.1.0"

# Lazy (PEP 562): `albert_tf.text.tokenization`, `albert_tf.records` and `albert_tf.config` must not
# pay for importing Keras and TensorFlow, which data-prep workers and CLIs would otherwise load for
# nothing.
_LAZY = {
    "AlbertConfig": "albert_tf.config",
    "AlbertModel": "albert_tf.modeling.model",
    "AlbertPretrainer": "albert_tf.modeling.model",
    "AlbertClassifier": "albert_tf.modeling.heads.classifier",
}


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'albert_tf' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_LAZY])
