"""Tests for albert_tf.training.optimization against the original LAMB/AdamW trajectories (golden)."""

import contextlib
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

from albert_tf.training.optimization import (
    AdamWeightDecayOptimizer,
    LAMBOptimizer,
    WarmupPolynomialDecay,
    create_optimizer,
    excluded_from_weight_decay,
    uses_weight_decay,
)
from albert_tf.tolerance import FLOAT32_EPS, scaled_limit
from tests.model_configs import MICRO

# Compares floats against goldens or another form of the model: CI reruns it on other kernels.
pytestmark = pytest.mark.numerics

REPO = pathlib.Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "original_optimizer"
NUM_STEPS = 12


def assert_golden(actual, expected, what):
    """float32 round-off: |a - e| <= 1e-5 |e| (84 ulps of the entry) + 1e-6 * max(1, max |e|)
    (8 ulps of the trajectory's scale, for entries near zero)."""
    np.testing.assert_allclose(
        actual, expected, rtol=1e-5, atol=scaled_limit(expected, 1e-6), err_msg=what
    )


def load_fixture(kind):
    data = np.load(FIXTURES / f"{kind}_trajectory.npz")
    settings = json.loads((FIXTURES / f"{kind}_trajectory.json").read_text())
    names = [key.split("::", 1)[1] for key in data.files if key.startswith("init::")]
    return data, settings, names


def variable_at_path(path, value):
    """A keras.Variable whose `.path` is exactly `path` (names may not contain '/')."""
    *scopes, leaf = path.split("/")
    with contextlib.ExitStack() as stack:
        for scope in scopes:
            stack.enter_context(keras.name_scope(scope))
        variable = keras.Variable(value, name=leaf)
    assert variable.path == path
    return variable


def optimizer_from_settings(settings, **kwargs):
    return create_optimizer(
        settings["learning_rate"],
        settings["num_train_steps"],
        settings["num_warmup_steps"],
        optimizer=settings["optimizer"],
        weight_decay_rate=settings["weight_decay_rate"],
        clip_global_norm=settings["clip_global_norm"],
        **kwargs,
    )


class GoldenProblem:
    """The fixture's loss 0.5 * sum_v sum(scale_v * (v - target_v)^2) over named variables."""

    def __init__(self, kind):
        self.data, self.settings, self.names = load_fixture(kind)
        self.variables = [variable_at_path(n, self.data[f"init::{n}"]) for n in self.names]

    def loss_and_grads(self):
        with tf.GradientTape() as tape:
            loss = 0.0
            for name, var in zip(self.names, self.variables):
                diff = var - self.data[f"target::{name}"]
                loss += 0.5 * tf.reduce_sum(self.data[f"scale::{name}"] * tf.square(diff))
        return loss, tape.gradient(loss, [v.value for v in self.variables])

    def check_step(self, step, loss):
        assert_golden(float(loss), self.data["losses"][step], f"loss before step {step}")
        for name, var in zip(self.names, self.variables):
            assert_golden(
                var.numpy(), self.data[f"after::{name}"][step], f"{name} after step {step}"
            )


@pytest.mark.parametrize("kind", ["lamb", "adamw"])
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "xla"])
def test_golden_trajectory(kind, jit):
    problem = GoldenProblem(kind)
    optimizer = optimizer_from_settings(problem.settings)
    assert type(optimizer) is {"lamb": LAMBOptimizer, "adamw": AdamWeightDecayOptimizer}[kind]
    optimizer.build(problem.variables)

    def step():
        loss, grads = problem.loss_and_grads()
        optimizer.apply_gradients(zip(grads, problem.variables))
        return loss

    if jit:
        step = tf.function(step, jit_compile=True)
    for k in range(NUM_STEPS):
        problem.check_step(k, step())
    assert int(optimizer.iterations) == NUM_STEPS
    # The first update used lr(0) = 0 (fixture ordering note), so it only moved the slots.
    slot_names = [v.name for v in optimizer.variables]
    assert (
        "bert_encoder_dense_kernel_m" in slot_names and "bert_encoder_dense_kernel_v" in slot_names
    )


