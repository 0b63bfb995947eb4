"""GLUE tasks in the original TSV format: the processors of the original `classifier_utils.py`.

Each task keeps the original's folder under `data_dir`, file names, column layout and label set.
Files are read with quoting off (a field is exactly the text between tabs; many rows start with
`"`), gunzipped where only `<file>.gz` is there; the UTF-8 BOM of MRPC is dropped, and CoLA's
train/dev files have no header (its test file does). Labels go through
`preprocess_text(lower=do_lower_case)` as in the original, then must be in the task's label set
(STS-B: a finite float). Malformed rows (a column count different from the
header's, an unknown label, bytes that are not UTF-8) raise `MalformedRowError` naming file and
line, or are skipped and counted with `skip_malformed_rows=True`. The original skipped short QQP
rows silently and crashed (or mislabelled, for rows with extra tabs) elsewhere.
"""

from __future__ import annotations

import dataclasses
import gzip
import math
import os
import zlib

from albert_tf.text.tokenization import preprocess_text

SPLITS = ("train", "dev", "test")


class MalformedRowError(ValueError):
    """A GLUE TSV row that cannot be read; the message starts with `path:line:`."""


@dataclasses.dataclass(frozen=True)
class Layout:
    """Column indices of one file format (-1 = last column, as the original's `line[-1]`)."""

    text_a: int
    text_b: int | None
    label: int | None  # None: unlabelled (test files)
    guid: int | None  # None: the original's "<split>-<row index>"
    header: bool
    num_columns: int | None = None  # for files without a header; else the header's width


@dataclasses.dataclass(frozen=True)
class GlueTask:
    """One GLUE task as the original processor reads it."""

    name: str
    folder: str
    labels: tuple[str, ...] | None  # None: regression (STS-B), one output
    labelled: Layout  # train and dev files
    test: Layout
    files: dict[str, str]  # split -> file name inside `folder`
    submission_file: str  # name the GLUE server expects for this task's predictions
    # What each label id means, for people and serving clients (the TSV files and the GLUE
    # server keep `labels`); None: the labels themselves.
    label_names: tuple[str, ...] | None = None

    def __post_init__(self):
        if self.labels is not None and self.label_names is None:
            object.__setattr__(self, "label_names", self.labels)
        if self.label_names is not None and len(self.label_names) != self.num_labels:
            raise ValueError(f"{self.name}: {self.label_names} do not name {self.labels}")

    @property
    def is_regression(self) -> bool:
        return self.labels is None

    @property
    def num_labels(self) -> int:
        return 1 if self.labels is None else len(self.labels)

    def layout(self, split: str) -> Layout:
        return self.test if split == "test" else self.labelled


_FILES = {"train": "train.tsv", "dev": "dev.tsv", "test": "test.tsv"}
_BINARY = ("0", "1")
_NLI3 = ("contradiction", "entailment", "neutral")
_ENTAIL = ("entailment", "not_entailment")
# (index/guid, a, b, label) layouts shared by QNLI, RTE, WNLI.
_PAIR = Layout(text_a=1, text_b=2, label=-1, guid=0, header=True)
_PAIR_TEST = Layout(text_a=1, text_b=2, label=None, guid=0, header=True)
_MNLI = Layout(text_a=8, text_b=9, label=-1, guid=0, header=True)
_MNLI_TEST = Layout(text_a=8, text_b=9, label=None, guid=0, header=True)

