"""Reading input text into documents (lists of raw sentences), streaming, with bad-input accounting.

Two input formats:
- `sentences` (the original's): one sentence per line, a blank line between documents.
- `paragraphs`: plain prose, hard-wrapped lines, blank lines between paragraphs. Wrapped lines are joined
  and each paragraph is split into sentences by `sentencex` (Wikimedia's rule-based segmenter: compiled,
  no model download, keeps every character). A file is one document.

In both formats a document also ends at the end of its file (the original let a document run on into
the next file when a file did not end with a blank line) and once it holds `max_document_chars`
characters (at the next sentence line or paragraph end), which bounds the memory a document can take.

Bad lines (invalid UTF-8, NUL bytes, longer than `max_line_bytes`) are skipped as if absent, logged with
file and line, and counted by `SkipLog`. Input files that match nothing or cannot be opened are fatal
(`InputError`) and are checked before any work starts.
"""

from __future__ import annotations

import dataclasses
import gzip
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import BinaryIO

from absl import logging

from albert_tf.io import expand_patterns
from albert_tf.settings import setting

INPUT_FORMATS = ("sentences", "paragraphs")
_BOM = b"\xef\xbb\xbf"
_LOGGED_PER_REASON = 10  # individual warnings per skip reason before they are only counted


class InputError(Exception):
    """A fatal input problem (a pattern matching nothing, an unreadable file); names the file."""


@dataclasses.dataclass(frozen=True)
class CorpusConfig:
    """How input files become documents.

    Args:
        every field is one flag of data prep, its help text in its `setting`.

    Example:
        CorpusConfig(input_format="paragraphs")
    """

    input_format: str = setting(
        "sentences",
        "sentences: one sentence per line, blank line between documents (the original's "
        "format). paragraphs: hard-wrapped prose, blank line between paragraphs, one document "
        "per file; split into sentences with sentencex.",
        choices=INPUT_FORMATS,
    )
    max_line_bytes: int = setting(100_000, "Longer input lines are skipped and counted.")
    max_document_chars: int = setting(
        100_000, "A document ends at the next line/paragraph after this many characters."
    )
    language: str = setting(
        "en", "Language of the sentence-splitting rules (paragraphs).", flag="sentence_language"
    )

    def __post_init__(self):
        if self.input_format not in INPUT_FORMATS:
            raise ValueError(
                f"input_format must be one of {INPUT_FORMATS}, got {self.input_format!r}"
            )
        if self.max_line_bytes < 1 or self.max_document_chars < 1:
            raise ValueError("max_line_bytes and max_document_chars must be positive")


@dataclasses.dataclass
class Document:
    """One document: its index (file number, ordinal in the file), where it starts, and its raw
    sentences. The index needs nothing but the file itself, so files can be read apart."""

    index: tuple[int, int]
    source: str
    sentences: list[str]
    num_chars: int


class SkipLog:
    """Counts skipped inputs per (file, reason), keeps the first line numbers, logs the first few."""

    def __init__(self):
        self._entries: dict[tuple[str, str], dict] = {}
        self._logged: dict[str, int] = {}

    def skip(self, path: str, reason: str, line: int | None = None, detail: str = "") -> None:
        """Records one skipped line (or a whole file when `line` is None) and logs it."""
        entry = self._entries.setdefault(
            (path, reason), {"file": path, "reason": reason, "count": 0, "first_lines": []}
        )
        entry["count"] += 1
        if line is not None and len(entry["first_lines"]) < 10:
            entry["first_lines"].append(line)
        shown = self._logged.get(reason, 0)
        if shown < _LOGGED_PER_REASON:
            where = f"{path}:{line}" if line is not None else path
            logging.warning("%s: skipped (%s)%s", where, reason, f": {detail}" if detail else "")
        elif shown == _LOGGED_PER_REASON:
            logging.warning("further '%s' skips are counted in the summary but not logged", reason)
        self._logged[reason] = shown + 1

    def merge(self, entries: Sequence[dict]) -> None:
        """Adds another log's `entries()` (e.g. a worker's), without logging them again."""
        for other in entries:
            entry = self._entries.setdefault(
                (other["file"], other["reason"]),
                {"file": other["file"], "reason": other["reason"], "count": 0, "first_lines": []},
            )
            entry["count"] += other["count"]
            entry["first_lines"] = sorted(entry["first_lines"] + other["first_lines"])[:10]

    def entries(self) -> list[dict]:
        """Every skipped input: file, reason, count and the first line numbers."""
        return [dict(e) for e in self._entries.values()]

    def has(self, path: str, reason: str) -> bool:
        """Whether `path` has a skip of `reason`."""
        return (path, reason) in self._entries

    def counts(self) -> dict[str, int]:
        """Number of skips per reason."""
        counts: dict[str, int] = {}
        for entry in self._entries.values():
            counts[entry["reason"]] = counts.get(entry["reason"], 0) + entry["count"]
        return counts

    def total(self, reason: str | None = None) -> int:
        """Number of skips, of one reason or all."""
        return sum(e["count"] for e in self._entries.values() if reason in (None, e["reason"]))