def test_golden_trajectory_through_loss_scale_optimizer():
    problem = GoldenProblem("lamb")
    inner = optimizer_from_settings(problem.settings)
    optimizer = keras.optimizers.LossScaleOptimizer(inner, initial_scale=2.0**10)
    optimizer.build(problem.variables)
    for k in range(NUM_STEPS):
        with tf.GradientTape() as tape:
            loss = 0.0
            for name, var in zip(problem.names, problem.variables):
                diff = var - problem.data[f"target::{name}"]
                loss += 0.5 * tf.reduce_sum(problem.data[f"scale::{name}"] * tf.square(diff))
            scaled = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, [v.value for v in problem.variables])
        optimizer.apply_gradients(zip(grads, problem.variables))
        problem.check_step(k, loss)
    assert int(optimizer.iterations) == NUM_STEPS

    # A non-finite gradient skips the update (weights, step and schedule stay) and halves the scale.
    before = [v.numpy() for v in problem.variables]
    scale = float(optimizer.dynamic_scale)
    optimizer.apply_gradients([(tf.fill(v.shape, np.inf), v) for v in problem.variables])
    assert int(inner.iterations) == NUM_STEPS
    assert float(optimizer.dynamic_scale) == scale / 2
    for b, v in zip(before, problem.variables):
        np.testing.assert_array_equal(v.numpy(), b)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "xla"])
def test_gradient_accumulation_replays_golden_and_schedule(jit):
    """Two micro-batches whose gradients average to the golden one give the golden step, and
    the schedule advances once per applied update (Keras alone would advance per micro-batch)."""
    problem = GoldenProblem("lamb")
    optimizer = optimizer_from_settings(problem.settings, gradient_accumulation_steps=2)
    optimizer.build(problem.variables)
    rng = np.random.default_rng(0)
    schedule = WarmupPolynomialDecay(0.05, 12, 4)

    def micro_steps(noise):
        loss, grads = problem.loss_and_grads()
        for sign in (1.0, -1.0):
            optimizer.apply_gradients(
                [(g + sign * d, v) for g, d, v in zip(grads, noise, problem.variables)]
            )
        return loss

    if jit:
        micro_steps = tf.function(micro_steps, jit_compile=True)
    for k in range(NUM_STEPS):
        expected = float(schedule(k))
        assert float(optimizer.learning_rate) == pytest.approx(expected, rel=4 * FLOAT32_EPS), k
        noise = [0.1 * rng.standard_normal(v.shape).astype("float32") for v in problem.variables]
        problem.check_step(k, micro_steps(noise))
        assert int(optimizer.iterations) == k + 1


def test_schedule_warmup_jump_and_decay():
    schedule = WarmupPolynomialDecay(init_lr=1.0, num_train_steps=100, num_warmup_steps=10)
    values = {s: float(schedule(s)) for s in (0, 5, 9, 10, 11, 50, 100, 150)}
    expected = {0: 0.0, 5: 0.5, 9: 0.9, 10: 0.9, 11: 0.89, 50: 0.5, 100: 0.0, 150: 0.0}
    for step, value in expected.items():
        assert values[step] == pytest.approx(value, abs=FLOAT32_EPS), step  # init_lr=1
    # The jump: the last warmup value equals init_lr * 9/10, the first decayed one is not ~init_lr.
    original_jump = WarmupPolynomialDecay(0.00176, 125000, 3125)
    assert float(original_jump(3124)) == pytest.approx(0.00176 * 3124 / 3125, rel=1e-6)
    assert float(original_jump(3125)) == pytest.approx(0.00176 * 0.975, rel=1e-6)


