"""Choosing and building the tf.distribute strategy for pretraining and fine-tuning."""

from __future__ import annotations

import json
import os
import socket

import tensorflow as tf
from absl import logging

from albert_tf.settings import STRATEGIES


class TPUUnavailableError(RuntimeError):
    """No TPU could be reached with the given address."""


def build_strategy(
    kind: str = "auto",
    tpu: str | None = None,
    tpu_zone: str | None = None,
    gcp_project: str | None = None,
    multi_worker_cluster: bool = False,
) -> tf.distribute.Strategy:
    """Build a strategy by name.

    `auto`: a TPU when `tpu` is given, MultiWorkerMirrored when `multi_worker_cluster` (the caller
    saw a TF_CONFIG with several tasks), Mirrored over several GPUs, else one device.
    """
    if kind not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {kind!r}")
    if kind == "auto":
        if tpu:
            kind = "tpu"
        elif multi_worker_cluster:
            kind = "multi_worker"
        elif len(tf.config.list_logical_devices("GPU")) > 1:
            kind = "mirrored"
        else:
            kind = "one_device"
    if kind == "tpu":
        strategy = _tpu_strategy(tpu, tpu_zone, gcp_project)
    elif kind == "multi_worker":
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    elif kind == "mirrored":
        strategy = tf.distribute.MirroredStrategy()
    else:
        gpus = tf.config.list_logical_devices("GPU")
        strategy = tf.distribute.OneDeviceStrategy(gpus[0].name if gpus else "/cpu:0")
    logging.info(
        "strategy %s (%s) with %d replica(s)",
        kind,
        type(strategy).__name__,
        strategy.num_replicas_in_sync,
    )
    return strategy


def _tpu_strategy(tpu, tpu_zone, gcp_project) -> tf.distribute.TPUStrategy:
    if not tpu:
        raise TPUUnavailableError(
            "--strategy=tpu needs --tpu (or --tpu_name): a TPU name, "
            "grpc:// address, or 'local' on a TPU VM"
        )
    if tpu.startswith("grpc://"):
        _check_reachable(tpu)
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
            tpu=tpu, zone=tpu_zone, project=gcp_project
        )
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except Exception as error:  # the resolver raises many types (ValueError, RPC, HTTP errors)
        raise TPUUnavailableError(
            f"could not reach TPU {tpu!r} (zone={tpu_zone}, project={gcp_project}): "
            f"{type(error).__name__}: {error}"
        ) from error
    return tf.distribute.TPUStrategy(resolver)


def _check_reachable(address: str, timeout_seconds: float = 20.0) -> None:
    # TF retries a dead grpc:// address forever; fail fast and say so instead.
    host, _, port = address[len("grpc://") :].rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_seconds).close()
    except (OSError, ValueError) as error:
        raise TPUUnavailableError(f"could not reach TPU at {address}: {error}") from error


def tf_config_has_cluster() -> bool:
    """True when the TF_CONFIG environment variable describes a cluster of several tasks (a
    multi-worker job); raises ValueError when it is not valid JSON."""
    try:
        tf_config = json.loads(os.environ.get("TF_CONFIG") or "{}")  # set but empty: unset
    except json.JSONDecodeError as error:
        raise ValueError(f"TF_CONFIG is not valid JSON: {error}") from error
    cluster = tf_config.get("cluster") if isinstance(tf_config, dict) else None
    if not isinstance(cluster, dict):
        return False
    return sum(len(tasks) for tasks in cluster.values() if isinstance(tasks, list | dict)) > 1


def is_multi_worker(strategy: tf.distribute.Strategy | None) -> bool:
    """True for a strategy whose replicas live in several processes (MultiWorkerMirrored)."""
    return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)


def check_same_on_every_worker(strategy: tf.distribute.Strategy, value: int, what: str) -> None:
    """Raises ValueError on every worker of a multi-worker job whose workers hold different
    `value`s (nothing to check otherwise). All workers must call it: it all-reduces.

    Every worker gets the same sums (n, S = sum of values, Q = sum of squares), and the values
    are all equal exactly when n * Q == S * S, so all of them raise together rather than some
    going on to train and wait forever for the others.
    """
    if not is_multi_worker(strategy):
        return

    def replica_sums():
        v = tf.constant(float(value), tf.float64)  # exact for integers below 2**53
        context = tf.distribute.get_replica_context()
        return context.all_reduce(tf.distribute.ReduceOp.SUM, tf.stack([1.0, v, v * v]))

    sums = strategy.experimental_local_results(tf.function(lambda: strategy.run(replica_sums))())
    n, total, squares = (float(x) for x in sums[0].numpy())
    if n * squares != total * total:
        raise ValueError(
            f"the workers disagree on {what} (this one: {value}, mean over replicas: {total / n:g})"
        )


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """True on the task that writes outputs (always, unless multi-worker and not the chief)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not getattr(resolver, "task_type", None):
        return True
    if resolver.task_type == "chief":
        return True
    cluster = resolver.cluster_spec().as_dict()
    return "chief" not in cluster and resolver.task_type == "worker" and resolver.task_id == 0
