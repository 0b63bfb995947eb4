r"""Dynamic masking vs masked records: data prep, the input pipeline, and the margin over training.

Measured side by side in one run, on the bundled sample corpus and the 30k ALBERT SentencePiece
model:

1. Data prep (`data_prep.pipeline.run`, paragraphs, seq 512, 2 workers): wall time and output
   bytes of `--masking=static --dupe_factor=40` (the README recipe) vs `--masking=dynamic
   --dupe_factor=1`.
2. The training input pipeline alone (`pretraining_dataset`: read, parse, [mask], batch 64, seeded,
   repeated) in examples/s: the static records as they are vs the dynamic records masked on the
   fly, without and with XLA (`DynamicMasking(jit_compile=True)`). Each round builds every variant
   afresh and times it after a warm-up, so that all of them see the same machine state.
3. ALBERT-base's training rate at seq 512, batch 8 (LAMB, fp32, one fixed batch, so that no input
   work is counted), and the margin: dynamic pipeline examples/s / training examples/s, against
   a target of 5x.

    python benchmarks/dynamic_masking.py [--dupe_factor=40 --max_seq_length=512 --num_workers=2]
    python benchmarks/dynamic_masking.py --dupe_factor=2 --max_seq_length=128 --batches=5 \
        --warmup_batches=1 --rounds=1 --preset=smoke --train_steps=1   # checks the script only

At the defaults on 2 cores this takes about 5 minutes: data prep ~20 s static, ~3 s dynamic; the
pipelines ~30 s; ALBERT-base training a few minutes (~20 s a step).
"""

import os
import pathlib
import statistics
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # run from a checkout
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags, logging

from benchmarks.machine import describe as describe_machine
from albert_tf.config import PRESETS, AlbertConfig, resolve_max_predictions_per_seq
from albert_tf.text.tokenization import AlbertTokenizer
from data_prep import corpus, instances, pipeline

REPO = pathlib.Path(__file__).resolve().parents[1]
FLAGS = flags.FLAGS
flags.DEFINE_string(
    "input_file", str(REPO / "data_prep/sample_corpus/train/*.txt.gz"), "Corpus (paragraphs)."
)
flags.DEFINE_string(
    "spm_model_file",
    str(REPO / "tests/fixtures/albert_spm/30k-clean.model"),
    "SentencePiece model (its ids must fit the model's vocab_size).",
)
flags.DEFINE_integer("max_seq_length", 512, "Sequence length of the records, pipelines and model.")
flags.DEFINE_integer(
    "max_predictions_per_seq", None, "Masked positions per sequence (default min(20, seq))."
)
flags.DEFINE_integer("dupe_factor", 40, "Passes of the static data prep (dynamic: always 1).")
flags.DEFINE_integer("num_workers", 2, "Data prep worker processes.")
flags.DEFINE_string(
    "output_dir", None, "Keep the records here (default: a temporary directory, removed after)."
)
flags.DEFINE_integer("batch_size", 64, "Input pipeline batch size.")
flags.DEFINE_integer("warmup_batches", 10, "Batches read before each timed window.")
flags.DEFINE_integer("batches", 200, "Batches per timed window of each pipeline.")
flags.DEFINE_integer("rounds", 3, "Timed rounds, each: every pipeline variant in turn.")
flags.DEFINE_integer("seed", 12345, "Input pipeline seed (shuffling and masks).")
flags.DEFINE_enum(
    "preset",
    "base",
    sorted(PRESETS),
    "Model shape (AlbertConfig.from_preset; smoke: 2 layers of width 64, to check the script).",
)
flags.DEFINE_string("albert_config_file", None, "Model config JSON (overrides --preset).")
flags.DEFINE_integer("train_batch_size", 8, "Training batch size.")
flags.DEFINE_integer("train_warmup_steps", 1, "Training steps after the first (tracing) one.")
flags.DEFINE_integer("train_steps", 3, "Timed training steps.")
flags.DEFINE_bool("train_jit_compile", False, "XLA-compile the train step (off: the CPU default).")
flags.DEFINE_bool("skip_training", False, "Measure data prep and the pipelines only.")
flags.DEFINE_float("target_margin", 5.0, "Required dynamic pipeline / training examples/s.")

STATIC, DYNAMIC, DYNAMIC_XLA = "static records", "dynamic, masked on the fly", "dynamic, XLA"


