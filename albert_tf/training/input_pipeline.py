"""tf.data input for pretraining from TFRecords in the original ALBERT schema.

The schema is the one `create_pretraining_data.py` writes, as `albert_tf.records`
states it; the pipeline follows the original `input_fn_builder`: training repeats and
shuffles the file list, interleaves files in parallel, shuffles records and batches with
`drop_remainder=True` (static shapes for TPU/XLA); evaluation reads files in order,
deterministically. Records are parsed after batching (one vectorised `parse_example` per batch)
and every int64 feature is cast to int32, as the original does for TPUs.

Records of unmasked instances (`UNMASKED_FEATURE_NAMES`) are masked as they are read
(`masking="dynamic"`, `DynamicMasker`): every example gets the stateless seed of its place in this
input pipeline's stream, so a run's masks follow from its seed, change every epoch, differ between
input pipelines, and continue where they stopped when a run resumes.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Sequence

import tensorflow as tf
from absl import logging

from albert_tf.io import expand_patterns
from albert_tf.records import (
    MASKING_MODES,
    FEATURE_NAMES,
    FLOAT_FEATURES,
    PRED_FEATURES,
    UNMASKED_FEATURE_NAMES,
    feature_lengths,
)
from albert_tf.text.ngrams import ngram_cumulative
from albert_tf.training.dynamic_masking import DynamicMasker, element_seed

ORIGINAL_SHUFFLE_BUFFER = 100
ORIGINAL_CYCLE_LENGTH = 4
# Evaluation masks unmasked records from this seed when none is given: the same masks every time.
EVAL_MASKING_SEED = 0


@dataclasses.dataclass(frozen=True)
class DynamicMasking:
    """How `masking="dynamic"` masks unmasked records; the masked-LM settings keep the names and
    defaults of the original `create_pretraining_data.py` flags (max_predictions_per_seq is the
    pipeline's own argument).

    Args:
      vocab_size: the model's vocabulary size (`AlbertConfig.vocab_size`); random replacements are
        uniform over it.
      masked_lm_prob: share of the real tokens to predict (at least 1, at most
        max_predictions_per_seq).
      ngram: longest n-gram masked, in words.
      favor_shorter_ngram: p(n) ∝ 1/n; otherwise reversed.
      do_whole_word_mask: mask all pieces of a word together (words open at `token_boundary`).
      cls_id, sep_id, mask_id: special ids; the defaults are the ALBERT SentencePiece vocab's.
      jit_compile: XLA-compile the masking (faster; gives other masks than without it).
    """

    vocab_size: int
    masked_lm_prob: float = 0.15
    ngram: int = 3
    favor_shorter_ngram: bool = True
    do_whole_word_mask: bool = True
    cls_id: int = 2
    sep_id: int = 3
    mask_id: int = 4
    jit_compile: bool = False

    def masker(self, max_predictions_per_seq: int) -> DynamicMasker:
        """The masker of these settings at `max_predictions_per_seq` predictions per example."""
        settings = _MaskerSettings(
            self.masked_lm_prob,
            max_predictions_per_seq,
            self.ngram,
            self.favor_shorter_ngram,
            self.do_whole_word_mask,
        )
        return DynamicMasker(
            settings,
            self.vocab_size,
            self.cls_id,
            self.sep_id,
            self.mask_id,
            jit_compile=self.jit_compile,
        )


@dataclasses.dataclass(frozen=True)
class _MaskerSettings:
    """`dynamic_masking.MaskingSettings` (data prep's `MaskingConfig` fields, which this layer
    cannot import)."""

    masked_lm_prob: float
    max_predictions_per_seq: int
    ngram: int
    favor_shorter_ngram: bool
    do_whole_word_mask: bool
    do_permutation: bool = False

    def ngram_cumulative(self) -> list[float]:
        """Data prep's n-gram thresholds (`albert_tf.text.ngrams`)."""
        return ngram_cumulative(self.ngram, self.favor_shorter_ngram)


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


def record_masking(path: str) -> str | None:
    """How the records of `path` are to be read, from its first record: "static" if it is masked
    (holds `masked_lm_positions`), "dynamic" if not, None if the file holds no record. An
    unreadable first record raises ValueError naming the file."""
    try:
        first = next(iter(tf.data.TFRecordDataset(path).take(1)), None)
        if first is None:
            return None
        features = tf.train.Example.FromString(first.numpy()).features.feature
    except (tf.errors.OpError, ValueError) as error:  # protobuf's DecodeError is a ValueError
        message = getattr(error, "message", None) or str(error)
        raise ValueError(
            f"{path}: cannot read the first record to tell masked from unmasked records: "
            f"{message.strip().splitlines()[0]}"
        ) from error
    return "static" if "masked_lm_positions" in features else "dynamic"


def detect_masking(files: Sequence[str]) -> str:
    """The masking of the records in `files`, from the first record of the first file holding
    any (see `record_masking`)."""
    for path in files:
        masking = record_masking(path)
        if masking is not None:
            logging.info(
                "%s holds %s records: masking %s",
                path,
                "masked" if masking == "static" else "unmasked",
                masking,
            )
            return masking
    raise ValueError(f"no record in {', '.join(files)}: cannot tell masked from unmasked records")


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
    masking: str = "auto",
    dynamic_masking: DynamicMasking | None = None,
    start_index: int = 0,
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

    `masking`: "static" reads masked records as they are; "dynamic" reads unmasked records
    (`UNMASKED_FEATURE_NAMES`) and masks every example with `dynamic_masking` before batching,
    into the same features, shapes and dtypes; "auto" takes the one the first record of the first
    file needs (`detect_masking`). Example k of this input pipeline's stream (counted across
    epochs, from `start_index`: the examples it gave before a resume) is masked with
    `element_seed(base, k)`, `base` the seed with the pipeline id folded in. The seed is `seed`;
    without one, training draws a random one (logged) and evaluation uses `EVAL_MASKING_SEED`.
    """
    if batch_size <= 0:
        raise ValueError(f"batch_size must be > 0, got {batch_size}")
    if masking not in MASKING_MODES:
        raise ValueError(f"masking must be one of {MASKING_MODES}, got {masking!r}")
    spec = feature_spec(max_seq_length, max_predictions_per_seq)
    files = list_input_files(input_patterns)
    if masking == "auto":
        masking = detect_masking(files)
    if masking == "dynamic":
        if dynamic_masking is None:
            raise ValueError(
                f"unmasked records ({files[0]}) are masked as they are read: give "
                f"dynamic_masking=DynamicMasking(vocab_size=...)"
            )
        spec = feature_spec(max_seq_length, names=UNMASKED_FEATURE_NAMES)
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
    if masking == "dynamic":
        masker = dynamic_masking.masker(max_predictions_per_seq)
        base = _masking_base_seed(seed, is_training, pipeline_id)
        # Masked one by one (the masker's loop is per example) after the vectorised parse. The
        # index is attached before the parallel map: masks do not depend on its parallelism.
        examples = batches.unbatch().enumerate(start=start_index)
        examples = examples.map(
            lambda index, example: _in_static_order(masker(example, element_seed(base, index))),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=deterministic,
        )
        batches = examples.batch(batch_size, drop_remainder=True)
    return batches.prefetch(tf.data.AUTOTUNE)


def _masking_base_seed(seed: int | None, is_training: bool, pipeline_id: int) -> tf.Tensor:
    """The [2] seed the masks of input pipeline `pipeline_id` are drawn from."""
    if seed is None and is_training:
        seed = random.SystemRandom().randrange(1 << 63)
        logging.info(
            "Input pipeline %d masks from random seed %d (a seed makes masks reproducible).",
            pipeline_id,
            seed,
        )
    elif seed is None:
        seed = EVAL_MASKING_SEED
    # Pipelines share `seed` and element indices: the fold-in keeps their masks apart.
    return tf.random.experimental.stateless_fold_in(
        tf.constant([seed, 0], tf.int64), tf.constant(pipeline_id, tf.int64)
    )


def _in_static_order(features: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    # The dict static records give, key for key (`parse_example` sorts the names).
    return {name: features[name] for name in sorted(FEATURE_NAMES)}


def pretraining_dataset_fn(
    input_patterns: str | Sequence[str],
    max_seq_length: int,
    max_predictions_per_seq: int,
    global_batch_size: int,
    is_training: bool,
    start_step: int = 0,
    masking: str = "auto",
    **kwargs,
) -> Callable[[tf.distribute.InputContext], tf.data.Dataset]:
    """A `dataset_fn` for `strategy.distribute_datasets_from_function`: each call builds this
    input pipeline's shard at the per-replica batch size. `kwargs` go to `pretraining_dataset`.

    `start_step`: batches of `global_batch_size` the run already took (optimizer steps x gradient
    accumulation steps after a resume); each pipeline's mask counter starts after its share of
    them. "auto" `masking` is resolved here, once for all pipelines.
    """
    if masking == "auto":
        masking = detect_masking(list_input_files(input_patterns))

    def dataset_fn(input_context: tf.distribute.InputContext) -> tf.data.Dataset:
        batch_size = per_replica_batch_size(global_batch_size, input_context)
        # Each step takes one batch for every replica this pipeline feeds.
        replicas_fed = input_context.num_replicas_in_sync // input_context.num_input_pipelines
        return pretraining_dataset(
            input_patterns,
            max_seq_length,
            max_predictions_per_seq,
            batch_size=batch_size,
            is_training=is_training,
            input_context=input_context,
            masking=masking,
            start_index=start_step * batch_size * max(replicas_fed, 1),
            **kwargs,
        )

    return dataset_fn
