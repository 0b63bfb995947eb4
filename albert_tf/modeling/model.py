"""`AlbertModel` (the backbone) and `AlbertPretrainer` (backbone + MLM and SOP heads, losses)."""

from __future__ import annotations

import keras
import tensorflow as tf
from keras import ops

from albert_tf.config import AlbertConfig
from albert_tf.modeling.layers import (
    AlbertAttention,
    AlbertEmbeddings,
    AlbertFeedForward,
    AlbertMaskedLMHead,
    AlbertSentenceOrderHead,
    _dense,
)

BACKBONE_INPUTS = ("input_ids", "input_mask", "segment_ids")


def _as_config(config) -> AlbertConfig:
    return config if isinstance(config, AlbertConfig) else AlbertConfig.from_dict(config)


def resolve_backbone(config, backbone, dtype) -> AlbertModel:
    """The backbone a model is built on: `backbone` itself (its config and dtype policy must agree
    with `config` and `dtype` when those are given), else a new `AlbertModel(config, dtype)`."""
    if backbone is None:
        if config is None:
            raise ValueError("give the backbone's config or the backbone (an AlbertModel)")
        return AlbertModel(config, dtype=dtype)
    if not isinstance(backbone, AlbertModel):
        raise ValueError(f"backbone must be an AlbertModel, got {type(backbone).__name__}")
    if config is not None and _as_config(config) != backbone.config:
        raise ValueError("config differs from the backbone's config: give one of them")
    wanted, has = keras.dtype_policies.get(dtype).name, backbone.dtype_policy.name
    if dtype is not None and wanted != has:
        raise ValueError(
            f"dtype {wanted!r} differs from the backbone's {has!r}: build it with that"
        )
    return backbone


def encoder_routing(config: AlbertConfig) -> list[tuple[str, str]]:
    """(attention layer name, FFN layer name) for each of the L x inner_group_num blocks, in order.

    Shared parts are named by the original group/inner-group indices (`group_{g}_inner_group_{k}`);
    parts that `config.sharing` leaves unshared get one copy per layer (`layer_{l}_inner_group_{k}`).
    """
    share_attention = config.sharing in ("all", "attention")
    share_ffn = config.sharing in ("all", "ffn")
    blocks = []
    for layer in range(config.num_hidden_layers):
        group = config.group_of_layer(layer)
        for inner in range(config.inner_group_num):
            shared, own = f"group_{group}_inner_group_{inner}", f"layer_{layer}_inner_group_{inner}"
            blocks.append(
                (
                    f"{shared if share_attention else own}_attention",
                    f"{shared if share_ffn else own}_ffn",
                )
            )
    return blocks