def albert_config() -> AlbertConfig:
    """The model of --albert_config_file, else of --preset."""
    if FLAGS.albert_config_file:
        return AlbertConfig.from_json_file(FLAGS.albert_config_file)
    return AlbertConfig.from_preset(FLAGS.preset)


def prepare(masking: str, dupe_factor: int, output_dir: str, predictions: int) -> dict:
    """Runs the data prep job; returns its path, wall time, output bytes and instances."""
    output = os.path.join(output_dir, masking, "train.tfrecord")
    config = pipeline.DataPrepConfig(
        input_file=FLAGS.input_file,
        output_file=output,
        spm_model_file=FLAGS.spm_model_file,
        dupe_factor=dupe_factor,
        pair=instances.PairConfig(max_seq_length=FLAGS.max_seq_length),
        masking=instances.MaskingConfig(max_predictions_per_seq=predictions),
        masking_mode=masking,
        corpus=corpus.CorpusConfig(input_format="paragraphs"),
        num_workers=FLAGS.num_workers,
    )
    start = time.perf_counter()
    summary = pipeline.run(config)
    wall = time.perf_counter() - start
    return {
        "path": output,
        "wall_s": wall,
        "bytes": os.path.getsize(output),
        "instances": summary["instances"],
    }


def pipeline_rate(make_dataset) -> float:
    """Examples/s of a fresh dataset over `--batches` batches after `--warmup_batches`. Fresh each
    time: a kept iterator would fill its prefetch buffers while the others are timed."""
    iterator = iter(make_dataset())
    for _ in range(FLAGS.warmup_batches):
        next(iterator)
    start = time.perf_counter()
    for _ in range(FLAGS.batches):
        next(iterator)
    return FLAGS.batches * FLAGS.batch_size / (time.perf_counter() - start)


def training_rate(config: AlbertConfig, batch: dict) -> float:
    """Examples/s of AlbertPretrainer's compiled train step (LAMB) on one fixed batch, timed as
    benchmarks/model_throughput.py times it (importing that script would define its flags again)."""
    import tensorflow as tf

    from albert_tf import AlbertPretrainer
    from albert_tf.training.optimization import create_optimizer

    model = AlbertPretrainer(config)
    model.compile(optimizer=create_optimizer(1e-4, 1000, 10), jit_compile=FLAGS.train_jit_compile)
    dataset = tf.data.Dataset.from_tensors(batch).repeat()
    # `fit` builds the train function; calling it directly skips fit's per-call setup.
    model.fit(dataset, steps_per_epoch=1, epochs=1, verbose=0, shuffle=False)
    iterator = iter(dataset)
    for _ in range(FLAGS.train_warmup_steps):
        model.train_function(iterator)
    start = time.perf_counter()
    for _ in range(FLAGS.train_steps):
        model.train_function(iterator)
    return FLAGS.train_steps * FLAGS.train_batch_size / (time.perf_counter() - start)


def dataset_fn(path, masking, config, predictions, batch_size, jit=False):
    """A maker of `pretraining_dataset` over `path` as training reads it."""
    from albert_tf.training.input_pipeline import DynamicMasking, pretraining_dataset

    def make():
        return pretraining_dataset(
            path,
            FLAGS.max_seq_length,
            predictions,
            batch_size=batch_size,
            is_training=True,
            seed=FLAGS.seed,
            masking=masking,
            dynamic_masking=DynamicMasking(vocab_size=config.vocab_size, jit_compile=jit),
        )

    return make


def measure_pipelines(config, static_path, dynamic_path, predictions) -> dict:
    """Examples/s of each pipeline variant, per round."""
    import tensorflow as tf

    b = FLAGS.batch_size
    print(
        f"\n2. input pipeline alone (TF {tf.__version__}): batch {b}, seq {FLAGS.max_seq_length}, "
        f"training mode, seed {FLAGS.seed}; {FLAGS.batches} batches after {FLAGS.warmup_batches}, "
        f"{FLAGS.rounds} rounds"
    )
    makers = {
        STATIC: dataset_fn(static_path, "static", config, predictions, b),
        DYNAMIC: dataset_fn(dynamic_path, "dynamic", config, predictions, b),
        DYNAMIC_XLA: dataset_fn(dynamic_path, "dynamic", config, predictions, b, jit=True),
    }
    rates = {name: [] for name in makers}
    for _ in range(FLAGS.rounds):
        for name, make in makers.items():
            rates[name].append(pipeline_rate(make))
    for name, values in rates.items():
        print(
            f"  {name:<28} best {max(values):9.0f}  median {statistics.median(values):9.0f} "
            f"examples/s"
        )
    for name in (DYNAMIC, DYNAMIC_XLA):
        per_round = [d / s for d, s in zip(rates[name], rates[STATIC])]
        print(
            f"  {name} / static: {max(rates[name]) / max(rates[STATIC]):.3f} best rounds, "
            f"{statistics.median(per_round):.3f} median of rounds"
        )
    return rates


