"""Which ops the stock TF Serving model server runs: core TensorFlow and tensorflow-text's."""

import pathlib

import tensorflow as tf
import tensorflow_text as tf_text

from albert_tf.export.serving_ops import (
    TF_SERVING_TEXT_OP_LIBRARIES,
    non_stock_ops,
    ops_tf_serving_lacks,
    tf_serving_failures,
)

SPM = pathlib.Path(__file__).parent / "fixtures" / "albert_spm" / "30k-clean.model"


class Tokenize(tf.Module):
    def __init__(self, trimmer_budget=None):
        super().__init__()
        self.tokenizer = tf_text.FastSentencepieceTokenizer(SPM.read_bytes())
        self.budget = trimmer_budget

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def __call__(self, text):
        ids = self.tokenizer.tokenize(text)
        if self.budget:
            ids = tf_text.RoundRobinTrimmer(self.budget).trim([ids, ids])[0]
        return ids.to_tensor()


def test_tensorflow_text_ops_are_served_and_others_are_named(tmp_path, monkeypatch):
    path = str(tmp_path / "tokenize")
    tf.saved_model.save(Tokenize(trimmer_budget=8), path)
    extra = non_stock_ops(path)
    assert "TFText>FastSentencepieceTokenize" in extra and "TFText>RoundRobinTrim" in extra
    assert ops_tf_serving_lacks(path) == [] and tf_serving_failures(path) == []
    # A server without the trimmer's library could not run the model, and says which op.
    monkeypatch.setattr(
        "albert_tf.export.serving_ops.TF_SERVING_TEXT_OP_LIBRARIES",
        TF_SERVING_TEXT_OP_LIBRARIES - {"trimmer_ops"},
    )
    assert ops_tf_serving_lacks(path) == ["TFText>RoundRobinTrim"]
    assert "TFText>RoundRobinTrim" in tf_serving_failures(path)[0]


def test_a_core_only_model_has_no_extra_ops(tmp_path):
    module = tf.Module()
    module.f = tf.function(lambda x: tf.nn.relu(x) * 2, input_signature=[tf.TensorSpec([None])])
    path = str(tmp_path / "core")
    tf.saved_model.save(module, path)
    assert non_stock_ops(path) == [] and ops_tf_serving_lacks(path) == []
