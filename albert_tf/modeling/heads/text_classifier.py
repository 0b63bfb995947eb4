"""`AlbertTextClassifier`: a classifier that takes raw strings, ALBERT's tokenization in its graph.

It chains the in-graph tokenizer the text-in SavedModels use (`AlbertPreprocessingLayer`, whose
config carries the SentencePiece model, so a `.keras` file of it needs no other file) and an
ids-in classifier (`AlbertClassifier`, or any model called on the three id tensors that returns
`probabilities`), and names the most probable class. As keras-hub's tasks, which carry their
preprocessor, it predicts straight from text:

    model = keras.saving.load_model("classifier_text.keras")  # after `import albert_tf`
    model.predict(["a gripping film"])["label"]                # array(['positive'], dtype=object)
    model.predict({"text_a": ["a man plays"], "text_b": ["a man is playing"]})["probabilities"]
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from albert_tf.text.tf_tokenization import AlbertPreprocessingLayer
from albert_tf.text.tokenization import AlbertTokenizer

PAIR_INPUTS = ("text_a", "text_b")
DEFAULT_BATCH_SIZE = 32


def default_label_names(num_labels: int) -> list[str]:
    """The names of classes that nothing else names: "0", "1", ..."""
    return [str(i) for i in range(num_labels)]


def _num_outputs(classifier: keras.Model) -> int:
    """The width of `classifier`'s `probabilities` (its `num_labels` when it says)."""
    if getattr(classifier, "num_labels", None) is not None:
        return int(classifier.num_labels)
    ids = {name: np.ones((1, 4), np.int32) for name in ("input_ids", "input_mask", "segment_ids")}
    return int(classifier(ids, training=False)["probabilities"].shape[-1])


