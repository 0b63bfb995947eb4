"""Every private Keras / TensorFlow hook the library relies on, in one place.

A Keras upgrade that renames or reshapes one of these fails here, with the hook's name, before it
fails somewhere obscure (a multi-worker `fit`, the optimizer's clip, a TFLite conversion).
"""

import inspect
import json
import zipfile

import keras
import numpy as np
import tensorflow as tf

from albert_tf import AlbertConfig, AlbertModel
from albert_tf.modeling import layers
from albert_tf.modeling.heads.classifier import AlbertClassifier
from albert_tf.training.optimization import create_optimizer
from tests.model_configs import MICRO

TINY = AlbertConfig(**MICRO)


def _parameters(function) -> list[str]:
    return list(inspect.signature(function).parameters)


def test_model_maybe_symbolic_build_and_compile_parts():
    # The models override `_maybe_symbolic_build(iterator, data_batch)` and read the compiled
    # model's `_compile_metrics` / `_compile_loss`: under a tf.distribute strategy Keras takes a
    # batch out of the training stream only to build what is unbuilt (no public switch skips it).
    assert _parameters(keras.Model._maybe_symbolic_build)[1:] == ["iterator", "data_batch"]
    model = AlbertClassifier(TINY, num_labels=2)
    model.compile(optimizer="sgd")
    for name in ("_compile_metrics", "_compile_loss", "optimizer"):
        assert hasattr(model, name), name


def test_flatten_layers_yields_nested_attention_layers():
    # The TFLite export finds every attention layer through `_flatten_layers()`.
    model = AlbertModel(TINY)
    ids = np.ones((1, 4), np.int32)
    model({"input_ids": ids, "input_mask": ids, "segment_ids": 0 * ids})
    attention = [l for l in model._flatten_layers() if isinstance(l, layers.AlbertAttention)]
    assert attention, "no AlbertAttention found through _flatten_layers()"


def test_optimizer_hooks_for_schedule_and_global_clip():
    # The original LAMB/AdamW override `_get_current_learning_rate()` (schedule at applied
    # updates) and `_all_reduce_sum_gradients(grads_and_vars)` (clip after the cross-replica sum).
    base = keras.optimizers.Optimizer
    assert _parameters(base._get_current_learning_rate) == ["self"]
    assert _parameters(base._all_reduce_sum_gradients) == ["self", "grads_and_vars"]
    optimizer = create_optimizer(1e-3, num_train_steps=10, num_warmup_steps=1, optimizer="lamb")
    assert hasattr(optimizer, "_learning_rate")
    variable = keras.Variable(np.ones(3, np.float32), name="kernel")
    optimizer.apply_gradients([(tf.ones(3), variable)])
    assert int(optimizer.iterations.numpy()) == 1


def test_keras_archive_config_json_holds_albert_config(tmp_path):
    # Fine-tuning reads the backbone config of a `.keras` init checkpoint from the archive's
    # `config.json` without building the model.
    path = tmp_path / "classifier.keras"
    AlbertClassifier(TINY, num_labels=2).save(path)
    with zipfile.ZipFile(path) as archive:
        stored = json.loads(archive.read("config.json"))["config"]["albert_config"]
    assert AlbertConfig.from_dict(stored) == TINY
