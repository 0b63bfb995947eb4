"""SQuAD windows as the original builds them: `[CLS] query [SEP] doc window [SEP]`, with the maps
post-processing needs to turn a predicted span back into characters of the context."""

from __future__ import annotations

import collections
import dataclasses
import functools
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence

from albert_tf.tasks.squad.alignment import (
    CharAlignment,
    convert_index,
    fast_alignment,
    pieces_text,
)
from albert_tf.tasks.squad.examples import SquadExample
from albert_tf.text.tokenization import AlbertTokenizer

logger = logging.getLogger(__name__)

# (context, pieces' text, do_lower_case) -> alignment: `fast_alignment`, or another computing the
# same (the benchmarks' plain reference of the original's algorithm).
AlignmentFn = Callable[[str, str, bool], CharAlignment]


@dataclasses.dataclass
class SquadFeature:
    """One window of one question; the fields (and their meaning) are the original's.

    Args:
        unique_id: counts up from 1000000000 over all windows.
        example_index: the question's index in the examples (None for training features).
        doc_span_index: the window's index among its question's windows.
        tok_start_to_orig_index: per doc piece of the window, its first character in the context.
        tok_end_to_orig_index: per doc piece of the window, its last character in the context.
        token_is_max_context: {position in the sequence: whether this window gives the piece its
            most central context}.
        tokens: the pieces of the sequence, padded with "<pad>" to max_seq_length.
        input_ids, input_mask, segment_ids: the model inputs, [max_seq_length] each.
        paragraph_len: the length of the whole unpadded sequence (not just the doc, despite the
            name).
        p_mask: 1 where no answer can start or end (query, [SEP], padding), 0 at [CLS] and doc.
        start_position, end_position: the answer's positions in the sequence when training
            (0 and 0 for an impossible window), None otherwise.
        is_impossible: whether the window holds no answer (training only).

    Example:
        >>> f = SquadFeature(1000000000, 0, 0, [], [], {}, [], [], [], [], 0, [])
        >>> f.unique_id
        1000000000
    """

    unique_id: int
    example_index: int | None
    doc_span_index: int
    tok_start_to_orig_index: list[int]
    tok_end_to_orig_index: list[int]
    token_is_max_context: dict[int, bool]
    tokens: list[str]
    input_ids: list[int]
    input_mask: list[int]
    segment_ids: list[int]
    paragraph_len: int
    p_mask: list[int]
    start_position: int | None = None
    end_position: int | None = None
    is_impossible: bool = False


@dataclasses.dataclass(frozen=True)
class ParagraphTokens:
    """A context's pieces and the character offsets the original derives for them.

    Args:
        piece_ids: the ids of `tokenize(context)`.
        tok_start_to_orig_index: per piece, its first character in the context.
        tok_end_to_orig_index: per piece, its last character in the context.
        orig_to_chartok_index: per context character, its character in the pieces' text, or None.
        chartok_to_tok_index: per character of the pieces' text, its piece.

    Example:
        >>> p = tokenize_paragraph("Rollo did.", tokenizer)  # doctest: +SKIP
        >>> p.token_span(0, 4)  # doctest: +SKIP
        (0, 1)
    """

    piece_ids: list[int]
    tok_start_to_orig_index: list[int]
    tok_end_to_orig_index: list[int]
    orig_to_chartok_index: list[int | None]
    chartok_to_tok_index: list[int]

    def token_span(self, start_char: int, end_char: int) -> tuple[int, int]:
        """The pieces holding context characters `start_char..end_char` (inclusive)."""
        start = convert_index(self.orig_to_chartok_index, start_char, is_start=True)
        end = convert_index(self.orig_to_chartok_index, end_char, is_start=False)
        return self.chartok_to_tok_index[start], self.chartok_to_tok_index[end]


def tokenize_paragraph(
    paragraph_text: str, tokenizer: AlbertTokenizer, alignment_fn: AlignmentFn = fast_alignment
) -> ParagraphTokens | None:
    """Pieces of a context and their character offsets; None where the original gives up.

    The original skips a question (logging "MISMATCH DETECTED!") when the LCS matches at most
    80 % of its context; None stands for that.
    """
    if not paragraph_text:
        raise ValueError("cannot align an empty context")
    pieces = tokenizer.tokenize(paragraph_text)
    chartok_to_tok_index: list[int] = []
    tok_start_to_chartok_index, tok_end_to_chartok_index = [], []
    char_count = 0
    for i, piece in enumerate(pieces):
        chartok_to_tok_index.extend([i] * len(piece))  # "▁" -> " " keeps the length
        tok_start_to_chartok_index.append(char_count)
        char_count += len(piece)
        tok_end_to_chartok_index.append(char_count - 1)
    tok_cat_text = pieces_text(pieces)
    if not tok_cat_text:
        return None
    alignment = alignment_fn(paragraph_text, tok_cat_text, tokenizer.do_lower_case)
    if alignment.is_mismatch():
        return None
    n = len(paragraph_text)
    chartok_to_orig = alignment.chartok_to_orig_index
    return ParagraphTokens(
        piece_ids=tokenizer.convert_tokens_to_ids(pieces),
        tok_start_to_orig_index=[
            convert_index(chartok_to_orig, pos, n, is_start=True)
            for pos in tok_start_to_chartok_index
        ],
        tok_end_to_orig_index=[
            convert_index(chartok_to_orig, pos, n, is_start=False)
            for pos in tok_end_to_chartok_index
        ],
        orig_to_chartok_index=alignment.orig_to_chartok_index,
        chartok_to_tok_index=chartok_to_tok_index,
    )


