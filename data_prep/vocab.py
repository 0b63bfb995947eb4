"""Train an ALBERT SentencePiece vocabulary (the `30k-clean` recipe) on preprocessed text, streaming.

The original README's command: `spm_train --vocab_size=30000 --model_type=unigram --pad_id=0 --unk_id=1
--eos_id=-1 --bos_id=-1 --control_symbols=[CLS],[SEP],[MASK] --user_defined_symbols=( ) " - . – £ €
--character_coverage=0.99995 --shuffle_input_sentence=true --input_sentence_size=10000000`, which fixes
ids 0-12 as `<pad> <unk> [CLS] [SEP] [MASK] ( ) " - . – £ €`. Text goes through `preprocess_text`
first, as the tokenizer does at encode time, and is fed to SentencePiece from an iterator (no temp
copy of the corpus); SentencePiece samples `input_sentence_size` lines by reservoir sampling.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence

import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2
from absl import logging

from albert_tf.text.tokenization import preprocess_text
from data_prep import corpus

CONTROL_SYMBOLS = ("[CLS]", "[SEP]", "[MASK]")
USER_DEFINED_SYMBOLS = ("(", ")", '"', "-", ".", "\u2013", "\u00a3", "\u20ac")


@dataclasses.dataclass(frozen=True)
class VocabConfig:
    """SentencePiece training settings; defaults are the original `30k-clean` command."""

    vocab_size: int = 30000
    do_lower_case: bool = True
    input_sentence_size: int = 10_000_000
    character_coverage: float = 0.99995
    num_threads: int = 1
    seed: int = 12345


@dataclasses.dataclass
class VocabResult:
    """What `train_vocab` wrote and read."""

    model_path: str
    vocab_path: str
    lines_used: int = 0
    lines_skipped: dict[str, int] = dataclasses.field(default_factory=dict)  # reason -> lines


def _training_lines(
    files: Sequence[str], do_lower_case: bool, skips: corpus.SkipLog, result: VocabResult
) -> Iterator[str]:
    """Preprocessed non-empty lines of all files; bad lines are skipped and counted in `skips`."""
    for path in files:
        for _, line in corpus.read_lines(path, corpus.CorpusConfig().max_line_bytes, skips):
            text = preprocess_text(line, lower=do_lower_case)
            if text:
                result.lines_used += 1
                if result.lines_used % 1_000_000 == 0:
                    logging.info("vocab: read %d lines (now in %s)", result.lines_used, path)
                yield text


def train_vocab(
    input_patterns: str | Sequence[str],
    output_dir: str,
    model_prefix: str = "30k-clean",
    config: VocabConfig = VocabConfig(),
) -> VocabResult:
    """Trains a unigram SentencePiece model with ALBERT's settings; writes `<prefix>.model` and `.vocab`.

    Both files appear under their final names only when training succeeded (written in a temporary
    directory inside `output_dir`, then renamed), so an interrupted run leaves no finished-looking file.
    """
    files = corpus.expand_inputs(input_patterns)
    skips = corpus.SkipLog()
    if os.sep in model_prefix or not model_prefix:
        raise ValueError(f"model_prefix must be a plain file name, got {model_prefix!r}")
    try:
        os.makedirs(output_dir, exist_ok=True)
        tmp_dir = tempfile.mkdtemp(prefix=f".{model_prefix}.tmp-", dir=output_dir)
    except OSError as e:
        raise PermissionError(f"output directory {output_dir!r} is not writable: {e}") from e
    result = VocabResult(
        os.path.join(output_dir, f"{model_prefix}.model"),
        os.path.join(output_dir, f"{model_prefix}.vocab"),
    )
    try:
        lines = _training_lines(files, config.do_lower_case, skips, result)
        first = next(lines, None)
        if first is None:
            raise ValueError(
                f"no text to train on: {', '.join(files)} hold no non-empty lines "
                f"(skipped: {skips.counts() or 'none'})"
            )
        logging.info(
            "vocab: training a %d-piece unigram model on %s", config.vocab_size, ", ".join(files)
        )
        spm.set_random_generator_seed(config.seed)
        stopped: list[BaseException] = []  # what stopped the lines, which SentencePiece hides
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=_chain(first, lines, stopped),
                model_prefix=os.path.join(tmp_dir, model_prefix),
                model_type="unigram",
                vocab_size=config.vocab_size,
                pad_id=0,
                unk_id=1,
                bos_id=-1,
                eos_id=-1,
                control_symbols=list(CONTROL_SYMBOLS),
                user_defined_symbols=list(USER_DEFINED_SYMBOLS),
                character_coverage=config.character_coverage,
                shuffle_input_sentence=True,
                input_sentence_size=config.input_sentence_size,
                num_threads=config.num_threads,
                minloglevel=1,
            )
        except RuntimeError as e:
            if stopped:  # reading a file failed or the job was stopped: say that
                raise stopped[0] from None
            if _nearly_full(tmp_dir):  # SentencePiece's own message names neither
                full = os.path.normpath(output_dir)
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), full) from e
            raise ValueError(
                f"SentencePiece training on {', '.join(files)} failed "
                f"(vocab_size={config.vocab_size}, {result.lines_used} lines): {e}"
            ) from e
        _set_model_prefix(os.path.join(tmp_dir, model_prefix + ".model"), model_prefix)
        for suffix in (".vocab", ".model"):  # The model last: its presence means both are complete.
            os.replace(
                os.path.join(tmp_dir, model_prefix + suffix),
                os.path.join(output_dir, model_prefix + suffix),
            )
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
    result.lines_skipped = skips.counts()
    logging.info(
        "vocab: wrote %s from %d lines (skipped %s)",
        result.model_path,
        result.lines_used,
        result.lines_skipped or "none",
    )
    return result


def _nearly_full(directory: str, margin: int = 1 << 20) -> bool:
    """Whether the file system of `directory` has less than `margin` bytes left: SentencePiece
    reports a write it could not do only as `INTERNAL: ... WriteLine`."""
    try:
        stats = os.statvfs(directory)
    except OSError:
        return False
    return stats.f_bavail * stats.f_frsize < margin


def _set_model_prefix(model_path: str, model_prefix: str) -> None:
    # SentencePiece records its model_prefix (here our temp dir) in the model; keep only the name.
    proto = sentencepiece_model_pb2.ModelProto()
    with open(model_path, "rb") as f:
        proto.ParseFromString(f.read())
    proto.trainer_spec.model_prefix = model_prefix
    with open(model_path, "wb") as f:
        f.write(proto.SerializeToString())


def _chain(first: str, rest: Iterator[str], stopped: list[BaseException]) -> Iterator[str]:
    """`first`, then `rest`; what stops `rest` (an error, a signal's exception) is also kept in
    `stopped`: SentencePiece turns it into a RuntimeError of its own."""
    yield first
    try:
        yield from rest
    except GeneratorExit:  # SentencePiece is done with the lines
        raise
    except BaseException as error:
        stopped.append(error)
        raise
