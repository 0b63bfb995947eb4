"""The study's data: training and held-out text from the corpus folders, one vocabulary, and SOP
and NSP records of the same text (static masks), written by the library's data prep.

Text is gathered into data prep's `sentences` format (one sentence per line, a blank line between
documents): hard-wrapped prose (Project Gutenberg) is read by data prep's own paragraph reader;
WikiExtractor files (`<doc ...>` ... `</doc>`, the English Wikipedia dump) become one document
per article, its title line dropped and its paragraphs split into sentences by the same
segmenter (sentencex). Held-out text is never trained on, nor used for the vocabulary.
"""

from __future__ import annotations

import collections
import os
import pathlib

from albert_tf.io import write_text
from benchmarks.ablations.settings import StudySettings

HELD_OUT_SEED_OFFSET = 1  # held-out records: another data-prep seed than the training ones


def corpus_files(corpus_dir: str) -> tuple[list[str], list[str]]:
    """(training files, held-out files) of a corpus folder: its `train/` and `heldout/`, or else
    all its files with the last by name held out."""
    root = pathlib.Path(corpus_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"--corpus_dir: {corpus_dir} is not a folder")

    def files(folder: pathlib.Path) -> list[str]:
        return sorted(str(p) for p in folder.iterdir() if p.is_file() and p.name[0] != ".")

    if (root / "train").is_dir() and (root / "heldout").is_dir():
        train, heldout = files(root / "train"), files(root / "heldout")
    else:
        everything = files(root)
        train, heldout = everything[:-1], everything[-1:]
    if not train or not heldout:
        raise FileNotFoundError(f"--corpus_dir: {corpus_dir} needs training and held-out files")
    return train, heldout


def _is_wikiextractor(path: str) -> bool:
    with open(path, "rb") as f:
        return f.read(9) == b"<doc id=\""


def _wiki_documents(path: str) -> list[list[str]]:
    """Each article of a WikiExtractor file as its sentences (title line and tags dropped)."""
    import sentencex

    documents, article, title_next = [], None, False
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.strip()
            if line.startswith("<doc "):
                article, title_next = [], True
            elif line == "</doc>":
                if article:
                    documents.append(article)
                article = None
            elif article is not None and line:
                if title_next:
                    title_next = False  # the article's title, repeated from the tag
                    continue
                article.extend(s.strip() for s in sentencex.segment("en", line) if s.strip())
    return documents


def _prose_documents(path: str) -> list[list[str]]:
    """A hard-wrapped prose file's documents (data prep's paragraph reader) as sentences."""
    from data_prep import corpus

    config = corpus.CorpusConfig(input_format="paragraphs")
    return [d.sentences for d in corpus.read_file_documents(0, path, config, corpus.SkipLog())]


def write_sentences_text(paths: list[str], output: str, max_chars: float | None) -> dict:
    """Writes the documents of `paths` to `output` in the sentences format, stopping after the
    file that brings it past `max_chars`; returns what was read."""
    parts, chars, used = [], 0, []
    for path in paths:
        if max_chars is not None and chars >= max_chars:
            break
        reader = _wiki_documents if _is_wikiextractor(path) else _prose_documents
        for sentences in reader(path):
            text = "\n".join(s.replace("\n", " ") for s in sentences) + "\n\n"
            parts.append(text)
            chars += len(text)
        used.append(path)
    os.makedirs(os.path.dirname(output), exist_ok=True)
    write_text(output, "".join(parts))
    return {"files": used, "chars": chars, "documents": len(parts)}


def _interleave(lists: list[list[str]]) -> list[str]:
    """Files taken in turn from each corpus, so a cap keeps both books and articles."""
    order = []
    for i in range(max(len(files) for files in lists)):
        order += [files[i] for files in lists if i < len(files)]
    return order


def prepare_text(s: StudySettings) -> dict:
    """Training and held-out text of all corpus folders, in the sentences format."""
    listed = [corpus_files(d) for d in s.corpus_dirs]
    text_dir = os.path.join(s.work_dir, "text")
    train = write_sentences_text(
        _interleave([train for train, _ in listed]),
        os.path.join(text_dir, "train.txt"),
        s.max_train_text_mb * 1e6,
    )
    heldout = write_sentences_text(
        [f for _, heldout in listed for f in heldout], os.path.join(text_dir, "heldout.txt"), None
    )
    return {
        "train": {"path": os.path.join(text_dir, "train.txt"), **train},
        "heldout": {"path": os.path.join(text_dir, "heldout.txt"), **heldout},
    }


