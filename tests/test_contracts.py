"""The model contract helper fails on each kind of broken model, at the check meant to catch it."""

import json
import pathlib

import keras
import numpy as np
import pytest

from albert_tf import AlbertConfig, AlbertModel
from albert_tf.modeling.heads.classifier import AlbertClassifier
from albert_tf.modeling.model import BACKBONE_INPUTS, ConfiguredModel
from tests.contracts import (
    check_bfloat16_training,
    check_keras_file_round_trip,
    check_mixed_precision,
    check_tf1_names,
    check_tf1_round_trip,
    model_inputs,
    original_tf1_names,
    run_model_contract_test,
)
from tests.model_configs import MICRO

CHECKPOINTS = pathlib.Path(__file__).parent / "fixtures" / "original_checkpoints"
CONFIG = AlbertConfig(**MICRO)
INPUTS = model_inputs(CONFIG)
LABELS = np.array([1, 0], np.int32)


class _DropsAConfigField(AlbertModel):
    def get_config(self):
        config = super().get_config()
        del config["albert_config"]["num_hidden_groups"]
        return config


class _DropsAnArgument(AlbertClassifier):
    def extra_config(self):
        return {"num_labels": self.num_labels, "regression": self.regression}  # no `seed`


class _EchoesNumpyNumbers(AlbertClassifier):
    def extra_config(self):
        return dict(super().extra_config(), num_labels=np.int64(self.num_labels))


class _UnstableNames(ConfiguredModel):
    """Its head layer is named by Keras' counter (`dense`, `dense_1`, ...): new in each model."""

    def __init__(self, config, name="unstable_names", **kwargs):
        config = config if isinstance(config, AlbertConfig) else AlbertConfig.from_dict(config)
        inputs = {k: keras.Input((None,), dtype="int32", name=k) for k in BACKBONE_INPUTS}
        pooled = AlbertModel(config)(inputs)["pooled_output"]
        logits = keras.layers.Dense(2)(pooled)
        super().__init__(inputs=inputs, outputs={"logits": logits}, name=name, **kwargs)
        self.config = config


@keras.saving.register_keras_serializable(package="contract_tests")
class _StateOutsideVariables(AlbertModel):
    """Adds a number that is neither a variable nor in its config: a reload loses it."""

    instances = 0

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        type(self).instances += 1
        self.shift = float(type(self).instances)

    def call(self, inputs, training=None, mask=None):
        outputs = super().call(inputs, training=training, mask=mask)
        return {key: value + self.shift for key, value in outputs.items()}


class _OverflowsFloat16(AlbertModel):
    """Scales its outputs past float16's largest finite value (65504); fine in float32."""

    def call(self, inputs, training=None, mask=None):
        outputs = super().call(inputs, training=training, mask=mask)
        return {key: value * 1e5 for key, value in outputs.items()}


