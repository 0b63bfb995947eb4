r"""Text -> masked SOP instances -> TFRecords, with the flags of the original `create_pretraining_data.py`.

    python -m pipelines.create_pretraining_data --input_file='corpus/*.txt' --output_file=out/train.tfrecord \
        --spm_model_file=30k-clean.model --max_seq_length=128 --dupe_factor=10 --num_workers=2

Every flag of the original keeps its name and default, except that --max_predictions_per_seq follows a
--max_seq_length under 20 down (its default is min(20, --max_seq_length): 20 at the default 512). The
additions are --runner (local or beam, with --beam_runner and --beam_pipeline_options),
--num_workers, --num_output_shards, --input_format, --single_sentence_random_doc,
--masking and the bounds below. A JSON summary is written beside the outputs. This CLI never imports
TensorFlow.

--masking=dynamic writes each instance unmasked, once (--dupe_factor defaults to 1 there), for the
trainer to mask afresh on every read; the masking flags then go to the summary's "masking" block.
"""

import os
import sys

if not __package__:  # run as a script: make the repository root importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pipelines import _cli  # first: TensorFlow's log level must be set before it loads
from absl import app, flags, logging

from albert_tf.config import resolve_max_predictions_per_seq  # TensorFlow-free
from data_prep import corpus, instances, pipeline, units, writer

FLAGS = flags.FLAGS

# The original's flags, same names and defaults.
flags.DEFINE_string("input_file", None, "Input text files: comma-separated globs (.gz allowed).")
flags.DEFINE_string(
    "output_file",
    None,
    "Output TFRecord file(s), comma-separated; instances are written round-robin across them.",
)
flags.DEFINE_string(
    "vocab_file",
    None,
    "Accepted for compatibility; unused with --spm_model_file (the "
    "original's WordPiece path is not supported).",
)
flags.DEFINE_string("spm_model_file", None, "SentencePiece model, e.g. 30k-clean.model.")
flags.DEFINE_string(
    "input_file_mode",
    "r",
    "Accepted for compatibility: inputs are always read as bytes "
    "and decoded as UTF-8 line by line.",
)
flags.DEFINE_bool(
    "do_lower_case", True, "Lowercase the text (the released English models are uncased)."
)
flags.DEFINE_bool("do_whole_word_mask", True, "Mask whole words (all pieces of a word together).")
flags.DEFINE_bool(
    "do_permutation", False, "Experimental (original): also permute a second set of tokens."
)
flags.DEFINE_bool("favor_shorter_ngram", True, "p(n) ∝ 1/n; otherwise reversed.")
flags.DEFINE_bool(
    "random_next_sentence", False, "BERT-style NSP instead of sentence order prediction."
)
flags.DEFINE_integer("max_seq_length", 512, "Maximum sequence length.")
flags.DEFINE_integer("ngram", 3, "Maximum n-gram length (words) to mask.")
flags.DEFINE_integer(
    "max_predictions_per_seq",
    None,
    "Maximum masked LM predictions per sequence (default: min(20, --max_seq_length)).",
)
flags.DEFINE_integer(
    "random_seed", 12345, "Seed of every random choice (the output is reproducible)."
)
flags.DEFINE_integer(
    "dupe_factor",
    40,
    "Passes over the corpus, each with new pairs and masks (with --masking=dynamic: new pairs "
    "only, and 1 unless given).",
)
flags.DEFINE_float("masked_lm_prob", 0.15, "Masked LM probability.")
flags.DEFINE_float(
    "short_seq_prob", 0.1, "Probability of a shorter target length for a document pass."
)

# Additions.
flags.DEFINE_integer(
    "num_workers", None, "Worker processes (default: all CPUs). Output does not depend on it."
)
flags.DEFINE_integer(
    "num_output_shards", 1, "With one --output_file, write FILE-0000i-of-0000N shards."
)
flags.DEFINE_enum(
    "input_format",
    "sentences",
    list(corpus.INPUT_FORMATS),
    "sentences: one sentence per line, blank line between documents (the original's format). "
    "paragraphs: hard-wrapped prose, blank line between paragraphs, one document per file; "
    "split into sentences with sentencex.",
)
flags.DEFINE_enum(
    "masking",
    "static",
    list(units.MASKING_MODES),
    "static: mask here, once per --dupe_factor pass, into the original's 8-feature records. "
    "dynamic: write the same SOP instances unmasked (input_ids, input_mask, segment_ids, "
    "token_boundary, next_sentence_labels), for the trainer to mask afresh each time it reads "
    "them; --masked_lm_prob, --max_predictions_per_seq, --ngram, --favor_shorter_ngram, "
    "--do_whole_word_mask and --do_permutation are then not applied, only recorded in the "
    "summary's \"masking\" block; --dupe_factor defaults to 1.",
)
flags.DEFINE_bool(
    "single_sentence_random_doc",
    True,
    "Reproduce the original's leak: a "
    "one-sentence chunk gets B from a random other document, label 1. False: cut the sentence "
    "at a random word start into an ordinary SOP pair.",
)
flags.DEFINE_integer(
    "shuffle_buffer_size",
    20_000,
    "Instances held for shuffling before writing (the original shuffled all instances in memory).",
)
flags.DEFINE_integer(
    "batch_chars",
    256 * 1024,
    "Characters of text per work unit; also the window random-document segments are drawn from.",
)
flags.DEFINE_integer(
    "max_document_chars",
    100_000,
    "A document ends at the next line/paragraph after this many characters.",
)
flags.DEFINE_integer("max_line_bytes", 100_000, "Longer input lines are skipped and counted.")
flags.DEFINE_string(
    "sentence_language", "en", "Language of the sentence-splitting rules (paragraphs)."
)
flags.DEFINE_string(
    "summary_file", None, "Summary JSON (default: beside the first output, .summary.json)."
)