def string_batch(texts, what: str) -> tf.Tensor:
    """A string tensor [B] of a list, tuple, numpy array or tensor of texts."""
    if isinstance(texts, (str, bytes)):
        raise ValueError(f"{what}: expected a batch of texts (a list), got one text {texts!r:.80}")
    if not isinstance(texts, tf.Tensor):
        texts = np.asarray(texts, dtype=object)
    return tf.convert_to_tensor(texts, tf.string)


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertTextClassifier(keras.Model):
    """Strings -> class probabilities and label names; ids equal `AlbertTokenizer`'s.

    Inputs, to `predict` (which batches them) or to a call (string tensors): a batch of texts,
    packed `[CLS] text [SEP]` (`["a gripping film"]`), or a pair of batches as a dict
    `{"text_a": [...], "text_b": [...]}` (or, to `predict` and calls, a tuple `(text_a, text_b)`),
    packed `[CLS] a [SEP] b [SEP]`; each cut to `max_seq_length` tokens as the tokenizer cuts them.
    Outputs, a dict: `probabilities` float32 [B, num_labels], the classifier's; `label` [B], the
    name of the most probable class (`predict` gives `str`s, a call string tensors). A regression
    classifier (one score, `regression=True`) has no label names and returns `probabilities`
    (its score) only. For inference only: the classifier runs in inference mode.

    Args:
        classifier: the ids-in classifier (an `AlbertClassifier`, or any Keras model called on
            `input_ids`, `input_mask`, `segment_ids` that returns `probabilities` [B, C]).
        preprocessing: the `AlbertPreprocessingLayer` (SentencePiece model, `max_seq_length`,
            `do_lower_case`).
        label_names: the classes' names in output order; None: "0", "1", ... (none for a
            regression classifier).
        name: the model's name.

    Example:
        >>> model = AlbertTextClassifier.from_spm_model(classifier, "30k-clean.model", 128,
        ...                                             label_names=["negative", "positive"])
        >>> model.predict_labels(["a gripping film", "dull"])  # ['positive', 'negative']
    """

    def __init__(
        self,
        classifier: keras.Model,
        preprocessing: AlbertPreprocessingLayer,
        label_names=None,
        name: str = "albert_text_classifier",
        **kwargs,
    ):
        super().__init__(name=name, **kwargs)
        self.classifier = classifier
        self.preprocessing = preprocessing
        self.regression = bool(getattr(classifier, "regression", False))
        num_labels = _num_outputs(classifier)
        if self.regression:
            if label_names:
                raise ValueError("a regression classifier (one score) has no label names")
            self.label_names = None
        else:
            self.label_names = (
                [str(x) for x in label_names] if label_names else default_label_names(num_labels)
            )
            if len(self.label_names) != num_labels:
                raise ValueError(
                    f"{len(self.label_names)} label names for {num_labels} classes: "
                    f"{self.label_names}"
                )
        config = getattr(classifier, "config", None)
        limit = getattr(config, "max_position_embeddings", None)
        if limit is not None and preprocessing.max_seq_length > limit:
            raise ValueError(
                f"max_seq_length={preprocessing.max_seq_length} is over the classifier's "
                f"max_position_embeddings={limit}"
            )
        # tensorflow-text's ops have no XLA kernels: Keras must not jit-compile `predict` on
        # accelerators (it asks every layer's `supports_jit`, this model's too).
        self.supports_jit = False
        self.built = True

    @classmethod
    def from_spm_model(
        cls,
        classifier: keras.Model,
        spm_model: str | bytes,
        max_seq_length: int,
        do_lower_case: bool = True,
        label_names=None,
        **kwargs,
    ) -> "AlbertTextClassifier":
        """The text model of `classifier` with the SentencePiece model `spm_model` (a file path,
        or the serialized model's bytes) embedded."""
        proto = (
            spm_model if isinstance(spm_model, bytes) else AlbertTokenizer(spm_model).model_proto
        )
        preprocessing = AlbertPreprocessingLayer(
            proto, max_seq_length=max_seq_length, do_lower_case=do_lower_case
        )
        return cls(classifier, preprocessing, label_names, **kwargs)

    def _segments(self, inputs):
        if isinstance(inputs, dict):
            unknown = set(inputs) - {"text", *PAIR_INPUTS}
            if unknown or "text_a" in inputs and "text" in inputs:
                raise ValueError(
                    f"text inputs are `text` or `text_a` (+ `text_b`), got {sorted(inputs)}"
                )
            if "text_b" in inputs:
                return inputs["text_a"], inputs["text_b"]
            return inputs["text_a"] if "text_a" in inputs else inputs["text"]
        # Two batches of texts: a pair. (Two bare strings are one batch of two texts.)
        if isinstance(inputs, (tuple, list)) and len(inputs) == 2:
            if not any(isinstance(t, (str, bytes)) for t in inputs):
                return tuple(inputs)
        return inputs

    def call(self, inputs):
        features = self.preprocessing(self._segments(inputs))
        probabilities = self.classifier(features, training=False)["probabilities"]
        outputs = {"probabilities": probabilities}
        if self.label_names is not None:
            names = tf.constant(self.label_names, tf.string)
            outputs["label"] = tf.gather(names, tf.argmax(probabilities, axis=-1))
        return outputs

    def predict(self, x, batch_size=None, verbose="auto", steps=None, callbacks=None):
        """Keras's `predict` on texts: a list (or array) of strings, or `{"text_a": [...],
        "text_b": [...]}` / `(text_a, text_b)` for pairs (a `tf.data.Dataset` of such batches
        passes as it is); `label` comes back as `str`s."""
        if not isinstance(x, tf.data.Dataset):
            if isinstance(x, tuple) and len(x) == 2:
                x = dict(zip(PAIR_INPUTS, x))
            if isinstance(x, dict):
                texts = {k: string_batch(v, k) for k, v in x.items()}
                sizes = {int(v.shape[0]) for v in texts.values()}
                if len(sizes) != 1:
                    raise ValueError(f"{' and '.join(texts)} must hold as many texts each")
            else:
                texts = string_batch(x, "texts")
            x = tf.data.Dataset.from_tensor_slices(texts).batch(batch_size or DEFAULT_BATCH_SIZE)
        outputs = super().predict(x, verbose=verbose, steps=steps, callbacks=callbacks)
        if "label" in outputs:
            outputs["label"] = np.array([b.decode("utf-8") for b in outputs["label"]], object)
        return outputs

    def predict_labels(self, texts, batch_size=None) -> list[str]:
        """The most probable class's name of each text (or pair, as `predict` takes them)."""
        if self.label_names is None:
            raise ValueError("a regression classifier has no labels: use predict()")
        return list(self.predict(texts, batch_size=batch_size, verbose=0)["label"])

    def get_config(self):
        return {
            "classifier": keras.saving.serialize_keras_object(self.classifier),
            "preprocessing": keras.saving.serialize_keras_object(self.preprocessing),
            "label_names": self.label_names,
            "name": self.name,
            "trainable": self.trainable,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for key in ("classifier", "preprocessing"):
            config[key] = keras.saving.deserialize_keras_object(config[key])
        return cls(**config)
