"""The whole data-prep job: read documents, build masked SOP instances in worker processes, shuffle, write.

Determinism: documents are numbered in reading order and grouped into batches by content alone; each
(document, dupe pass) draws from its own `random.Random` seeded from (seed, document index, pass); a
batch's records (pass by pass, documents in order) enter a shuffle buffer seeded from the seed, batches
in order. So the shards are byte-identical for any `num_workers` (other flags, `batch_chars` and
`shuffle_buffer_size` included, change them).

Bounded memory: the main process holds the shuffle buffer and the text of at most `2 * num_workers`
batches (about `batch_chars` characters each); a worker holds one batch and its tokens, and streams
records to a hidden spill file beside the outputs that the main process reads back in order. Nothing
grows with the corpus or with `dupe_factor`.

Differences from the original, all forced by streaming: random-document segments (the single-sentence
leak, and NSP mode) are drawn from the documents of the same batch rather than from the whole corpus;
the original's shuffles of all documents and of all instances of all passes become one bounded shuffle
buffer; documents end at the end of their file and after `max_document_chars`.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import multiprocessing
import os
import random
import time
from collections.abc import Iterator

from absl import logging

from albert_tf import records
from data_prep import corpus, instances, writer
from data_prep.stats import Stats


@dataclasses.dataclass(frozen=True)
class DataPrepConfig:
    """Everything the job needs; the CLI fills it from flags."""

    input_file: str
    output_file: str
    spm_model_file: str
    do_lower_case: bool = True
    random_seed: int = 12345
    dupe_factor: int = 40
    pair: instances.PairConfig = instances.PairConfig()
    masking: instances.MaskingConfig = instances.MaskingConfig()
    corpus: corpus.CorpusConfig = corpus.CorpusConfig()
    num_workers: int = 1
    num_output_shards: int = 1
    shuffle_buffer_size: int = 20_000
    batch_chars: int = 256 * 1024
    summary_file: str | None = None

    def __post_init__(self):
        if self.pair.max_seq_length < 5:
            raise ValueError(
                f"max_seq_length must be >= 5 ([CLS] A [SEP] B [SEP]), got {self.pair.max_seq_length}"
            )
        if self.dupe_factor < 1 or self.num_workers < 1 or self.batch_chars < 1:
            raise ValueError("dupe_factor, num_workers and batch_chars must be >= 1")
        if self.masking.max_predictions_per_seq < 1 or self.masking.ngram < 1:
            raise ValueError("max_predictions_per_seq and ngram must be >= 1")

    def summary_path(self) -> str:
        """`--summary_file`, else the first output file with its .tfrecord(s) extension -> .summary.json."""
        if self.summary_file:
            return self.summary_file
        first = self.output_file.split(",")[0].strip()
        stem, ext = os.path.splitext(first)
        return (stem if ext in (".tfrecord", ".tfrecords") else first) + ".summary.json"


def derive_seed(*parts: int | str) -> int:
    """A 128-bit seed from the run seed and a position (document, pass, batch), stable across runs."""
    return int.from_bytes(hashlib.blake2b(repr(parts).encode(), digest_size=16).digest(), "little")


class BatchProcessor:
    """Tokenizes a batch of documents and turns it into framed TFRecord records for all dupe passes."""

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
        num_predictions = config.masking.max_predictions_per_seq * (
            1 + config.masking.do_permutation
        )
        self.encoder = records.PretrainingExampleEncoder(
            config.pair.max_seq_length, num_predictions, tok.vocab_size
        )

    def tokenize(self, documents: list[tuple[int, list[str]]]) -> list[tuple[int, list[list[int]]]]:
        """(index, non-empty token-id sentences) of the documents that keep at least one sentence."""
        flat = [s for _, sentences in documents for s in sentences]
        encoded = self.tokenizer.encode_batch(flat, num_threads=self.encode_threads)
        out, k = [], 0
        for index, sentences in documents:
            ids = [e for e in encoded[k : k + len(sentences)] if e]
            k += len(sentences)
            if ids:
                out.append((index, ids))
        return out

    def instance_records(
        self, documents: list[tuple[int, list[str]]], stats: Stats
    ) -> Iterator[bytes]:
        """Framed records of a batch, pass by pass (memory does not grow with dupe_factor); counts into
        `stats` as it goes."""
        config = self.config
        tokenized = self.tokenize(documents)
        pool = [sentences for _, sentences in tokenized]
        stats.documents += len(pool)
        stats.single_sentence_documents += sum(len(d) == 1 for d in pool)
        stats.sentences += sum(len(d) for d in pool)
        stats.tokens += sum(len(s) for d in pool for s in d)
        encode, frame, masker = self.encoder.encode, records.frame_record, self.masker
        for dupe_pass in range(config.dupe_factor):
            for position, (doc_index, _) in enumerate(tokenized):
                rng = random.Random(derive_seed(config.random_seed, doc_index, dupe_pass))
                pairs, dropped = instances.create_pairs_from_document(
                    pool, position, config.pair, rng, self.word_start
                )
                stats.dropped_one_token_chunks += dropped
                for pair in pairs:
                    inst = instances.build_instance(pair, masker, rng)
                    stats.add_instance(inst, pair.random_document)
                    yield frame(
                        encode(
                            inst.input_ids,
                            inst.num_segment_a,
                            inst.token_boundary,
                            inst.masked_positions,
                            inst.masked_label_ids,
                            inst.sop_label,
                        )
                    )


_WORKER: BatchProcessor | None = None


def _process_in_worker(spill_path: str, documents: list[tuple[int, list[str]]]) -> Stats:
    # Records go to a spill file rather than back through the result pipe, so a batch never sits in
    # memory whole, whatever dupe_factor is.
    assert _WORKER is not None
    stats = Stats()
    with open(spill_path, "wb", buffering=1 << 20) as f:
        for record in _WORKER.instance_records(documents, stats):
            f.write(record)
    return stats


def _batches(config: DataPrepConfig, paths: list[str], skips: corpus.SkipLog):
    docs = corpus.read_documents(paths, config.corpus, skips)
    for batch_index, batch in enumerate(corpus.batch_documents(docs, config.batch_chars)):
        yield batch_index, [(d.index, d.sentences) for d in batch]


def run(config: DataPrepConfig) -> dict:
    """Runs the job and returns the summary (also written as JSON beside the outputs).

    Raises corpus.InputError / writer.OutputError for fatal input or output problems, before any output
    is renamed into place.
    """
    global _WORKER
    started = time.monotonic()
    paths = corpus.expand_inputs(config.input_file)
    corpus.check_readable(paths)
    outputs = writer.shard_paths(config.output_file, config.num_output_shards)
    summary_path = config.summary_path()
    skips = corpus.SkipLog()
    stats = Stats()
    threads = max(1, (os.cpu_count() or 1) // config.num_workers)
    # Built before forking so workers inherit the loaded model instead of each loading it.
    _WORKER = BatchProcessor(config, encode_threads=threads)
    buffer = writer.ShuffleBuffer(
        config.shuffle_buffer_size, random.Random(derive_seed(config.random_seed, "shuffle"))
    )
    progress = _Progress()
    try:
        with writer.ShardedWriter(outputs) as out:

            def consume(batch_records: Iterator[bytes]) -> None:
                for record in batch_records:
                    evicted = buffer.push(record)
                    if evicted is not None:
                        out.write(evicted)
                progress.update(stats)

            batches = _batches(config, paths, skips)
            if config.num_workers == 1:
                for _, documents in batches:
                    consume(_WORKER.instance_records(documents, stats))
            else:
                _run_in_workers(config, batches, writer.temporary_path(outputs[0]), stats, consume)
            for record in buffer.drain():
                out.write(record)
            out.commit()
    finally:
        _WORKER = None  # the forked workers have their copy; release the model here
    summary = _summary(config, paths, outputs, out.counts, stats, skips, time.monotonic() - started)
    writer.write_json_atomically(summary_path, summary)
    logging.info(
        "wrote %d instances to %d file(s) in %.1fs; summary %s",
        stats.instances,
        len(outputs),
        summary["elapsed_seconds"],
        summary_path,
    )
    return summary


def _run_in_workers(
    config: DataPrepConfig, batches, spill_prefix: str, stats: Stats, consume
) -> None:
    """Batches go to worker processes, at most 2 per worker in flight; results are consumed in batch
    order, so the output does not depend on which worker ran what."""
    pending: collections.deque = collections.deque()
    try:
        with multiprocessing.get_context("fork").Pool(config.num_workers) as pool:

            def finish_oldest() -> None:
                spill, result = pending[0]
                stats.merge(result.get())
                with open(spill, "rb") as f:
                    consume(records.iter_framed_records(f))
                pending.popleft()
                os.remove(spill)

            for batch_index, documents in batches:
                spill = f"{spill_prefix}.batch{batch_index}"
                pending.append((spill, pool.apply_async(_process_in_worker, (spill, documents))))
                while len(pending) >= 2 * config.num_workers:
                    finish_oldest()
            while pending:
                finish_oldest()
    finally:
        for spill, _ in pending:  # after a failure: the pool is terminated, its files go
            try:
                os.remove(spill)
            except OSError:
                pass


class _Progress:
    """A progress line every few seconds."""

    def __init__(self, every_seconds: float = 5.0):
        self.start = self.last = time.monotonic()
        self.every = every_seconds

    def update(self, stats: Stats) -> None:
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            logging.info(
                "%d documents, %d instances, %.0f instances/s",
                stats.documents,
                stats.instances,
                stats.instances / max(now - self.start, 1e-9),
            )


def _summary(
    config: DataPrepConfig,
    paths: list[str],
    outputs: list[str],
    counts: list[int],
    stats: Stats,
    skips: corpus.SkipLog,
    elapsed: float,
) -> dict:
    settings = {
        "spm_model_file": config.spm_model_file,
        "do_lower_case": config.do_lower_case,
        "random_seed": config.random_seed,
        "dupe_factor": config.dupe_factor,
        **dataclasses.asdict(config.pair),
        **dataclasses.asdict(config.masking),
        **dataclasses.asdict(config.corpus),
        "num_workers": config.num_workers,
        "shuffle_buffer_size": config.shuffle_buffer_size,
        "batch_chars": config.batch_chars,
    }
    return {
        "inputs": paths,
        "outputs": [{"file": p, "instances": n} for p, n in zip(outputs, counts)],
        "settings": settings,
        **stats.summary(),
        "skipped": skips.entries(),
        "skipped_lines": sum(
            e["count"] for e in skips.entries() if e["reason"] not in ("empty_file", "no_text")
        ),
        "elapsed_seconds": round(elapsed, 3),
    }
