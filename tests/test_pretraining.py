"""Pretraining runs on the original TFRecord: checkpoints, resume, eval, exports, failure modes."""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from albert_tf import AlbertConfig, AlbertPretrainer
from albert_tf.checkpoints import load_tf1_checkpoint
from albert_tf.training.callbacks import NonFiniteLossError
from albert_tf.training.distribution import build_strategy
from albert_tf.training.pretraining import run_pretraining
from albert_tf.training.pretraining_options import PretrainingOptions, use_xla
from tests.loss_scaling import overflowing
from tests.tolerances import GOLDEN, SAME_MODEL, assert_close_to_scale
from tests.model_configs import SAMPLE_VOCAB_TINY

ROOT = pathlib.Path(__file__).resolve().parents[1]
RECORDS = str(ROOT / "tests/fixtures/original_data/orig_small_seq128.tfrecord")
# The original file uses the real 30k vocabulary; everything else is tiny.
TINY = SAMPLE_VOCAB_TINY


def options(output_dir, **overrides):
    values = dict(
        input_file=RECORDS,
        output_dir=str(output_dir),
        max_seq_length=128,
        train_batch_size=16,
        eval_batch_size=16,
        learning_rate=0.01,
        num_train_steps=8,
        num_warmup_steps=2,
        save_checkpoints_steps=4,
        keep_checkpoint_max=2,
        log_every_steps=2,
        max_eval_steps=3,
        seed=1,
    )
    return PretrainingOptions(**{**values, **overrides})


def write_config(directory) -> pathlib.Path:
    path = pathlib.Path(directory) / "albert_config.json"
    AlbertConfig(**TINY).to_json_file(path)
    return path


@pytest.mark.e2e
def test_run_checkpoints_evaluates_summarises_and_exports(tmp_path):
    results = run_pretraining(
        options(tmp_path, num_train_steps=12, do_eval=True, eval_input_file=RECORDS),
        AlbertConfig(**TINY),
        build_strategy("one_device"),
    )
    assert results["global_step"] == 12
    checkpoints = tf.train.get_checkpoint_state(str(tmp_path / "checkpoints"))
    assert [os.path.basename(p) for p in checkpoints.all_model_checkpoint_paths] == [
        "ckpt-8",
        "ckpt-12",
    ]  # keep_checkpoint_max=2
    evaluation = json.loads((tmp_path / "eval_results.json").read_text())
    assert evaluation["global_step"] == 12 and evaluation["held_out"]
    assert 0 <= evaluation["masked_lm_accuracy"] <= 1 and evaluation["masked_lm_loss"] > 0
    # The schedule as the original: warmup 0 -> lr over 2 steps, then linear decay from the jump.
    history = results["train_history"]
    assert [h["step"] for h in history] == [2, 4, 6, 8, 10, 12]
    assert history[0]["learning_rate"] == pytest.approx(0.01 * (1 - 2 / 12), rel=1e-5)
    assert all(h["gradient_norm"] > 0 and h["examples_per_second"] > 0 for h in history)
    tags = set()
    for event_file in (tmp_path / "logs" / "train").iterdir():
        for event in tf.compat.v1.train.summary_iterator(str(event_file)):
            tags.update(v.tag for v in event.summary.value)
    assert tags >= {
        "loss",
        "masked_lm_accuracy",
        "sentence_order_accuracy",
        "learning_rate",
        "gradient_norm",
        "examples_per_second",
    }
    # Both final exports hold the trained weights.
    batch = {
        k: np.zeros((1, 8), np.int32) for k in ("input_ids", "segment_ids", "masked_lm_positions")
    }
    batch["input_mask"] = np.ones((1, 8), np.int32)
    from_keras = keras.saving.load_model(results["keras_model"])(batch)
    config_file = pathlib.Path(results["tf1_checkpoint"]).parent / "albert_config.json"
    from_tf1 = load_tf1_checkpoint(results["tf1_checkpoint"], str(config_file))(batch)
    assert_close_to_scale(from_keras["mlm_logits"], from_tf1["mlm_logits"], SAME_MODEL)


def test_rerun_resumes_from_the_last_checkpoint(tmp_path):
    first = run_pretraining(options(tmp_path), AlbertConfig(**TINY), build_strategy("one_device"))
    assert first["resumed_from"] is None
    results = run_pretraining(
        options(tmp_path, num_train_steps=12), AlbertConfig(**TINY), build_strategy("one_device")
    )
    assert results["resumed_from"] == f"{tmp_path}/checkpoints/ckpt-8"
    assert results["global_step"] == 12
    assert results["train_history"][0]["step"] == 10  # did not start over
    # Already finished: a third run trains nothing.
    assert (
        run_pretraining(
            options(tmp_path, num_train_steps=12),
            AlbertConfig(**TINY),
            build_strategy("one_device"),
        )["train_history"]
        == []
    )


