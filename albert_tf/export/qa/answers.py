"""In-graph SQuAD answers from windows' scores, as `postprocess_v1` / `postprocess_v2` compute them.

Candidates of a window (v1: its top `n_best_size` starts x top `n_best_size` ends over all
positions, padding included; v2: the head's beam, start i with its ends i*k'..(i+1)*k'-1) are kept
when `postprocess.valid_span` would keep them: start in the doc at its max-context window, end in
the doc, not before the start, at most `max_answer_length` pieces. A question's candidates, from
all its windows in window order, are ranked by start score + end score (float64, stable, so ties
keep that order); its n-best list is the first `n_best_size` distinct texts, a text being the
context's characters from the start piece's first to the end piece's last, stripped; each entry's
probability is the softmax over the list. No candidate: the original's fallback entry. v2: the
null score is the smallest `cls_logits` over the question's windows (1e6 with none), and the
answer is "" where it is >= the threshold.

A single pass of scores is averaged over one pair, which leaves each score as it is.
"""

from __future__ import annotations

import tensorflow as tf

from albert_tf.export.qa.ragged_rows import first_at_or_after, last_at_or_before
from albert_tf.tasks.squad.postprocess_v1 import V1_FALLBACK
from albert_tf.tasks.squad.postprocess_v2 import NULL_SCORE_START, V2_FALLBACK

# Texts made per step of the n-best loop, in code points (each candidate counting for
# `CANDIDATE_CODE_POINTS` more): a few tens of MB of int32 code points, strings and keys.
TEXT_CODE_POINTS_PER_STEP = 1 << 20
CANDIDATE_CODE_POINTS = 16


def span_candidates(
    windows: dict, starts: tf.Tensor, ends: tf.Tensor, start_scores, end_scores, max_answer_length
) -> dict[str, tf.Tensor]:
    """The valid (start, end) candidates of every window, in window then column order.

    Args:
        windows: from `windows.build_windows`.
        starts, ends: int [W, C] positions in the window of each candidate's start and end.
        start_scores, end_scores: float [W, C] their scores.
        max_answer_length: longest answer in pieces.

    Returns flat [N] `example`, `piece_start`, `piece_end` (indices into the context's pieces),
    `start_score`, `end_score` (float64).
    """
    starts, ends = tf.cast(starts, tf.int64), tf.cast(ends, tf.int64)
    offset = windows["doc_offset"][:, tf.newaxis]
    length = windows["doc_length"][:, tf.newaxis]
    doc_start, doc_end = starts - offset, ends - offset
    seq_length = tf.shape(windows["max_context"], out_type=tf.int64)[1]
    at_max = tf.gather(
        windows["max_context"], tf.clip_by_value(starts, 0, seq_length - 1), batch_dims=1
    )
    valid = (
        (doc_start >= 0)
        & (doc_start < length)
        & (doc_end < length)
        & at_max
        & (starts <= ends)
        & (ends - starts + 1 <= max_answer_length)
    )
    window_start = windows["doc_start"][:, tf.newaxis]
    example = tf.broadcast_to(windows["example"][:, tf.newaxis], tf.shape(starts, tf.int64))
    return {
        "example": tf.boolean_mask(example, valid),
        "piece_start": tf.boolean_mask(window_start + doc_start, valid),
        "piece_end": tf.boolean_mask(window_start + doc_end, valid),
        "start_score": tf.boolean_mask(tf.cast(start_scores, tf.float64), valid),
        "end_score": tf.boolean_mask(tf.cast(end_scores, tf.float64), valid),
    }


def v1_candidates(windows: dict, start_logits, end_logits, n_best_size: int, max_answer_length):
    """`span_candidates` of the v1 head: top starts x top ends of each window's logits."""
    k = min(n_best_size, int(start_logits.shape[-1]))
    top_start_logits, top_starts = tf.math.top_k(start_logits, k)
    top_end_logits, top_ends = tf.math.top_k(end_logits, k)
    num_windows = tf.shape(top_starts)[0]
    starts = tf.reshape(tf.repeat(top_starts, k, axis=1), [num_windows, k * k])
    ends = tf.tile(top_ends, [1, k])
    start_scores = tf.reshape(tf.repeat(top_start_logits, k, axis=1), [num_windows, k * k])
    end_scores = tf.tile(top_end_logits, [1, k])
    return span_candidates(windows, starts, ends, start_scores, end_scores, max_answer_length)