def measure_training(config, dynamic_path, predictions) -> float:
    """Training examples/s on one batch of the dynamic pipeline."""
    b = FLAGS.train_batch_size
    make = dataset_fn(dynamic_path, "dynamic", config, predictions, b)
    batch = next(iter(make()))
    print(
        f"\n3. training: {FLAGS.albert_config_file or 'ALBERT-' + FLAGS.preset}, seq "
        f"{FLAGS.max_seq_length}, batch {b}, LAMB, fp32, jit_compile={FLAGS.train_jit_compile}; "
        f"{FLAGS.train_steps} timed steps after {1 + FLAGS.train_warmup_steps} untimed"
    )
    rate = training_rate(config, batch)
    print(f"  {rate:.3f} examples/s ({b / rate:.1f} s/step)")
    return rate


def main(argv):
    del argv
    if not FLAGS["verbosity"].present:  # the jobs' progress would bury the measurements
        logging.set_verbosity(logging.WARNING)
    config = albert_config()
    seq = FLAGS.max_seq_length
    predictions = resolve_max_predictions_per_seq(FLAGS.max_predictions_per_seq, seq)
    if seq > config.max_position_embeddings:
        raise app.UsageError(
            f"--max_seq_length={seq} exceeds the model's {config.max_position_embeddings} positions"
        )
    spm_vocab = AlbertTokenizer(FLAGS.spm_model_file).vocab_size
    if spm_vocab > config.vocab_size:
        raise app.UsageError(
            f"the SentencePiece model has {spm_vocab} pieces, the model only {config.vocab_size}"
        )
    print(f"machine: {describe_machine()}, load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        output_dir = FLAGS.output_dir or tmp
        print(
            f"\n1. data prep: {FLAGS.input_file}, seq {seq}, {FLAGS.num_workers} workers "
            f"(into {output_dir})"
        )
        # TensorFlow is imported only after the data prep: its workers are forked, and forking a
        # process that has TensorFlow's threads running is unsafe.
        static = prepare("static", FLAGS.dupe_factor, output_dir, predictions)
        dynamic = prepare("dynamic", 1, output_dir, predictions)
        for label, r in (
            (f"--masking=static --dupe_factor={FLAGS.dupe_factor}", static),
            ("--masking=dynamic --dupe_factor=1", dynamic),
        ):
            print(
                f"  {label:<38} {r['wall_s']:7.1f} s  {r['bytes'] / 1e6:8.1f} MB  "
                f"{r['instances']:7d} instances"
            )
        print(
            f"  static / dynamic: {static['wall_s'] / dynamic['wall_s']:.1f}x time, "
            f"{static['bytes'] / dynamic['bytes']:.1f}x disk"
        )
        rates = measure_pipelines(config, static["path"], dynamic["path"], predictions)
        if FLAGS.skip_training:
            return
        train_rate = measure_training(config, dynamic["path"], predictions)
    # The median round, not the best: the margin must hold in an ordinary stretch of the machine.
    pipeline, xla = (statistics.median(rates[name]) for name in (DYNAMIC, DYNAMIC_XLA))
    margin = pipeline / train_rate
    print(
        f"  margin: dynamic pipeline {pipeline:,.0f} (median round) / training {train_rate:.3f} "
        f"examples/s = {margin:,.0f}x (target >= {FLAGS.target_margin:g}x): "
        f"{'PASS' if margin >= FLAGS.target_margin else 'FAIL'}; with XLA masking "
        f"{xla / train_rate:,.0f}x"
    )


if __name__ == "__main__":
    app.run(main)