TASKS: dict[str, GlueTask] = {
    t.name: t
    for t in (
        GlueTask(
            "cola",
            "CoLA",
            _BINARY,
            Layout(text_a=3, text_b=None, label=1, guid=None, header=False, num_columns=4),
            Layout(text_a=1, text_b=None, label=None, guid=0, header=True),
            _FILES,
            "CoLA.tsv",
            ("unacceptable", "acceptable"),
        ),
        GlueTask(
            "mnli",
            "MNLI",
            _NLI3,
            _MNLI,
            _MNLI_TEST,
            {"train": "train.tsv", "dev": "dev_matched.tsv", "test": "test_matched.tsv"},
            "MNLI-m.tsv",
        ),
        GlueTask(
            "mismnli",
            "MNLI",
            _NLI3,
            _MNLI,
            _MNLI_TEST,
            {"train": "train.tsv", "dev": "dev_mismatched.tsv", "test": "test_mismatched.tsv"},
            "MNLI-mm.tsv",
        ),
        GlueTask(
            "mrpc",
            "MRPC",
            _BINARY,
            Layout(text_a=3, text_b=4, label=0, guid=None, header=True),
            Layout(text_a=3, text_b=4, label=None, guid=0, header=True),
            _FILES,
            "MRPC.tsv",
            ("not_equivalent", "equivalent"),
        ),
        GlueTask("rte", "RTE", _ENTAIL, _PAIR, _PAIR_TEST, _FILES, "RTE.tsv"),
        GlueTask(
            "sst-2",
            "SST-2",
            _BINARY,
            Layout(text_a=0, text_b=None, label=1, guid=None, header=True),
            Layout(text_a=1, text_b=None, label=None, guid=0, header=True),
            _FILES,
            "SST-2.tsv",
            ("negative", "positive"),
        ),
        GlueTask(
            "sts-b",
            "STS-B",
            None,
            Layout(text_a=7, text_b=8, label=-1, guid=0, header=True),
            Layout(text_a=7, text_b=8, label=None, guid=0, header=True),
            _FILES,
            "STS-B.tsv",
        ),
        GlueTask(
            "qqp",
            "QQP",
            _BINARY,
            Layout(text_a=3, text_b=4, label=5, guid=0, header=True),
            Layout(text_a=1, text_b=2, label=None, guid=0, header=True),
            _FILES,
            "QQP.tsv",
            ("not_duplicate", "duplicate"),
        ),
        GlueTask("qnli", "QNLI", _ENTAIL, _PAIR, _PAIR_TEST, _FILES, "QNLI.tsv"),
        GlueTask(
            "wnli",
            "WNLI",
            _BINARY,
            _PAIR,
            _PAIR_TEST,
            _FILES,
            "WNLI.tsv",
            ("not_entailment", "entailment"),  # 1: the pronoun's substitute is entailed
        ),
    )
}


def get_task(name: str) -> GlueTask:
    """The task for a `--task_name` (case-insensitive, as the original lowercases it)."""
    task = TASKS.get(name.lower())
    if task is None:
        raise ValueError(f"unknown GLUE task {name!r}; choose from {sorted(TASKS)}")
    return task


@dataclasses.dataclass(frozen=True)
class GlueExample:
    """One row: raw texts (the tokenizer preprocesses them), label (str, float, or None on test)."""

    guid: str
    text_a: str
    text_b: str | None
    label: str | float | None
    line: int  # 1-based line in the source file


@dataclasses.dataclass
class GlueSplit:
    """The examples of one file, and the malformed rows skipped on request as (line, reason)."""

    path: str
    examples: list[GlueExample]
    skipped: list[tuple[int, str]] = dataclasses.field(default_factory=list)