def test_schedule_poly_power_start_warmup_and_no_warmup():
    squared = WarmupPolynomialDecay(2.0, 100, 10, poly_power=2.0)
    assert float(squared(50)) == pytest.approx(2.0 * 0.25, rel=1e-6)
    assert float(squared(90)) == pytest.approx(2.0 * 0.01, rel=1e-5)

    late = WarmupPolynomialDecay(1.0, 100, 10, start_warmup_step=20)
    assert float(late(20)) == 0.0
    assert float(late(25)) == pytest.approx(0.5)
    assert float(late(29)) == pytest.approx(0.9)
    assert float(late(30)) == pytest.approx(0.7)  # decay at the absolute step
    assert float(late(10)) == 0.0  # original: negative LR; clamped (see class docstring)

    no_warmup = WarmupPolynomialDecay(1.0, 100, 0)
    assert float(no_warmup(0)) == 1.0
    assert float(no_warmup(25)) == pytest.approx(0.75)

    with pytest.raises(ValueError, match="num_train_steps"):
        WarmupPolynomialDecay(1.0, 0, 0)


def test_schedule_serialization_round_trip():
    schedule = WarmupPolynomialDecay(0.003, 1000, 100, poly_power=0.5, start_warmup_step=7)
    restored = keras.optimizers.schedules.deserialize(
        keras.optimizers.schedules.serialize(schedule)
    )
    assert type(restored) is WarmupPolynomialDecay
    assert restored.get_config() == schedule.get_config()
    for step in (0, 50, 107, 108, 500, 1000):
        assert float(restored(step)) == float(schedule(step))


@pytest.mark.parametrize("kind", ["lamb", "adamw"])
def test_optimizer_serialization_round_trip(kind):
    optimizer = create_optimizer(
        1e-3,
        500,
        50,
        optimizer=kind,
        poly_power=2.0,
        start_warmup_step=3,
        weight_decay_rate=0.02,
        gradient_accumulation_steps=4,
    )
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    assert type(restored) is type(optimizer)
    config, restored_config = optimizer.get_config(), restored.get_config()
    assert restored_config == config
    assert config["weight_decay_rate"] == 0.02 and config["epsilon"] == 1e-6
    assert config["exclude_from_weight_decay"] == ["LayerNorm", "layer_norm", "bias"]
    assert config["gradient_accumulation_steps"] == 4
    assert isinstance(restored._learning_rate, WarmupPolynomialDecay)
    assert restored._learning_rate.get_config() == optimizer._learning_rate.get_config()


def test_base_class_decay_and_clipping_are_refused():
    for key in ("weight_decay", "global_clipnorm", "clipnorm", "clipvalue"):
        with pytest.raises(ValueError, match=key):
            LAMBOptimizer(learning_rate=0.1, **{key: 1.0})
    with pytest.raises(ValueError, match="optimizer must be one of"):
        create_optimizer(0.1, 10, 1, optimizer="adam")


def test_exclusion_regexes_on_original_names():
    excluded = [
        "cls/predictions/output_bias",
        "cls/seq_relationship/output_bias",
        "bert/embeddings/LayerNorm/gamma",
        "bert/embeddings/LayerNorm/beta",
        "bert/encoder/transformer/group_0/inner_group_0/LayerNorm_1/gamma",
        "bert/encoder/transformer/group_0/inner_group_0/attention_1/self/query/bias",
        "cls/predictions/transform/LayerNorm/beta",
        "albert/layer_norm/gamma",
    ]
    decayed = [
        "bert/embeddings/word_embeddings",
        "bert/embeddings/position_embeddings",
        "bert/embeddings/token_type_embeddings",
        "cls/seq_relationship/output_weights",
        "bert/encoder/embedding_hidden_mapping_in/kernel",
        "bert/encoder/transformer/group_0/inner_group_0/ffn_1/intermediate/dense/kernel",
        "bert/pooler/dense/kernel",
        "cls/predictions/transform/dense/kernel",
    ]
    assert [n for n in excluded + decayed if not uses_weight_decay(n)] == excluded
    variables = [variable_at_path(n, np.zeros(1, "float32")) for n in excluded + decayed]
    assert excluded_from_weight_decay(variables) == excluded
    # Raw tf.Variables (no Keras path) are matched by their name without the ':0' suffix.
    assert excluded_from_weight_decay([tf.Variable(0.0, name="output_bias")]) == ["output_bias"]


