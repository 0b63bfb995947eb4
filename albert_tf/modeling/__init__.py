"""Modeling stage: ALBERT's layers, `AlbertModel` / `AlbertPretrainer`, and the task heads."""

# Importing the package registers every Keras class of the models with
# `keras.saving.register_keras_serializable`, which `keras.saving.load_model` needs to rebuild a
# `.keras` file of any of them (the task heads' models too: `heads` imports each of them).
from albert_tf.modeling import heads, layers, model  # noqa: F401
