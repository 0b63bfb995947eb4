"""The training harness on a model of its own: precision, schedule, checkpoints, resume, stop."""

import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf

from albert_tf.training import harness
from albert_tf.training.callbacks import NonFiniteLossError
from albert_tf.training.pretraining_options import PretrainingOptions


def test_mixed_precision_settings_name_keras_dtype_policies():
    assert [harness.dtype_policy(m) for m in (None, "none", "bf16", "fp16")] == [
        "float32",
        "float32",
        "mixed_bfloat16",
        "mixed_float16",
    ]
    with pytest.raises(ValueError, match=r"one of \['bf16', 'fp16', 'none'\], got 'fp8'"):
        harness.dtype_policy("fp8")


@dataclasses.dataclass
class LoopSizes:
    save_checkpoints_steps: int = 3
    train_batch_size: int = 8
    log_every_steps: int = 1


def test_schedule_of_pretraining_and_fine_tuning_settings():
    options = PretrainingOptions("x", "y", gradient_accumulation_steps=4, log_every_steps=10)
    assert harness.Schedule.of(options, 50) == harness.Schedule(50, 5000, 4096, 10, 4)
    shown = {"accuracy": "acc"}
    schedule = harness.Schedule.of(LoopSizes(), 7, shown_metrics=shown)
    assert schedule == harness.Schedule(7, 3, 8, 1, 1, shown)


class RecordingFormat:
    """A checkpoint format that only records what it is asked."""

    def __init__(self, restored=0):
        self.restored, self.saved = restored, []

    def restore(self):
        return self.restored

    def save(self, step):
        if self.saved and self.saved[-1] == step:
            return None
        self.saved.append(step)
        return f"ckpt-{step}"

    def latest(self):
        return f"ckpt-{self.saved[-1]}" if self.saved else None


def tiny_model(learning_rate=0.05):
    keras.utils.set_random_seed(0)
    model = harness.compile_model(
        lambda: keras.Sequential([keras.Input((3,)), keras.layers.Dense(1, name="dense")]),
        tf.distribute.get_strategy(),
        jit_compile=False,
        init_lr=learning_rate,
        num_train_steps=100,
        num_warmup_steps=0,
        optimizer="adamw",
    )
    # The Sequential has no loss of its own: a compiled one (the harness keeps the optimizer).
    model.compile(optimizer=model.optimizer, loss="mse", jit_compile=False)
    return model


def batches(targets=1.0):
    x = np.random.default_rng(0).normal(size=(64, 3)).astype(np.float32)
    y = np.full((64, 1), targets, np.float32)
    return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(4)


def from_step(data):
    """`harness.train`'s data source for `data`: its batches from a step on."""
    return lambda step, until_stop: until_stop(data.skip(step))


def test_train_saves_every_interval_and_at_the_end_and_resumes_the_data():
    model, format_ = tiny_model(), RecordingFormat()
    starts = []

    def make_dataset(step, until_stop):
        starts.append(step)
        return until_stop(batches().skip(step))

    schedule = harness.Schedule(5, 2, 4, log_every_steps=2)
    history, step = harness.train(model, make_dataset, 0, schedule, format_)
    assert step == 5 and format_.saved == [2, 4, 5] and starts == [0]
    assert [h["step"] for h in history] == [2, 4, 5]
    assert int(model.optimizer.iterations.numpy()) == 5
    # Resumed at step 4: the data from step 4 on, one more step, saved at the end.
    format_ = RecordingFormat(restored=4)
    assert harness.resume(format_, tf.distribute.get_strategy(), "the step") == 4
    _, step = harness.train(tiny_model(), make_dataset, 4, schedule, format_)
    assert step == 5 and format_.saved == [5] and starts == [0, 4]
    assert harness.train(tiny_model(), make_dataset, 5, schedule, format_) == ([], 5)


def test_a_non_finite_loss_stops_training_naming_the_last_checkpoint():
    model, format_ = tiny_model(), RecordingFormat()
    data = batches().take(2).concatenate(batches(targets=np.inf))  # steps 3.. diverge
    with pytest.raises(NonFiniteLossError, match="at step 3.*checkpoint is ckpt-2"):
        harness.train(model, from_step(data), 0, harness.Schedule(6, 2, 4), format_)
    assert format_.saved == [2]


def test_train_state_checkpoints_restore_weights_optimizer_and_step(tmp_path):
    model = tiny_model()
    harness.train(model, from_step(batches()), 0, harness.Schedule(3, 3, 4), RecordingFormat())
    checkpoints = harness.TrainStateCheckpoints(model, str(tmp_path), max_to_keep=2)
    assert checkpoints.restore() == 0 and checkpoints.latest() is None
    assert checkpoints.save(3) == str(tmp_path / "checkpoints" / "ckpt-3")
    assert checkpoints.save(3) is None  # already saved at this step
    saved = [v.numpy() for v in model.weights]
    fresh = tiny_model(learning_rate=0.01)
    again = harness.TrainStateCheckpoints(fresh, str(tmp_path / "other"), str(tmp_path))
    assert again.restore() == 3 and again.latest() == str(tmp_path / "checkpoints" / "ckpt-3")
    for want, got in zip(saved, fresh.weights):
        np.testing.assert_array_equal(got.numpy(), want, err_msg=got.path)
    assert int(fresh.optimizer.iterations.numpy()) == 3


def test_each_report_is_the_mean_of_its_own_steps():
    # A rate of 0 keeps the weights, so every batch's loss is known before training; the loss
    # jumps at step 5, inside the one checkpoint interval.
    model, format_ = tiny_model(learning_rate=0.0), RecordingFormat()
    data = batches(targets=0.0).take(4).concatenate(batches(targets=10.0))
    per_batch = [np.mean((model(x).numpy() - y) ** 2) for x, y in data.take(8).as_numpy_iterator()]
    history, _ = harness.train(model, from_step(data), 0, harness.Schedule(8, 8, 4, 2), format_)
    assert [h["step"] for h in history] == [2, 4, 6, 8]
    expected = [np.mean(per_batch[i : i + 2]) for i in (0, 2, 4, 6)]
    np.testing.assert_allclose([h["loss"] for h in history], expected, rtol=1e-5)