def tiny_model(seed=0, dtype_policy="float32"):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential(
        [
            keras.Input((6,)),
            keras.layers.Dense(16, dtype=dtype_policy, name="dense"),
            keras.layers.LayerNormalization(dtype=dtype_policy, name="LayerNorm"),
            keras.layers.Dense(3, dtype=dtype_policy, name="output"),
        ],
        name="tiny",
    )
    model.dtype_policy = dtype_policy  # `compile` adds loss scaling under "mixed_float16"
    return model


def tiny_data(target_scale=50.0):
    """Large targets by default: gradient norms >> 1, so the global-norm clipping matters."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(32, 6)).astype("float32")
    y = (target_scale * rng.normal(size=(32, 3))).astype("float32")
    return x, y


def train_tiny(jit_compile, dtype_policy="float32", target_scale=50.0):
    model = tiny_model(dtype_policy=dtype_policy)
    model.compile(optimizer=create_optimizer(0.05, 20, 2), loss="mse", jit_compile=jit_compile)
    x, y = tiny_data(target_scale)
    history = model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    return model, history.history["loss"][-1]


def test_keras_fit_with_jit_compile_matches_eager():
    eager, eager_loss = train_tiny(jit_compile=False)
    xla, xla_loss = train_tiny(jit_compile=True)
    assert xla.jit_compile is True and int(xla.optimizer.iterations) == 4
    assert xla_loss == pytest.approx(eager_loss, rel=1e-5)
    initial = tiny_model()
    for w0, we, wx in zip(initial.weights, eager.weights, xla.weights):
        assert not np.allclose(w0.numpy(), wx.numpy())
        np.testing.assert_allclose(
            wx.numpy(), we.numpy(), rtol=1e-5, err_msg=wx.path, atol=scaled_limit(we.numpy(), 1e-6)
        )


def test_keras_fit_mixed_precision_wraps_in_loss_scale_optimizer():
    # Unit-scale targets keep the float16 loss scaled by 2**15 finite, so no step is skipped.
    model, loss = train_tiny(jit_compile=True, dtype_policy="mixed_float16", target_scale=1.0)
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    assert isinstance(model.optimizer.inner_optimizer, LAMBOptimizer)
    assert int(model.optimizer.iterations) == 4 and np.isfinite(loss)
    assert all(w.dtype == "float32" for w in model.trainable_weights)
    assert model.layers[0].compute_dtype == "float16"
    initial = tiny_model()
    for w0, w in zip(initial.weights, model.weights):
        assert not np.allclose(w0.numpy(), w.numpy()), w.path


def test_checkpoint_and_keras_file_restore_slots_and_step(tmp_path):
    model, _ = train_tiny(jit_compile=False)
    optimizer = model.optimizer
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    path = checkpoint.write(str(tmp_path / "ckpt"))

    fresh = tiny_model(seed=5)
    fresh_optimizer = create_optimizer(0.05, 20, 2)
    fresh_optimizer.build(fresh.trainable_variables)
    tf.train.Checkpoint(model=fresh, optimizer=fresh_optimizer).read(path).assert_consumed()
    assert int(fresh_optimizer.iterations) == int(optimizer.iterations) == 4
    for a, b in zip(optimizer.variables, fresh_optimizer.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())

    model.save(tmp_path / "tiny.keras")
    loaded = keras.models.load_model(tmp_path / "tiny.keras")
    assert type(loaded.optimizer) is LAMBOptimizer
    assert isinstance(loaded.optimizer._learning_rate, WarmupPolynomialDecay)
    for a, b in zip(optimizer.variables, loaded.optimizer.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


MIRRORED_SCRIPT = textwrap.dedent(
    """
    import sys
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import numpy as np
    sys.path.insert(0, "tests")
    from test_optimization import tiny_data, tiny_model
    from albert_tf.training.optimization import create_optimizer

    def train(strategy):
        with strategy.scope():
            model = tiny_model()
            model.compile(optimizer=create_optimizer(0.05, 20, 2), loss="mse", jit_compile=False)
        x, y = tiny_data()
        model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
        return model

    one = train(tf.distribute.OneDeviceStrategy("CPU:0"))
    mirrored_strategy = tf.distribute.MirroredStrategy(["CPU:0", "CPU:1"])
    assert mirrored_strategy.num_replicas_in_sync == 2
    two = train(mirrored_strategy)
    assert int(two.optimizer.iterations.numpy()) == 4
    scale = max([1.0] + [float(np.abs(b.numpy()).max()) for b in one.weights])
    diff = max(float(np.abs(a.numpy() - b.numpy()).max()) for a, b in zip(one.weights, two.weights))
    diff /= scale  # in units of the weights' scale
    moved = min(float(np.abs(a.numpy() - b.numpy()).max()) for a, b in zip(tiny_model().weights, two.weights))
    print(f"RESULT diff={diff:.3g} moved={moved:.3g}")
    """
)


def test_mirrored_two_replicas_match_one_device():
    """Same global batch on 2 logical CPUs == 1 device: clipping acts on the summed gradient.

    (Clipping each replica before the sum, as Keras's `global_clipnorm` does, ends 0.14 apart.)
    Runs in a subprocess because logical devices must be configured before TF initialises.
    """
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO))
    result = subprocess.run(
        [sys.executable, "-c", MIRRORED_SCRIPT],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(l for l in result.stdout.splitlines() if l.startswith("RESULT"))
    diff, moved = (float(part.split("=")[1]) for part in line.split()[1:])
    assert moved > 1e-3, line
    assert diff < 16 * FLOAT32_EPS, line  # a few ulps of the weights' scale


def test_gradient_norm_is_recorded_before_clipping():
    optimizer = create_optimizer(0.1, 10, 0)
    variables = [
        keras.Variable(np.zeros(3, np.float32), name="w"),
        keras.Variable(np.zeros(2, np.float32), name="b"),
    ]
    gradients = [np.array([3.0, 0.0, 4.0], np.float32), np.array([0.0, 12.0], np.float32)]
    optimizer.apply(gradients, variables)
    assert float(optimizer.gradient_norm) == pytest.approx(13.0)


def test_exactly_layernorm_parameters_and_biases_of_the_pretrainer_are_excluded():
    from albert_tf import AlbertConfig, AlbertPretrainer
    from albert_tf.checkpoints import tf1_name

    config = AlbertConfig(**MICRO, num_hidden_groups=2)
    model = AlbertPretrainer(config)
    excluded = sorted(tf1_name(path) for path in excluded_from_weight_decay(model.weights))
    print("\nexcluded from weight decay and trust ratio:\n  " + "\n  ".join(excluded))
    # The original rule on the original names: every LayerNorm parameter and every bias.
    expected = sorted(
        name
        for name in map(tf1_name, (v.path for v in model.weights))
        if "LayerNorm" in name or name.endswith(("bias", "output_bias"))
    )
    assert excluded == expected
    assert "cls/predictions/output_bias" in excluded
    assert "bert/embeddings/LayerNorm/gamma" in excluded
    assert "bert/encoder/transformer/group_1/inner_group_0/LayerNorm_1/beta" in excluded
    # embedding LN 2, mapping bias 1, per group (q/k/v/output biases 4, LN 2, FFN biases 2,
    # LN_1 2) x 2, pooler bias 1, MLM transform bias + LN + output bias 4, SOP bias 1.
    assert len(excluded) == 2 + 1 + 2 * (4 + 2 + 2 + 2) + 1 + 4 + 1
    decayed = {tf1_name(v.path) for v in model.weights} - set(excluded)
    assert {
        "bert/embeddings/word_embeddings",
        "cls/seq_relationship/output_weights",
        "bert/encoder/transformer/group_0/inner_group_0/attention_1/self/query/kernel",
    } <= decayed
