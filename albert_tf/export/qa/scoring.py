"""In-graph scoring of a request's windows a few at a time, keeping only their valid candidates.

A long context has thousands of windows. Scored in one batch, the model's activations (and v1's
top starts x top ends of every window) would all be held at once, which grows with the context
times the model's size; here a loop scores `windows_per_step` windows at a time, one step after
the other, and keeps only what post-processing needs of each: its valid span candidates
(`answers.span_candidates`) and, for v2, its `cls_logits`. Peak memory is then the windows
and candidates (linear in the context) plus one step's activations.

Scores of a window do not depend on the other windows of its step (inference: no dropout, no
batch statistics), up to the float32 round-off of other kernel shapes, as when the Python path
scores them in its own batches.
"""

from __future__ import annotations

import tensorflow as tf

from albert_tf.export.qa.answers import v1_candidates, v2_candidates

# About this many bytes of activations per step (float32 attention scores and probabilities,
# feed-forward and hidden states of one layer): a few hundred MB at most with TensorFlow's copies.
ACTIVATION_BYTES_PER_STEP = 64 * 2**20
MAX_WINDOWS_PER_STEP = 256

CANDIDATE_KEYS = ("example", "piece_start", "piece_end", "start_score", "end_score")
_DTYPES = {"start_score": tf.float64, "end_score": tf.float64, "cls_logits": tf.float64}


def windows_per_step(config, max_seq_length: int) -> int:
    """Windows scored together: as many as fit `ACTIVATION_BYTES_PER_STEP` for this model size
    (at least 1, at most `MAX_WINDOWS_PER_STEP`)."""
    per_window = (
        4
        * max_seq_length
        * (
            2 * config.num_attention_heads * max_seq_length
            + config.intermediate_size
            + 4 * config.hidden_size
        )
    )
    return int(max(1, min(MAX_WINDOWS_PER_STEP, ACTIVATION_BYTES_PER_STEP // per_window)))


def scored_candidates(
    head, windows: dict, n_best_size: int, max_answer_length: int, step: int
) -> tuple[dict[str, tf.Tensor], tf.Tensor | None]:
    """Score `windows` `step` at a time with `head` (a `squad_v1` / `squad_v2` ServingHead).

    Returns the valid candidates of every window, in window then column order, as
    `answers.span_candidates` gives them (flat [N]), and for v2 the `cls_logits` of every
    window ([W]; None for v1).
    """
    names = head.signature_inputs["serving_default"]
    num_windows = tf.shape(windows["example"], out_type=tf.int32)[0]
    num_steps = (num_windows + step - 1) // step
    v2 = head.kind == "squad_v2"

    def arrays():
        return {
            key: tf.TensorArray(
                _DTYPES.get(key, tf.int64),
                size=num_steps,
                element_shape=tf.TensorShape([None]),
                infer_shape=False,
            )
            for key in CANDIDATE_KEYS + (("cls_logits",) if v2 else ())
        }

    def body(i, collected):
        low = i * step
        high = tf.minimum(low + step, num_windows)
        chunk = {key: value[low:high] for key, value in windows.items()}
        scores = head.outputs("serving_default", {key: chunk[key] for key in names})
        if v2:
            found = v2_candidates(chunk, scores, max_answer_length)
            found["cls_logits"] = tf.cast(scores["cls_logits"], tf.float64)
        else:
            found = v1_candidates(
                chunk, scores["start_logits"], scores["end_logits"], n_best_size, max_answer_length
            )
        return i + 1, {key: collected[key].write(i, found[key]) for key in collected}

    # One step at a time: parallel iterations would hold several steps' activations at once.
    _, collected = tf.while_loop(
        lambda i, _: i < num_steps, body, (tf.constant(0), arrays()), parallel_iterations=1
    )
    collected = {key: array.concat() for key, array in collected.items()}
    return {key: collected[key] for key in CANDIDATE_KEYS}, collected.get("cls_logits")
