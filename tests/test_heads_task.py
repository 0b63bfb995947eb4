"""What every task model shares (`AlbertTask`): a backbone given or built from the config, its
dtype policy in every layer, and Keras's compile / fit on (features, labels)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from albert_tf import AlbertConfig, AlbertModel, AlbertPretrainer
from albert_tf.modeling.heads.classifier import AlbertClassifier
from albert_tf.modeling.heads.losses import LogitsAccuracy, SoftmaxCrossEntropy
from albert_tf.modeling.heads.multiple_choice import AlbertMultipleChoice
from albert_tf.modeling.heads.squad_v1 import AlbertSquadV1
from albert_tf.modeling.heads.squad_v2 import AlbertSquadV2
from tests.contracts import model_inputs
from tests.model_configs import MICRO

CONFIG = AlbertConfig(**MICRO)
INPUTS = model_inputs(CONFIG)


@pytest.mark.parametrize(
    "cls", [AlbertClassifier, AlbertMultipleChoice, AlbertSquadV1, AlbertSquadV2, AlbertPretrainer]
)
def test_a_given_backbone_is_used_as_it_is_with_its_dtype(cls):
    backbone = AlbertModel(CONFIG, dtype="mixed_bfloat16")
    model = cls(backbone=backbone)
    assert model.backbone is backbone and model.config == CONFIG
    assert model.dtype_policy.name == "mixed_bfloat16"
    assert {v.dtype for v in model.weights} == {"float32"}
    # The config is what a reload rebuilds: the same as that of a model built from it.
    assert model.get_config() == cls(CONFIG).get_config()
    assert [v.path for v in model.weights] == [v.path for v in cls(CONFIG).weights]


def test_a_pretrained_backbone_carries_its_weights_into_the_head():
    pretrainer = AlbertPretrainer(CONFIG)
    classifier = AlbertClassifier(backbone=pretrainer.backbone, num_labels=3)
    shared = {v.path for v in pretrainer.weights} & {v.path for v in classifier.weights}
    assert shared == {v.path for v in pretrainer.backbone.weights}
    np.testing.assert_array_equal(
        classifier.backbone(INPUTS)["pooled_output"], pretrainer.backbone(INPUTS)["pooled_output"]
    )


def test_config_backbone_and_dtype_must_agree():
    backbone = AlbertModel(CONFIG)
    other = AlbertConfig(**dict(MICRO, intermediate_size=24))
    with pytest.raises(ValueError, match="config differs from the backbone's"):
        AlbertSquadV1(other, backbone=backbone)
    with pytest.raises(ValueError, match="dtype 'mixed_float16' differs from the backbone's"):
        AlbertClassifier(backbone=backbone, dtype="mixed_float16")
    with pytest.raises(ValueError, match="give the backbone's config or the backbone"):
        AlbertClassifier(num_labels=2)
    with pytest.raises(ValueError, match="backbone must be an AlbertModel"):
        AlbertClassifier(backbone=AlbertPretrainer(CONFIG))
    assert AlbertClassifier(CONFIG, backbone=backbone).backbone is backbone  # the same config


def test_compile_defaults_to_the_original_loss_and_metrics_and_takes_others():
    model = AlbertClassifier(CONFIG, num_labels=3)
    model.compile(optimizer="sgd")
    assert isinstance(model.task_loss, SoftmaxCrossEntropy)
    assert [type(m) for m in model.task_metrics] == [LogitsAccuracy]
    labels = np.array([2, 0], np.int32)
    outputs = model(INPUTS)
    logits = outputs["logits"].numpy().astype(np.float64)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = -log_probs[[0, 1], labels].mean()
    assert float(model.compute_loss(INPUTS, labels, outputs)) == pytest.approx(expected, rel=1e-6)

    class Doubled(keras.losses.Loss):
        def call(self, y_true, y_pred):
            return 2.0 * SoftmaxCrossEntropy().call(y_true, y_pred)

    model.compile(optimizer="sgd", loss=Doubled(), metrics=[])
    assert model.task_metrics == []
    doubled = float(model.compute_loss(INPUTS, labels, outputs))
    assert doubled == pytest.approx(2 * expected, rel=1e-6)


def test_fit_needs_labels_and_a_compiled_loss():
    model = AlbertClassifier(CONFIG, num_labels=2)
    with pytest.raises(ValueError, match="compile the model"):
        model.compute_loss(INPUTS, np.array([0, 1]), model(INPUTS))
    model.compile(optimizer="sgd")
    with pytest.raises(ValueError, match=r"\(features, labels\) batches: no labels"):
        model.fit(tf.data.Dataset.from_tensors(INPUTS), verbose=0, shuffle=False)


def test_features_the_model_does_not_read_are_ignored():
    model = AlbertSquadV1(CONFIG)
    extra = {**INPUTS, "unique_ids": np.array([7, 8]), "p_mask": np.zeros_like(INPUTS["input_ids"])}
    for key, value in model(extra).items():
        np.testing.assert_array_equal(value, model(INPUTS)[key], err_msg=key)
