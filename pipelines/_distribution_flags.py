"""The distribution flags the CLIs share: the original TPU flags, `--strategy` and
`--mixed_precision`, and the tf.distribute strategy they ask for.

Defining the flags does not import TensorFlow; `strategy_from_flags` does.
"""

from __future__ import annotations

from absl import app, flags, logging

from albert_tf.settings import MIXED_PRECISIONS, STRATEGIES

# The original scripts' flags that only tuned TF1 Estimator/TPU internals: accepted, ignored.
IGNORED_ORIGINAL_FLAGS = ("iterations_per_loop", "num_tpu_cores", "use_einsum")


def define_tpu_and_distribution_flags(flag_values=flags.FLAGS) -> None:
    """The original TPU flags (`use_tpu`, `tpu_name`, `tpu_zone`, `gcp_project`, `master`,
    `num_tpu_cores`, `iterations_per_loop`) and ours: `strategy`, `mixed_precision`; each unless
    already defined (a job's settings may hold `iterations_per_loop` or `mixed_precision`)."""
    definitions = (
        (flags.DEFINE_bool, "use_tpu", False, "Train on a TPU (same as --strategy=tpu)."),
        (flags.DEFINE_string, "tpu_name", None, "TPU name or grpc:// address."),
        (flags.DEFINE_string, "tpu_zone", None, "GCE zone of the TPU."),
        (flags.DEFINE_string, "gcp_project", None, "GCP project of the TPU."),
        (flags.DEFINE_string, "master", None, "TF master address (same as --tpu_name)."),
        (
            flags.DEFINE_integer,
            "num_tpu_cores",
            8,
            "Accepted for compatibility; the TPU system decides.",
        ),
        (
            flags.DEFINE_integer,
            "iterations_per_loop",
            1000,
            "Accepted for compatibility (a TPUEstimator setting); ignored.",
        ),
    )
    for define, name, default, help_text in definitions:
        if name not in flag_values:
            define(name, default, help_text, flag_values=flag_values)
    if "strategy" not in flag_values:
        flags.DEFINE_enum(
            "strategy",
            "auto",
            list(STRATEGIES),
            "tf.distribute strategy: auto picks a TPU (--use_tpu/--tpu_name), multi_worker when "
            "TF_CONFIG names a cluster (the chief writes checkpoints, scores and predictions), "
            "mirrored over several GPUs, else one device.",
            flag_values=flag_values,
        )
    if "mixed_precision" not in flag_values:
        flags.DEFINE_enum(
            "mixed_precision",
            "none",
            list(MIXED_PRECISIONS),
            "Compute precision.",
            flag_values=flag_values,
        )


def note_ignored_flags(names=IGNORED_ORIGINAL_FLAGS, flag_values=flags.FLAGS) -> None:
    """Logs each original flag of `names` given on the command line that has no effect here."""
    for name in names:
        if name in flag_values and flag_values[name].present:
            logging.info("--%s is accepted for compatibility and has no effect here", name)


def multi_worker_cluster() -> bool:
    """Whether TF_CONFIG names a cluster of several tasks (a UsageError when it is not JSON)."""
    from albert_tf.training.distribution import tf_config_has_cluster

    try:
        return tf_config_has_cluster()
    except ValueError as error:
        raise app.UsageError(str(error)) from error


def strategy_from_flags(flag_values=flags.FLAGS):
    """The tf.distribute strategy the TPU and distribution flags ask for (imports TensorFlow):
    `auto` is a TPU with `--use_tpu`, multi-worker when TF_CONFIG names a cluster, mirrored over
    several GPUs, else one device. The TPU is `--tpu` (where a CLI defines it), `--tpu_name` or
    `--master`."""
    from albert_tf.training.distribution import build_strategy

    tpu = (flag_values["tpu"].value if "tpu" in flag_values else None) or (
        flag_values.tpu_name or flag_values.master
    )
    kind = flag_values.strategy
    if kind == "auto" and flag_values.use_tpu:
        kind = "tpu"
    return build_strategy(
        kind,
        tpu=tpu,
        tpu_zone=flag_values.tpu_zone,
        gcp_project=flag_values.gcp_project,
        multi_worker_cluster=multi_worker_cluster(),
    )
