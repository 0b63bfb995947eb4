"""In-graph checks of what a text model's request holds, failing with a message naming the field.

A SavedModel signature declares its inputs' shapes but does not enforce them (TF Serving and
`signatures[...]` feed a [B, 1] or scalar string through a [None] input): `string_batch` does,
naming the input. Every text-in model also bounds the text a request holds (`bounded_texts`: the
QA model's `max_context_bytes`, the others' `max_text_bytes`, stored in the model) before any work,
and rejects text that is not UTF-8 (the QA model's answers are cut from the context by character,
which only valid UTF-8 has; for the others the Python tokenizer, whose ids they must equal, takes
only Unicode text). Dtypes are checked before the graph runs, by whatever feeds it (TF Serving's request
parsing, or the signature's call).
"""

from __future__ import annotations

import tensorflow as tf

# A request's memory grows with its text, above the loaded model: about 250 bytes per byte of
# context for the QA model, and 75-110 per byte for the other text models, which tokenize the whole
# text before cutting it to max_seq_length (benchmarks/qa_serving_memory.py,
# benchmarks/text_serving_memory.py). Measured at this limit: 1.4 GB (QA), 0.4 GB (a classifier's
# one text; 0.6 GB for a pair). 5 MiB is more text than any Wikipedia article and most books hold.
DEFAULT_MAX_TEXT_BYTES = 5 * 2**20
DEFAULT_MAX_CONTEXT_BYTES = DEFAULT_MAX_TEXT_BYTES  # the QA model's name for the same limit


def string_batch(texts: tf.Tensor, name: str) -> tf.Tensor:
    """`texts` as a batch of strings [B]; any other rank fails naming the input `name`."""
    return tf.ensure_shape(texts, [None], name=name)


def _first_failing(ok: tf.Tensor) -> tf.Tensor:
    """Index of the first False of a bool [B] (B when none)."""
    return tf.argmax(tf.concat([tf.cast(~ok, tf.int32), [1]], 0), output_type=tf.int32)


def _rows_of(field: str) -> str:
    """How a message names all rows of `field`: "contexts", "texts", "text_a texts"."""
    return f"{field}s" if field.isalpha() else f"{field} texts"


def bounded_texts(texts: dict[str, tf.Tensor], max_bytes: int, limit_name: str) -> dict:
    """`texts` (request field -> string [B]) behind checks: at most `max_bytes` UTF-8 bytes in
    each field, all its rows together (memory grows with the request's total text), then each
    row valid UTF-8. Lengths are read without touching the text, so a request over the limit is
    stopped before anything decodes it. A failed check stops the request with one line naming
    the field and `limit_name` (the limit's name in the model's settings) or the row."""
    checks = []
    for name, rows in texts.items():
        total = tf.reduce_sum(tf.cast(tf.strings.length(rows, unit="BYTE"), tf.int64))
        checks.append(
            tf.debugging.Assert(
                total <= max_bytes,
                [
                    tf.strings.format(
                        f"{name}: the {_rows_of(name)} of the request hold {{}} bytes, more than "
                        f"{limit_name}={max_bytes} (the limit stored in this model, "
                        f"for all {_rows_of(name)} of a request together)",
                        (total,),
                    )
                ],
            )
        )
    with tf.control_dependencies(checks):  # no decoding of a text over the limit
        for name, rows in texts.items():
            valid = tf.equal(
                tf.strings.unicode_transcode(rows, "UTF-8", "UTF-8", errors="replace"), rows
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
        return {name: tf.identity(rows) for name, rows in texts.items()}


def same_batch_size(first: tf.Tensor, second: tf.Tensor, message: str) -> tuple:
    """`first` and `second` behind a check that they hold as many rows, failing with `message`."""
    check = tf.debugging.assert_equal(tf.shape(first), tf.shape(second), message=message)
    with tf.control_dependencies([check]):
        return tf.identity(first), tf.identity(second)


def checked_requests(
    question: tf.Tensor, context: tf.Tensor, max_context_bytes: int
) -> tuple[tf.Tensor, tf.Tensor]:
    """`question` and `context` behind checks: each a string [B] of the same B, then
    `bounded_texts` at `max_context_bytes`. A failed check stops the request with one line naming
    the field (and the row, or the limit)."""
    question, context = same_batch_size(
        string_batch(question, "question"),
        string_batch(context, "context"),
        "question and context must have the same batch size",
    )
    checked = bounded_texts(
        {"question": question, "context": context}, max_context_bytes, "max_context_bytes"
    )
    return checked["question"], checked["context"]


def requests_within(rows, max_text_bytes: int, size: int = 32):
    """`rows` ((text_a, text_b or None)) as requests of up to `size` rows whose fields each hold at
    most `max_text_bytes` UTF-8 bytes, all rows together (lists of row indices); and the rows that
    no request can hold (a field over the limit on its own)."""
    requests, over, request, totals = [], [], [], [0, 0]
    for i, row in enumerate(rows):
        sizes = [len(t.encode("utf-8")) if t is not None else 0 for t in row]
        if max(sizes) > max_text_bytes:
            over.append(i)
            continue
        if request and (
            len(request) == size or any(t + n > max_text_bytes for t, n in zip(totals, sizes))
        ):
            requests.append(request)
            request, totals = [], [0, 0]
        request.append(i)
        totals = [t + n for t, n in zip(totals, sizes)]
    return requests + ([request] if request else []), over
