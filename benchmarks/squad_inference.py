"""SQuAD v2 inference: our AlbertSquadV2 (the original head: start, top-k end beam, answer class)
against keras-hub's AlbertBackbone plus a plain span head (a Dense(2) on the sequence output: what
one would build there, keras-hub having no SQuAD task), at the same size, side by side.

    python benchmarks/squad_inference.py [--preset=base --seq_length=384 --batch_size=8 --rounds=8]

Both are called through a `tf.function` on the same random batch, in alternating rounds (one batch
each per round) after a warm-up; reported: the median examples/s of each and their ratio. Ours
does more work than the plain span head (the end head runs for each of the 5 top starts).
"""

import os
import pathlib
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # run from a checkout
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf
from absl import app, flags

from albert_tf import AlbertConfig
from albert_tf.checkpoints.keras_hub import keras_hub_backbone
from albert_tf.modeling.heads.squad_v2 import AlbertSquadV2
from benchmarks.machine import describe as describe_machine

FLAGS = flags.FLAGS
flags.DEFINE_string("preset", "base", "Model size.")
flags.DEFINE_integer("seq_length", 384, "Sequence length (the SQuAD recipe's 384).")
flags.DEFINE_integer("batch_size", 8, "Batch size (the original's predict_batch_size).")
flags.DEFINE_integer("rounds", 8, "Timed rounds, each one batch per model.")


def _batch(config: AlbertConfig, rng: np.random.Generator) -> dict:
    b, t = FLAGS.batch_size, FLAGS.seq_length
    ids = rng.integers(5, config.vocab_size, (b, t), dtype=np.int32)
    segments = np.zeros((b, t), np.int32)
    segments[:, 40:] = 1  # a 38-piece question, then the context
    p_mask = 1 - segments
    p_mask[:, 0] = 0  # [CLS] may hold the (null) answer
    mask = np.ones((b, t), np.int32)
    return {"input_ids": ids, "input_mask": mask, "segment_ids": segments, "p_mask": p_mask}


def _keras_hub_span_model(config: AlbertConfig) -> keras.Model:
    backbone = keras_hub_backbone(config)
    sequence = backbone.output["sequence_output"]
    logits = keras.layers.Dense(2, name="span")(sequence)
    return keras.Model(backbone.input, logits)


def main(argv):
    del argv
    config = AlbertConfig.from_preset(FLAGS.preset, max_position_embeddings=512)
    batch = _batch(config, np.random.default_rng(0))
    ours = AlbertSquadV2(config, seed=0)
    hub = _keras_hub_span_model(config)
    ours_inputs = {k: tf.constant(v) for k, v in batch.items()}
    hub_inputs = {
        "token_ids": tf.constant(batch["input_ids"]),
        "segment_ids": tf.constant(batch["segment_ids"]),
        "padding_mask": tf.constant(batch["input_mask"]),
    }
    runners = {
        "albert-tf AlbertSquadV2 (beam 5x5)": (tf.function(lambda x: ours(x)), ours_inputs),
        "keras-hub AlbertBackbone + Dense(2)": (tf.function(lambda x: hub(x)), hub_inputs),
    }
    for fn, inputs in runners.values():  # trace and warm up
        tf.nest.map_structure(lambda t: t.numpy(), fn(inputs))
    seconds = {name: [] for name in runners}
    for _ in range(FLAGS.rounds):
        for name, (fn, inputs) in runners.items():
            started = time.perf_counter()
            tf.nest.map_structure(lambda t: t.numpy(), fn(inputs))
            seconds[name].append(time.perf_counter() - started)
    print(f"machine: {describe_machine()}, TF {tf.__version__}, keras {keras.__version__}")
    print(
        f"ALBERT-{FLAGS.preset}, seq {FLAGS.seq_length}, batch {FLAGS.batch_size}, fp32, "
        f"{FLAGS.rounds} alternating rounds"
    )
    rates = {}
    for name, times in seconds.items():
        rates[name] = FLAGS.batch_size / statistics.median(times)
        print(f"  {name:38s} {rates[name]:7.2f} examples/s (median of rounds)")
    ours_rate, hub_rate = rates.values()
    print(f"  ours / keras-hub: {ours_rate / hub_rate:.2f}x")


if __name__ == "__main__":
    app.run(main)
