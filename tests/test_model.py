"""AlbertModel / AlbertPretrainer: parameter counts, shapes, losses, Keras 3 contracts."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from albert_tf import AlbertConfig, AlbertModel, AlbertPretrainer
from albert_tf.modeling.model import encoder_routing, masked_lm_loss, sentence_order_loss
from tests.contracts import model_inputs, original_tf1_names, run_model_contract_test
from tests.model_configs import MICRO, MICRO_PARTLY_SHARED
from tests.tolerances import FEW_OPS, SAME_MODEL, assert_close_to_scale


TINY = dict(
    vocab_size=120,
    embedding_size=16,
    hidden_size=32,
    num_hidden_layers=4,
    num_attention_heads=4,
    intermediate_size=64,
    max_position_embeddings=64,
)

# Paper Table 3 (sharing all) and Table 4 (ALBERT-base, E=128), in millions.
PAPER_COUNTS = {
    ("base", "all"): 12,
    ("large", "all"): 18,
    ("xlarge", "all"): 60,
    ("xxlarge", "all"): 235,
    ("base", "attention"): 64,
    ("base", "ffn"): 38,
    ("base", "none"): 89,
}
EXPECTED_COUNTS = {
    ("base", "all"): 11_683_584,
    ("large", "all"): 17_683_968,
    ("xlarge", "all"): 58_724_864,
    ("xxlarge", "all"): 222_595_584,
    ("base", "attention"): 63_647_232,
    ("base", "ffn"): 37_686_528,
    ("base", "none"): 89_650_176,
}


def pretraining_batch(config, batch=2, seq=12, predictions=3, seed=0):
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, seq), np.int32)
    mask[-1, seq - 4 :] = 0
    return {
        "input_ids": rng.integers(5, config.vocab_size, (batch, seq)).astype(np.int32) * mask,
        "input_mask": mask,
        "segment_ids": (np.arange(seq) >= seq // 2).astype(np.int32)[None].repeat(batch, 0),
        "masked_lm_positions": rng.integers(1, seq - 4, (batch, predictions)).astype(np.int32),
        "masked_lm_ids": rng.integers(5, config.vocab_size, (batch, predictions)).astype(np.int32),
        "masked_lm_weights": np.tile(np.array([1, 1, 0], np.float32)[:predictions], (batch, 1)),
        "next_sentence_labels": rng.integers(0, 2, (batch, 1)).astype(np.int32),
    }


def gradient_step(model, training=True, jit_compile=False):
    """tf.function: features -> (outputs, gradients of the pretraining loss, one per variable)."""

    @tf.function(jit_compile=jit_compile)
    def step(features):
        with tf.GradientTape() as tape:
            outputs = model(features, training=training)
            loss = model.compute_loss(x=features, y_pred=outputs)
        return outputs, tape.gradient(loss, model.trainable_variables)

    return step


def test_parameter_counts_equal_the_original_and_the_paper():
    print("\nmodel   sharing    ours         paper")
    for (preset, sharing), expected in EXPECTED_COUNTS.items():
        count = AlbertModel(AlbertConfig.from_preset(preset, sharing=sharing)).count_params()
        print(f"{preset:7s} {sharing:10s} {count:>12,d} {PAPER_COUNTS[preset, sharing]:>5d}M")
        assert count == expected
        if preset != "xxlarge":  # the paper's 235M is not reproducible from the released config
            assert round(count / 1e6) == pytest.approx(PAPER_COUNTS[preset, sharing], abs=1)


def test_sharing_modes_compose_with_groups_and_inner_groups():
    config = AlbertConfig(**TINY, num_hidden_groups=2, inner_group_num=2)
    routing = encoder_routing(config)
    assert len(routing) == 8  # L x inner blocks, run in order
    assert [a for a, _ in routing[:4]] == [
        "group_0_inner_group_0_attention",
        "group_0_inner_group_1_attention",
    ] * 2
    attention_only = encoder_routing(
        AlbertConfig(**TINY, num_hidden_groups=2, inner_group_num=2, sharing="attention")
    )
    assert len({a for a, _ in attention_only}) == 4 and len({f for _, f in attention_only}) == 8
    assert attention_only[5] == ("group_1_inner_group_1_attention", "layer_2_inner_group_1_ffn")
    ffn_only = encoder_routing(AlbertConfig(**TINY, sharing="ffn"))
    assert len({a for a, _ in ffn_only}) == 4 and len({f for _, f in ffn_only}) == 1
    # `none` is exactly "all" with one group per layer.
    none = AlbertModel(AlbertConfig(**TINY, sharing="none"))
    per_layer = AlbertModel(AlbertConfig(**TINY, num_hidden_groups=4))
    assert none.count_params() == per_layer.count_params()


def test_pretrainer_outputs_and_shapes():
    config = AlbertConfig(**TINY)
    outputs = AlbertPretrainer(config)(pretraining_batch(config))
    assert outputs["sequence_output"].shape == (2, 12, 32)
    assert outputs["pooled_output"].shape == (2, 32)
    assert outputs["mlm_logits"].shape == (2, 3, 120)
    assert outputs["sop_logits"].shape == (2, 2)
    assert np.all(np.abs(outputs["pooled_output"]) <= 1.0)  # tanh pooler


@pytest.mark.numerics
def test_padding_does_not_change_real_positions():
    config = AlbertConfig(**TINY)
    model = AlbertModel(config)
    batch = pretraining_batch(config, batch=1)
    short = {k: batch[k][:, :8] for k in ("input_ids", "input_mask", "segment_ids")}
    padded = {k: np.pad(v, ((0, 0), (0, 6))) for k, v in short.items()}
    a, b = model(short), model(padded)
    assert_close_to_scale(a["sequence_output"], b["sequence_output"][:, :8], SAME_MODEL)
    assert_close_to_scale(a["pooled_output"], b["pooled_output"], SAME_MODEL)


def test_first_and_last_layers_differ_when_not_sharing_only_ffn():
    config = AlbertConfig(**TINY, sharing="ffn")
    model = AlbertModel(config)
    kernels = [v for v in model.weights if v.path.endswith("attention/query/kernel")]
    assert len(kernels) == 4 and not np.allclose(kernels[0].numpy(), kernels[-1].numpy())


@pytest.mark.numerics
def test_losses_match_a_numpy_reference():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(2, 3, 7)).astype(np.float32)
    ids = rng.integers(0, 7, (2, 3))
    weights = np.array([[1, 1, 0], [1, 0, 0]], np.float32)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    nll = -np.take_along_axis(log_probs, ids[..., None], -1)[..., 0]
    expected = (weights * nll).sum() / (weights.sum() + 1e-5)
    logits_tensor = tf.constant(logits)
    with tf.GradientTape() as tape:
        tape.watch(logits_tensor)
        loss = masked_lm_loss(logits_tensor, ids, weights)
    assert float(loss) == pytest.approx(expected, rel=1e-6)
    # d loss / d logits = w * (softmax - one_hot) / (sum(w) + 1e-5)
    softmax = np.exp(log_probs)
    one_hot = np.eye(7, dtype=np.float32)[ids]
    expected_gradient = weights[..., None] * (softmax - one_hot) / (weights.sum() + 1e-5)
    assert_close_to_scale(tape.gradient(loss, logits_tensor), expected_gradient, FEW_OPS)
    sop = rng.normal(size=(4, 2)).astype(np.float32)
    labels = np.array([[0], [1], [1], [0]])
    sop_lp = sop - np.log(np.exp(sop).sum(-1, keepdims=True))
    expected_sop = -np.take_along_axis(sop_lp, labels, -1).mean()
    assert float(sentence_order_loss(sop, labels)) == pytest.approx(expected_sop, rel=1e-6)


@pytest.mark.numerics
def test_gelu_is_the_tanh_approximation():
    from albert_tf.modeling.layers import gelu_approximate

    x = np.linspace(-4, 4, 41).astype(np.float32)
    tanh_form = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    assert_close_to_scale(gelu_approximate(x), tanh_form, FEW_OPS)


@pytest.mark.numerics
def test_gelu_erf_is_the_exact_form_and_survives_a_keras_file(tmp_path):
    from albert_tf.modeling.layers import gelu_approximate, gelu_erf

    x = np.linspace(-4, 4, 41).astype(np.float32)
    erf_form = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x.astype(np.float64)])
    assert_close_to_scale(gelu_erf(x), erf_form, FEW_OPS)
    # The two forms differ by up to ~1e-3 near |x| = 2: far above the tolerance.
    assert np.max(np.abs(np.asarray(gelu_approximate(x)) - erf_form)) > 100 * FEW_OPS
    model = AlbertModel(AlbertConfig(**MICRO, hidden_act="gelu_erf"))
    ffn = model.get_layer(encoder_routing(model.config)[0][1])
    assert ffn.intermediate_dense.activation is gelu_erf
    inputs = model_inputs(model.config)
    model.save(tmp_path / "erf.keras")
    reloaded = keras.saving.load_model(tmp_path / "erf.keras")
    assert reloaded.config.hidden_act == "gelu_erf"
    assert_close_to_scale(
        reloaded(inputs)["sequence_output"], model(inputs)["sequence_output"], SAME_MODEL
    )


def test_dropout_only_in_training():
    config = AlbertConfig(**TINY, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    model = AlbertModel(config)
    inputs = {
        k: v
        for k, v in pretraining_batch(config).items()
        if k in ("input_ids", "input_mask", "segment_ids")
    }
    np.testing.assert_array_equal(
        model(inputs)["sequence_output"], model(inputs)["sequence_output"]
    )
    assert not np.allclose(
        model(inputs, training=True)["sequence_output"], model(inputs)["sequence_output"]
    )


@pytest.mark.half_precision
@pytest.mark.numerics
def test_backbone_keeps_the_model_contract():
    config = AlbertConfig(**MICRO)
    inputs = model_inputs(config)
    run_model_contract_test(
        AlbertModel,
        {"config": config},
        inputs,
        expected_tf1_names=original_tf1_names(config),
        expected_output_shapes={"sequence_output": (2, 8, 16), "pooled_output": (2, 16)},
        # The backbone has no loss of its own: any Keras loss on an output trains it.
        train_batch=(inputs, {"pooled_output": np.full((2, 16), 0.5, np.float32)}),
        compile_kwargs={"loss": {"pooled_output": keras.losses.MeanSquaredError()}},
    )


@pytest.mark.half_precision
@pytest.mark.numerics
def test_pretrainer_keeps_the_model_contract():
    config = AlbertConfig(**MICRO_PARTLY_SHARED)
    run_model_contract_test(
        AlbertPretrainer,
        {"config": config},
        model_inputs(config, masked_positions=3),
        expected_tf1_names=original_tf1_names(config, "pretraining"),
        expected_output_shapes={
            "sequence_output": (2, 8, 16),
            "pooled_output": (2, 16),
            "mlm_logits": (2, 3, 50),
            "sop_logits": (2, 2),
        },
        # Its labels are features of the pretraining records, as in the original: x alone.
        train_batch=(pretraining_batch(config),),
    )


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision(policy):
    config = AlbertConfig(**TINY)
    model = AlbertPretrainer(config, dtype=policy)
    outputs = model(pretraining_batch(config))
    assert all(v.dtype == "float32" for v in model.weights)
    assert outputs["sequence_output"].dtype == policy.split("_")[1]
    assert outputs["mlm_logits"].dtype == outputs["sop_logits"].dtype == "float32"
    assert all(np.isfinite(np.asarray(o, np.float32)).all() for o in outputs.values())


def test_train_step_compiles_under_xla_and_learns():
    config = AlbertConfig(**TINY)
    model = AlbertPretrainer(config)
    model.compile(optimizer=keras.optimizers.Adam(1e-2), jit_compile=True)
    batch = pretraining_batch(config, batch=2)
    dataset = tf.data.Dataset.from_tensors(batch).repeat(60)
    history = model.fit(dataset, epochs=1, verbose=0, shuffle=False)
    assert model.jit_compile
    assert history.history["loss"][0] < 6.0
    metrics = model.evaluate(tf.data.Dataset.from_tensors(batch), verbose=0, return_dict=True)
    assert set(metrics) >= {
        "loss",
        "masked_lm_accuracy",
        "sentence_order_accuracy",
        "masked_lm_loss",
        "sentence_order_loss",
    }
    # Memorising one batch: the loss must fall well below its start (ln 120 + ln 2 ~ 5.5).
    assert metrics["loss"] < 1.0
    assert metrics["sentence_order_accuracy"] == 1.0
