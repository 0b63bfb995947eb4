"""In-graph SQuAD windows: `[CLS] query [SEP] doc window [SEP]`, as `convert_examples_to_features`.

For a context of m doc pieces and a query of q pieces (cut to `max_query_length`), a window holds
up to `max_tokens_for_doc = max_seq_length - q - 3` pieces and the windows start every
`min(max_tokens_for_doc, doc_stride)` pieces (the original advances by `min(length, doc_stride)`,
and every window but the last is full), the last one being the first that reaches the end. A doc
piece is at its max context in the window where `min(left, right) + 0.01 * length` is largest,
the first such window on ties (computed in float64, as Python's floats).
"""

from __future__ import annotations

import tensorflow as tf


def _ceil_div(a: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
    return -(-a // b)


def build_windows(
    query_ids: tf.RaggedTensor,
    doc_ids: tf.RaggedTensor,
    has_doc: tf.Tensor,
    max_seq_length: int,
    doc_stride: int,
    cls_id: int,
    sep_id: int,
) -> dict[str, tf.Tensor]:
    """Every window of every question, in question order then window order.

    Args:
        query_ids: int32 ragged [B, (q)], already cut to `max_query_length`.
        doc_ids: int32 ragged [B, (m)], the context's pieces.
        has_doc: bool [B]; False: the question gets no window (the Python path skips it).
        max_seq_length, doc_stride: the original's flags.
        cls_id, sep_id: the [CLS] and [SEP] ids.

    Returns:
        `input_ids`, `input_mask`, `segment_ids`, `p_mask` int32 [W, max_seq_length];
        `example` (its question), `doc_start` (its first doc piece in the context's pieces),
        `doc_length`, `doc_offset` (position of its first doc piece) int64 [W]; `max_context`
        bool [W, max_seq_length] (`token_is_max_context`, False outside the doc).
    """
    query_ids = query_ids.with_row_splits_dtype(tf.int64)
    doc_ids = doc_ids.with_row_splits_dtype(tf.int64)
    query_length = query_ids.row_lengths()
    num_pieces = doc_ids.row_lengths()
    max_doc = max_seq_length - query_length - 3
    step = tf.minimum(max_doc, doc_stride)
    count = 1 + _ceil_div(tf.maximum(num_pieces - max_doc, 0), step)
    count = tf.where(has_doc & (num_pieces > 0), count, tf.zeros_like(count))
    windows = tf.ragged.range(count)
    example = windows.value_rowids()
    index_in_example = windows.flat_values
    doc_start = index_in_example * tf.gather(step, example)
    doc_length = tf.minimum(tf.gather(num_pieces, example) - doc_start, tf.gather(max_doc, example))
    doc_offset = tf.gather(query_length, example) + 2

    doc_positions = tf.ragged.range(doc_start, doc_start + doc_length)
    doc_piece = tf.gather(doc_ids.row_splits, example)
    doc_piece = doc_positions + tf.expand_dims(doc_piece, 1)  # flat index into doc_ids' values
    window_doc_ids = doc_piece.with_flat_values(
        tf.gather(doc_ids.flat_values, doc_piece.flat_values)
    )
    window_query = tf.gather(query_ids, example)
    num_windows = tf.size(example, out_type=tf.int64)

    def column(value):
        return tf.RaggedTensor.from_row_lengths(
            tf.fill([num_windows], tf.constant(value, tf.int32)), tf.ones([num_windows], tf.int64)
        )

    ids = tf.concat(
        [column(cls_id), window_query, column(sep_id), window_doc_ids, column(sep_id)], 1
    )
    length = ids.row_lengths()
    shape = [num_windows, max_seq_length]
    positions = tf.range(max_seq_length, dtype=tf.int64)[tf.newaxis, :]
    real = positions < length[:, tf.newaxis]
    doc_begin = doc_offset[:, tf.newaxis]
    in_doc = (positions >= doc_begin) & (positions < doc_begin + doc_length[:, tf.newaxis])
    segment = (positions >= doc_begin) & real
    p_mask = ~(in_doc | tf.equal(positions, 0))

    # Max context: score every (window, doc piece) pair, keep the first best window per piece.
    offset_in_window = doc_positions.flat_values - tf.repeat(doc_start, doc_length)
    window_of_pair = tf.repeat(tf.range(num_windows), doc_length)
    left = offset_in_window
    right = tf.repeat(doc_length, doc_length) - 1 - offset_in_window
    score = tf.cast(tf.minimum(left, right), tf.float64) + 0.01 * tf.cast(
        tf.repeat(doc_length, doc_length), tf.float64
    )
    piece = doc_piece.flat_values
    num_doc_pieces = tf.size(doc_ids.flat_values, out_type=tf.int64)
    best = tf.math.unsorted_segment_max(score, piece, num_doc_pieces)
    is_best = tf.equal(score, tf.gather(best, piece))
    first_best = tf.math.unsorted_segment_min(
        tf.where(is_best, window_of_pair, num_windows), piece, num_doc_pieces
    )
    is_max = tf.equal(tf.gather(first_best, piece), window_of_pair)
    max_context = tf.scatter_nd(
        tf.stack([window_of_pair, tf.repeat(doc_offset, doc_length) + offset_in_window], 1),
        is_max,
        shape,
    )
    return {
        "input_ids": ids.to_tensor(0, shape=shape),
        "input_mask": tf.cast(real, tf.int32),
        "segment_ids": tf.cast(segment, tf.int32),
        "p_mask": tf.cast(p_mask, tf.int32),
        "example": example,
        "doc_start": doc_start,
        "doc_length": doc_length,
        "doc_offset": doc_offset,
        "max_context": max_context,
    }
