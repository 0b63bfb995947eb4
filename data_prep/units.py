"""The runner-independent core of data prep: the job config, seeds, and the unit of work.

The unit of work is a `DocumentPool`: consecutive documents of one input file, grouped by content
alone (`read_file_pools`: until they hold `batch_chars` characters) and keyed by (file number,
ordinal in the file), so every file can be read into pools on its own, by any worker. A runner
hands each pool to `PoolProcessor.instance_records`, which yields the pool's framed TFRecord records
and counts its statistics. The contract every runner relies on:

- A pool's records depend only on the instance settings of the job config (seed, tokenizer, dupe
  factor, pair and masking settings, masking mode) and on the pool's documents (their indices
  (file number, ordinal in the file) and sentences): not on its key, on the pools processed before
  it, on the process, the runner, the number of workers or the scheduling.
- Random-document segments (the single-sentence leak, NSP mode) are drawn only from the pool's own
  documents (those that keep a sentence after tokenization).
- Each (document, dupe pass) draws from its own `random.Random`, seeded with
  `derive_seed(random_seed, document index, dupe pass)`; records come pass by pass, documents
  in reading order within a pass. A document's pairs are all drawn before any of them is masked,
  so `masking_mode="dynamic"` gives the same instances as static masking, unmasked, in the same
  order.

So every runner produces the same multiset of records. The local runner writes them in key order
through a `writer.ShuffleBuffer` seeded with `derive_seed(random_seed, "shuffle")`, round-robin into
the shards; the Beam runner shuffles them fully by a key derived from the seed. This differs from
the original, which drew random documents from the whole corpus.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import random
from collections.abc import Callable, Iterator, Sequence
from typing import BinaryIO

from absl import logging

from albert_tf import records
from albert_tf.settings import OUTPUT_FILE, setting
from data_prep import corpus, instances
from data_prep.stats import Stats

# static: instances are masked here, once per dupe pass, in the original's 8-feature schema.
# dynamic: they are written unmasked (`records.UNMASKED_FEATURE_NAMES`) for the trainer to mask
# afresh each time it reads them; the masking settings then only go to the summary.
MASKING_MODES = ("static", "dynamic")


@dataclasses.dataclass(frozen=True)
class DataPrepConfig:
    """Everything the job needs; each setting (those of `pair`, `masking` and `corpus` too) is a
    flag of `pipelines/create_pretraining_data.py`, the original's where it has one.

    `masking_mode` is one of `MASKING_MODES`. Under "dynamic" a `dupe_factor` above 1 only adds
    pairings (the CLI defaults it to 1 there); `masking` is recorded for the trainer, not applied.

    Args:
        every field is one flag, its help text in its `setting`
        (`create_pretraining_data.py --help`); `pair`, `masking`, `corpus` group theirs.

    Example:
        config = DataPrepConfig(input_file="corpus/*.txt", output_file="train.tfrecord",
                                spm_model_file="30k-clean.model")
    """

    input_file: str = setting(help="Input text files: comma-separated globs (.gz allowed).")
    output_file: str = setting(
        help="Output TFRecord file(s), comma-separated; instances are written round-robin "
        "across them.",
        path=OUTPUT_FILE,
    )
    spm_model_file: str = setting(help="SentencePiece model, e.g. 30k-clean.model.")
    do_lower_case: bool = setting(
        True, "Lowercase the text (the released English models are uncased)."
    )
    random_seed: int = setting(12345, "Seed of every random choice (the output is reproducible).")
    dupe_factor: int = setting(
        40,
        "Passes over the corpus, each with new pairs and masks (with --masking=dynamic: new "
        "pairs only, and 1 unless given).",
    )
    pair: instances.PairConfig = instances.PairConfig()
    masking: instances.MaskingConfig = instances.MaskingConfig()
    masking_mode: str = setting(
        "static",
        "static: mask here, once per --dupe_factor pass, into the original's 8-feature records. "
        "dynamic: write the same SOP instances unmasked (input_ids, input_mask, segment_ids, "
        "token_boundary, next_sentence_labels), for the trainer to mask afresh each time it "
        "reads them; --masked_lm_prob, --max_predictions_per_seq, --ngram, "
        "--favor_shorter_ngram, --do_whole_word_mask and --do_permutation are then not "
        'applied, only recorded in the summary\'s "masking" block; --dupe_factor defaults to 1.',
        flag="masking",
        choices=MASKING_MODES,
    )
    corpus: corpus.CorpusConfig = corpus.CorpusConfig()
    num_workers: int = 1
    num_output_shards: int = setting(1, "With one --output_file, write FILE-0000i-of-0000N shards.")
    shuffle_buffer_size: int = setting(
        20_000,
        "Instances held for shuffling before writing (the original shuffled all instances in "
        "memory).",
    )
    batch_chars: int = setting(
        256 * 1024,
        "Characters of text per work unit; also the window random-document segments are drawn "
        "from.",
    )
    summary_file: str | None = setting(
        None, "Summary JSON (default: beside the first output, .summary.json).", path=OUTPUT_FILE
    )

    def __post_init__(self):
        if self.pair.max_seq_length < 5:
            raise ValueError(
                "max_seq_length must be >= 5 ([CLS] A [SEP] B [SEP]), "
                f"got {self.pair.max_seq_length}"
            )
        if self.dupe_factor < 1 or self.num_workers < 1 or self.batch_chars < 1:
            raise ValueError("dupe_factor, num_workers and batch_chars must be >= 1")
        if self.masking.max_predictions_per_seq < 1 or self.masking.ngram < 1:
            raise ValueError("max_predictions_per_seq and ngram must be >= 1")
        if self.masking_mode not in MASKING_MODES:
            raise ValueError(
                f"masking_mode must be one of {MASKING_MODES}, got {self.masking_mode!r}"
            )
        if self.masking_mode == "dynamic" and self.masking.do_permutation:
            raise ValueError("do_permutation is not supported with masking_mode='dynamic'")

    def summary_path(self) -> str:
        """`--summary_file`, else the first output, its .tfrecord(s) extension -> .summary.json."""
        if self.summary_file:
            return self.summary_file
        first = self.output_file.split(",")[0].strip()
        stem, ext = os.path.splitext(first)
        return (stem if ext in (".tfrecord", ".tfrecords") else first) + ".summary.json"


def derive_seed(*parts: int | str) -> int:
    """A 128-bit seed from the run seed and a position (document, pass, ...), stable across runs."""
    return int.from_bytes(hashlib.blake2b(repr(parts).encode(), digest_size=16).digest(), "little")


@dataclasses.dataclass(frozen=True)
class DocumentPool:
    """One unit of work: consecutive documents, which are also its random-document pool.

    Args:
      key: (file number, the pool's ordinal in the file); runners order by it, records ignore it.
      documents: ((file number, ordinal in the file), raw sentences) per document, in reading
        order.

    Example:
      >>> pool = DocumentPool((0, 0), (((0, 0), ("A sentence.", "Another.")),))
      >>> pool.documents[0][0]
      (0, 0)
    """

    key: tuple[int, int]
    documents: tuple[tuple[tuple[int, int], tuple[str, ...]], ...]


def read_pools(
    paths: Sequence[str], config: DataPrepConfig, skips: corpus.SkipLog
) -> Iterator[DocumentPool]:
    """The pools of the input files in key order, streaming (bad input is counted in `skips`)."""
    for file_number, path in enumerate(paths):
        logging.info("reading %s (%d/%d)", path, file_number + 1, len(paths))
        yield from read_file_pools(file_number, path, config, skips)


def read_file_pools(
    file_number: int,
    path: str,
    config: DataPrepConfig,
    skips: corpus.SkipLog,
    opener: Callable[[str], BinaryIO] = corpus.open_local,
) -> Iterator[DocumentPool]:
    """The pools of one input file (the `file_number`-th of the job), streaming."""
    documents = corpus.read_file_documents(file_number, path, config.corpus, skips, opener)
    for ordinal, batch in enumerate(corpus.batch_documents(documents, config.batch_chars)):
        yield DocumentPool(
            (file_number, ordinal), tuple((d.index, tuple(d.sentences)) for d in batch)
        )


class PoolProcessor:
    """Turns pools into framed TFRecord records; holds the tokenizer, so build it once per process.

    Args:
      config: the job config.
      encode_threads: SentencePiece threads per pool (-1: all); the output does not depend on it.
    """

    def __init__(self, config: DataPrepConfig, encode_threads: int = -1):
        from albert_tf.text.tokenization import AlbertTokenizer  # TensorFlow-free

        self.config = config
        self.encode_threads = encode_threads
        self.tokenizer = AlbertTokenizer(config.spm_model_file, do_lower_case=config.do_lower_case)
        tok = self.tokenizer
        tok.preprocess("\u00e9")  # builds the lazy accent table once, before workers fork
        pieces = [tok.sp_model.id_to_piece(i) for i in range(tok.vocab_size)]
        self.word_start = instances.start_piece_table(pieces)
        self.masker = instances.Masker(
            config.masking, self.word_start, tok.vocab_size, tok.cls_id, tok.sep_id, tok.mask_id
        )
        dynamic = config.masking_mode == "dynamic"
        self.encoder = records.PretrainingExampleEncoder(
            config.pair.max_seq_length,
            config.masking.max_predictions_per_seq * (1 + config.masking.do_permutation),
            tok.vocab_size,
            names=records.UNMASKED_FEATURE_NAMES if dynamic else records.FEATURE_NAMES,
        )
        self._example = self._unmasked_example if dynamic else self._masked_example

    def tokenize(self, pool: DocumentPool) -> list[tuple[int, list[list[int]]]]:
        """(index, non-empty token-id sentences) of the documents that keep a sentence."""
        flat = [s for _, sentences in pool.documents for s in sentences]
        encoded = self.tokenizer.encode_batch(flat, num_threads=self.encode_threads)
        out, k = [], 0
        for index, sentences in pool.documents:
            ids = [e for e in encoded[k : k + len(sentences)] if e]
            k += len(sentences)
            if ids:
                out.append((index, ids))
        return out

    def instance_records(self, pool: DocumentPool, stats: Stats) -> Iterator[bytes]:
        """Framed records of a pool, pass by pass (memory does not grow with dupe_factor); counts
        into `stats` as it goes."""
        config = self.config
        tokenized = self.tokenize(pool)
        documents = [sentences for _, sentences in tokenized]
        stats.documents += len(documents)
        stats.single_sentence_documents += sum(len(d) == 1 for d in documents)
        stats.sentences += sum(len(d) for d in documents)
        stats.tokens += sum(len(s) for d in documents for s in d)
        example, frame = self._example, records.frame_record
        for dupe_pass in range(config.dupe_factor):
            for position, (doc_index, _) in enumerate(tokenized):
                rng = random.Random(derive_seed(config.random_seed, doc_index, dupe_pass))
                pairs, dropped = instances.create_pairs_from_document(
                    documents, position, config.pair, rng, self.word_start
                )
                stats.dropped_one_token_chunks += dropped
                for pair in pairs:
                    inst, data = example(pair, rng)
                    stats.add_instance(inst, pair.random_document)
                    yield frame(data)

    def _masked_example(
        self, pair: instances.SentencePair, rng: random.Random
    ) -> tuple[instances.MaskedInstance, bytes]:
        inst = instances.build_instance(pair, self.masker, rng)
        data = self.encoder.encode(
            inst.input_ids,
            inst.num_segment_a,
            inst.token_boundary,
            inst.masked_positions,
            inst.masked_label_ids,
            inst.sop_label,
        )
        return inst, data

    def _unmasked_example(
        self, pair: instances.SentencePair, rng: random.Random
    ) -> tuple[instances.MaskedInstance, bytes]:
        del rng  # nothing is drawn after the pairs
        inst = instances.build_unmasked_instance(pair, self.masker)
        data = self.encoder.encode(
            inst.input_ids, inst.num_segment_a, inst.token_boundary, (), (), inst.sop_label
        )
        return inst, data
