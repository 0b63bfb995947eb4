"""RACE model inputs as the original `convert_single_example`: four `[CLS] article [SEP] candidate
[SEP]` sequences per question, the candidate cut to its last `max_qa_length` pieces and the
article cut from its end to fit."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from albert_tf.tasks.race.examples import RaceExample
from albert_tf.text.tokenization import AlbertTokenizer


@dataclasses.dataclass
class RaceFeature:
    """The four packed choices of one question.

    Args:
        example_id: the article's id.
        input_ids, input_mask, segment_ids: [4][max_seq_length] each, one row per option A-D.
        label_id: the gold option's index, 0-3.

    Example:
        >>> RaceFeature("m1.txt", [[2, 3]] * 4, [[1, 1]] * 4, [[0, 0]] * 4, 1).label_id
        1
    """

    example_id: str
    input_ids: list[list[int]]
    input_mask: list[list[int]]
    segment_ids: list[list[int]]
    label_id: int


def convert_race_example(
    example: RaceExample, tokenizer: AlbertTokenizer, max_seq_length: int, max_qa_length: int
) -> RaceFeature:
    """Packs one question's four choices as the original.

    The texts were preprocessed by the reader; `tokenizer.tokenize` normalises them again, which
    leaves such text unchanged (the original tokenized it without normalising).

    Args:
        example: from `read_race_examples`.
        tokenizer: the model's tokenizer.
        max_seq_length: length of each packed sequence.
        max_qa_length: pieces kept from the end of each candidate (question + option).
    """
    if max_qa_length < 1:  # the original's `[-0:]` would keep the whole candidate
        raise ValueError(f"max_qa_length={max_qa_length} must be >= 1")
    context_ids = tokenizer.encode(example.context)
    rows: dict[str, list[list[int]]] = {"input_ids": [], "input_mask": [], "segment_ids": []}
    for ending in example.endings:
        ending_ids = tokenizer.encode(ending)[-max_qa_length:]
        room = max_seq_length - 3 - len(ending_ids)
        if room < 0:
            raise ValueError(
                f"article {example.example_id!r}: a {len(ending_ids)}-piece candidate does not "
                f"fit max_seq_length={max_seq_length}; lower max_qa_length"
            )
        context_part = context_ids[:room]
        ids = [tokenizer.cls_id, *context_part, tokenizer.sep_id, *ending_ids, tokenizer.sep_id]
        padding = [0] * (max_seq_length - len(ids))
        rows["input_ids"].append(ids + padding)
        rows["input_mask"].append([1] * len(ids) + padding)
        rows["segment_ids"].append(
            [0] * (len(context_part) + 2) + [1] * (len(ending_ids) + 1) + padding
        )
    return RaceFeature(example.example_id, label_id=example.label, **rows)


def convert_race_examples(
    examples: Iterable[RaceExample],
    tokenizer: AlbertTokenizer,
    max_seq_length: int,
    max_qa_length: int,
) -> list[RaceFeature]:
    """`convert_race_example` for each example, in order.

    Example:
        >>> feats = convert_race_examples(dev, tokenizer, 512, 128)  # doctest: +SKIP
    """
    return [convert_race_example(e, tokenizer, max_seq_length, max_qa_length) for e in examples]