def v2_candidates(windows: dict, beam: dict, max_answer_length):
    """`span_candidates` of the v2 head's beam: start i with ends i*k'..(i+1)*k'-1."""
    start_n_top = tf.shape(beam["start_top_index"])[1]
    end_n_top = tf.shape(beam["end_top_index"])[1] // start_n_top
    starts = tf.repeat(beam["start_top_index"], end_n_top, axis=1)
    start_scores = tf.repeat(beam["start_top_log_probs"], end_n_top, axis=1)
    return span_candidates(
        windows,
        starts,
        beam["end_top_index"],
        start_scores,
        beam["end_top_log_probs"],
        max_answer_length,
    )


def _ranked(candidates: dict) -> dict[str, tf.Tensor]:
    """The candidates grouped by question, each question's best (start + end score) first."""
    score = candidates["start_score"] + candidates["end_score"]
    by_score = tf.argsort(score, direction="DESCENDING", stable=True)
    order = tf.gather(by_score, tf.argsort(tf.gather(candidates["example"], by_score), stable=True))
    return {key: tf.gather(value, order) for key, value in candidates.items()}


def _text_spans(ranked: dict, pieces: dict) -> tuple[tf.Tensor, tf.Tensor]:
    """Each candidate's stripped text as (first code point, count) in `pieces["codes"]`' flat
    values: the context's characters from the start piece's first to the end piece's last, less
    leading and trailing whitespace (count 0 for an empty text)."""
    example = ranked["example"]
    piece_base = tf.gather(pieces["start_char"].row_splits, example)
    first = tf.gather(pieces["start_char"].flat_values, piece_base + ranked["piece_start"])
    last = tf.gather(pieces["end_char"].flat_values, piece_base + ranked["piece_end"])
    char_base = tf.gather(pieces["codes"].row_splits, example)
    low = char_base + tf.cast(first, tf.int64)
    high = char_base + tf.cast(last, tf.int64)
    kept = ~pieces["is_space"].flat_values
    text_start = first_at_or_after(kept, low, high)
    text_end = last_at_or_before(kept, low, high)
    return text_start, tf.where(text_start >= 0, text_end - text_start + 1, 0)