def train_vocabulary(s: StudySettings, train_text: str) -> dict:
    """A SentencePiece model of the training text (ALBERT's recipe, `vocab_size` pieces)."""
    from data_prep.vocab import VocabConfig, train_vocab

    result = train_vocab(
        train_text,
        os.path.join(s.work_dir, "vocab"),
        "study_spm",
        VocabConfig(
            vocab_size=s.vocab_size,
            input_sentence_size=s.vocab_sentences,
            num_threads=min(2, os.cpu_count() or 1),
        ),
    )
    return {"spm_model_file": result.model_path}


def sentence_records(
    s,
    text_path: str,
    output: str,
    spm_model_file: str,
    seed: int,
    task: str = "sop",
    masking_mode: str = "static",
) -> dict:
    """One record set of sentences-format text through data prep (one pass, `s`'s sequence
    and prediction sizes); returns data prep's summary."""
    from data_prep import corpus, instances, pipeline

    return pipeline.run(
        pipeline.DataPrepConfig(
            input_file=text_path,
            output_file=output,
            spm_model_file=spm_model_file,
            random_seed=seed,
            dupe_factor=1,
            # SOP pairs are always two segments of one document (a one-sentence chunk is cut at
            # a word), not the original's random-document B for those: SOP accuracy then
            # measures order alone. NSP (BERT's) is unaffected by it.
            pair=instances.PairConfig(
                max_seq_length=s.max_seq_length,
                random_next_sentence=task == "nsp",
                single_sentence_random_doc=False,
            ),
            masking=instances.MaskingConfig(max_predictions_per_seq=s.max_predictions_per_seq),
            masking_mode=masking_mode,
            corpus=corpus.CorpusConfig(input_format="sentences"),
            num_workers=min(2, os.cpu_count() or 1),
        )
    )


def write_records(s: StudySettings, spm_model_file: str, text: dict) -> dict:
    """SOP and NSP records of the training and of the held-out text: both of one text are
    written with the same seed, so they differ only in how B and the label are chosen."""
    paths: dict[str, dict] = {}
    for split, seed in (("train", s.data_seed), ("heldout", s.data_seed + HELD_OUT_SEED_OFFSET)):
        for task in ("sop", "nsp"):
            path = os.path.join(s.work_dir, "data", f"{split}_{task}.tfrecord")
            summary = sentence_records(s, text[split]["path"], path, spm_model_file, seed, task)
            paths.setdefault(split, {})[task] = {
                "path": path,
                "instances": summary["instances"],
                "label_1_share": summary["sop_label_1_share"],
                "random_document_b": summary["random_document_b"],
            }
    return paths


def baselines(s: StudySettings, train_records: str, heldout: dict[str, str]) -> dict:
    """What a model that learnt nothing scores on the held-out sets (`heldout`: task -> records):
    MLM accuracy of always the most frequent masked training token (over all held-out masked
    tokens), and per sentence task the share of label 1 among the examples the evaluation
    scores (its first `max_eval_steps` batches) and the majority-class accuracy there."""
    import numpy as np
    import tensorflow as tf

    from albert_tf.training.input_pipeline import feature_spec

    spec = feature_spec(s.max_seq_length, s.max_predictions_per_seq)

    def parsed(paths, limit=None):
        dataset = tf.data.TFRecordDataset(paths)
        if limit:
            dataset = dataset.take(limit)
        for batch in dataset.batch(1024):
            yield tf.io.parse_example(batch, spec)

    def masked_ids(paths):
        return np.concatenate(
            [b["masked_lm_ids"].numpy()[b["masked_lm_weights"].numpy() > 0] for b in parsed(paths)]
        )

    top_id, _ = collections.Counter(masked_ids([train_records]).tolist()).most_common(1)[0]
    result = {"unigram_mlm_accuracy": float(np.mean(masked_ids(list(heldout.values())) == top_id))}
    scored = s.max_eval_steps * s.eval_batch_size
    for task, path in heldout.items():
        labels = np.concatenate(
            [b["next_sentence_labels"].numpy().ravel() for b in parsed([path], scored)]
        )
        share = float(np.mean(labels == 1))
        result[f"{task}_label_1_share"] = share
        result[f"{task}_majority_accuracy"] = max(share, 1 - share)
    return result
