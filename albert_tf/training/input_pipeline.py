"""tf.data input for pretraining from TFRecords in the original ALBERT schema.

The schema is the one `create_pretraining_data.py` writes, as `albert_tf.records`
states it; the pipeline follows the original `input_fn_builder`: training repeats and
shuffles the file list, interleaves files in parallel, shuffles records and batches with
`drop_remainder=True` (static shapes for TPU/XLA); evaluation reads files in order,
deterministically. Records are parsed after batching (one vectorised `parse_example` per batch)
and every int64 feature is cast to int32, as the original does for TPUs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import tensorflow as tf
from absl import logging

from albert_tf.io import expand_patterns
from albert_tf.records import FEATURE_NAMES, FLOAT_FEATURES, PRED_FEATURES, feature_lengths

ORIGINAL_SHUFFLE_BUFFER = 100
ORIGINAL_CYCLE_LENGTH = 4


def feature_spec(
    max_seq_length: int,
    max_predictions_per_seq: int | None = None,
    names: Sequence[str] = FEATURE_NAMES,
) -> dict[str, tf.io.FixedLenFeature]:
    """The tf.io spec of features `names` of an original pretraining record: by default all 8, in
    the order the original writes them; lengths and dtypes from the schema (`albert_tf.records`).

    `max_predictions_per_seq` is P of the records (doubled by the original's `do_permutation`),
    needed only for the masked-LM features. `next_sentence_labels` holds the sentence-order label
    (the name is the original's).
    """
    needs_predictions = any(name in PRED_FEATURES for name in names)
    if max_seq_length <= 0 or (needs_predictions and (max_predictions_per_seq or 0) <= 0):
        raise ValueError(
            f"max_seq_length and max_predictions_per_seq must be > 0, got {max_seq_length} and "
            f"{max_predictions_per_seq}"
        )
    lengths = feature_lengths(max_seq_length, max_predictions_per_seq, names)
    return {
        name: tf.io.FixedLenFeature([length], tf.float32 if name in FLOAT_FEATURES else tf.int64)
        for name, length in lengths.items()
    }


def parse_examples(serialized, spec, example_names=None) -> dict[str, tf.Tensor]:
    """Parses a batch of serialized records; int64 -> int32. A malformed record raises
    InvalidArgumentError whose message carries its entry of `example_names` and the feature."""
    features = tf.io.parse_example(serialized, spec, example_names=example_names)
    return {
        name: tf.cast(value, tf.int32) if value.dtype == tf.int64 else value
        for name, value in features.items()
    }


def list_input_files(input_patterns: str | Sequence[str]) -> list[str]:
    """Files of comma-separated globs (`gs://` too), each glob's matches sorted, a file named
    twice read once; a pattern matching nothing is an error (`albert_tf.io.expand_patterns`)."""
    return expand_patterns(input_patterns, glob=tf.io.gfile.glob)


def per_replica_batch_size(
    global_batch_size: int, input_context: tf.distribute.InputContext | None = None
) -> int:
    """The batch size each replica's dataset must produce under
    `strategy.distribute_datasets_from_function` (global batch / replicas in sync)."""
    if input_context is None:
        return global_batch_size
    replicas = input_context.num_replicas_in_sync
    if global_batch_size % replicas:
        raise ValueError(
            f"Global batch size {global_batch_size} is not divisible by the {replicas} replicas "
            f"in sync."
        )
    return global_batch_size // replicas


def _read_file_fn(shard: tuple[int, int] | None):
    """Returns fn(file_index, path) -> dataset of (file_index, record_index, serialized)."""

    def read(file_index, path):
        records = tf.data.TFRecordDataset(path).enumerate()
        if shard is not None:
            # Sharding inside each file keeps the split deterministic whatever the file order.
            records = records.shard(*shard)
        return records.map(lambda index, record: (file_index, index, record))

    return read


def pretraining_dataset(
    input_patterns: str | Sequence[str],
    max_seq_length: int,
    max_predictions_per_seq: int,
    batch_size: int,
    is_training: bool,
    input_context: tf.distribute.InputContext | None = None,
    seed: int | None = None,
    shuffle_buffer: int = ORIGINAL_SHUFFLE_BUFFER,
    cycle_length: int = ORIGINAL_CYCLE_LENGTH,
    repeat: bool | None = None,
) -> tf.data.Dataset:
    """Batches of pretraining features as dicts of `FEATURE_NAMES` -> [batch_size, ...] tensors.

    `batch_size` is this dataset's batch (per replica under `distribute_datasets_from_function`;
    see `per_replica_batch_size`). Labels stay in the dict (`masked_lm_ids`, `masked_lm_weights`,
    `next_sentence_labels`). With `input_context`, files are split across input pipelines; when
    there are fewer files than pipelines every pipeline reads all files and keeps every n-th
    record instead. Training repeats forever (unless `repeat=False`) and shuffles files and
    records (buffer `shuffle_buffer`, the original's 100); with `seed` the order is reproducible,
    without it interleaving is non-deterministic (faster, the original's `sloppy=True`).
    Evaluation reads files and records in order and does not repeat unless `repeat=True`.
    """
    if batch_size <= 0:
        raise ValueError(f"batch_size must be > 0, got {batch_size}")
    spec = feature_spec(max_seq_length, max_predictions_per_seq)
    files = list_input_files(input_patterns)
    num_pipelines = input_context.num_input_pipelines if input_context else 1
    pipeline_id = input_context.input_pipeline_id if input_context else 0
    record_shard = None
    if num_pipelines > 1 and len(files) >= num_pipelines:
        file_indices = list(range(pipeline_id, len(files), num_pipelines))
    else:
        file_indices = list(range(len(files)))
        if num_pipelines > 1:
            logging.warning(
                "%d input files for %d input pipelines: each pipeline reads all files and keeps "
                "every %d-th record; write at least %d files to shard by file.",
                len(files),
                num_pipelines,
                num_pipelines,
                num_pipelines,
            )
            record_shard = (num_pipelines, pipeline_id)
    logging.info(
        "Input pipeline %d/%d: %d of %d files (%s), batch %d.",
        pipeline_id + 1,
        num_pipelines,
        len(file_indices),
        len(files),
        "training" if is_training else "eval",
        batch_size,
    )
    if repeat is None:
        repeat = is_training

    deterministic = not is_training or seed is not None
    file_list = tf.data.Dataset.from_tensor_slices(
        (tf.constant(file_indices, tf.int64), tf.constant([files[i] for i in file_indices]))
    )
    read = _read_file_fn(record_shard)
    if is_training:
        if repeat:
            file_list = file_list.repeat()
        file_list = file_list.shuffle(len(file_indices), seed=seed)
        records = file_list.interleave(
            read,
            cycle_length=min(cycle_length, len(file_indices)),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=deterministic,
        )
        records = records.shuffle(shuffle_buffer, seed=seed)
    else:
        records = file_list.flat_map(read)
        if repeat:
            records = records.repeat()

    all_files = tf.constant(files)

    def parse(file_index, record_index, serialized):
        names = tf.strings.join(
            [tf.gather(all_files, file_index), " (record ", tf.strings.as_string(record_index), ")"]
        )
        return parse_examples(serialized, spec, example_names=names)

    batches = records.batch(batch_size, drop_remainder=True)
    batches = batches.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
    return batches.prefetch(tf.data.AUTOTUNE)


def pretraining_dataset_fn(
    input_patterns: str | Sequence[str],
    max_seq_length: int,
    max_predictions_per_seq: int,
    global_batch_size: int,
    is_training: bool,
    **kwargs,
) -> Callable[[tf.distribute.InputContext], tf.data.Dataset]:
    """A `dataset_fn` for `strategy.distribute_datasets_from_function`: each call builds this
    input pipeline's shard at the per-replica batch size. `kwargs` go to `pretraining_dataset`."""

    def dataset_fn(input_context: tf.distribute.InputContext) -> tf.data.Dataset:
        return pretraining_dataset(
            input_patterns,
            max_seq_length,
            max_predictions_per_seq,
            batch_size=per_replica_batch_size(global_batch_size, input_context),
            is_training=is_training,
            input_context=input_context,
            **kwargs,
        )

    return dataset_fn
