"""SQuAD questions as the original reader keeps them: the context as text, answers by character."""

from __future__ import annotations

import dataclasses
import json
import logging
import os

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class SquadExample:
    """One question over one paragraph.

    Args:
        qas_id: the question's id in the SQuAD file.
        question_text: the question, as written.
        paragraph_text: the context, as written (answers index into it by character).
        orig_answer_text: the gold answer's text when training ("" for an impossible question);
            None otherwise (evaluation reads the gold answers from the file).
        start_position: the gold answer's first character in `paragraph_text` when training
            (-1 for an impossible question).
        end_position: its last character (inclusive) when training (-1 when impossible).
        is_impossible: the question has no answer in the paragraph (SQuAD v2.0; read for
            training only, as the original).

    Example:
        >>> SquadExample("q1", "Who?", "Rollo did.", "Rollo", 0, 4).orig_answer_text
        'Rollo'
    """

    qas_id: str
    question_text: str
    paragraph_text: str
    orig_answer_text: str | None = None
    start_position: int | None = None
    end_position: int | None = None
    is_impossible: bool = False


class SquadFormatError(ValueError):
    """A SQuAD file that cannot be read as the original reads it; the message names file and id."""


@dataclasses.dataclass(frozen=True)
class SquadFile:
    """What `read_squad` got from one file.

    Args:
        examples: the questions, in file order.
        skipped: ids of training questions dropped for an answer not found in their context
            (only with `skip_bad_answers=True`).

    Example:
        >>> SquadFile([], []).examples
        []
    """

    examples: list[SquadExample]
    skipped: list[str]


def _load_json(path: str) -> object:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise SquadFormatError(f"{path}: not valid JSON: {e}") from e
    except UnicodeDecodeError as e:
        raise SquadFormatError(f"{path}: not UTF-8 text: {e}") from e


def _field(record: object, key: str, kind: type, where: str) -> object:
    if not isinstance(record, dict) or key not in record:
        raise SquadFormatError(f"{where}: missing {key!r}")
    value = record[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise SquadFormatError(f"{where}: {key!r} is not a {kind.__name__}: {value!r}")
    return value


def _utf8_error(text: str) -> str | None:
    """Why `text` has no UTF-8 form (a lone surrogate, which JSON's "\\ud800" escapes give), or
    None. Its answers would be cut from it by character, as the text-in model refuses to do for
    bytes that are not UTF-8."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return f"is not valid UTF-8: a lone surrogate U+{ord(text[e.start]):04X} at character {e.start}"
    return None


def _answer_error(paragraph_text: str, answer: object, where: str) -> str | None:
    """Why a training answer cannot be used, or None: its text must sit at `answer_start`."""
    text = _field(answer, "text", str, where)
    start = _field(answer, "answer_start", int, where)
    if not text:
        return "the answer text is empty"
    found = paragraph_text[start : start + len(text)] if start >= 0 else None
    if found != text:
        return f"answer {text!r} is not at answer_start {start} (the context has {found!r} there)"
    return None


def read_squad(
    path: str | os.PathLike, is_training: bool, skip_bad_answers: bool = False
) -> SquadFile:
    """Reads a SQuAD v1.1 / v2.0 JSON file as the original `read_squad_examples`, checked.

    Training: each answerable question needs exactly one answer, whose text must be found at its
    `answer_start` (the original took the offsets on trust); v2.0 `is_impossible` questions get
    `orig_answer_text=""` and positions -1. Evaluation keeps only the texts (the metrics read the
    gold answers from the file). Errors name the file and the question id; with
    `skip_bad_answers=True` a training answer that is not in its context drops the question
    instead, and its id is listed in `skipped`.

    Question ids must be unique for evaluation: predictions are keyed by id, so the original
    silently kept one answer of a repeated id. Training keys nothing by id (the original trains on
    every copy), so a training file may repeat an id, as the original reads it.

    Args:
        path: the JSON file.
        is_training: read answers as the training reader does.
        skip_bad_answers: drop (and count) training questions whose answer is not in the context.
    """
    path = os.fspath(path)
    data = _field(_load_json(path), "data", list, path)
    examples: list[SquadExample] = []
    skipped: list[str] = []
    seen: dict[str, str] = {}  # id -> where first met (evaluation only)
    for article_index, article in enumerate(data):
        for paragraph_index, paragraph in enumerate(
            _field(article, "paragraphs", list, f"{path}: article {article_index}")
        ):
            where = f"{path}: article {article_index}, paragraph {paragraph_index}"
            paragraph_text = _field(paragraph, "context", str, where)
            for qa in _field(paragraph, "qas", list, where):
                qas_id = _field(qa, "id", str, where)
                where_qa = f"{path}: question {qas_id!r}"
                question_text = _field(qa, "question", str, where_qa)
                if not paragraph_text.strip():
                    raise SquadFormatError(f"{where_qa}: empty context")
                if not question_text.strip():
                    raise SquadFormatError(f"{where_qa}: empty question")
                for field, text in (("context", paragraph_text), ("question", question_text)):
                    error = _utf8_error(text)
                    if error is not None:
                        raise SquadFormatError(f"{where_qa}: the {field} {error}")
                if not is_training:
                    _check_unique(seen, qas_id, article_index, paragraph_index, path)
                    examples.append(SquadExample(qas_id, question_text, paragraph_text))
                    continue
                is_impossible = qa.get("is_impossible", False)
                if not isinstance(is_impossible, bool):
                    raise SquadFormatError(f"{where_qa}: 'is_impossible' is not a bool")
                if is_impossible:
                    examples.append(
                        SquadExample(qas_id, question_text, paragraph_text, "", -1, -1, True)
                    )
                    continue
                answers = _field(qa, "answers", list, where_qa)
                if len(answers) != 1:
                    raise SquadFormatError(
                        f"{where_qa}: for training, each question should have exactly 1 answer "
                        f"(found {len(answers)})"
                    )
                error = _answer_error(paragraph_text, answers[0], where_qa)
                if error is not None:
                    if not skip_bad_answers:
                        raise SquadFormatError(f"{where_qa}: {error}")
                    skipped.append(qas_id)
                    continue
                text, start = answers[0]["text"], answers[0]["answer_start"]
                examples.append(
                    SquadExample(
                        qas_id, question_text, paragraph_text, text, start, start + len(text) - 1
                    )
                )
    if skipped:
        logger.warning(
            "%s: skipped %d training question(s) whose answer is not in the context",
            path,
            len(skipped),
        )
    return SquadFile(examples, skipped)


def _check_unique(seen: dict[str, str], qas_id: str, article: int, paragraph: int, path: str):
    here = f"article {article}, paragraph {paragraph}"
    if qas_id in seen:
        raise SquadFormatError(
            f"{path}: question id {qas_id!r} appears twice ({seen[qas_id]} and {here}): its "
            "predictions would overwrite each other; give every question its own id"
        )
    seen[qas_id] = here


def read_squad_examples(
    path: str | os.PathLike, is_training: bool, skip_bad_answers: bool = False
) -> list[SquadExample]:
    """`read_squad(...).examples`: the questions of a SQuAD file, as the original reader.

    Example:
        >>> examples = read_squad_examples("dev-v2.0.json", is_training=False)  # doctest: +SKIP
    """
    return read_squad(path, is_training, skip_bad_answers).examples
