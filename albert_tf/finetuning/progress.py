"""Progress lines for long `model.predict` runs (scoring a dev set, predicting a test set).

A full SQuAD dev set takes minutes on a CPU with Keras' own progress bar off; `PredictProgress`
logs how far it is at most once per `interval_s` of wall time, and one line with the total time at
the end, so a prediction that finishes within the first interval logs that line only.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import keras
import numpy as np
from absl import logging

# Wall-time seconds between two progress lines.
DEFAULT_INTERVAL_S = 30.0


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _batch_size(logs: dict | None) -> int:
    # Keras hands each batch's outputs over flattened, each passed through `float()` where that
    # works: an output left as an array gives the batch size; with a numpy that turns
    # one-element arrays into numbers, none left means a batch of one.
    for value in (logs or {}).values():
        if isinstance(value, np.ndarray) and value.ndim > 0:
            return int(value.shape[0])
    return 1


class PredictProgress(keras.callbacks.Callback):
    """Logs `model.predict`'s progress: examples done, rate and time left, then the total time.

    Args:
      what: what is predicted, as the lines name it (e.g. "squad_v1 dev").
      total: the number of examples the dataset holds; None: counts without a percentage.
      unit: what one example is called in the lines (e.g. "windows").
      interval_s: least wall time between two progress lines (0: one per batch).
      clock: seconds of wall time (monotonic).

    Example:
      progress = PredictProgress("squad_v1 dev", 12000, "windows")
      model.predict(batches, verbose=0, callbacks=[progress])
      # Predicting squad_v1 dev: 3,200/12,000 windows (26%), 41.2 windows/s, ~3.6 min left
      # Predicted squad_v1 dev: 12,000 windows in 4.9 min (41.0 windows/s)
    """

    # Not `async_safe`: Keras then calls the batch hook in order on its predict loop, so each
    # line counts the batches done so far, not whichever a worker thread reached first.

    def __init__(
        self,
        what: str,
        total: int | None,
        unit: str = "examples",
        interval_s: float = DEFAULT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        super().__init__()
        if total is not None and total < 0:
            raise ValueError(f"total must be >= 0, got {total}")
        if interval_s < 0:
            raise ValueError(f"interval_s must be >= 0, got {interval_s}")
        self.what, self.total, self.unit = what, total, unit
        self.interval_s = interval_s
        self._clock = clock
        self.done = 0
        self._start = self._last_line = clock()

    def on_predict_begin(self, logs=None):
        self.done = 0
        self._start = self._last_line = self._clock()

    def on_predict_batch_end(self, batch, logs=None):
        self.done += _batch_size(logs)
        now = self._clock()
        finished = self.total is not None and self.done >= self.total
        if finished or now - self._last_line < self.interval_s:
            return
        self._last_line = now
        logging.info("Predicting %s: %s", self.what, self._progress(now - self._start))

    def _progress(self, elapsed: float) -> str:
        rate = self.done / elapsed if elapsed > 0 else 0.0
        if self.total is None:
            return f"{self.done:,} {self.unit}, {rate:.1f} {self.unit}/s"
        line = (
            f"{self.done:,}/{self.total:,} {self.unit} ({100 * self.done // max(self.total, 1)}%), "
            f"{rate:.1f} {self.unit}/s"
        )
        if rate > 0:
            line += f", ~{_duration((self.total - self.done) / rate)} left"
        return line

    def on_predict_end(self, logs=None):
        elapsed = self._clock() - self._start
        rate = self.done / elapsed if elapsed > 0 else 0.0
        counted = f"{self.done:,}"
        if self.total is not None and self.done != self.total:
            counted += f" of {self.total:,}"  # fewer or more than the caller said: show both
        logging.info(
            "Predicted %s: %s %s in %s (%.1f %s/s)",
            self.what,
            counted,
            self.unit,
            _duration(elapsed),
            rate,
            self.unit,
        )


def predict_with_progress(
    model: keras.Model,
    dataset,
    what: str,
    total: int | None,
    unit: str = "examples",
    interval_s: float = DEFAULT_INTERVAL_S,
):
    """`model.predict(dataset)` without Keras' progress bar, logging `PredictProgress` lines.

    Example:
      outputs = predict_with_progress(model, batches, "squad_v1 dev", 12000, "windows")
    """
    progress = PredictProgress(what, total, unit, interval_s)
    return model.predict(dataset, verbose=0, callbacks=[progress])