def expand_inputs(patterns: str | Sequence[str]) -> list[str]:
    """Files of comma-separated globs, each glob's matches sorted, in pattern order (repeats kept,
    as the original reads a file named twice twice). Raises InputError naming every pattern that
    matches no file."""
    try:
        return expand_patterns(patterns, keep_repeats=True)
    except (FileNotFoundError, ValueError) as e:
        raise InputError(str(e)) from None


def check_readable(paths: Sequence[str]) -> None:
    """Opens and reads a byte of every file; raises InputError naming the first that fails."""
    for path in dict.fromkeys(paths):
        try:
            with open(path, "rb") as f:
                f.read(1)
        except OSError as e:
            raise InputError(f"cannot read input file {path}: {e.strerror or e}") from e


def open_local(path: str) -> BinaryIO:
    """A local (gzip) file for reading bytes; other openers (e.g. Beam's filesystems) fit too."""
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


def read_lines(
    path: str, max_line_bytes: int, skips: SkipLog, opener: Callable[[str], BinaryIO] = open_local
) -> Iterator[tuple[int, str]]:
    """(line number, decoded line without line ending) of the good lines of a (gzip) file.

    Empty files, lines over `max_line_bytes`, NUL bytes, invalid UTF-8 and read errors are
    recorded in `skips` (file, line, reason) and skipped.
    """
    number = 0
    try:
        with opener(path) as f:
            while True:
                raw = f.readline(max_line_bytes + 2)  # room for "\r\n"
                if not raw:
                    if number == 0:
                        skips.skip(path, "empty_file")
                    return
                number += 1
                if number == 1 and raw.startswith(_BOM):
                    raw = raw[len(_BOM) :]
                if not raw.endswith(b"\n") and len(raw) == max_line_bytes + 2:
                    while raw and not raw.endswith(b"\n"):  # drain the rest in bounded reads
                        raw = f.readline(1 << 20)
                    skips.skip(path, "line_too_long", number, f"longer than {max_line_bytes} bytes")
                    continue
                raw = raw.rstrip(b"\r\n")
                if len(raw) > max_line_bytes:
                    skips.skip(
                        path, "line_too_long", number, f"{len(raw)} bytes > {max_line_bytes}"
                    )
                    continue
                nul = raw.find(b"\x00")
                if nul >= 0:
                    skips.skip(path, "nul_byte", number, f"NUL at byte {nul}")
                    continue
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    skips.skip(path, "invalid_utf8", number, f"invalid UTF-8 at byte {e.start}")
                    continue
                yield number, line
    except (OSError, EOFError, zlib.error) as e:
        # A file that opened but breaks mid-way (corrupt gzip, I/O error): keep what was read, go on.
        skips.skip(path, "read_error", number + 1, str(e))


def _is_blank(line: str) -> bool:
    """Empty after the original's `preprocess_text` (the document delimiter of the sentence format)."""
    if not line.split():
        return True
    if line.isascii():
        return False
    from albert_tf.text.tokenization import preprocess_text  # only for the rare non-ASCII check

    return not preprocess_text(line, lower=False)


