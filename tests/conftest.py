"""Shared test setup: quiet TF and fixture paths. (No test sets Keras's global dtype policy: models
take their precision as `dtype=`.)"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pathlib

import pytest
from absl import logging as absl_logging

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
ORIGINAL_CHECKPOINTS = FIXTURES / "original_checkpoints"
REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _restore_absl_verbosity():
    # The TFLite converter lowers absl's verbosity for the rest of the process; tests that read
    # logs must not depend on whether a conversion ran before them.
    verbosity = absl_logging.get_verbosity()
    yield
    absl_logging.set_verbosity(verbosity)