def task_file(task: GlueTask, data_dir: str | os.PathLike, split: str) -> str:
    """Path of a split: `data_dir/<Folder>/<file>` as the original (which joins the task folder),
    or `data_dir/<file>` when `data_dir` is the task folder itself; `<file>.gz` where only that
    is there."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    name = task.files[split]
    candidates = [
        os.path.join(folder, file)
        for folder in (os.path.join(data_dir, task.folder), os.fspath(data_dir))
        for file in (name, name + ".gz")
    ]
    for path in candidates:
        if os.path.isfile(path):
            return path
    raise FileNotFoundError(f"{task.name} {split} file not found; tried {candidates}")


def read_tsv_rows(path: str | os.PathLike, undecodable: list[tuple[int, str]] | None = None):
    """Yields (line number, fields) of a TSV file (gzip when its name ends in .gz) read with
    quoting off, the UTF-8 BOM dropped.

    Splitting on tabs is what the original's `csv.reader(quotechar=None)` does; reading line by
    line lets every error name its line. A line that is not UTF-8 (flipped bytes, a cut
    multi-byte character) raises `MalformedRowError`, or is skipped and appended to the list
    `undecodable`, if given, as (line, reason).
    """
    path = os.fspath(path)
    for number, raw in _numbered_lines(path):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            if undecodable is None:
                raise MalformedRowError(
                    f"{path}:{number}: not valid UTF-8 ({e}) (set "
                    "skip_malformed_rows to skip and count such rows)"
                ) from None
            undecodable.append((number, f"not valid UTF-8 ({e})"))
            continue
        if number == 1:
            text = text.removeprefix("\ufeff")
        yield number, text.rstrip("\n").removesuffix("\r").split("\t")


def _numbered_lines(path: str):
    """(line number, bytes) of a file, gunzipped when its name ends in .gz; a damaged or cut
    archive raises `MalformedRowError` naming the line it stopped at."""
    number = 0
    try:
        with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
            for number, raw in enumerate(f, start=1):
                yield number, raw
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise MalformedRowError(f"{path}:{number + 1}: damaged gzip data ({e})") from None


def read_split(
    task: GlueTask | str,
    data_dir: str | os.PathLike,
    split: str,
    do_lower_case: bool = True,
    skip_malformed_rows: bool = False,
) -> GlueSplit:
    """Reads the train, dev or test file of a task into `GlueExample`s (see the module doc)."""
    task = get_task(task) if isinstance(task, str) else task
    path = task_file(task, data_dir, split)
    layout = task.layout(split)
    result = GlueSplit(path=path, examples=[])
    rows = read_tsv_rows(path, result.skipped if skip_malformed_rows else None)
    expected = layout.num_columns
    if layout.header:
        header_line, header = next(rows, (1, None))
        if header is None:
            raise MalformedRowError(f"{path}:1: empty file, expected a header line")
        if header_line != 1:
            raise MalformedRowError(f"{path}:1: header is not valid UTF-8")
        expected = len(header)
        used = [
            i
            for i in (layout.text_a, layout.text_b, layout.label, layout.guid)
            if i is not None and i >= 0
        ]
        if expected <= max(used):
            raise MalformedRowError(
                f"{path}:{header_line}: header has {expected} columns, {task.name} {split} needs "
                f"at least {max(used) + 1} (is this the right task?)"
            )
    for line, fields in rows:
        try:
            result.examples.append(
                _example(task, split, layout, fields, line, expected, do_lower_case)
            )
        except _RowError as e:
            if not skip_malformed_rows:
                raise MalformedRowError(
                    f"{path}:{line}: {e} (set skip_malformed_rows to skip and count such rows)"
                ) from None
            result.skipped.append((line, str(e)))
    return result


class _RowError(Exception):
    pass


def _example(
    task: GlueTask,
    split: str,
    layout: Layout,
    fields: list[str],
    line: int,
    expected: int,
    do_lower_case: bool,
) -> GlueExample:
    if len(fields) != expected:
        raise _RowError(f"expected {expected} tab-separated columns, got {len(fields)}")
    label = None
    if layout.label is not None:
        label = preprocess_text(fields[layout.label], lower=do_lower_case)
        if task.is_regression:
            try:
                label = float(label)
            except ValueError:
                label = math.nan
            if not math.isfinite(label):
                raise _RowError(f"label {fields[layout.label]!r} is not a finite number")
        elif label not in task.labels:
            raise _RowError(
                f"unknown label {fields[layout.label]!r}; {task.name} labels are "
                f"{list(task.labels)}"
            )
    # The original's guid: a column, or "<set>-<row index>" counting the header as row 0.
    guid = fields[layout.guid] if layout.guid is not None else f"{split}-{line - 1}"
    text_b = fields[layout.text_b] if layout.text_b is not None else None
    return GlueExample(
        guid=guid, text_a=fields[layout.text_a], text_b=text_b, label=label, line=line
    )


def parse_label_names(given, labels, what: str) -> tuple[str, ...]:
    """`given` (comma-separated, or a sequence) as one name per entry of `labels` (None: a
    regression, which has no names); a `ValueError` in one line otherwise."""
    names = given.split(",") if isinstance(given, str) else list(given)
    names = tuple(str(name).strip() for name in names)
    if labels is None:
        raise ValueError(f"--label_names: {what} is a regression (one score): it has no labels")
    if len(names) != len(labels) or not all(names):
        raise ValueError(
            f"--label_names: {len(names)} names ({','.join(names)}) for {what}'s "
            f"{len(labels)} labels ({','.join(labels)})"
        )
    return names
