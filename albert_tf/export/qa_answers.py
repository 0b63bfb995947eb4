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

from albert_tf.export.qa_offsets import whitespace_code_points
from albert_tf.tasks.squad.postprocess_v1 import V1_FALLBACK
from albert_tf.tasks.squad.postprocess_v2 import NULL_SCORE_START, V2_FALLBACK


def _whitespace_class() -> str:
    return "[" + "".join(f"\\x{{{cp:x}}}" for cp in whitespace_code_points()) + "]"


def strip_text(texts: tf.Tensor) -> tf.Tensor:
    """`str.strip()` of each string: leading and trailing `str.isspace` characters removed."""
    space = _whitespace_class()
    return tf.strings.regex_replace(texts, f"^{space}+|{space}+$", "")


def span_candidates(
    windows: dict, starts: tf.Tensor, ends: tf.Tensor, start_scores, end_scores, max_answer_length
) -> dict[str, tf.Tensor]:
    """The valid (start, end) candidates of every window, in window then column order.

    Args:
        windows: from `qa_windows.build_windows`.
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


def nbest_lists(
    candidates: dict,
    contexts: tf.Tensor,
    pieces: dict,
    n_best_size: int,
    fallback: tuple[str, float, float],
) -> dict[str, tf.Tensor]:
    """Each question's n-best list (see the module docstring), padded to `n_best_size`.

    Args:
        candidates: from `span_candidates`.
        contexts: string [B] the contexts, as given.
        pieces: from `qa_offsets.ContextPieces` (`start_char`, `end_char`).
        n_best_size: entries kept per question.
        fallback: (text, start score, end score) of a question with no candidate.

    Returns `nbest_text` string, `nbest_start_score`, `nbest_end_score`, `nbest_probability`
    float64 [B, n_best_size] and `nbest_size` int32 [B].
    """
    num_examples = tf.shape(contexts, out_type=tf.int64)[0]
    score = candidates["start_score"] + candidates["end_score"]
    by_score = tf.argsort(score, direction="DESCENDING", stable=True)
    order = tf.gather(by_score, tf.argsort(tf.gather(candidates["example"], by_score), stable=True))
    ranked = {key: tf.gather(value, order) for key, value in candidates.items()}
    example = ranked["example"]
    char_base = tf.gather(pieces["start_char"].row_splits, example)
    first = tf.gather(pieces["start_char"].flat_values, char_base + ranked["piece_start"])
    last = tf.gather(pieces["end_char"].flat_values, char_base + ranked["piece_end"])
    text = tf.strings.substr(
        tf.gather(contexts, example), first, tf.maximum(last - first + 1, 0), unit="UTF8_CHAR"
    )
    text = strip_text(text)
    # The first candidate of each distinct (question, text), in ranked order.
    key = tf.strings.join([tf.strings.as_string(example), text], separator="\x1f")
    _, distinct = tf.unique(key, out_idx=tf.int64)
    position = tf.range(tf.size(key, out_type=tf.int64))
    first_seen = tf.math.unsorted_segment_min(position, distinct, tf.size(key, out_type=tf.int64))
    is_first = tf.equal(tf.gather(first_seen, distinct), position)
    kept = tf.cumsum(tf.cast(is_first, tf.int64))
    example_base = tf.math.unsorted_segment_min(position, example, num_examples)
    before_example = tf.gather(
        tf.concat([[0], kept], 0),
        tf.clip_by_value(tf.gather(example_base, example), 0, tf.size(kept, tf.int64)),
    )
    rank = kept - before_example - 1
    keep = is_first & (rank < n_best_size)
    where = tf.stack([tf.boolean_mask(example, keep), tf.boolean_mask(rank, keep)], 1)
    shape = tf.stack([num_examples, n_best_size])
    sizes = tf.math.unsorted_segment_sum(tf.cast(keep, tf.int32), example, num_examples)
    empty = tf.equal(sizes, 0)[:, tf.newaxis] & tf.equal(tf.range(n_best_size), 0)[tf.newaxis, :]

    def scattered(values, fallback_value, dtype):
        dense = tf.scatter_nd(where, tf.boolean_mask(values, keep), tf.cast(shape, tf.int64))
        return tf.where(empty, tf.constant(fallback_value, dtype), dense)

    nbest = {
        "nbest_text": scattered(text, fallback[0], tf.string),
        "nbest_start_score": scattered(ranked["start_score"], fallback[1], tf.float64),
        "nbest_end_score": scattered(ranked["end_score"], fallback[2], tf.float64),
    }
    size = tf.maximum(sizes, 1)
    real = tf.range(n_best_size)[tf.newaxis, :] < size[:, tf.newaxis]
    total = nbest["nbest_start_score"] + nbest["nbest_end_score"]
    highest = tf.reduce_max(tf.where(real, total, tf.constant(-float("inf"), tf.float64)), 1)
    exps = tf.where(real, tf.exp(total - highest[:, tf.newaxis]), tf.zeros_like(total))
    nbest["nbest_probability"] = exps / tf.reduce_sum(exps, 1, keepdims=True)
    nbest["nbest_size"] = size
    return nbest


def null_scores(windows: dict, cls_logits: tf.Tensor, num_examples: tf.Tensor) -> tf.Tensor:
    """Per question, the smallest `cls_logits` of its windows (float64; 1e6 with no window)."""
    lowest = tf.math.unsorted_segment_min(
        tf.cast(cls_logits, tf.float64), windows["example"], num_examples
    )
    return tf.minimum(lowest, NULL_SCORE_START)


FALLBACKS = {"squad_v1": V1_FALLBACK, "squad_v2": V2_FALLBACK}
