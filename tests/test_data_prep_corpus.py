"""Reading inputs: both formats, gzip, and bad input (counted, named by file and line, never fatal mid-run)."""

import gzip
import os

import pytest

from data_prep import corpus
from data_prep.corpus import CorpusConfig, InputError, SkipLog


def _read(paths, **config):
    skips = SkipLog()
    docs = list(corpus.read_documents([str(p) for p in paths], CorpusConfig(**config), skips))
    return docs, skips


def _by_reason(skips):
    return {
        (os.path.basename(e["file"]), e["reason"]): (e["count"], e["first_lines"])
        for e in skips.entries()
    }


def test_sentence_format_documents(tmp_path):
    a = tmp_path / "a.txt"
    a.write_bytes(
        b"\xef\xbb\xbfFirst one.\r\nSecond one.\r\n\r\n  \t \n\nThird.\n\u0301\u0300\n".replace(
            b"\\u0301\\u0300", "\u0301\u0300".encode()
        )
    )
    b = tmp_path / "b.txt"
    b.write_text("Fourth.\nFifth.")  # no blank line before a.txt's end nor trailing newline here
    docs, skips = _read([a, b])
    assert [d.sentences for d in docs] == [
        ["First one.", "Second one."],
        ["Third."],
        ["Fourth.", "Fifth."],
    ]
    # (file number, ordinal in the file): each file's documents are numbered on their own.
    assert [d.index for d in docs] == [(0, 0), (0, 1), (1, 0)]
    assert docs[0].source.endswith("a.txt:1") and docs[1].source.endswith("a.txt:6")
    assert (
        skips.entries() == []
    )  # a line of only combining marks is a document break, as after preprocess_text


def test_documents_are_capped_at_a_line(tmp_path):
    path = tmp_path / "long.txt"
    path.write_text("".join(f"sentence number {i:04d}\n" for i in range(100)))  # 20 chars each
    docs, _ = _read([path], max_document_chars=200)
    assert [len(d.sentences) for d in docs] == [10] * 10
    assert [s for d in docs for s in d.sentences] == [
        f"sentence number {i:04d}" for i in range(100)
    ]


def test_paragraph_format_joins_wrapped_lines_and_splits_sentences(tmp_path):
    path = tmp_path / "book.txt"
    path.write_bytes(
        b"Mrs. Hurst thought the\r\nsame. She left at\r\nnoon!\r\n\r\n"
        b"\"Is it?\" he asked.\r\n\r\n\r\nThe end"
    )
    docs, _ = _read([path], input_format="paragraphs")
    assert len(docs) == 1
    assert docs[0].sentences == [
        "Mrs. Hurst thought the same.",
        "She left at noon!",
        "\"Is it?\" he asked.",
        "The end",
    ]


def test_paragraph_documents_are_capped_at_a_paragraph(tmp_path):
    path = tmp_path / "book.txt"
    path.write_text("\n\n".join(f"Paragraph {i} has words.\nIt wraps here." for i in range(30)))
    docs, _ = _read([path], input_format="paragraphs", max_document_chars=100)
    assert all(len(d.sentences) % 2 == 0 for d in docs)  # never cut inside a paragraph
    assert sum(len(d.sentences) for d in docs) == 60 and len(docs) > 5


def test_gzip_input(tmp_path):
    path = tmp_path / "a.txt.gz"
    with gzip.open(path, "wb") as f:
        f.write(b"One.\nTwo.\n\nThree.\n")
    docs, _ = _read([path])
    assert [d.sentences for d in docs] == [["One.", "Two."], ["Three."]]


def test_bad_lines_are_skipped_counted_and_located(tmp_path, caplog):
    path = tmp_path / "bad.txt"
    huge = b"x" * (3 * 1024 * 1024)
    path.write_bytes(
        b"Good one.\n"  # 1
        b"Bad \xff\xfe utf8.\n"  # 2
        b"Has a NUL \x00 byte.\n"  # 3
        + huge
        + b"\n"  # 4: megabytes
        + b"Good two.\n"  # 5
        + huge
    )  # 6: megabytes, no newline at the end
    docs, skips = _read([path], max_line_bytes=1000)
    assert [d.sentences for d in docs] == [["Good one.", "Good two."]]
    reasons = _by_reason(skips)
    assert reasons[("bad.txt", "invalid_utf8")] == (1, [2])
    assert reasons[("bad.txt", "nul_byte")] == (1, [3])
    assert reasons[("bad.txt", "line_too_long")] == (2, [4, 6])
    assert skips.total() == 4
    assert "bad.txt:2: skipped (invalid_utf8): invalid UTF-8 at byte 4" in caplog.text
    assert "bad.txt:4: skipped (line_too_long)" in caplog.text


def test_empty_and_textless_files_are_counted(tmp_path):
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "blank.txt").write_text("\n  \n\n")
    (tmp_path / "ok.txt").write_text("Hello.\n")
    docs, skips = _read([tmp_path / "empty.txt", tmp_path / "blank.txt", tmp_path / "ok.txt"])
    assert [d.sentences for d in docs] == [["Hello."]]
    reasons = _by_reason(skips)
    assert reasons[("empty.txt", "empty_file")][0] == 1
    assert reasons[("blank.txt", "no_text")][0] == 1


def test_corrupt_gzip_keeps_what_was_read(tmp_path):
    good = gzip.compress(b"".join(b"Line %d.\n" % i for i in range(5000)))
    path = tmp_path / "broken.txt.gz"
    path.write_bytes(good[: len(good) // 2])
    docs, skips = _read([path])
    assert docs and docs[0].sentences[0] == "Line 0."
    assert skips.total("read_error") == 1 and skips.entries()[0]["file"].endswith("broken.txt.gz")


def test_expand_inputs_sorts_globs_keeps_repeats_and_names_missing(tmp_path):
    for name in ("b.txt", "a.txt"):
        (tmp_path / name).write_text("x\n")
    (tmp_path / "sub").mkdir()
    files = corpus.expand_inputs(f"{tmp_path}/*,{tmp_path}/a.txt")
    assert [os.path.basename(f) for f in files] == ["a.txt", "b.txt", "a.txt"]
    with pytest.raises(InputError, match="nothing.txt"):
        corpus.expand_inputs(f"{tmp_path}/a.txt,{tmp_path}/nothing.txt")


def test_unreadable_input_is_named(tmp_path):
    (tmp_path / "dangling.txt").symlink_to(tmp_path / "gone.txt")
    files = corpus.expand_inputs(str(tmp_path / "*.txt"))
    with pytest.raises(InputError, match="cannot read input file .*dangling.txt"):
        corpus.check_readable(files)
    if os.geteuid() != 0:  # root reads any file, so a chmod cannot make it unreadable
        locked = tmp_path / "locked.txt"
        locked.write_text("x\n")
        locked.chmod(0)
        with pytest.raises(InputError, match="locked.txt"):
            corpus.check_readable([str(locked)])


def test_batches_group_documents_by_characters():
    docs = [corpus.Document(i, "x", ["s" * 40], 40) for i in range(10)]
    batches = list(corpus.batch_documents(iter(docs), 100))
    assert [[d.index for d in b] for b in batches] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
