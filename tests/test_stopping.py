"""A stop request (a signal) stops a job at its next safe point: within the step under way of a
long device loop, never inside a checkpoint write; a job stuck in one long call is dropped."""

from __future__ import annotations

import signal
import threading
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from albert_tf import stopping
from albert_tf.training import harness


@pytest.fixture(autouse=True)
def fresh_stop_state():
    stopping.reset()
    yield
    stopping.reset()


def ask_later(seconds: float, signum=signal.SIGTERM) -> None:
    threading.Timer(seconds, stopping.ask_to_stop, (signum,)).start()


def never_dropped(signum, notes):
    raise AssertionError("the job should have stopped by itself")


def test_a_job_in_python_is_interrupted_where_it_is():
    reached = []

    def job():
        for step in range(200):
            reached.append(step)
            time.sleep(0.05)
        return "finished"

    ask_later(0.3)
    with pytest.raises(stopping.Interrupted) as stopped:
        stopping.run_stoppably(job, on_dropped=never_dropped)
    assert stopped.value.signum == signal.SIGTERM
    assert 0 < len(reached) < 200


def test_a_job_that_is_not_stopped_returns_its_value_and_raises_its_errors():
    assert stopping.run_stoppably(lambda: 7, on_dropped=never_dropped) == 7
    with pytest.raises(KeyError, match="missing"):
        stopping.run_stoppably(lambda: {}["missing"], on_dropped=never_dropped)


def test_an_uninterruptible_block_finishes_before_the_job_stops():
    done = []

    def job():
        with stopping.uninterruptible():
            time.sleep(0.6)  # a checkpoint being written
            done.append("saved")
        done.append("went on")  # never reached: stopped right after the block

    ask_later(0.1)
    with pytest.raises(stopping.Interrupted):
        stopping.run_stoppably(job, on_dropped=never_dropped)
    assert done == ["saved"]


def test_a_job_that_does_not_reach_a_safe_point_is_dropped_after_the_grace():
    dropped = []

    class Dropped(Exception):
        pass

    def drop(signum, notes):
        dropped.append((signum, notes))
        raise Dropped  # a CLI ends the process here

    release = threading.Event()
    stopping.on_drop(lambda: "the staging directory was removed")
    forget = stopping.on_drop(lambda: "never said: unregistered")
    forget()
    ask_later(0.1)
    started = time.monotonic()
    with pytest.raises(Dropped):
        # A call that takes no notice of Python's pending exception, as a TensorFlow call.
        stopping.run_stoppably(lambda: release.wait(30), on_dropped=drop, grace_seconds=0.5)
    release.set()
    assert dropped == [(signal.SIGTERM, ["the staging directory was removed"])]
    assert time.monotonic() - started >= 0.5


def test_the_first_request_counts_and_hooks_run_once_registered():
    seen = []
    forget = stopping.on_stop_request(lambda: seen.append("hook"))
    stopping.request_stop(signal.SIGINT)
    stopping.request_stop(signal.SIGTERM)
    assert seen == ["hook"] and stopping.stop_requested()
    forget()
    stopping.on_stop_request(lambda: seen.append("late"))  # after the request: at once
    assert seen == ["hook", "late"]


def batches_that_ask_to_stop(at_batch: int):
    """Batches of a tiny regression; making batch `at_batch` asks for a stop (a signal)."""
    x = np.random.default_rng(0).normal(size=(64, 3)).astype(np.float32)
    data = tf.data.Dataset.from_tensor_slices((x, np.ones((64, 1), np.float32))).repeat().batch(4)
    made = []

    def count():
        made.append(1)
        if len(made) == at_batch:
            stopping.ask_to_stop(signal.SIGTERM)
        time.sleep(0.002)

    def counted(features, targets):
        tf.py_function(count, [], [])
        return features, targets

    return data.map(counted)


class RecordingFormat:
    def __init__(self):
        self.saved = []

    def restore(self):
        return 0

    def save(self, step):
        self.saved.append(step)
        return f"ckpt-{step}"

    def latest(self):
        return None


def test_a_stop_ends_a_long_device_loop_after_the_step_under_way():
    keras.utils.set_random_seed(0)
    model = harness.compile_model(
        lambda: keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)]),
        tf.distribute.get_strategy(),
        jit_compile=False,
        steps_per_execution=1000,  # one device loop
        init_lr=0.01,
        num_train_steps=1000,
        num_warmup_steps=0,
        optimizer="adamw",
    )
    model.compile(
        optimizer=model.optimizer, loss="mse", jit_compile=False, steps_per_execution=1000
    )
    checkpoints = RecordingFormat()
    schedule = harness.Schedule(1000, 1000, 4, log_every_steps=1000)
    data = batches_that_ask_to_stop(at_batch=20)

    def job():
        return harness.train(
            model, lambda step, until_stop: until_stop(data.skip(step)), 0, schedule, checkpoints
        )

    with pytest.raises(stopping.Interrupted):
        stopping.run_stoppably(job, on_dropped=never_dropped)
    steps = int(model.optimizer.iterations.numpy())
    # The request came while batch 20 was made; the waiting main thread acts on it within about
    # a tenth of a second, ~50 batches of 2 ms. The loop ends that soon, not after its 1000
    # steps (the bound leaves room for a loaded machine).
    assert 0 < steps < 500, steps
    assert checkpoints.saved == []  # nothing saved of the cut loop
