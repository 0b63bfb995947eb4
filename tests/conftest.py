"""Shared test setup: quiet TF, fixture paths, and a clean Keras dtype policy for every test."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pathlib

import keras
import pytest
from absl import logging as absl_logging

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
ORIGINAL_CHECKPOINTS = FIXTURES / "original_checkpoints"
REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _restore_dtype_policy():
    policy = keras.config.dtype_policy()
    yield
    keras.config.set_dtype_policy(policy)


@pytest.fixture(autouse=True)
def _restore_absl_verbosity():
    # The TFLite converter lowers absl's verbosity for the rest of the process; tests that read
    # logs must not depend on whether a conversion ran before them.
    verbosity = absl_logging.get_verbosity()
    yield
    absl_logging.set_verbosity(verbosity)
