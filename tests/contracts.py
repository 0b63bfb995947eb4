"""The contract every model kind keeps, checked by one call per model (as keras-hub's `run_*_test`).

`run_model_contract_test(cls, init_kwargs, input_data, expected_tf1_names=..., train_batch=...)`
builds `cls(**init_kwargs)` and checks, in order:

1. config: `get_config` echoes every constructor argument (the `AlbertConfig` as a dict), survives
   JSON, and `cls.from_config` rebuilds an equal config with the same variable paths;
2. `.keras`: save and `load_model(safe_mode=True)` give the same class, config, variable paths,
   weights and outputs;
3. mixed precision: built with `dtype="mixed_float16"` the model runs, its outputs are finite and
   its variables stay float32; built with `dtype="mixed_bfloat16"` every layer computes in
   bfloat16 (but the input layers and the `float32_layers` kept in float32 on purpose), and `fit`
   trains it one step on `train_batch` (an (x, y) batch) with float32 variables that move and a
   finite loss. Keras's global dtype policy is never touched;
4. TF1 names: every variable has its own original name, a saved TF1 checkpoint holds exactly
   `expected_tf1_names`, and loading it into a fresh model reproduces the weights and outputs.

Each check is also a function of its own, for tests that need only one. A test that runs check 3
is marked `half_precision` (TensorFlow's own bfloat16 kernels: see .ci/run).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Mapping

import keras
import numpy as np
import tensorflow as tf

from albert_tf.checkpoints import (
    assign_tf1_checkpoint,
    head_tf1_names,
    save_tf1_checkpoint,
    tf1_name,
    tf1_name_rules,
)
from albert_tf.config import AlbertConfig
from tests.tolerances import SAME_MODEL, assert_close_to_scale

MIXED_POLICY = "mixed_float16"
BFLOAT16_POLICY = "mixed_bfloat16"


def run_model_contract_test(
    cls: type[keras.Model],
    init_kwargs: Mapping,
    input_data: Mapping[str, np.ndarray],
    *,
    expected_tf1_names: Iterable[str],
    train_batch: tuple,
    tf1_loader: Callable[[keras.Model, str], object] = assign_tf1_checkpoint,
    expected_output_shapes: Mapping[str, tuple] | None = None,
    compile_kwargs: Mapping | None = None,
    float32_layers: Iterable[str] = (),
) -> None:
    """Checks the whole contract of `cls(**init_kwargs)` (see the module docstring).

    `tf1_loader(model, prefix)` is the library's loader of a TF1 checkpoint for this model kind;
    `train_batch` the (features, labels) batch `fit` trains on, `compile_kwargs` what `compile`
    takes besides the optimizer (default: the model's own loss); `float32_layers` the names of
    layers that compute in float32 whatever the policy. Raises AssertionError naming the first
    broken check.
    """
    model = cls(**init_kwargs)
    # The model rebuilt from its config is also the TF1 load's target: another instance.
    rebuilt = check_config_round_trip(model, cls, init_kwargs)
    outputs = model_outputs(model, input_data)
    if expected_output_shapes is not None:
        shapes = {key: value.shape for key, value in outputs.items()}
        assert shapes == dict(expected_output_shapes), f"output shapes {shapes}"
    with tempfile.TemporaryDirectory() as directory:
        check_keras_file_round_trip(
            model, input_data, os.path.join(directory, "model.keras"), outputs
        )
        check_mixed_precision(cls, init_kwargs, input_data)
        check_bfloat16_training(cls, init_kwargs, train_batch, compile_kwargs, float32_layers)
        check_tf1_round_trip(
            model,
            rebuilt,
            input_data,
            os.path.join(directory, "tf1", "model.ckpt"),
            expected_tf1_names,
            tf1_loader,
            outputs,
        )


def model_inputs(config: AlbertConfig, batch=2, seq=8, masked_positions=0, seed=0) -> dict:
    """int32 model inputs; the last example is padded, and `masked_positions` > 0 adds
    `masked_lm_positions` (the pretrainer's fourth input)."""
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, seq), np.int32)
    mask[-1, seq // 2 :] = 0
    inputs = {
        "input_ids": rng.integers(1, config.vocab_size, (batch, seq)).astype(np.int32) * mask,
        "input_mask": mask,
        "segment_ids": np.repeat((np.arange(seq) >= seq // 4)[None], batch, 0).astype(np.int32),
    }
    if masked_positions:
        positions = rng.integers(0, seq // 2, (batch, masked_positions))
        inputs["masked_lm_positions"] = positions.astype(np.int32)
    return inputs


def model_outputs(model, input_data) -> dict[str, np.ndarray]:
    """The model's outputs on `input_data` (inference mode) as numpy arrays by name."""
    outputs = model(input_data, training=False)
    if not isinstance(outputs, Mapping):
        outputs = {"output": outputs}
    return {key: keras.ops.convert_to_numpy(value) for key, value in outputs.items()}


def variable_paths(model) -> list[str]:
    return [v.path for v in model.weights]


def check_config_round_trip(model, cls, init_kwargs) -> keras.Model:
    """get_config echoes the constructor's arguments; JSON and `cls.from_config` keep it.
    Returns the rebuilt model."""
    config = model.get_config()
    for key, value in init_kwargs.items():
        if key == "config":
            value = value if isinstance(value, AlbertConfig) else AlbertConfig.from_dict(value)
            assert "albert_config" in config, "get_config has no `albert_config`"
            echoed = AlbertConfig.from_dict(config["albert_config"])
            assert echoed == value, f"get_config's albert_config is {echoed}, built from {value}"
        else:
            assert key in config, f"get_config drops the argument {key!r}"
            assert config[key] == value, (
                f"get_config has {key}={config[key]!r}, built with {value!r}"
            )
    try:
        from_json = json.loads(json.dumps(config))
    except TypeError as error:
        raise AssertionError(f"get_config is not JSON-serialisable: {error}") from None
    assert from_json == config, "get_config changes through JSON"
    rebuilt = cls.from_config(from_json)
    assert type(rebuilt) is cls, f"from_config built a {type(rebuilt).__name__}"
    assert rebuilt.get_config() == config, "from_config(get_config()) has another config"
    assert variable_paths(rebuilt) == variable_paths(model), (
        "a model rebuilt from its config has other variable paths (layer names not stable)"
    )
    return rebuilt


def check_keras_file_round_trip(model, input_data, path, expected_outputs=None) -> None:
    """A `.keras` file reloads in safe mode as the same class, config, weights and outputs
    (`expected_outputs`: the model's own on `input_data`, computed when not given)."""
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert type(loaded) is type(model), f".keras reloads as {type(loaded).__name__}"
    assert loaded.get_config() == model.get_config(), ".keras reloads another config"
    assert variable_paths(loaded) == variable_paths(model), ".keras reloads other variable paths"
    for saved, restored in zip(model.weights, loaded.weights):
        np.testing.assert_array_equal(restored.numpy(), saved.numpy(), err_msg=saved.path)
    expected = expected_outputs or model_outputs(model, input_data)
    actual = model_outputs(loaded, input_data)
    assert actual.keys() == expected.keys(), f".keras reloads outputs {sorted(actual)}"
    for key in expected:
        assert_close_to_scale(actual[key], expected[key], SAME_MODEL, err_msg=f".keras {key}")


def check_mixed_precision(cls, init_kwargs, input_data) -> None:
    """Built with `dtype="mixed_float16"` the model runs to finite outputs and keeps float32
    variables."""
    model = cls(**init_kwargs, dtype=MIXED_POLICY)
    assert model.compute_dtype == "float16", f"computes in {model.compute_dtype}"
    for key, value in model_outputs(model, input_data).items():
        assert np.isfinite(value.astype(np.float32)).all(), f"{MIXED_POLICY}: {key} not finite"
    assert_float32_variables(model, MIXED_POLICY)


def assert_float32_variables(model, policy: str) -> None:
    wrong = {v.path: v.dtype for v in model.weights if v.dtype != "float32"}
    assert not wrong, f"{policy}: variables not float32: {wrong}"


def check_bfloat16_training(
    cls, init_kwargs, train_batch, compile_kwargs=None, float32_layers: Iterable[str] = ()
) -> None:
    """Built with `dtype="mixed_bfloat16"` every layer computes in bfloat16 (but input layers and
    `float32_layers`), and one `fit` step on the (x, y) `train_batch` moves float32 variables
    with a finite loss."""
    model = cls(**init_kwargs, dtype=BFLOAT16_POLICY)
    float32_layers = set(float32_layers)
    layers = [
        layer
        for layer in model._flatten_layers(include_self=False)
        if not isinstance(layer, keras.layers.InputLayer)
    ]
    assert float32_layers <= {layer.name for layer in layers}, "float32_layers not in the model"
    wrong = {
        layer.name: layer.compute_dtype
        for layer in layers
        if layer.compute_dtype != ("float32" if layer.name in float32_layers else "bfloat16")
    }
    assert not wrong, f"{BFLOAT16_POLICY}: layers computing in other dtypes: {wrong}"
    assert_float32_variables(model, BFLOAT16_POLICY)
    model.compile(optimizer=keras.optimizers.SGD(0.1), jit_compile=False, **(compile_kwargs or {}))
    before = [v.numpy() for v in model.trainable_variables]
    history = model.fit(tf.data.Dataset.from_tensors(train_batch), verbose=0, shuffle=False)
    assert np.isfinite(history.history["loss"][0]), f"{BFLOAT16_POLICY}: loss not finite"
    assert int(model.optimizer.iterations.numpy()) == 1, "fit did not take one step"
    moved = [not np.array_equal(b, v.numpy()) for b, v in zip(before, model.trainable_variables)]
    assert any(moved), f"{BFLOAT16_POLICY}: one fit step moved no variable"
    assert_float32_variables(model, BFLOAT16_POLICY)


def tf1_names(model) -> dict[str, str]:
    """{our variable path: original TF1 name} by the model's own table; asserts that every
    variable has a name of its own and that the head's names are among them."""
    rules = tf1_name_rules(model)
    names = {}
    for variable in model.weights:
        try:
            names[variable.path] = tf1_name(variable.path, rules)
        except KeyError as error:
            raise AssertionError(str(error)) from None
    assert len(names) == len(model.weights), "two variables share a path"
    shared = sorted(name for name, count in Counter(names.values()).items() if count > 1)
    assert not shared, f"TF1 names not unique: {shared}"
    head = head_tf1_names(model)
    assert head <= set(names.values()), f"head names {sorted(head)} missing"
    return names


def check_tf1_names(model, expected_tf1_names: Iterable[str]) -> None:
    """The model's TF1 names are unique and exactly `expected_tf1_names`."""
    assert_same_names(set(tf1_names(model).values()), expected_tf1_names, "TF1 table")


def assert_same_names(actual: set[str], expected: Iterable[str], what: str) -> None:
    expected = set(expected)
    assert actual == expected, (
        f"{what}: unexpected {sorted(actual - expected)}, missing {sorted(expected - actual)}"
    )


def check_tf1_round_trip(
    model, fresh, input_data, prefix, expected_tf1_names, tf1_loader, expected_outputs=None
) -> None:
    """`save_tf1_checkpoint(model)` at `prefix` holds exactly `expected_tf1_names`; `tf1_loader`
    puts it into `fresh` (another instance of the model) with the same weights and outputs."""
    names = tf1_names(model)
    assert_same_names(set(names.values()), expected_tf1_names, "TF1 table")
    prefix = save_tf1_checkpoint(model, prefix)
    written = {name for name, _ in tf.train.list_variables(prefix)}
    assert_same_names(written, expected_tf1_names, "TF1 checkpoint")
    assert fresh is not model, "the TF1 checkpoint must be loaded into another model"
    assert variable_paths(fresh) == variable_paths(model), "a fresh model has other paths"
    # Every variable must come from the checkpoint: none may hold the saved value beforehand.
    for saved, target in zip(model.weights, fresh.weights):
        target.assign(saved.numpy() + 1)
    tf1_loader(fresh, prefix)
    for saved, loaded in zip(model.weights, fresh.weights):
        np.testing.assert_array_equal(
            loaded.numpy(), saved.numpy(), err_msg=f"{names[saved.path]} after the TF1 load"
        )
    expected = expected_outputs or model_outputs(model, input_data)
    for key, value in model_outputs(fresh, input_data).items():
        assert_close_to_scale(value, expected[key], SAME_MODEL, err_msg=f"TF1 round trip {key}")


def original_tf1_names(config: AlbertConfig, head: str | None = None) -> set[str]:
    """The variable names of an original checkpoint of `config`, written out from the original
    modeling code rather than from our name table. `head` is "pretraining" (MLM + SOP),
    "classifier" (`run_classifier.py`'s top-level head) or None (the backbone alone). Parts that
    `config.sharing` leaves unshared, which the original cannot express, sit under `layer_{l}`.
    """
    names = {
        "bert/embeddings/word_embeddings",
        "bert/embeddings/token_type_embeddings",
        "bert/embeddings/position_embeddings",
        "bert/embeddings/LayerNorm/gamma",
        "bert/embeddings/LayerNorm/beta",
        "bert/pooler/dense/kernel",
        "bert/pooler/dense/bias",
    }
    if config.embedding_size != config.hidden_size:
        names |= {"bert/encoder/embedding_hidden_mapping_in/" + p for p in ("kernel", "bias")}
    attention = [f"attention_1/self/{d}" for d in ("query", "key", "value")]
    attention.append("attention_1/output/dense")
    ffn = ("ffn_1/intermediate/dense", "ffn_1/intermediate/output/dense")
    dense, norm = ("kernel", "bias"), ("gamma", "beta")
    share_attention = config.sharing in ("all", "attention")
    share_ffn = config.sharing in ("all", "ffn")
    for layer in range(config.num_hidden_layers):
        for inner in range(config.inner_group_num):
            shared = f"group_{config.group_of_layer(layer)}/inner_group_{inner}"
            own = f"layer_{layer}/inner_group_{inner}"
            a = f"bert/encoder/transformer/{shared if share_attention else own}"
            f = f"bert/encoder/transformer/{shared if share_ffn else own}"
            names |= {f"{a}/{part}/{p}" for part in attention for p in dense}
            names |= {f"{a}/LayerNorm/{p}" for p in norm}
            names |= {f"{f}/{part}/{p}" for part in ffn for p in dense}
            names |= {f"{f}/LayerNorm_1/{p}" for p in norm}
    if head == "pretraining":
        transform = "cls/predictions/transform"
        names |= {f"{transform}/dense/kernel", f"{transform}/dense/bias"}
        names |= {f"{transform}/LayerNorm/gamma", f"{transform}/LayerNorm/beta"}
        names |= {"cls/predictions/output_bias"}
        names |= {"cls/seq_relationship/output_weights", "cls/seq_relationship/output_bias"}
    elif head == "classifier":
        names |= {"output_weights", "output_bias"}
    elif head is not None:
        raise ValueError(f"unknown head {head!r}")
    return names