def nbest_lists(
    candidates: dict, pieces: dict, n_best_size: int, fallback: tuple[str, float, float]
) -> dict[str, tf.Tensor]:
    """Each question's n-best list (see the module docstring), padded to `n_best_size`.

    As the Python path, the ranked candidates are read in order, each question's until it has
    `n_best_size` distinct texts; only the texts of one step's candidates (about
    `TEXT_CODE_POINTS_PER_STEP` code points) and the lists so far are held at a time, so memory
    does not grow with the candidates' total text (each window's candidates overlap).

    Args:
        candidates: from `span_candidates`.
        pieces: from `offsets.ContextPieces` (`start_char`, `end_char`, `codes`, `is_space`).
        n_best_size: entries kept per question.
        fallback: (text, start score, end score) of a question with no candidate.

    Returns `nbest_text` string, `nbest_start_score`, `nbest_end_score`, `nbest_probability`
    float64 [B, n_best_size] and `nbest_size` int32 [B].
    """
    codes = pieces["codes"]
    num_examples = codes.nrows(out_type=tf.int64)
    ranked = _ranked(candidates)
    text_start, text_length = _text_spans(ranked, pieces)
    example = ranked["example"]
    num_candidates = tf.size(example, out_type=tf.int64)
    cost = tf.cumsum(text_length + CANDIDATE_CODE_POINTS, exclusive=True)
    shape = tf.stack([num_examples, n_best_size])

    def step(low, text, start_score, end_score, count):
        # [low, high): the next candidates, about TEXT_CODE_POINTS_PER_STEP code points of them.
        high = tf.searchsorted(cost, [cost[low] + TEXT_CODE_POINTS_PER_STEP], out_type=tf.int64)
        high = tf.maximum(high[0], low + 1)
        ex = example[low:high]
        active = tf.gather(count, ex) < n_best_size  # a full list reads no more texts
        begin = tf.where(active, text_start[low:high], 0)
        chars = tf.ragged.range(begin, begin + tf.where(active, text_length[low:high], 0))
        texts = tf.strings.unicode_encode(
            chars.with_flat_values(tf.gather(codes.flat_values, chars.flat_values)), "UTF-8"
        )
        # New: the first of its (question, text) among the lists so far and these candidates.
        listed = tf.where(tf.range(n_best_size, dtype=tf.int64)[tf.newaxis, :] < count[:, None])
        keys = tf.concat([_keys(listed[:, 0], tf.gather_nd(text, listed)), _keys(ex, texts)], 0)
        _, distinct = tf.unique(keys, out_idx=tf.int64)
        position = tf.range(tf.size(keys, out_type=tf.int64))
        first_seen = tf.math.unsorted_segment_min(position, distinct, tf.size(keys, tf.int64))
        mine = tf.shape(listed, out_type=tf.int64)[0]
        is_new = active & tf.equal(tf.gather(first_seen, distinct[mine:]), position[mine:])
        new = tf.cast(is_new, tf.int64)
        before = tf.cumsum(new, exclusive=True)
        local = tf.range(high - low)
        question_first = tf.math.unsorted_segment_min(local, ex, num_examples)
        rank = tf.gather(count, ex) + before - tf.gather(before, tf.gather(question_first, ex))
        keep = is_new & (rank < n_best_size)
        where = tf.stack([tf.boolean_mask(ex, keep), tf.boolean_mask(rank, keep)], 1)

        def put(dense, values):
            return tf.tensor_scatter_nd_update(dense, where, tf.boolean_mask(values, keep))

        return (
            high,
            put(text, texts),
            put(start_score, ranked["start_score"][low:high]),
            put(end_score, ranked["end_score"][low:high]),
            count + tf.math.unsorted_segment_sum(tf.cast(keep, tf.int64), ex, num_examples),
        )

    zeros = tf.zeros(shape, tf.float64)
    _, text, start_score, end_score, count = tf.while_loop(
        lambda low, *lists: (low < num_candidates) & tf.reduce_any(lists[-1] < n_best_size),
        step,
        (
            tf.constant(0, tf.int64),
            tf.fill(shape, ""),
            zeros,
            zeros,
            tf.zeros(num_examples[None], tf.int64),
        ),
        parallel_iterations=1,
    )
    empty = tf.equal(count, 0)[:, tf.newaxis] & tf.equal(tf.range(n_best_size), 0)[tf.newaxis, :]
    nbest = {
        "nbest_text": tf.where(empty, fallback[0], text),
        "nbest_start_score": tf.where(empty, tf.constant(fallback[1], tf.float64), start_score),
        "nbest_end_score": tf.where(empty, tf.constant(fallback[2], tf.float64), end_score),
    }
    size = tf.maximum(tf.cast(count, tf.int32), 1)
    real = tf.range(n_best_size)[tf.newaxis, :] < size[:, tf.newaxis]
    total = nbest["nbest_start_score"] + nbest["nbest_end_score"]
    highest = tf.reduce_max(tf.where(real, total, tf.constant(-float("inf"), tf.float64)), 1)
    exps = tf.where(real, tf.exp(total - highest[:, tf.newaxis]), tf.zeros_like(total))
    nbest["nbest_probability"] = exps / tf.reduce_sum(exps, 1, keepdims=True)
    nbest["nbest_size"] = size
    return nbest


def _keys(example: tf.Tensor, texts: tf.Tensor) -> tf.Tensor:
    """One string per (question, text): equal exactly when both are."""
    return tf.strings.join([tf.strings.as_string(example), texts], separator="\x1f")


def null_scores(windows: dict, cls_logits: tf.Tensor, num_examples: tf.Tensor) -> tf.Tensor:
    """Per question, the smallest `cls_logits` of its windows (float64; 1e6 with no window)."""
    lowest = tf.math.unsorted_segment_min(
        tf.cast(cls_logits, tf.float64), windows["example"], num_examples
    )
    return tf.minimum(lowest, NULL_SCORE_START)


FALLBACKS = {"squad_v1": V1_FALLBACK, "squad_v2": V2_FALLBACK}
