"""Progress lines of long predictions: counts per batch, the final total, quiet short runs."""

import logging
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from albert_tf.finetuning.progress import PredictProgress, predict_with_progress
from tests.tolerances import SAME_MODEL, assert_close_to_scale

NUM_EXAMPLES = 10
BATCH_SIZE = 3  # batches of 3, 3, 3 and 1
PROGRESS = re.compile(r"Predicting tiny: (\d+)/10 examples \((\d+)%\), [\d.]+ examples/s, ~.+ left")
FINAL = re.compile(
    r"Predicted tiny: (\d+)(?: of (\d+))? examples in [\d.]+ (?:s|min|h) \([\d.]+ examples/s\)"
)


@pytest.fixture(scope="module")
def tiny():
    inputs = keras.Input((4,))
    model = keras.Model(inputs, {"logits": keras.layers.Dense(1)(inputs)})
    x = np.arange(NUM_EXAMPLES * 4, dtype=np.float32).reshape(NUM_EXAMPLES, 4)
    return model, x, tf.data.Dataset.from_tensor_slices(x).batch(BATCH_SIZE)


def _messages(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "absl"]


def _final_lines(messages):
    return [FINAL.fullmatch(m) for m in messages if m.startswith("Predicted ")]


def test_interval_zero_logs_every_batch_and_the_total(tiny, caplog):
    model, x, batches = tiny
    with caplog.at_level(logging.INFO, logger="absl"):
        outputs = predict_with_progress(model, batches, "tiny", NUM_EXAMPLES, interval_s=0)
    messages = _messages(caplog)
    progress = [PROGRESS.fullmatch(m) for m in messages if m.startswith("Predicting ")]
    assert all(progress), messages
    # The last batch ends the prediction: the final line reports it, not a progress line.
    assert [(int(m[1]), int(m[2])) for m in progress] == [(3, 30), (6, 60), (9, 90)]
    final = _final_lines(messages)
    assert len(final) == 1 and final[0], messages
    assert int(final[0][1]) == NUM_EXAMPLES and final[0][2] is None
    # The callback only watches: the outputs are the model's. `predict` batches by its own size,
    # and another batch shape may pick another matmul kernel (oneDNN does on AVX-512 CPUs): equal
    # up to float32 round-off, not bit for bit.
    assert_close_to_scale(outputs["logits"], model.predict(x, verbose=0)["logits"], SAME_MODEL)


def test_large_interval_logs_only_the_final_line(tiny, caplog):
    model, _, batches = tiny
    with caplog.at_level(logging.INFO, logger="absl"):
        predict_with_progress(model, batches, "tiny", NUM_EXAMPLES, interval_s=3600)
    messages = [m for m in _messages(caplog) if "tiny" in m]
    assert len(messages) == 1, messages
    final = FINAL.fullmatch(messages[0])
    assert final and int(final[1]) == NUM_EXAMPLES, messages


def test_a_wrong_total_shows_in_the_final_line(tiny, caplog):
    model, _, batches = tiny
    with caplog.at_level(logging.INFO, logger="absl"):
        predict_with_progress(model, batches, "tiny", NUM_EXAMPLES + 2, interval_s=3600)
    final = _final_lines(_messages(caplog))
    assert len(final) == 1 and final[0]
    assert (int(final[0][1]), int(final[0][2])) == (NUM_EXAMPLES, NUM_EXAMPLES + 2)


def test_rate_and_time_left_follow_the_clock(caplog):
    now = [100.0]
    progress = PredictProgress("dev", 1000, "windows", interval_s=30, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="absl"):
        progress.on_predict_begin()
        now[0] += 10  # before the interval: counted, not logged
        progress.on_predict_batch_end(0, {"start_logits": np.zeros((100, 8))})
        now[0] += 30
        progress.on_predict_batch_end(1, {"start_logits": np.zeros((100, 8))})
        now[0] += 10
        progress.on_predict_batch_end(2, {"start_logits": np.zeros((100, 8))})
        now[0] += 50
        progress.on_predict_end()
    # 200 windows in 40 s: 5 per second, 800 left: 160 s.
    assert _messages(caplog) == [
        "Predicting dev: 200/1,000 windows (20%), 5.0 windows/s, ~2.7 min left",
        "Predicted dev: 300 of 1,000 windows in 1.7 min (3.0 windows/s)",
    ]


def test_without_a_total_lines_count_only(caplog):
    now = [0.0]
    progress = PredictProgress("test", None, interval_s=0, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="absl"):
        progress.on_predict_begin()
        now[0] += 2
        progress.on_predict_batch_end(0, {"logits": np.zeros((8, 2))})
        progress.on_predict_end()
    assert _messages(caplog) == [
        "Predicting test: 8 examples, 4.0 examples/s",
        "Predicted test: 8 examples in 2.0 s (4.0 examples/s)",
    ]


def test_outputs_turned_into_numbers_count_one_example(caplog):
    progress = PredictProgress("test", 4, interval_s=3600)
    with caplog.at_level(logging.INFO, logger="absl"):
        progress.on_predict_begin()
        progress.on_predict_batch_end(0, {"logits": np.zeros((3, 2)), "score": 0.5})
        progress.on_predict_batch_end(1, {"score": 0.5})
        progress.on_predict_end()
    assert progress.done == 4
    assert _messages(caplog)[-1].startswith("Predicted test: 4 examples in ")


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="interval_s"):
        PredictProgress("dev", 10, interval_s=-1)
    with pytest.raises(ValueError, match="total"):
        PredictProgress("dev", -1)
