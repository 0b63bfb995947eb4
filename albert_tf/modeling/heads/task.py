"""`AlbertTask`: what every task model shares, as keras-hub's tasks: a backbone (given, or built
from the config) whose dtype policy every layer of the head takes, and training in Keras's
convention: `fit` on `(features, labels)` batches with the loss and metrics given to `compile`.
"""

from __future__ import annotations

import keras

from albert_tf.modeling.model import BACKBONE_INPUTS, AlbertModel, ConfiguredModel


def task_inputs(names=BACKBONE_INPUTS, shape=(None,)) -> dict:
    """int32 `keras.Input`s named `names`, each of `shape` (without the batch)."""
    return {name: keras.Input(shape=shape, dtype="int32", name=name) for name in names}


class AlbertTask(ConfiguredModel):
    """Base of the task models: backbone + head as one functional model.

    Every task model takes its backbone's `config` or `backbone=` (an `AlbertModel`, e.g. a
    pretrained one), `dtype=` (the Keras dtype policy of every layer, e.g. "mixed_bfloat16"; None:
    the backbone's, or Keras's global policy for a backbone built from `config`) and `name=`.

    A subclass builds its head on `backbone` with `dtype=backbone.dtype_policy`, calls
    `super().__init__(inputs, outputs, backbone, head, name=...)`, names the features it reads in
    `INPUTS` (others in the batch are ignored) and says its original loss and metrics in
    `default_loss` / `default_metrics`. `compile(loss=..., metrics=...)` takes Keras `Loss` and
    `Metric` objects that see the labels `y` and the model's whole output dict
    (`albert_tf.modeling.heads.losses`); "auto" gives the original's.

    Args:
        inputs: the functional model's `keras.Input`s.
        outputs: its output dict.
        backbone: the `AlbertModel` inside (its config and dtype policy are the model's).
        head: the head's layer (`self.head`).
        name: the model's name.

    Example:
        >>> model = AlbertClassifier(backbone=AlbertModel(config, dtype="mixed_bfloat16"))
        >>> model.compile(optimizer=create_optimizer(2e-5, 1000, 100))  # the original's loss
        >>> model.fit(batches_of_features_and_label_ids)
    """

    INPUTS = BACKBONE_INPUTS

    def __init__(self, inputs, outputs, backbone: AlbertModel, head, name: str, **kwargs):
        super().__init__(inputs=inputs, outputs=outputs, name=name, **kwargs)
        self._use_dtype_policy(backbone.dtype_policy)
        self.config = backbone.config
        self.backbone = backbone
        self.head = head
        self.task_loss: keras.losses.Loss | None = None
        self.task_metrics: list[keras.metrics.Metric] = []

    def default_loss(self) -> keras.losses.Loss:
        """The original's training loss for this head."""
        raise NotImplementedError

    def default_metrics(self) -> list[keras.metrics.Metric]:
        """The original's metrics for this head reported while training (none by default)."""
        return []

    def compile(self, optimizer="rmsprop", loss="auto", metrics="auto", **kwargs):
        """Keras's `compile`; `loss` and `metrics` "auto" (or None, as a reloaded model's saved
        compile config holds) are the original's: `default_loss()`, `default_metrics()`."""
        self.task_loss = self.default_loss() if loss in ("auto", None) else loss
        self.task_metrics = list(self.default_metrics() if metrics in ("auto", None) else metrics)
        super().compile(optimizer=optimizer, **kwargs)

    def call(self, inputs, training=None):
        # Features the model does not read (ids, labels) pass through `fit` untouched.
        return super().call({k: inputs[k] for k in self.INPUTS}, training=training)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """The compiled loss of `y` and the whole output dict, plus any layer losses."""
        if self.task_loss is None:
            raise ValueError(f"{type(self).__name__}: compile the model before computing its loss")
        if y is None:
            raise ValueError(
                f"{type(self).__name__} trains on (features, labels) batches: no labels given"
            )
        loss = self.task_loss(y, y_pred, sample_weight)
        if self.losses:  # Keras adds (and scales) layer losses when it has no compiled loss
            loss = loss + super().compute_loss(x, y, y_pred, sample_weight, training)
        return loss

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        for metric in self.task_metrics:
            metric.update_state(y, y_pred, sample_weight=sample_weight)
        return self.step_logs()
