"""GLUE examples as model inputs: packed as the original `convert_single_example`, then batched.

Examples are stored without padding; batches are padded to their longest example
(`dynamic_padding`, the default) or to `max_seq_length` as the original. Padded keys get -10000
before the attention softmax, where exp underflows to exactly 0, so both give the same outputs up
to float rounding; dynamic padding is several times faster on short texts such as SST-2.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf

from albert_tf.tasks.glue import processors as glue
from albert_tf.text.tokenization import AlbertTokenizer


@dataclasses.dataclass
class EncodedSplit:
    """Packed examples without their padding: `[CLS] A [SEP] (B [SEP])` ids, flat."""

    token_ids: np.ndarray  # int32, all examples concatenated
    lengths: np.ndarray  # real tokens per example
    segment_a_lengths: np.ndarray  # tokens with segment id 0 ([CLS] A [SEP])
    label_ids: np.ndarray  # int32 class ids, float32 scores (STS-B), zeros when unlabelled
    guids: list[str]


def encode_split(
    split: glue.GlueSplit, task: glue.GlueTask, tokenizer: AlbertTokenizer, max_seq_length: int
) -> EncodedSplit:
    """Tokenizes and packs examples exactly as the original `convert_single_example`."""
    examples = split.examples
    ids_a = tokenizer.encode_batch([e.text_a for e in examples])
    with_b = [i for i, e in enumerate(examples) if e.text_b]  # the original: `if text_b:`
    ids_b = dict(zip(with_b, tokenizer.encode_batch([examples[i].text_b for i in with_b])))
    chunks, lengths, segment_a = [], [], []
    for i, ids in enumerate(ids_a):
        packed = tokenizer.pack(ids, ids_b.get(i) or None, max_seq_length)  # `if tokens_b:`
        length = sum(packed.input_mask)
        chunks.append(packed.input_ids[:length])
        lengths.append(length)
        segment_a.append(length - sum(packed.segment_ids))
    if task.is_regression:
        labels = np.array([0.0 if e.label is None else e.label for e in examples], np.float32)
    else:
        index = {label: i for i, label in enumerate(task.labels)}
        labels = np.array([0 if e.label is None else index[e.label] for e in examples], np.int32)
    flat = np.fromiter((t for c in chunks for t in c), np.int32, count=sum(lengths))
    return EncodedSplit(
        flat,
        np.array(lengths, np.int64),
        np.array(segment_a, np.int32),
        labels,
        [e.guid for e in examples],
    )


def make_dataset(
    encoded: EncodedSplit,
    batch_size: int,
    max_seq_length: int,
    training: bool,
    seed: int = 0,
    dynamic_padding: bool = True,
) -> tf.data.Dataset:
    """Batches of (features `input_ids, input_mask, segment_ids`, `label_ids`), as `fit` and
    `predict` take them.

    Training: shuffled (seeded, reshuffled each pass), repeated, remainder dropped (as the
    original). Otherwise in file order with a smaller last batch.
    """
    ids = tf.RaggedTensor.from_row_lengths(encoded.token_ids, encoded.lengths)
    dataset = tf.data.Dataset.from_tensor_slices(
        {"ids": ids, "segment_a": encoded.segment_a_lengths, "label_ids": encoded.label_ids}
    )
    if training:
        dataset = dataset.shuffle(
            len(encoded.lengths), seed=seed, reshuffle_each_iteration=True
        ).repeat()

    def unpack(row):
        length = tf.shape(row["ids"])[0]
        segment_ids = tf.concat(
            [
                tf.zeros([row["segment_a"]], tf.int32),
                tf.ones([length - row["segment_a"]], tf.int32),
            ],
            0,
        )
        features = {
            "input_ids": row["ids"],
            "input_mask": tf.ones([length], tf.int32),
            "segment_ids": segment_ids,
        }
        return features, row["label_ids"]

    width = None if dynamic_padding else max_seq_length
    shapes = ({"input_ids": [width], "input_mask": [width], "segment_ids": [width]}, [])
    dataset = dataset.map(unpack, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.padded_batch(batch_size, padded_shapes=shapes, drop_remainder=training).prefetch(
        tf.data.AUTOTUNE
    )