class _DocumentBuilder:
    """Accumulates sentences of one file into documents capped at `max_document_chars`."""

    def __init__(self, path: str, file_number: int, max_chars: int):
        self.path, self.file_number, self.max_chars = path, file_number, max_chars
        self.next_ordinal = 0
        self.sentences: list[str] = []
        self.chars = 0
        self.start_line = 0

    def add(self, sentences: list[str], line: int) -> None:
        if not self.sentences:
            self.start_line = line
        self.sentences.extend(sentences)
        self.chars += sum(len(s) for s in sentences)

    def full(self) -> bool:
        return self.chars >= self.max_chars

    def take(self) -> Document | None:
        if not self.sentences:
            return None
        doc = Document(
            (self.file_number, self.next_ordinal),
            f"{self.path}:{self.start_line}",
            self.sentences,
            self.chars,
        )
        self.next_ordinal += 1
        self.sentences, self.chars = [], 0
        return doc


def _split_sentences(paragraph: str, language: str) -> list[str]:
    import sentencex  # compiled, ~ms import; only needed for paragraphs

    return [s.strip() for s in sentencex.segment(language, paragraph) if s.strip()]


def _sentence_lines(lines: Iterator[tuple[int, str]]) -> Iterator[tuple[int, list[str]]]:
    """(line number, [sentence]) per text line; ([]) for a document break."""
    for number, line in lines:
        yield number, ([] if _is_blank(line) else [line])


def _paragraph_sentences(
    lines: Iterator[tuple[int, str]], config: CorpusConfig
) -> Iterator[tuple[int, list[str]]]:
    """(first line, sentences) per paragraph of wrapped lines. Paragraphs never end a document; one
    without blank lines is cut once it reaches `max_document_chars`."""
    paragraph: list[str] = []
    chars = first_line = 0
    for number, line in lines:
        stripped = line.strip()
        if stripped:
            if not paragraph:
                first_line = number
            paragraph.append(stripped)
            chars += len(stripped)
        if paragraph and (not stripped or chars >= config.max_document_chars):
            yield first_line, _split_sentences(" ".join(paragraph), config.language)
            paragraph, chars = [], 0
    if paragraph:
        yield first_line, _split_sentences(" ".join(paragraph), config.language)


def read_documents(
    paths: Sequence[str], config: CorpusConfig, skips: SkipLog
) -> Iterator[Document]:
    """Streams the documents of all files in order (file number = position in `paths`)."""
    for file_number, path in enumerate(paths):
        yield from read_file_documents(file_number, path, config, skips)


def read_file_documents(
    file_number: int,
    path: str,
    config: CorpusConfig,
    skips: SkipLog,
    opener: Callable[[str], BinaryIO] = open_local,
) -> Iterator[Document]:
    """Streams the documents of one file, indexed (file_number, 0), (file_number, 1), ..."""
    builder = _DocumentBuilder(path, file_number, config.max_document_chars)
    lines = read_lines(path, config.max_line_bytes, skips, opener)
    units = (
        _sentence_lines(lines)
        if config.input_format == "sentences"
        else _paragraph_sentences(lines, config)
    )
    produced = 0
    for number, sentences in units:
        if sentences:
            builder.add(sentences, number)
        # A blank line ends a document in the sentence format; a full document ends anywhere.
        doc = (
            builder.take()
            if (not sentences and config.input_format == "sentences") or builder.full()
            else None
        )
        if doc is not None:
            produced += 1
            yield doc
    last = builder.take()
    if last is not None:
        produced += 1
        yield last
    if produced == 0 and not skips.has(path, "empty_file"):
        skips.skip(path, "no_text")


def batch_documents(documents: Iterator[Document], batch_chars: int) -> Iterator[list[Document]]:
    """Consecutive documents grouped until a group holds at least `batch_chars` characters."""
    batch: list[Document] = []
    chars = 0
    for doc in documents:
        batch.append(doc)
        chars += doc.num_chars
        if chars >= batch_chars:
            yield batch
            batch, chars = [], 0
    if batch:
        yield batch
