"""pipelines/_distribution_flags.py: the strategy the shared flags ask for, and the one-line errors
when the TPU they name cannot be had (no TPU here: only the refusals are testable)."""

import pytest
from absl import flags

from pipelines import _distribution_flags


def _flags(*argv: str, with_tpu_flag: bool = False) -> flags.FlagValues:
    values = flags.FlagValues()
    _distribution_flags.define_tpu_and_distribution_flags(values)
    if with_tpu_flag:  # as pretrain.py defines it beside the original ones
        flags.DEFINE_string("tpu", None, "TPU to train on.", flag_values=values)
    values(["prog", *argv])
    return values


def test_auto_without_tpu_or_cluster_is_one_device(monkeypatch):
    import tensorflow as tf

    monkeypatch.delenv("TF_CONFIG", raising=False)
    strategy = _distribution_flags.strategy_from_flags(_flags())
    assert strategy.num_replicas_in_sync == 1
    assert not isinstance(strategy, tf.distribute.TPUStrategy)


def test_use_tpu_without_an_address_names_the_flags_to_give(monkeypatch):
    from albert_tf.training.distribution import TPUUnavailableError

    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(TPUUnavailableError, match="--tpu"):
        _distribution_flags.strategy_from_flags(_flags("--use_tpu"))


@pytest.mark.parametrize(
    "argv, with_tpu_flag",
    [
        (("--tpu=grpc://127.0.0.1:9",), True),  # pretrain.py's own flag
        (("--tpu_name=grpc://127.0.0.1:9",), False),
        (("--master=grpc://127.0.0.1:9",), False),
    ],
)
def test_the_tpu_address_comes_from_any_of_its_flags(argv, with_tpu_flag, monkeypatch):
    from albert_tf.training.distribution import TPUUnavailableError

    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(TPUUnavailableError, match=r"grpc://127\.0\.0\.1:9"):
        _distribution_flags.strategy_from_flags(_flags(*argv, with_tpu_flag=with_tpu_flag))


def test_a_tf_config_that_is_not_json_is_a_usage_error(monkeypatch):
    from absl import app

    monkeypatch.setenv("TF_CONFIG", "{not json")
    with pytest.raises(app.UsageError, match="TF_CONFIG"):
        _distribution_flags.strategy_from_flags(_flags())