def doc_spans(num_tokens: int, max_tokens_for_doc: int, doc_stride: int) -> list[tuple[int, int]]:
    """(start, length) of the sliding windows over `num_tokens` doc pieces, as the original."""
    spans = []
    start = 0
    while start < num_tokens:
        length = min(num_tokens - start, max_tokens_for_doc)
        spans.append((start, length))
        if start + length == num_tokens:
            break
        start += min(length, doc_stride)
    return spans


def is_max_context(spans: Sequence[tuple[int, int]], span_index: int, position: int) -> bool:
    """Whether window `span_index` gives doc piece `position` its most central context.

    Score = min(pieces left, pieces right) + 0.01 * window length; the first best window wins.
    """
    best_score, best_index = None, None
    for index, (start, length) in enumerate(spans):
        end = start + length - 1
        if position < start or position > end:
            continue
        score = min(position - start, end - position) + 0.01 * length
        if best_score is None or score > best_score:
            best_score, best_index = score, index
    return span_index == best_index


@functools.lru_cache(maxsize=4096)
def _max_context_windows(spans: tuple[tuple[int, int], ...]) -> tuple[int, ...]:
    """Per doc piece, the window where `is_max_context` holds (all pieces in one pass)."""
    num_tokens = spans[-1][0] + spans[-1][1]
    best_scores: list[float | None] = [None] * num_tokens
    best_windows = [0] * num_tokens
    for index, (start, length) in enumerate(spans):
        end = start + length - 1
        for position in range(start, end + 1):
            score = min(position - start, end - position) + 0.01 * length
            best = best_scores[position]
            if best is None or score > best:
                best_scores[position], best_windows[position] = score, index
    return tuple(best_windows)


class _ParagraphCache:
    """The last few contexts' `ParagraphTokens` (SQuAD lists a context's questions together).

    With size 0 every question tokenizes and aligns its context again, as the original does.
    """

    def __init__(self, tokenizer: AlbertTokenizer, alignment_fn: AlignmentFn, size: int):
        self._tokenizer, self._alignment_fn, self._size = tokenizer, alignment_fn, size
        self._entries: collections.OrderedDict[str, ParagraphTokens | None] = (
            collections.OrderedDict()
        )

    def get(self, paragraph_text: str) -> ParagraphTokens | None:
        if paragraph_text in self._entries:
            self._entries.move_to_end(paragraph_text)
            return self._entries[paragraph_text]
        value = tokenize_paragraph(paragraph_text, self._tokenizer, self._alignment_fn)
        self._entries[paragraph_text] = value
        if len(self._entries) > self._size:
            self._entries.popitem(last=False)
        return value