class ConfiguredModel(keras.Model):
    """A functional model built from an `AlbertConfig` (`self.config`), which its config echoes.

    Subclasses add their own constructor arguments to `get_config` via `extra_config()`. How a
    model is built and run is not in its config: a `backbone` passed in is rebuilt from the
    `AlbertConfig`, and the `dtype` policy (the compute precision) is left out, so a `.keras`
    file reloads in Keras's default policy (float32) whatever precision it was trained in.
    """

    def extra_config(self) -> dict:
        return {}

    def _use_dtype_policy(self, policy) -> None:
        # Functional models take no `dtype` argument: set the policy the layers were given (it
        # decides, for one, whether `compile` wraps the optimizer in loss scaling).
        if policy is not None:
            self.dtype_policy = policy

    def get_config(self):
        return {
            "albert_config": self.config.to_dict(),
            **self.extra_config(),
            "name": self.name,
            "trainable": self.trainable,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        return cls(AlbertConfig.from_dict(config.pop("albert_config")), **config)

    # --- Workarounds for Keras 3.15 `fit` under a tf.distribute strategy (TF backend) ---
    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        # Keras takes one batch out of the training iterator and all-reduces it, only to trace
        # shapes for whatever is unbuilt: the batch is lost to training (the run reads on one
        # batch later than a resume expects), and that reduce of a dict batch fails under
        # MultiWorkerMirroredStrategy. Our models build at construction and keep their losses
        # and metrics out of Keras's compiled ones, so nothing is unbuilt: skip it.
        nothing_to_build = self.built and all(
            part is None or part.built
            for part in (self._compile_metrics, self._compile_loss, self.optimizer)
        )
        if not nothing_to_build:
            super()._maybe_symbolic_build(iterator=iterator, data_batch=data_batch)

    def step_logs(self) -> dict:
        """The metric results a train/test step returns (`compute_metrics` ends with this)."""
        results = self.get_metrics_result()
        if isinstance(self.distribute_strategy, tf.distribute.MultiWorkerMirroredStrategy):
            # Keras reduces multi-worker step logs with a mean over axis 0: needs rank >= 1.
            results = {name: ops.reshape(value, (1,)) for name, value in results.items()}
        return results


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertModel(ConfiguredModel):
    """The ALBERT encoder: factorized embeddings, shared post-LN blocks, tanh pooler.

    Inputs (int32 [B, T], the original names): `input_ids`, `input_mask` (1 = real token),
    `segment_ids`. Outputs: `sequence_output` [B, T, H], `pooled_output` [B, H].

    Args:
        config: the `AlbertConfig` (or its dict).
        dtype: the Keras dtype policy of every layer, e.g. "mixed_bfloat16" (None: Keras's global
            policy, float32 unless changed); variables stay float32. name: the model's name.

    Example:
        >>> backbone = AlbertModel(AlbertConfig.from_preset("base"), dtype="mixed_bfloat16")
        >>> backbone({"input_ids": ids, "input_mask": mask, "segment_ids": segments})
    """

    def __init__(self, config: AlbertConfig | dict, dtype=None, name: str = "albert", **kwargs):
        config = _as_config(config)
        # === Layers ===
        embeddings = AlbertEmbeddings(config, dtype=dtype, name="embeddings")
        # The original creates the E->H mapping only when the widths differ.
        mapping = (
            _dense(config.hidden_size, config, "embedding_hidden_mapping_in", dtype=dtype)
            if config.embedding_size != config.hidden_size
            else None
        )
        routing = encoder_routing(config)
        blocks = {}
        for attention_name, ffn_name in routing:
            blocks.setdefault(
                attention_name, AlbertAttention(config, dtype=dtype, name=attention_name)
            )
            blocks.setdefault(ffn_name, AlbertFeedForward(config, dtype=dtype, name=ffn_name))
        pooler = _dense(config.hidden_size, config, "pooler", act="tanh", dtype=dtype)

        # === Functional model ===
        inputs = {
            name: keras.Input(shape=(None,), dtype="int32", name=name) for name in BACKBONE_INPUTS
        }
        x = embeddings(inputs["input_ids"], inputs["segment_ids"])
        if mapping is not None:
            x = mapping(x)
        for attention_name, ffn_name in routing:
            x = blocks[attention_name](x, inputs["input_mask"])
            x = blocks[ffn_name](x)
        pooled = pooler(x[:, 0, :])
        super().__init__(
            inputs=inputs,
            outputs={"sequence_output": x, "pooled_output": pooled},
            name=name,
            **kwargs,
        )

        # === Config ===
        self._use_dtype_policy(dtype)
        self.config = config
        self.embeddings = embeddings


def masked_lm_loss(mlm_logits, masked_lm_ids, masked_lm_weights, weight_total=None):
    """The original: sum(w * NLL) / (sum(w) + 1e-5) over all predictions of the batch.

    `weight_total` replaces sum(w) in the denominator (the global sum under tf.distribute).
    """
    # One fused kernel (TF's sparse softmax cross-entropy) instead of log_softmax + gather: over
    # [batch, predictions, vocab] logits it makes the loss and its gradient ~40% cheaper.
    nll = ops.sparse_categorical_crossentropy(
        ops.cast(masked_lm_ids, "int32"), ops.cast(mlm_logits, "float32"), from_logits=True
    )
    weights = ops.cast(masked_lm_weights, "float32")
    if weight_total is None:
        weight_total = ops.sum(weights)
    return ops.sum(weights * nll) / (weight_total + 1e-5)


def sentence_order_loss(sop_logits, labels):
    """Mean softmax cross-entropy over the two SOP classes."""
    labels = ops.reshape(ops.cast(labels, "int32"), (-1,))
    return ops.mean(
        keras.losses.sparse_categorical_crossentropy(
            labels, ops.cast(sop_logits, "float32"), from_logits=True
        )
    )


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertPretrainer(ConfiguredModel):
    """Backbone + MLM head (tied to the word embeddings) + SOP head, with the original losses.

    Called on a dict with `input_ids, input_mask, segment_ids, masked_lm_positions` it returns
    `sequence_output`, `pooled_output`, `mlm_logits` [B, P, V] and `sop_logits` [B, 2]. Trained with
    `fit(dataset)` where each element is the feature dict of a pretraining TFRecord, labels
    (`masked_lm_ids`, `masked_lm_weights`, `next_sentence_labels`) included, as the original's;
    the MLM loss is normalised over the global batch, which a per-replica Keras `Loss` cannot do.

    Args:
        config, backbone, dtype, name: as the task heads take them (`heads.task.AlbertTask`).

    Example:
        >>> pretrainer = AlbertPretrainer(config, dtype="mixed_bfloat16")
        >>> pretrainer.compile(optimizer=create_optimizer(1e-3, 1000, 100))
    """

    def __init__(
        self,
        config: AlbertConfig | dict | None = None,
        *,
        backbone: AlbertModel | None = None,
        dtype=None,
        name: str = "albert_pretrainer",
        **kwargs,
    ):
        # === Layers ===
        backbone = resolve_backbone(config, backbone, dtype)
        config, dtype = backbone.config, backbone.dtype_policy
        mlm_head = AlbertMaskedLMHead(config, backbone.embeddings, dtype=dtype, name="predictions")
        sop_head = AlbertSentenceOrderHead(config, dtype=dtype, name="seq_relationship")

        # === Functional model ===
        inputs = {
            name: keras.Input(shape=(None,), dtype="int32", name=name)
            for name in (*BACKBONE_INPUTS, "masked_lm_positions")
        }
        outputs = dict(backbone({k: inputs[k] for k in BACKBONE_INPUTS}))
        outputs["mlm_logits"] = mlm_head(outputs["sequence_output"], inputs["masked_lm_positions"])
        outputs["sop_logits"] = sop_head(outputs["pooled_output"])
        super().__init__(inputs=inputs, outputs=outputs, name=name, **kwargs)

        # === Config ===
        self._use_dtype_policy(dtype)
        self.config = config
        self.backbone = backbone
        # 0 drops the sentence loss: MLM alone (`albert_tf.training.sentence_task`).
        self.sentence_loss_weight = 1.0
        self.metric_trackers = {
            name: keras.metrics.Mean(name=name)
            for name in (
                "masked_lm_loss",
                "masked_lm_accuracy",
                "sentence_order_loss",
                "sentence_order_accuracy",
            )
        }

    def call(self, inputs, training=None):
        # Extra features of a TFRecord (labels, token_boundary) pass through `fit` untouched.
        return super().call({k: inputs[k] for k in self.input_names_}, training=training)

    @property
    def input_names_(self):
        return (*BACKBONE_INPUTS, "masked_lm_positions")

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """MLM + SOP loss (1:1, as the original), plus any layer losses.

        Under tf.distribute each replica returns its share of the global-batch loss: MLM is
        normalised by the weight sum of the whole global batch (one scalar all-reduce) and SOP
        and layer losses are divided by the replica count. Summed over replicas the gradients are
        exactly those of one device on the same global batch. (The original's TPU cores each
        normalised MLM by their own weights and summed; on one device both agree.)
        """
        weights = ops.cast(x["masked_lm_weights"], "float32")
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        weight_total = ops.sum(weights)
        if replicas > 1:
            weight_total = tf.distribute.get_replica_context().all_reduce("sum", weight_total)
        mlm = masked_lm_loss(y_pred["mlm_logits"], x["masked_lm_ids"], weights, weight_total)
        rest = 0.0
        if self.sentence_loss_weight:
            rest = self.sentence_loss_weight * sentence_order_loss(
                y_pred["sop_logits"], x["next_sentence_labels"]
            )
        if self.losses:
            rest = rest + ops.sum(self.losses)
        return mlm + rest / replicas

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        """The original eval metrics: weighted MLM accuracy/loss, SOP accuracy/loss."""
        weights = ops.cast(x["masked_lm_weights"], "float32")
        mlm_correct = ops.equal(
            ops.argmax(y_pred["mlm_logits"], axis=-1), ops.cast(x["masked_lm_ids"], "int64")
        )
        sop_labels = ops.reshape(ops.cast(x["next_sentence_labels"], "int64"), (-1,))
        sop_correct = ops.equal(ops.argmax(y_pred["sop_logits"], axis=-1), sop_labels)
        t = self.metric_trackers
        t["masked_lm_loss"].update_state(
            masked_lm_loss(y_pred["mlm_logits"], x["masked_lm_ids"], x["masked_lm_weights"])
        )
        t["masked_lm_accuracy"].update_state(
            ops.cast(mlm_correct, "float32"), sample_weight=weights
        )
        t["sentence_order_loss"].update_state(
            sentence_order_loss(y_pred["sop_logits"], x["next_sentence_labels"])
        )
        t["sentence_order_accuracy"].update_state(ops.cast(sop_correct, "float32"))
        return self.step_logs()

    @property
    def metrics(self):
        return [*super().metrics, *self.metric_trackers.values()]
