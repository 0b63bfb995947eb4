"""Training throughput of AlbertPretrainer vs keras-hub's AlbertMaskedLM, and vs the matmul peak.

Both models are ALBERT-base (seq 128, batch 8, 20 predictions), trained with the same original LAMB,
measured side by side in one process. The fp32 matmul rate of this machine is measured first
(on the model's own FFN shape); each model's achieved rate = analytic training FLOPs / step time.

    python benchmarks/model_throughput.py [--steps=3 --rounds=3] [--preset=base] [--nojit_compile]
"""

import os
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # run from a checkout
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import keras_hub
import numpy as np
import tensorflow as tf
from absl import app, flags

from albert_tf import AlbertConfig, AlbertPretrainer
from albert_tf.optimization import create_optimizer

FLAGS = flags.FLAGS
flags.DEFINE_string("preset", "base", "Model size.")
flags.DEFINE_integer("seq_length", 128, "Sequence length.")
flags.DEFINE_integer("batch_size", 8, "Batch size.")
flags.DEFINE_integer("predictions", 20, "Masked positions per sequence.")
flags.DEFINE_integer("steps", 3, "Training steps per timed round.")
flags.DEFINE_integer("rounds", 3, "Timed rounds per model, alternating between the models.")
flags.DEFINE_bool("jit_compile", True, "Compile both train steps with XLA.")


def training_flops(c: AlbertConfig, batch: int, seq: int, predictions: int) -> float:
    """Matmul FLOPs of one training step (forward x 3), counting 2 per multiply-add."""
    tokens = batch * seq
    per_layer = 2 * tokens * (4 * c.hidden_size ** 2 + 2 * c.hidden_size * c.intermediate_size)
    per_layer += 2 * 2 * batch * seq * seq * c.hidden_size  # scores and context
    forward = c.num_hidden_layers * c.inner_group_num * per_layer
    forward += 2 * tokens * c.embedding_size * c.hidden_size  # E -> H mapping
    forward += 2 * batch * predictions * (c.hidden_size * c.embedding_size
                                          + c.embedding_size * c.vocab_size)  # MLM head
    forward += 2 * batch * c.hidden_size ** 2  # pooler
    return 3.0 * forward


def matmul_gflops(m: int, k: int, n: int, seconds: float = 3.0) -> float:
    """Sustained fp32 matmul rate on a [m, k] x [k, n] product."""
    a = tf.random.normal((m, k))
    b = tf.random.normal((k, n))
    product = tf.function(lambda a, b: tf.matmul(a, b))
    product(a, b).numpy()
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        product(a, b).numpy()
        count += 1
    return 2.0 * m * k * n * count / (time.perf_counter() - start) / 1e9


def batch_arrays(c: AlbertConfig, batch: int, seq: int, predictions: int) -> dict:
    rng = np.random.default_rng(0)
    return {
        "input_ids": rng.integers(5, c.vocab_size, (batch, seq), dtype=np.int32),
        "input_mask": np.ones((batch, seq), np.int32),
        "segment_ids": (np.arange(seq) >= seq // 2).astype(np.int32)[None].repeat(batch, 0),
        "masked_lm_positions": np.sort(rng.choice(np.arange(1, seq), (batch, predictions)), -1)
        .astype(np.int32),
        "masked_lm_ids": rng.integers(5, c.vocab_size, (batch, predictions), dtype=np.int32),
        "masked_lm_weights": np.ones((batch, predictions), np.float32),
        "next_sentence_labels": rng.integers(0, 2, (batch, 1), dtype=np.int32),
    }


def time_round(model, iterator, steps: int) -> float:
    """Seconds per training step over `steps` steps."""
    start = time.perf_counter()
    model.fit(iterator, steps_per_epoch=steps, epochs=1, verbose=0)
    return (time.perf_counter() - start) / steps


def ours(c, arrays):
    model = AlbertPretrainer(c)
    model.compile(optimizer=create_optimizer(1e-4, 1000, 10), jit_compile=FLAGS.jit_compile)
    return model, tf.data.Dataset.from_tensors(arrays).repeat()


def keras_hubs(c, arrays):
    backbone = keras_hub.models.AlbertBackbone(
        vocabulary_size=c.vocab_size, num_layers=c.num_hidden_layers,
        num_heads=c.num_attention_heads, embedding_dim=c.embedding_size,
        hidden_dim=c.hidden_size, intermediate_dim=c.intermediate_size,
        max_sequence_length=c.max_position_embeddings)
    model = keras_hub.models.AlbertMaskedLM(backbone, preprocessor=None)
    model.compile(optimizer=create_optimizer(1e-4, 1000, 10),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  weighted_metrics=[keras.metrics.SparseCategoricalAccuracy()],
                  jit_compile=FLAGS.jit_compile)
    x = {"token_ids": arrays["input_ids"], "padding_mask": arrays["input_mask"],
         "segment_ids": arrays["segment_ids"], "mask_positions": arrays["masked_lm_positions"]}
    data = (x, arrays["masked_lm_ids"], arrays["masked_lm_weights"])
    return model, tf.data.Dataset.from_tensors(data).repeat()


def main(argv):
    del argv
    c = AlbertConfig.from_preset(FLAGS.preset)
    b, t, p = FLAGS.batch_size, FLAGS.seq_length, FLAGS.predictions
    flops = training_flops(c, b, t, p)
    # The peak: the best of the model's own matmul shapes and a large square one.
    shapes = [(b * t, c.hidden_size, c.hidden_size), (b * t, c.hidden_size, c.intermediate_size),
              (b * t, c.intermediate_size, c.hidden_size), (2048, 2048, 2048)]
    rates = {shape: matmul_gflops(*shape) for shape in shapes}
    peak = max(rates.values())
    print(f"machine: {os.cpu_count()} CPUs, TF {tf.__version__}, keras {keras.__version__}, "
          f"keras-hub {keras_hub.__version__}; jit_compile={FLAGS.jit_compile}")
    for (m, k, n), rate in rates.items():
        print(f"fp32 matmul [{m}x{k}]x[{k}x{n}]: {rate:.1f} GFLOP/s")
    print(f"matmul peak (best of the above): {peak:.1f} GFLOP/s")
    print(f"ALBERT-{FLAGS.preset}, seq {t}, batch {b}: {flops / 1e9:.1f} GFLOP per training step")
    arrays = batch_arrays(c, b, t, p)
    models = {"albert-tf AlbertPretrainer": ours(c, arrays),
              "keras-hub AlbertMaskedLM": keras_hubs(c, arrays)}
    for model, dataset in models.values():  # compile and warm up both before timing either
        model.fit(dataset, steps_per_epoch=2, epochs=1, verbose=0)
    # Alternate rounds so that background load hits both alike; keep each model's best round.
    results = {name: float("inf") for name in models}
    for _ in range(FLAGS.rounds):
        for name, (model, dataset) in models.items():
            results[name] = min(results[name], time_round(model, dataset, FLAGS.steps))
    for name, seconds in results.items():
        rate = flops / seconds / 1e9
        print(f"{name:28s} {1 / seconds:6.3f} steps/s  {b / seconds:6.2f} seq/s  "
              f"{rate:6.1f} GFLOP/s = {rate / peak:.2f} of matmul peak")
    ratio = results["keras-hub AlbertMaskedLM"] / results["albert-tf AlbertPretrainer"]
    print(f"ours / keras-hub throughput: {ratio:.2f}x (target >= 1.0)")


if __name__ == "__main__":
    app.run(main)