@pytest.mark.slow  # two runs, each compiling its own training step: about a minute
def test_divergence_stops_and_keeps_the_last_good_checkpoint(tmp_path):
    run_pretraining(
        options(tmp_path, num_train_steps=4), AlbertConfig(**TINY), build_strategy("one_device")
    )
    # LAMB scales each update to lr * |w|: at 1e30 the weights overflow after one step.
    with pytest.raises(NonFiniteLossError, match="ckpt-4"):
        run_pretraining(
            options(
                tmp_path,
                num_train_steps=12,
                learning_rate=1e30,
                num_warmup_steps=0,
                log_every_steps=1,
            ),
            AlbertConfig(**TINY),
            build_strategy("one_device"),
        )
    latest = tf.train.latest_checkpoint(str(tmp_path / "checkpoints"))
    assert latest.endswith("ckpt-4")
    reader = tf.train.load_checkpoint(latest)
    for name in reader.get_variable_to_shape_map():
        value = reader.get_tensor(name)
        if np.issubdtype(np.asarray(value).dtype, np.floating):
            assert np.isfinite(value).all(), name


def test_no_xla_for_fp32_and_bf16_on_cpu_and_the_flag_wins(tmp_path):
    one_device = build_strategy("one_device")  # no GPU here
    assert not use_xla(options(tmp_path), one_device)
    assert not use_xla(options(tmp_path, mixed_precision="bf16"), one_device)
    assert use_xla(options(tmp_path, mixed_precision="fp16"), one_device)
    assert use_xla(options(tmp_path, mixed_precision="bf16", jit_compile=True), one_device)
    assert use_xla(options(tmp_path, jit_compile=True), one_device)
    assert not use_xla(options(tmp_path, mixed_precision="fp16", jit_compile=False), one_device)


def test_invalid_settings_name_the_flag(tmp_path):
    with pytest.raises(ValueError, match="--max_seq_length=256 exceeds max_position_embeddings"):
        run_pretraining(
            options(tmp_path, max_seq_length=256),
            AlbertConfig(**TINY),
            build_strategy("one_device"),
        )
    with pytest.raises(ValueError, match="--train_batch_size=10 must divide"):
        run_pretraining(
            options(tmp_path, train_batch_size=10, gradient_accumulation_steps=4),
            AlbertConfig(**TINY),
            build_strategy("one_device"),
        )
    with pytest.raises(FileNotFoundError, match="nothing_here"):
        run_pretraining(
            options(tmp_path, input_file=str(tmp_path / "nothing_here*")),
            AlbertConfig(**TINY),
            build_strategy("one_device"),
        )


def test_bf16_builds_the_model_in_bfloat16_and_leaves_the_global_policy(tmp_path, monkeypatch):
    from albert_tf.training import pretraining

    built = []

    def recording(*args, **kwargs):
        built.append(AlbertPretrainer(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(pretraining, "AlbertPretrainer", recording)
    results = run_pretraining(
        options(tmp_path, mixed_precision="bf16", num_train_steps=2, save_checkpoints_steps=2),
        AlbertConfig(**TINY),
        build_strategy("one_device"),
    )
    (model,) = built
    assert model.dtype_policy.name == "mixed_bfloat16"
    assert model.backbone.get_layer("embeddings").compute_dtype == "bfloat16"
    assert {v.dtype for v in model.weights} == {"float32"}
    assert np.isfinite([h["loss"] for h in results["train_history"]]).all()
    assert keras.config.dtype_policy().name == "float32"
    # The exported file reloads in float32, as any `.keras` file: the dtype is the run's.
    exported = keras.saving.load_model(results["keras_model"])
    assert exported.compute_dtype == "float32"


def test_gradient_accumulation_trains_the_same_number_of_updates(tmp_path):
    results = run_pretraining(
        options(tmp_path, gradient_accumulation_steps=2),
        AlbertConfig(**TINY),
        build_strategy("one_device"),
    )
    assert results["global_step"] == 8
    assert [h["step"] for h in results["train_history"]] == [2, 4, 6, 8]


def test_fp16_steps_whose_gradients_overflow_still_count_as_batches(tmp_path, monkeypatch):
    # A loss scale of 2**40 overflows float16 gradients: every update is skipped (the optimizer's
    # `iterations` stay at 0) and halves the scale, yet each step took its batches.
    from albert_tf.training import harness

    monkeypatch.setattr(harness, "create_optimizer", overflowing(harness.create_optimizer))
    fp16 = dict(mixed_precision="fp16", jit_compile=False, gradient_accumulation_steps=2)

    def state(checkpoint: str) -> tuple[int, float]:
        reader = tf.train.load_checkpoint(checkpoint)
        names = ("_iterations", "dynamic_scale")
        iterations, scale = (
            reader.get_tensor(f"optimizer/{name}/.ATTRIBUTES/VARIABLE_VALUE") for name in names
        )
        return int(iterations), float(scale)

    first = run_pretraining(
        options(tmp_path, num_train_steps=4, **fp16),
        AlbertConfig(**TINY),
        build_strategy("one_device"),
    )
    assert first["global_step"] == 4
    assert [h["step"] for h in first["train_history"]] == [2, 4]
    # The scale halves at every micro-batch: 2 per step.
    assert state(str(tmp_path / "checkpoints" / "ckpt-4")) == (0, 2.0**32)

    # Resumed at step 4, with the scale it had reached.
    resumed = run_pretraining(
        options(tmp_path, num_train_steps=8, **fp16),
        AlbertConfig(**TINY),
        build_strategy("one_device"),
    )
    assert resumed["resumed_from"] == f"{tmp_path}/checkpoints/ckpt-4"
    assert resumed["global_step"] == 8
    assert [h["step"] for h in resumed["train_history"]] == [6, 8]
    assert state(str(tmp_path / "checkpoints" / "ckpt-8")) == (0, 2.0**24)


def run_cli(*args, env=None):
    return subprocess.Popen(
        [sys.executable, str(ROOT / "pipelines/pretrain.py"), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})},
    )


