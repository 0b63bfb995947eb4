"""Vocabulary training (data_prep.vocab, pipelines/train_tokenizer.py) on the small fixture corpus."""

import gzip
import os
import pathlib
import re
import subprocess
import sys

import pytest
import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2

from albert_tf.text.tokenization import AlbertTokenizer
from data_prep import corpus
from data_prep.vocab import VocabConfig, train_vocab

REPO = pathlib.Path(__file__).parent.parent
CORPUS = REPO / "tests" / "fixtures" / "original_data" / "corpus_small.txt"
FIXED_PIECES = [
    "<pad>",
    "<unk>",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "(",
    ")",
    '"',
    "-",
    ".",
    "\u2013",
    "\u00a3",
    "\u20ac",
]
TINY = VocabConfig(vocab_size=500, num_threads=1)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("vocab")
    return train_vocab(str(CORPUS), str(out), "tiny", TINY)


def test_id_layout_and_no_bos_eos(trained):
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(pathlib.Path(trained.model_path).read_bytes())
    assert [p.piece for p in proto.pieces[:13]] == FIXED_PIECES
    types = sentencepiece_model_pb2.ModelProto.SentencePiece
    assert [p.type for p in proto.pieces[:13]] == [types.CONTROL, types.UNKNOWN] + [
        types.CONTROL
    ] * 3 + [types.USER_DEFINED] * 8
    assert len(proto.pieces) == 500 and proto.trainer_spec.model_type == proto.trainer_spec.UNIGRAM
    assert proto.trainer_spec.character_coverage == pytest.approx(0.99995)
    assert (
        proto.trainer_spec.model_prefix == "tiny"
    )  # not the temporary directory it was trained in
    sp = spm.SentencePieceProcessor(model_file=trained.model_path)
    assert (sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id()) == (0, 1, -1, -1)
    vocab_lines = pathlib.Path(trained.vocab_path).read_text("utf-8").splitlines()
    assert [line.split("\t")[0] for line in vocab_lines[:13]] == FIXED_PIECES and len(
        vocab_lines
    ) == 500
    assert sorted(os.listdir(os.path.dirname(trained.model_path))) == ["tiny.model", "tiny.vocab"]


def test_lowercased_ascii_text_has_no_unknowns(trained):
    tokenizer = AlbertTokenizer(trained.model_path)
    assert (tokenizer.pad_id, tokenizer.cls_id, tokenizer.sep_id, tokenizer.mask_id) == (0, 2, 3, 4)
    # Letters and common punctuation; digits, "_" and "=" are below 0.99995 coverage in two novels.
    plain = re.compile(r"[A-Za-z .,;:!?'\"()\-]+")
    lines = [line for line in CORPUS.read_text("utf-8").splitlines() if plain.fullmatch(line)]
    ids = tokenizer.encode_batch(lines + ["A Brand-New Sentence: (about) a QUICK fox?!"])
    assert len(lines) > 3000 and all(tokenizer.unk_id not in row for row in ids)
    assert tokenizer.tokenize("THE CAT") == tokenizer.tokenize(
        "the cat"
    )  # trained on lowercased text


def test_same_seed_same_model_and_sampling_bounds_input(trained, tmp_path):
    again = train_vocab(str(CORPUS), str(tmp_path / "again"), "tiny", TINY)
    assert (
        pathlib.Path(again.model_path).read_bytes() == pathlib.Path(trained.model_path).read_bytes()
    )
    sampled = train_vocab(
        str(CORPUS),
        str(tmp_path / "sampled"),
        "tiny",
        VocabConfig(vocab_size=500, num_threads=1, input_sentence_size=300),
    )
    assert (
        pathlib.Path(sampled.model_path).read_bytes()
        != pathlib.Path(trained.model_path).read_bytes()
    )


def test_gzip_and_comma_separated_globs_and_bad_lines(tmp_path):
    lines = CORPUS.read_bytes().splitlines(keepends=True)
    with gzip.open(tmp_path / "a.txt.gz", "wb") as f:
        f.writelines(lines[: len(lines) // 2])
    (tmp_path / "b.txt").write_bytes(
        b"".join(lines[len(lines) // 2 :]) + b"bad \xff\xfe line\n" + b"nul\0line\n"
    )
    result = train_vocab(f"{tmp_path}/*.gz, {tmp_path}/b.*", str(tmp_path / "out"), "mixed", TINY)
    assert result.lines_used == trained_line_count() and result.lines_skipped == {
        "invalid_utf8": 1,
        "nul_byte": 1,
    }
    assert AlbertTokenizer(result.model_path).encode("alice") != []


def trained_line_count():
    return sum(1 for line in CORPUS.read_text("utf-8").splitlines() if line.strip())


def test_errors_name_the_input_or_output(tmp_path):
    with pytest.raises(corpus.InputError, match="nothing-here"):
        train_vocab(str(tmp_path / "nothing-here*.txt"), str(tmp_path / "out"), "x", TINY)
    blank = tmp_path / "blank.txt"
    blank.write_text("\n  \n\t\n")
    with pytest.raises(ValueError, match="blank.txt"):
        train_vocab(str(blank), str(tmp_path / "out"), "x", TINY)
    not_a_dir = tmp_path / "file.txt"
    not_a_dir.write_text("x")
    with pytest.raises(PermissionError, match="file.txt"):
        train_vocab(str(CORPUS), str(not_a_dir / "sub"), "x", TINY)


def test_failed_training_keeps_previous_output(trained, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "tiny.model").write_bytes(b"previous")
    with pytest.raises(ValueError, match="vocab_size=900000"):
        train_vocab(str(CORPUS), str(out), "tiny", VocabConfig(vocab_size=900000, num_threads=1))
    assert (out / "tiny.model").read_bytes() == b"previous" and sorted(os.listdir(out)) == [
        "tiny.model"
    ]


def test_cli(tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    cmd = [
        sys.executable,
        "-m",
        "pipelines.train_tokenizer",
        f"--input_file={CORPUS}",
        "--vocab_size=400",
        f"--output_dir={tmp_path}",
        "--model_prefix=sub/cli",
        "--num_threads=1",
    ]
    run = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert (
        spm.SentencePieceProcessor(model_file=str(tmp_path / "sub" / "cli.model")).get_piece_size()
        == 400
    )
    assert (tmp_path / "sub" / "cli.vocab").exists()
    run = subprocess.run(
        cmd[:3] + ["--input_file=/no/such/*.txt", f"--output_dir={tmp_path}"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 1 and "/no/such/*.txt" in run.stderr
