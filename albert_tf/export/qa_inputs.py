"""In-graph checks of what a text model's request holds, failing with a message naming the field.

A SavedModel signature declares its inputs' shapes but does not enforce them (TF Serving and
`signatures[...]` feed a [B, 1] or scalar string through a [None] input): `string_batch` does,
naming the input. The text-in QA model also bounds the text a request holds
(`max_context_bytes`, stored in the model) before any work, and rejects text that is not UTF-8 (its answers are
cut from the context by character, which only valid UTF-8 has). Dtypes are checked before the
graph runs, by whatever feeds it (TF Serving's request parsing, or the signature's call).
"""

from __future__ import annotations

import tensorflow as tf


def string_batch(texts: tf.Tensor, name: str) -> tf.Tensor:
    """`texts` as a batch of strings [B]; any other rank fails naming the input `name`."""
    return tf.ensure_shape(texts, [None], name=name)


def _first_failing(ok: tf.Tensor) -> tf.Tensor:
    """Index of the first False of a bool [B] (B when none)."""
    return tf.argmax(tf.concat([tf.cast(~ok, tf.int32), [1]], 0), output_type=tf.int32)


def checked_requests(
    question: tf.Tensor, context: tf.Tensor, max_context_bytes: int
) -> tuple[tf.Tensor, tf.Tensor]:
    """`question` and `context` behind checks: each a string [B] of the same B, valid UTF-8,
    and at most `max_context_bytes` UTF-8 bytes of each field in the request (all its rows
    together: memory grows with the request's total text). A failed check stops the request
    with one line naming the field (and the row, or the limit)."""
    question = string_batch(question, "question")
    context = string_batch(context, "context")
    checks = [
        tf.debugging.assert_equal(
            tf.shape(question),
            tf.shape(context),
            message="question and context must have the same batch size",
        )
    ]
    for name, texts in (("question", question), ("context", context)):
        total = tf.reduce_sum(tf.cast(tf.strings.length(texts, unit="BYTE"), tf.int64))
        checks.append(
            tf.debugging.Assert(
                total <= max_context_bytes,
                [
                    tf.strings.format(
                        f"{name}: the {name}s of the request hold {{}} bytes, more than "
                        f"max_context_bytes={max_context_bytes} (the limit stored in this model, "
                        f"for all {name}s of a request together)",
                        (total,),
                    )
                ],
            )
        )
    with tf.control_dependencies(checks):  # no decoding of a text over the limit
        for name, texts in (("question", question), ("context", context)):
            valid = tf.equal(
                tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8", errors="replace"), texts
            )
            checks.append(
                tf.debugging.Assert(
                    tf.reduce_all(valid),
                    [
                        tf.strings.format(
                            f"{name}[{{}}] is not valid UTF-8", (_first_failing(valid),)
                        )
                    ],
                )
            )
    with tf.control_dependencies(checks):
        return tf.identity(question), tf.identity(context)
