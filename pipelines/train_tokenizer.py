"""Train an ALBERT SentencePiece vocabulary (unigram, the original `30k-clean` settings).

    python -m pipelines.train_tokenizer --input_file='corpus/*.txt,more/*.txt.gz' \
        --output_dir=vocab --model_prefix=30k-clean --vocab_size=30000

Writes `<output_dir>/<model_prefix>.model` and `.vocab` with ids 0-12 fixed as
`<pad> <unk> [CLS] [SEP] [MASK] ( ) " - . – £ €`; text is normalised with `preprocess_text` first.
"""

import os
import sys

if not __package__:  # run as a script: make the repository root importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pipelines import _cli  # first: TensorFlow's log level must be set before it loads
from pipelines import _config_flags
from absl import flags

from albert_tf.settings import OUTPUT_DIR, OUTPUT_FILE

from data_prep.vocab import VocabConfig, train_vocab

FLAGS = flags.FLAGS

flags.DEFINE_string("input_file", None, "Input text files: comma-separated globs (plain or .gz).")
flags.DEFINE_string(
    "output_dir", ".", "Directory for the .model and .vocab files (created if missing)."
)
flags.DEFINE_string(
    "model_prefix",
    "30k-clean",
    "Output file name without extension; may include a "
    "sub-directory of --output_dir, as spm_train's --model_prefix.",
)
flags.DEFINE_integer("vocab_size", 30000, "Number of pieces, the 13 fixed ones included.")
flags.DEFINE_bool(
    "do_lower_case", True, "Lowercase before training (the released English models are uncased)."
)
flags.DEFINE_integer(
    "input_sentence_size",
    10_000_000,
    "Lines sampled (reservoir) from the corpus for "
    "training; bounds memory on large corpora. 0 = all.",
)
flags.DEFINE_float("character_coverage", 0.99995, "Share of characters the vocabulary must cover.")
flags.DEFINE_integer("num_threads", os.cpu_count() or 1, "SentencePiece training threads.")
flags.DEFINE_integer("random_seed", 12345, "Seed of SentencePiece's sampling and shuffling.")
flags.DEFINE_enum(
    "input_format",
    "sentences",
    ["sentences", "paragraphs"],
    "Accepted for symmetry with "
    "create_pretraining_data: both train on one line per physical line (hard-wrapped "
    "paragraph lines are fine for piece statistics).",
)
flags.mark_flag_as_required("input_file")


def main(argv):
    del argv
    prefix_dir, prefix_name = os.path.split(FLAGS.model_prefix)
    config = VocabConfig(
        vocab_size=FLAGS.vocab_size,
        do_lower_case=FLAGS.do_lower_case,
        input_sentence_size=FLAGS.input_sentence_size,
        character_coverage=FLAGS.character_coverage,
        num_threads=FLAGS.num_threads,
        seed=FLAGS.random_seed,
    )
    output_dir = os.path.join(FLAGS.output_dir, prefix_dir)
    _config_flags.check_output_path("output_dir", OUTPUT_DIR, output_dir)
    for suffix in (".model", ".vocab"):
        path = os.path.join(output_dir, prefix_name + suffix)
        _config_flags.check_output_path("model_prefix", OUTPUT_FILE, path)
    result = train_vocab(FLAGS.input_file, output_dir, prefix_name, config)
    print(
        f"wrote {result.model_path} and {result.vocab_path} from {result.lines_used} lines; "
        f"skipped: {result.lines_skipped or 'none'}"
    )


def cli() -> None:
    """The `albert-train-tokenizer` console script: this CLI, as `python pipelines/train_tokenizer.py`."""
    _cli.run_task(main)


if __name__ == "__main__":
    cli()