def iter_features(
    examples: Iterable[SquadExample],
    tokenizer: AlbertTokenizer,
    max_seq_length: int,
    doc_stride: int,
    max_query_length: int,
    is_training: bool,
    alignment_fn: AlignmentFn = fast_alignment,
    paragraph_cache_size: int = 8,
) -> Iterator[SquadFeature]:
    """`convert_examples_to_features`, one window at a time (for sets too large to hold)."""
    if doc_stride < 1 or max_query_length < 0:
        raise ValueError(f"doc_stride={doc_stride} must be >= 1, max_query_length >= 0")
    if max_seq_length < max_query_length + 4:
        raise ValueError(
            f"max_seq_length={max_seq_length} leaves no room for the document after a "
            f"{max_query_length}-piece query, [CLS] and two [SEP]"
        )
    id_to_piece = tokenizer.convert_ids_to_tokens(range(tokenizer.vocab_size))
    paragraphs = _ParagraphCache(tokenizer, alignment_fn, paragraph_cache_size)
    unique_id = 1000000000
    skipped = 0
    for example_index, example in enumerate(examples):
        query_ids = tokenizer.encode(example.question_text)[:max_query_length]
        if not example.paragraph_text:
            raise ValueError(f"question {example.qas_id!r}: empty context")
        paragraph = paragraphs.get(example.paragraph_text)
        if paragraph is None:
            skipped += 1
            logger.warning(
                "question %r skipped: its context's pieces match too little of its text",
                example.qas_id,
            )
            continue
        answer_span = None  # pieces of the answer in the doc, when training on an answerable one
        if is_training and not example.is_impossible:
            if example.start_position is None or example.orig_answer_text is None:
                raise ValueError(f"question {example.qas_id!r}: training example without answer")
            end_char = example.start_position + len(example.orig_answer_text) - 1
            if not 0 <= example.start_position <= end_char < len(example.paragraph_text):
                raise ValueError(f"question {example.qas_id!r}: answer outside its context")
            answer_span = paragraph.token_span(example.start_position, end_char)
            if answer_span[0] > answer_span[1]:
                raise ValueError(f"question {example.qas_id!r}: answer ends before it starts")

        spans = doc_spans(len(paragraph.piece_ids), max_seq_length - len(query_ids) - 3, doc_stride)
        max_context_windows = _max_context_windows(tuple(spans))
        doc_offset = len(query_ids) + 2
        for span_index, (doc_start, doc_length) in enumerate(spans):
            doc_end = doc_start + doc_length - 1
            input_ids = [tokenizer.cls_id, *query_ids, tokenizer.sep_id]
            input_ids += paragraph.piece_ids[doc_start : doc_end + 1]
            input_ids.append(tokenizer.sep_id)
            length = len(input_ids)
            padding = max_seq_length - length
            token_is_max_context = {
                doc_offset + i: best_window == span_index
                for i, best_window in enumerate(max_context_windows[doc_start : doc_end + 1])
            }
            segment_ids = [0] * doc_offset + [1] * (doc_length + 1) + [0] * padding
            p_mask = [0] + [1] * (doc_offset - 1) + [0] * doc_length + [1] * (1 + padding)
            input_ids += [0] * padding

            span_is_impossible = example.is_impossible
            start_position = end_position = None
            if is_training:
                if (
                    answer_span is not None
                    and doc_start <= answer_span[0]
                    and answer_span[1] <= doc_end
                ):
                    start_position = answer_span[0] - doc_start + doc_offset
                    end_position = answer_span[1] - doc_start + doc_offset
                else:  # no answer, or not inside this window: trained as "no answer here"
                    start_position = end_position = 0
                    span_is_impossible = True
            yield SquadFeature(
                unique_id=unique_id,
                # The original drops the index of training windows (it is per worker process).
                example_index=None if is_training else example_index,
                doc_span_index=span_index,
                tok_start_to_orig_index=paragraph.tok_start_to_orig_index[doc_start : doc_end + 1],
                tok_end_to_orig_index=paragraph.tok_end_to_orig_index[doc_start : doc_end + 1],
                token_is_max_context=token_is_max_context,
                tokens=[id_to_piece[i] for i in input_ids],
                input_ids=input_ids,
                input_mask=[1] * length + [0] * padding,
                segment_ids=segment_ids,
                paragraph_len=length,
                p_mask=p_mask,
                start_position=start_position,
                end_position=end_position,
                is_impossible=span_is_impossible,
            )
            unique_id += 1
    if skipped:
        logger.warning("%d question(s) skipped: context and pieces could not be aligned", skipped)


def convert_examples_to_features(
    examples: Iterable[SquadExample],
    tokenizer: AlbertTokenizer,
    max_seq_length: int,
    doc_stride: int,
    max_query_length: int,
    is_training: bool,
    alignment_fn: AlignmentFn = fast_alignment,
    paragraph_cache_size: int = 8,
) -> list[SquadFeature]:
    """The original's windows of every question: `[CLS] query [SEP] doc window [SEP]`, padded.

    The query is cut to `max_query_length` pieces; windows of up to
    `max_seq_length - |query| - 3` doc pieces start every `doc_stride` pieces. Training
    windows that do not hold the whole answer become impossible (positions 0, 0). Each context
    is tokenized and aligned once for all its questions.

    Args:
        examples: from `read_squad_examples` (same `is_training`).
        tokenizer: the model's tokenizer (its `do_lower_case` is the original's flag).
        max_seq_length, doc_stride, max_query_length: the original's flags (384, 128, 64).
        is_training: fill answer positions (and drop `example_index`) as the original.
        alignment_fn: `fast_alignment`, or another `AlignmentFn` computing the same.
        paragraph_cache_size: contexts kept tokenized and aligned; 0 redoes every question's
            context as the original (with the plain reference alignment: the original's cost).

    Example:
        >>> feats = convert_examples_to_features(examples, tok, 384, 128, 64, False)  # doctest: +SKIP
    """
    return list(
        iter_features(
            examples,
            tokenizer,
            max_seq_length,
            doc_stride,
            max_query_length,
            is_training,
            alignment_fn,
            paragraph_cache_size,
        )
    )