class _Float16Variable(AlbertModel):
    """Creates a variable in the compute dtype: float16 under a mixed policy."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.scale = self.add_weight(shape=(), initializer="ones", dtype=self.compute_dtype)


class _CollidingHeadNames(AlbertClassifier):
    TF1_HEAD_RULES = ((r"^classifier/(output_weights|output_bias)$", "output"),)


@pytest.mark.parametrize(
    "cls,init_kwargs,message",
    [
        pytest.param(
            _DropsAConfigField,
            dict(config=AlbertConfig(**MICRO, num_hidden_groups=2)),
            "albert_config is",
            id="drops-a-config-field",
        ),
        pytest.param(
            _DropsAnArgument, dict(seed=3), "drops the argument 'seed'", id="drops-an-argument"
        ),
        pytest.param(_EchoesNumpyNumbers, {}, "not JSON-serialisable", id="not-json"),
        pytest.param(_UnstableNames, {}, "layer names not stable", id="unstable-layer-names"),
    ],
)
def test_the_helper_fails_on_a_broken_config(cls, init_kwargs, message):
    config = init_kwargs.setdefault("config", CONFIG)
    head = "classifier" if issubclass(cls, AlbertClassifier) else None
    with pytest.raises(AssertionError, match=message):
        run_model_contract_test(
            cls,
            init_kwargs,
            INPUTS,
            expected_tf1_names=original_tf1_names(config, head),
            train_batch=(INPUTS, LABELS),
        )


# The later checks are called alone: through the whole helper each case would first pay for the
# checks before it.
def test_keras_file_check_fails_on_state_outside_the_variables(tmp_path):
    with pytest.raises(AssertionError, match=".keras sequence_output"):
        check_keras_file_round_trip(_StateOutsideVariables(CONFIG), INPUTS, tmp_path / "m.keras")


@pytest.mark.parametrize(
    "cls,message",
    [
        (_OverflowsFloat16, "mixed_float16: sequence_output not finite"),
        (_Float16Variable, "variables not float32"),
    ],
    ids=["float16-overflow", "float16-variable"],
)
def test_mixed_precision_check_fails_and_leaves_the_global_policy(cls, message):
    with pytest.raises(AssertionError, match=message):
        check_mixed_precision(cls, {"config": CONFIG}, INPUTS)
    assert keras.config.dtype_policy().name == "float32"


class _PoolerInFloat32(AlbertModel):
    """Sets one layer's policy on its own: that layer ignores the model's dtype."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.get_layer("pooler").dtype_policy = "float32"


class _Frozen(AlbertClassifier):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.trainable = False


@pytest.mark.filterwarnings("ignore:The model does not have any trainable weights")
def test_bfloat16_check_fails_on_a_float32_layer_and_on_a_model_that_does_not_train():
    with pytest.raises(AssertionError, match=r"other dtypes: \{'pooler': 'float32'\}"):
        check_bfloat16_training(_PoolerInFloat32, {"config": CONFIG}, (INPUTS,))
    with pytest.raises(AssertionError, match="float32_layers not in the model"):
        check_bfloat16_training(
            AlbertClassifier, {"config": CONFIG}, (INPUTS, LABELS), float32_layers=("softmax",)
        )
    with pytest.raises(AssertionError, match="fit did not take one step"):
        check_bfloat16_training(
            _Frozen, {"config": CONFIG}, (INPUTS, LABELS), float32_layers=("probabilities",)
        )


def test_tf1_checks_fail_on_bad_names_and_on_a_loader_that_loads_nothing(tmp_path):
    colliding = _CollidingHeadNames(CONFIG, num_labels=3)
    with pytest.raises(AssertionError, match=r"TF1 names not unique: \['output'\]"):
        check_tf1_names(colliding, original_tf1_names(CONFIG, "classifier"))
    with pytest.raises(AssertionError, match="no TF1 name rule for variable 'dense"):
        check_tf1_names(_UnstableNames(CONFIG), original_tf1_names(CONFIG))
    model = AlbertModel(CONFIG)
    with pytest.raises(AssertionError, match=r"missing \['cls/predictions/output_bias'"):
        check_tf1_names(model, original_tf1_names(CONFIG, "pretraining"))
    names = original_tf1_names(CONFIG)
    with pytest.raises(AssertionError, match="after the TF1 load"):
        check_tf1_round_trip(
            model, AlbertModel(CONFIG), INPUTS, tmp_path / "a", names, lambda m, p: None
        )


@pytest.mark.parametrize("folder", ["albert_tiny_grouped", "albert_tiny_shared"])
def test_expected_names_are_those_of_the_original_checkpoints(folder):
    config = AlbertConfig.from_json_file(CHECKPOINTS / folder / "albert_config.json")
    original = json.loads((CHECKPOINTS / folder / "variables.json").read_text())
    assert original_tf1_names(config, "pretraining") == set(original)


def test_classifier_echoes_a_numpy_label_count_as_json():
    config = AlbertClassifier(CONFIG, num_labels=np.int64(3)).get_config()
    assert json.loads(json.dumps(config))["num_labels"] == 3
