"""Per-row arithmetic on the flat values of ragged tensors, for the in-graph SQuAD offsets.

A batch of contexts is held as flat values plus row splits; these helpers compute running sums,
searches and the original's `convert_index` row by row without leaving the flat form.
"""

from __future__ import annotations

import tensorflow as tf


def row_ids(row_splits: tf.Tensor) -> tf.Tensor:
    """The row of each flat value of a ragged tensor with `row_splits`."""
    return tf.repeat(
        tf.range(tf.size(row_splits) - 1, dtype=tf.int64), row_splits[1:] - row_splits[:-1]
    )


def row_cumsum(values: tf.Tensor, row_splits: tf.Tensor, exclusive: bool) -> tf.Tensor:
    """Cumulative sum of flat `values` restarting at every row of `row_splits`."""
    total = tf.concat([tf.zeros([1], values.dtype), tf.cumsum(values)], axis=0)
    base = tf.gather(total, row_splits[:-1])
    running = tf.gather(total, tf.range(tf.size(values, out_type=tf.int64)))
    cumulative = running - tf.gather(base, row_ids(row_splits))
    return cumulative if exclusive else cumulative + values


def row_totals(values: tf.Tensor, row_splits: tf.Tensor) -> tf.Tensor:
    """Sum of flat `values` per row of `row_splits`."""
    total = tf.concat([tf.zeros([1], values.dtype), tf.cumsum(values)], axis=0)
    return tf.gather(total, row_splits[1:]) - tf.gather(total, row_splits[:-1])


def first_at_or_after(valid: tf.Tensor, low: tf.Tensor, high: tf.Tensor) -> tf.Tensor:
    """Per (low, high) pair of flat indices, the first index in [low, high] where `valid`, or -1."""
    positions = tf.concat([tf.where(valid)[:, 0], [-1]], 0)
    before = tf.concat([[0], tf.cumsum(tf.cast(valid, tf.int64))], 0)
    found = tf.gather(
        positions, tf.gather(before, tf.clip_by_value(low, 0, tf.size(valid, tf.int64)))
    )
    return tf.where((found >= low) & (found <= high), found, -1)


def last_at_or_before(valid: tf.Tensor, low: tf.Tensor, high: tf.Tensor) -> tf.Tensor:
    """Per (low, high) pair of flat indices, the last index in [low, high] where `valid`, or -1."""
    positions = tf.concat([[-1], tf.where(valid)[:, 0]], 0)
    through = tf.cumsum(tf.cast(valid, tf.int64))
    found = tf.gather(
        positions,
        tf.gather(
            tf.concat([[0], through], 0), tf.clip_by_value(high + 1, 0, tf.size(valid, tf.int64))
        ),
    )
    return tf.where((found >= low) & (found <= high), found, -1)


def convert_index(
    values: tf.Tensor,
    splits: tf.Tensor,
    queries: tf.Tensor,
    query_rows: tf.Tensor,
    num_targets: tf.Tensor,
    is_start: bool,
) -> tf.Tensor:
    """The original's `convert_index` at flat positions `queries` (rows `query_rows`) of the flat
    per-row alignment `values` (-1 for unmatched), `num_targets` [rows] its target lengths."""
    matched = values >= 0
    # A trailing -1 keeps the gathers in range when a row has no match at all.
    matched_values = tf.concat([tf.boolean_mask(values, matched), [-1]], 0)
    matched_count = row_cumsum(tf.cast(matched, tf.int64), splits, exclusive=False)
    row_matched = row_totals(tf.cast(matched, tf.int64), splits)
    row_first = tf.concat([[0], tf.cumsum(row_matched)], axis=0)[:-1]
    count_at = tf.gather(matched_count, queries)
    here = tf.gather(values, queries)
    start_of_row = tf.gather(row_first, query_rows)
    has_before = count_at > 0
    before = tf.where(
        has_before, tf.gather(matched_values, tf.maximum(start_of_row + count_at - 1, 0)), -1
    )
    count_before = count_at - tf.cast(here >= 0, tf.int64)
    has_after = count_before < tf.gather(row_matched, query_rows)
    after = tf.where(
        has_after,
        tf.gather(
            matched_values,
            tf.minimum(start_of_row + count_before, tf.size(matched_values, tf.int64) - 1),
        ),
        -1,
    )
    n = tf.cast(tf.gather(num_targets, query_rows), values.dtype)
    if is_start:
        only_after = tf.where(after >= 1, tf.zeros_like(after), after)
        only_before = tf.where(before < n - 1, before + 1, before)
        both = tf.where(after > before + 1, before + 1, after)
    else:
        only_after = tf.where(after >= 1, after - 1, after)
        only_before = tf.where(before < n - 1, n - 1, before)
        both = tf.where(after > before + 1, after - 1, before)
    resolved = tf.where(~has_before, only_after, tf.where(~has_after, only_before, both))
    return tf.where(here >= 0, here, resolved)