flags.DEFINE_enum(
    "runner",
    "local",
    ["local", "beam"],
    "local: worker processes on this machine. beam: Apache Beam (pip install -r "
    "requirements-beam.txt), on --beam_runner; same instances, fully shuffled by the seed.",
)
flags.DEFINE_enum(
    "beam_runner",
    "FnApiRunner",
    list(pipeline.BEAM_RUNNERS),
    "The Beam runner (--runner=beam). FnApiRunner: this machine, --num_workers processes.",
)
flags.DEFINE_string(
    "beam_pipeline_options",
    "",
    "Further Beam pipeline options, shell-quoted, e.g. '--project=P --region=R "
    "--temp_location=gs://B/tmp --setup_file=./setup.py' (--runner=beam).",
)

flags.mark_flags_as_required(["input_file", "output_file"])


def config_from_flags() -> pipeline.DataPrepConfig:
    """The job's configuration from the parsed flags."""
    if not FLAGS.spm_model_file:
        raise app.UsageError(
            "--spm_model_file is required (the original's WordPiece --vocab_file path is "
            "not supported)"
        )
    dupe_factor = FLAGS.dupe_factor
    if FLAGS.masking == "dynamic" and not FLAGS["dupe_factor"].present:
        # Fresh masks come from the trainer; more passes would only add pairings of the same text.
        dupe_factor = 1
        logging.info("--masking=dynamic: --dupe_factor=1 (pass --dupe_factor for more pairings)")
    return pipeline.DataPrepConfig(
        input_file=FLAGS.input_file,
        output_file=FLAGS.output_file,
        spm_model_file=FLAGS.spm_model_file,
        do_lower_case=FLAGS.do_lower_case,
        random_seed=FLAGS.random_seed,
        dupe_factor=dupe_factor,
        pair=instances.PairConfig(
            max_seq_length=FLAGS.max_seq_length,
            short_seq_prob=FLAGS.short_seq_prob,
            random_next_sentence=FLAGS.random_next_sentence,
            single_sentence_random_doc=FLAGS.single_sentence_random_doc,
        ),
        masking=instances.MaskingConfig(
            masked_lm_prob=FLAGS.masked_lm_prob,
            max_predictions_per_seq=resolve_max_predictions_per_seq(
                FLAGS.max_predictions_per_seq, FLAGS.max_seq_length
            ),
            ngram=FLAGS.ngram,
            favor_shorter_ngram=FLAGS.favor_shorter_ngram,
            do_whole_word_mask=FLAGS.do_whole_word_mask,
            do_permutation=FLAGS.do_permutation,
        ),
        masking_mode=FLAGS.masking,
        corpus=corpus.CorpusConfig(
            input_format=FLAGS.input_format,
            max_line_bytes=FLAGS.max_line_bytes,
            max_document_chars=FLAGS.max_document_chars,
            language=FLAGS.sentence_language,
        ),
        num_workers=FLAGS.num_workers or os.cpu_count() or 1,
        num_output_shards=FLAGS.num_output_shards,
        shuffle_buffer_size=FLAGS.shuffle_buffer_size,
        batch_chars=FLAGS.batch_chars,
        summary_file=FLAGS.summary_file,
    )


def main(argv):
    del argv
    try:
        config = config_from_flags()
        if FLAGS.runner == "beam":
            pipeline.run_on_beam(config, FLAGS.beam_runner, FLAGS.beam_pipeline_options)
        else:
            pipeline.run(config)
    except (
        corpus.InputError,
        writer.OutputError,
        FileNotFoundError,
        ValueError,
        RuntimeError,
    ) as e:
        logging.error("%s", e)
        print(f"create_pretraining_data: error: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    _cli.run(main)