def cli_args(tmp_path, **flags):
    values = dict(
        input_file=RECORDS,
        output_dir=tmp_path / "run",
        albert_config_file=write_config(tmp_path),
        max_seq_length=128,
        train_batch_size=16,
        num_train_steps=400,
        num_warmup_steps=10,
        save_checkpoints_steps=10,
        log_every_steps=10,
        learning_rate=0.01,
    )
    return [f"--{k}={v}" for k, v in {**values, **flags}.items()]


@pytest.mark.slow  # two CLI runs of 400 steps: 3-5 minutes on 2 cores
def test_kill_nine_then_rerun_resumes_and_finishes(tmp_path):
    args = cli_args(tmp_path)
    state = tmp_path / "run" / "checkpoints" / "checkpoint"
    process = run_cli(*args)
    deadline = time.time() + 240
    while not state.exists() and time.time() < deadline and process.poll() is None:
        time.sleep(0.05)
    assert process.poll() is None, "the run ended before a kill could interrupt it"
    process.send_signal(signal.SIGKILL)
    process.wait()
    killed_at = tf.train.get_checkpoint_state(str(state.parent))
    for prefix in killed_at.all_model_checkpoint_paths:  # never a half-written checkpoint
        assert pathlib.Path(prefix + ".index").exists()
        assert tf.train.load_checkpoint(prefix).get_variable_to_shape_map()
    step = int(killed_at.model_checkpoint_path.rsplit("-", 1)[1])
    assert step < 400
    rerun = run_cli(*args)
    output, _ = rerun.communicate(timeout=600)
    assert rerun.returncode == 0, output[-3000:]
    assert f"Resuming from {tmp_path}/run/checkpoints/ckpt-" in output
    assert tf.train.latest_checkpoint(str(state.parent)).endswith("ckpt-400")


@pytest.mark.e2e
def test_tpu_flag_without_a_tpu_fails_clearly(tmp_path):
    for address, message in (
        ("local", "could not reach TPU 'local'"),
        ("grpc://127.0.0.1:1", "could not reach TPU at grpc://127.0.0.1:1"),
    ):
        output, _ = run_cli(*cli_args(tmp_path), f"--tpu={address}").communicate(timeout=300)
        assert message in output
        assert "Traceback" not in output


def test_initial_weights_from_an_original_checkpoint_or_a_keras_file(tmp_path):
    from albert_tf.checkpoints import CheckpointMismatchError
    from albert_tf.modeling.model import AlbertPretrainer
    from albert_tf.training.pretraining import load_initial_weights

    folder = ROOT / "tests/fixtures/original_checkpoints/albert_tiny_shared_training"
    config = AlbertConfig.from_json_file(folder / "albert_config.json")
    from_tf1 = AlbertPretrainer(config)
    load_initial_weights(from_tf1, str(folder))  # optimizer slots and step are skipped
    expected = np.load(folder / "expected.npz")
    pooled = from_tf1(
        {k: expected[k] for k in ("input_ids", "input_mask", "segment_ids", "masked_lm_positions")}
    )["pooled_output"]
    assert_close_to_scale(pooled, expected["pooled_output"], GOLDEN)
    from_tf1.save(tmp_path / "init.keras")
    from_keras = AlbertPretrainer(config)
    load_initial_weights(from_keras, str(tmp_path / "init.keras"))
    for a, b in zip(from_tf1.weights, from_keras.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    with pytest.raises(
        CheckpointMismatchError, match="shape mismatch: bert/embeddings/word_embeddings"
    ):
        load_initial_weights(AlbertPretrainer(AlbertConfig(**TINY)), str(tmp_path / "init.keras"))
