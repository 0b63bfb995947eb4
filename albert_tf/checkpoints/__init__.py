"""Checkpoints stage: original TF1 checkpoints in and out by variable name; keras-hub conversion."""

from albert_tf.checkpoints.task_heads import (
    assign_task_weights,
    initialize_task_model,
    load_task_checkpoint,
)
from albert_tf.checkpoints.tf1 import (
    TF1_NAME_RULES,
    CheckpointMismatchError,
    assign_tf1_checkpoint,
    assign_tf1_weights,
    check_weights,
    head_tf1_names,
    load_tf1_checkpoint,
    read_tf1_checkpoint,
    read_weights,
    rename,
    resolve_checkpoint_prefix,
    save_tf1_checkpoint,
    tf1_name,
    tf1_name_rules,
    tf1_variable_map,
    tf1_weights,
)

__all__ = [
    "TF1_NAME_RULES",
    "CheckpointMismatchError",
    "assign_task_weights",
    "assign_tf1_checkpoint",
    "assign_tf1_weights",
    "check_weights",
    "head_tf1_names",
    "initialize_task_model",
    "load_task_checkpoint",
    "load_tf1_checkpoint",
    "read_tf1_checkpoint",
    "read_weights",
    "rename",
    "resolve_checkpoint_prefix",
    "save_tf1_checkpoint",
    "tf1_name",
    "tf1_name_rules",
    "tf1_variable_map",
    "tf1_weights",
]
