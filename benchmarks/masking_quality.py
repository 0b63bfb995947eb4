r"""Held-out MLM accuracy after the same short pretraining on static vs dynamically masked records.

The demo's recipe (vocab 8000, seq 128, a 4-layer factorized ALBERT, 450 steps of 32, LAMB) on the
bundled sample corpus, run for each arm and each training seed:

- static:  the training books written once with their masks (`--masking=static --dupe_factor=1`),
  so every epoch shows each sentence with the same mask;
- dynamic: the same SOP instances written once unmasked (`--masking=dynamic`: data prep gives the
  same instances in the same order, only unmasked), masked afresh by the input pipeline.

Both arms are scored on the same held-out book (Kipling, not trained on) written with fixed masks,
so the figure compares what the models learnt, not how they are probed. The seed-to-seed spread
within an arm is the noise the arms' difference is read against; the binomial standard error of
one accuracy over the evaluated masked tokens is printed too.

    python benchmarks/masking_quality.py [--seeds=1,2 --num_train_steps=450]
    python benchmarks/masking_quality.py --seeds=1 --num_train_steps=4 --smoke   # checks the script

About 4 minutes a run on 2 cores with AMX (450 steps), so ~16 minutes at the defaults.
"""

import dataclasses
import math
import os
import pathlib
import statistics
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # run from a checkout
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags, logging

from benchmarks.machine import describe as describe_machine
from pipelines.demo_pipeline import DemoSettings, small_run_options, train_vocabulary

FLAGS = flags.FLAGS
flags.DEFINE_list("seeds", ["1", "2"], "Training seeds (init, shuffling and dynamic masks).")
flags.DEFINE_integer("num_train_steps", 450, "Optimizer updates per run (the demo's 450).")
flags.DEFINE_integer("max_eval_steps", 200, "Held-out batches of 32 scored.")
flags.DEFINE_bool("smoke", False, "A tiny model and vocab: checks that the script runs.")
flags.DEFINE_string("work_dir", None, "Where runs go (default: a temporary folder).")


def _records(s: DemoSettings, spm_model_file: str, work_dir: str) -> dict:
    from data_prep import corpus, instances, pipeline

    paths = {}
    for name, files, mode, seed in (
        ("static", s.train_files, "static", 12345),
        ("dynamic", s.train_files, "dynamic", 12345),
        ("heldout", s.heldout_files, "static", 54321),
    ):
        path = os.path.join(work_dir, "data", f"{name}.tfrecord")
        summary = pipeline.run(
            pipeline.DataPrepConfig(
                input_file=files,
                output_file=path,
                spm_model_file=spm_model_file,
                random_seed=seed,
                dupe_factor=1,
                pair=instances.PairConfig(max_seq_length=s.max_seq_length),
                masking=instances.MaskingConfig(max_predictions_per_seq=s.max_predictions_per_seq),
                masking_mode=mode,
                corpus=corpus.CorpusConfig(input_format="paragraphs"),
                num_workers=min(2, os.cpu_count() or 1),
            )
        )
        paths[name] = path
        logging.info("%s: %d instances", name, summary["instances"])
    return paths


def _pretrain(s: DemoSettings, records: dict, arm: str, seed: int, work_dir: str) -> dict:
    from albert_tf.config import AlbertConfig
    from albert_tf.training.distribution import build_strategy
    from albert_tf.training.pretraining import run_pretraining

    options = small_run_options(
        s,
        input_file=records[arm],
        eval_input_file=records["heldout"],
        output_dir=os.path.join(work_dir, f"{arm}_seed{seed}"),
        save_checkpoints_steps=s.num_train_steps,
        do_eval=True,
        log_every_steps=max(1, s.num_train_steps // 5),
        shuffle_buffer=2000,
        seed=seed,
        masking=arm,
    )
    config = AlbertConfig(vocab_size=s.vocab_size, **s.model)
    return run_pretraining(options, config, build_strategy("one_device"))["eval"]


def _masked_tokens(path: str, s: DemoSettings, batches: int) -> int:
    """Real masked positions in the first `batches` eval batches (the binomial n)."""
    import tensorflow as tf

    from albert_tf.training.input_pipeline import feature_spec

    spec = {
        "masked_lm_weights": feature_spec(s.max_seq_length, s.max_predictions_per_seq)[
            "masked_lm_weights"
        ]
    }
    data = tf.data.TFRecordDataset(path).batch(s.eval_batch_size).take(batches)
    return int(sum(tf.reduce_sum(tf.io.parse_example(b, spec)["masked_lm_weights"]) for b in data))


def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)
    seeds = [int(x) for x in FLAGS.seeds]
    with tempfile.TemporaryDirectory() as tmp:
        work_dir = FLAGS.work_dir or tmp
        s = DemoSettings.quick(work_dir) if FLAGS.smoke else DemoSettings(output_dir=work_dir)
        s = dataclasses.replace(
            s,
            num_train_steps=FLAGS.num_train_steps,
            num_warmup_steps=max(1, FLAGS.num_train_steps // 10),
            max_eval_steps=FLAGS.max_eval_steps,
        )
        vocab = train_vocabulary(s)
        records = _records(s, vocab["spm_model_file"], work_dir)
        results = {arm: [] for arm in ("static", "dynamic")}
        for seed in seeds:
            for arm in results:
                evaluation = _pretrain(s, records, arm, seed, work_dir)
                results[arm].append(evaluation["masked_lm_accuracy"])
                print(
                    f"  {arm:8s} seed {seed}: held-out MLM accuracy "
                    f"{evaluation['masked_lm_accuracy']:.4f}, SOP "
                    f"{evaluation['sentence_order_accuracy']:.3f}",
                    flush=True,
                )
        n = _masked_tokens(records["heldout"], s, s.max_eval_steps)

    print(f"\nmachine: {describe_machine()}")
    print(
        f"{s.num_train_steps} steps of {s.train_batch_size}, seq {s.max_seq_length}, vocab "
        f"{s.vocab_size}; held-out: {n} masked tokens"
    )
    for arm, accs in results.items():
        spread = statistics.stdev(accs) if len(accs) > 1 else float("nan")
        print(f"  {arm:8s} mean {statistics.mean(accs):.4f}  seeds {accs}  seed stdev {spread:.4f}")
    mean = statistics.mean(results["static"] + results["dynamic"])
    print(f"  binomial s.e. of one accuracy: {math.sqrt(mean * (1 - mean) / n):.4f}")
    difference = statistics.mean(results["dynamic"]) - statistics.mean(results["static"])
    print(f"  dynamic - static: {difference:+.4f}")


if __name__ == "__main__":
    app.run(main)
