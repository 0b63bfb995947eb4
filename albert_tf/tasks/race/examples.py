"""RACE questions as the original `RaceProcessor` reads them.

`<data_dir>/RACE/<split>/{middle,high}/all.txt` hold one article per line as JSON:
`{"id", "article", "questions", "options", "answers"}`. Each question becomes one example with
four candidate texts: a question containing "_" has it replaced by each option (cloze), any other
question is followed by " " and the option. Article, questions and options go through
`preprocess_text(lower=do_lower_case)` first, as in the original.
"""

from __future__ import annotations

import dataclasses
import json
import os

from albert_tf.text.tokenization import preprocess_text

LABELS = ("A", "B", "C", "D")
LEVELS = ("middle", "high")  # the original reads middle school before high school


class RaceFormatError(ValueError):
    """A RACE line that cannot be read; the message starts with `path:line:`."""


@dataclasses.dataclass(frozen=True)
class RaceExample:
    """One question with its four candidate answers.

    Args:
        example_id: the article's id (shared by its questions), as the original keeps it.
        context: the article, preprocessed.
        endings: per option A-D, the question with the option filled in (or appended).
        label: the gold option's index, 0-3.

    Example:
        >>> RaceExample("m1.txt", "a text", ("q a", "q b", "q c", "q d"), 2).endings[2]
        'q c'
    """

    example_id: str
    context: str
    endings: tuple[str, str, str, str]
    label: int


def _candidate_text(question: str, option: str) -> str:
    if "_" in question:
        return question.replace("_", option)
    return " ".join([question, option])


def _examples_of_line(record: object, where: str, lower: bool) -> list[RaceExample]:
    if not isinstance(record, dict):
        raise RaceFormatError(f"{where}: not a JSON object")
    article_id = record.get("id")
    if not isinstance(article_id, str):
        raise RaceFormatError(f"{where}: missing or non-string 'id'")
    where = f"{where}: article {article_id!r}"
    fields = {}
    for key, kind in (("article", str), ("questions", list), ("options", list), ("answers", list)):
        if not isinstance(record.get(key), kind):
            raise RaceFormatError(f"{where}: missing or malformed {key!r}")
        fields[key] = record[key]
    questions, options, answers = fields["questions"], fields["options"], fields["answers"]
    if not len(questions) == len(options) == len(answers):
        raise RaceFormatError(
            f"{where}: {len(questions)} questions, {len(options)} option lists and "
            f"{len(answers)} answers"
        )
    context = preprocess_text(fields["article"], lower=lower)
    examples = []
    for index, (question, choices, answer) in enumerate(zip(questions, options, answers)):
        where_q = f"{where}, question {index}"
        if answer not in LABELS:
            raise RaceFormatError(f"{where_q}: answer {answer!r} is not one of A, B, C, D")
        if not isinstance(choices, list) or len(choices) != len(LABELS):
            count = len(choices) if isinstance(choices, list) else "no list of"
            raise RaceFormatError(f"{where_q}: {count} options, expected 4")
        if not isinstance(question, str) or not all(isinstance(c, str) for c in choices):
            raise RaceFormatError(f"{where_q}: question and options must be strings")
        question = preprocess_text(question, lower=lower)
        endings = tuple(_candidate_text(question, preprocess_text(c, lower=lower)) for c in choices)
        examples.append(RaceExample(article_id, context, endings, LABELS.index(answer)))
    return examples


def read_race_file(path: str | os.PathLike, do_lower_case: bool = True) -> list[RaceExample]:
    """The examples of one `all.txt` (JSON lines; blank lines are ignored)."""
    path = os.fspath(path)
    examples = []
    with open(path, encoding="utf-8") as f:
        for line_number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path}:{line_number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise RaceFormatError(f"{where}: not valid JSON: {e}") from e
            examples.extend(_examples_of_line(record, where, do_lower_case))
    return examples


def read_race_examples(
    data_dir: str | os.PathLike,
    split: str,
    middle_only: bool = False,
    high_only: bool = False,
    do_lower_case: bool = True,
) -> list[RaceExample]:
    """All questions of `<data_dir>/RACE/<split>/{middle,high}/all.txt`, middle first.

    Args:
        data_dir: the folder holding `RACE/` (the original's `--data_dir`).
        split: "train", "dev" or "test".
        middle_only, high_only: read one level only (the original's flags).
        do_lower_case: lowercase in `preprocess_text`.

    Example:
        >>> dev = read_race_examples("data", "dev")  # doctest: +SKIP
    """
    if middle_only and high_only:
        raise ValueError("middle_only and high_only exclude each other: nothing would be read")
    levels = [
        level
        for level in LEVELS
        if not (level == "middle" and high_only or level == "high" and middle_only)
    ]
    examples = []
    for level in levels:
        examples += read_race_file(
            os.path.join(os.fspath(data_dir), "RACE", split, level, "all.txt"), do_lower_case
        )
    return examples
