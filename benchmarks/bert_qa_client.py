"""The TFLite Task Library's `BertQuestionAnswerer`, re-implemented step for step in Python.

What the client does, and how it differs from our Python path (`albert_tf.tasks.squad`: windows
every `doc_stride` pieces, n-best over all windows, answers cut from the original characters):
- one window of 384 tokens: `[CLS] question [SEP] context [SEP]`, the question cut to 64 pieces
  and the context to what is left; anything beyond is never read;
- the context is split on spaces only and each word encoded on its own (ASCII lowercased, then
  SentencePiece; our ids with the client-compatible model);
- the 5 best start and the 5 best end logits over all 384 positions (padding included) are paired;
  a pair is kept when both lie in the context, end >= start and it spans at most 32 pieces;
  the kept pairs are sorted by start + end logit and the best 5 returned;
- an answer is the whole context words its pieces came from, joined by single spaces (our path:
  the exact characters, punctuation cut as the pieces cut it).

`client_inputs` and `client_answers` are these steps; `ClientAnswer` is one answer as the client
returns it (its `text`, `start`, `end` position and `logit`). The client's TFLite runtime rounds
the model's last bits otherwise than LiteRT: where two logits the answers depend on are that close
(`near_tie`), the client may order or pick those answers otherwise.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

MAX_SEQ_LENGTH = 384
MAX_QUERY_LENGTH = 64
PREDICT_ANSWERS = 5  # best starts, best ends, answers returned
MAX_ANSWER_LENGTH = 32


@dataclasses.dataclass(frozen=True)
class ClientInputs:
    """One question's model inputs ([1, 384] int32 each) and what maps answers back to text.

    Args:
        input_ids, input_mask, segment_ids: the model inputs.
        word_of_position: {input position: index of the context word its piece came from}.
        words: the context's words (split on spaces, empty ones dropped).
    """

    input_ids: np.ndarray
    input_mask: np.ndarray
    segment_ids: np.ndarray
    word_of_position: dict[int, int]
    words: list[str]

    def features(self) -> dict[str, np.ndarray]:
        """The inputs by their signature names."""
        return {
            "input_ids": self.input_ids,
            "input_mask": self.input_mask,
            "segment_ids": self.segment_ids,
        }


@dataclasses.dataclass(frozen=True)
class ClientAnswer:
    """One answer: its text, first and last input position, and start + end logit."""

    text: str
    start: int
    end: int
    logit: float


def client_inputs(
    context: str, question: str, encode: Callable[[str], list[int]], cls_id: int, sep_id: int
) -> ClientInputs:
    """The client's inputs for one question; `encode` maps a text (a question, or one context
    word) to ids: the clients' tokenization, or ours to compare with."""
    words = [w for w in context.split(" ") if w]
    query = encode(question)[:MAX_QUERY_LENGTH]
    pieces, word_index = [], []
    for i, word in enumerate(words):
        ids = encode(word)
        pieces += ids
        word_index += [i] * len(ids)
    room = MAX_SEQ_LENGTH - len(query) - 3
    pieces, word_index = pieces[:room], word_index[:room]
    first = len(query) + 2
    ids = [cls_id, *query, sep_id, *pieces, sep_id]
    segments = [0] * first + [1] * (len(pieces) + 1)
    padding = [0] * (MAX_SEQ_LENGTH - len(ids))

    def row(values):
        return np.array([values + padding], np.int32)

    return ClientInputs(
        row(ids),
        row([1] * len(ids)),
        row(segments),
        {first + j: w for j, w in enumerate(word_index)},
        words,
    )


def _best_positions(logits: np.ndarray) -> list[int]:
    # A stable sort, largest first, as the client's ReverseSortIndices.
    return [int(i) for i in np.argsort(-logits, kind="stable")[:PREDICT_ANSWERS]]


def _spans(inputs: ClientInputs, start_logits, end_logits) -> list[tuple[int, int, float]]:
    """Every (start, end, logit) the client keeps, best first."""
    start_logits = np.asarray(start_logits, np.float32).reshape(-1)
    end_logits = np.asarray(end_logits, np.float32).reshape(-1)
    words, spans = inputs.word_of_position, []
    for start in _best_positions(start_logits):
        for end in _best_positions(end_logits):
            if start not in words or end not in words or end < start:
                continue
            if end - start + 1 > MAX_ANSWER_LENGTH:
                continue
            spans.append((start, end, float(start_logits[start] + end_logits[end])))
    return sorted(spans, key=lambda span: -span[2])


def client_answers(
    inputs: ClientInputs, start_logits: np.ndarray, end_logits: np.ndarray
) -> list[ClientAnswer]:
    """The client's answers from one question's [384] (or [1, 384]) start and end logits."""
    words = inputs.word_of_position
    return [
        ClientAnswer(" ".join(inputs.words[words[s] : words[e] + 1]), s, e, logit)
        for s, e, logit in _spans(inputs, start_logits, end_logits)[:PREDICT_ANSWERS]
    ]


def near_tie(inputs: ClientInputs, start_logits, end_logits, tolerance: float) -> bool:
    """Whether logits off by `tolerance` (another runtime's round-off) can change the answers:
    two of the best start (or end) logits that pick the candidates, or two kept spans' logits,
    lie within it."""

    def close(values) -> bool:
        values = np.sort(np.asarray(values, np.float64))
        return bool(np.any(np.diff(values) <= tolerance))

    best = PREDICT_ANSWERS + 1
    start_logits = np.asarray(start_logits, np.float32).reshape(-1)
    end_logits = np.asarray(end_logits, np.float32).reshape(-1)
    return (
        close(np.sort(start_logits)[-best:])
        or close(np.sort(end_logits)[-best:])
        or close([logit for _, _, logit in _spans(inputs, start_logits, end_logits)])
    )
