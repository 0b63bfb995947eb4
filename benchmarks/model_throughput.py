"""Training throughput of AlbertPretrainer vs keras-hub's AlbertMaskedLM, vs the matmul peak, and
vs a matmul-only step.

Both models are ALBERT-base (seq 128, batch 8, 20 predictions), trained with the same original LAMB,
measured side by side in one process, together with the machine's fp32 matmul rate and with
`MatmulSkeleton`: every matmul of the same training step and nothing else, with and without XLA,
i.e. the best any implementation on these matmul kernels could do. Every round times a window of
matmuls (the best of the model's own shapes and a 2048^3 product), then the skeletons, then each
model, so that all of them see the same machine state. Achieved rate = analytic training FLOPs
(`training_flops`, held to the real train step's graph by a test) / step time. This VM is
throttled from time to time (whole rounds run ~1.7x slower), so the summary keeps each one's best
round, and prints every round's fraction of that round's peak (the better of the peak windows
before and after it).

    python benchmarks/model_throughput.py [--steps=1 --rounds=12] [--preset=base] [--jit_compile]
"""

import os
import pathlib
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # run from a checkout
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import keras_hub
import numpy as np
import tensorflow as tf
from absl import app, flags

from benchmarks.machine import describe as describe_machine
from albert_tf import AlbertConfig, AlbertPretrainer
from albert_tf.checkpoints.keras_hub import keras_hub_backbone
from albert_tf.training.optimization import create_optimizer
from benchmarks.matmul_reference import MatmulRate, MatmulSkeleton, training_flops

FLAGS = flags.FLAGS
flags.DEFINE_string("preset", "base", "Model size.")
flags.DEFINE_integer("seq_length", 128, "Sequence length.")
flags.DEFINE_integer("batch_size", 8, "Batch size.")
flags.DEFINE_integer("predictions", 20, "Masked positions per sequence.")
flags.DEFINE_integer("steps", 1, "Training steps per timed round.")
flags.DEFINE_integer("rounds", 12, "Timed rounds, each: matmul peak, the skeletons, each model.")
flags.DEFINE_bool(
    "jit_compile",
    False,
    "Compile both models' train steps with XLA (off: as pipelines/pretrain.py runs fp32 on a CPU).",
)
flags.DEFINE_enum(
    "dtype_policy",
    "float32",
    ["float32", "mixed_bfloat16"],
    "Keras dtype policy of both models. mixed_bfloat16 runs the matmuls on AMX where "
    "the CPU has it; the fractions stay relative to the fp32 matmul peak.",
)

SKELETONS = ("matmul-only step", "matmul-only step, XLA")
OURS, HUBS = "albert-tf AlbertPretrainer", "keras-hub AlbertMaskedLM"
SHORT_NAMES = {
    SKELETONS[0]: "matmul-only",
    SKELETONS[1]: "matmul-only XLA",
    OURS: "albert-tf",
    HUBS: "keras-hub",
}


def batch_arrays(c: AlbertConfig, batch: int, seq: int, predictions: int) -> dict:
    rng = np.random.default_rng(0)
    return {
        "input_ids": rng.integers(5, c.vocab_size, (batch, seq), dtype=np.int32),
        "input_mask": np.ones((batch, seq), np.int32),
        "segment_ids": (np.arange(seq) >= seq // 2).astype(np.int32)[None].repeat(batch, 0),
        "masked_lm_positions": np.sort(
            rng.choice(np.arange(1, seq), (batch, predictions)), -1
        ).astype(np.int32),
        "masked_lm_ids": rng.integers(5, c.vocab_size, (batch, predictions), dtype=np.int32),
        "masked_lm_weights": np.ones((batch, predictions), np.float32),
        "next_sentence_labels": rng.integers(0, 2, (batch, 1), dtype=np.int32),
    }


def step_timer(step):
    """Seconds per call of `step`, averaged over `steps` calls."""

    def seconds_per_step(steps: int) -> float:
        start = time.perf_counter()
        for _ in range(steps):
            step()
        return (time.perf_counter() - start) / steps

    return seconds_per_step


def model_step(model, dataset):
    """One training step: Keras's own compiled train step (what `fit` runs), without `fit`'s
    per-call setup, so that rounds can be as short as one step."""
    model.fit(dataset, steps_per_epoch=1, epochs=1, verbose=0)  # builds `train_function`
    iterator = iter(dataset)
    return lambda: model.train_function(iterator)


def ours(c, arrays):
    model = AlbertPretrainer(c)
    model.compile(optimizer=create_optimizer(1e-4, 1000, 10), jit_compile=FLAGS.jit_compile)
    return model, tf.data.Dataset.from_tensors(arrays).repeat()


def keras_hubs(c, arrays):
    model = keras_hub.models.AlbertMaskedLM(keras_hub_backbone(c), preprocessor=None)
    model.compile(
        optimizer=create_optimizer(1e-4, 1000, 10),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        weighted_metrics=[keras.metrics.SparseCategoricalAccuracy()],
        jit_compile=FLAGS.jit_compile,
    )
    x = {
        "token_ids": arrays["input_ids"],
        "padding_mask": arrays["input_mask"],
        "segment_ids": arrays["segment_ids"],
        "mask_positions": arrays["masked_lm_positions"],
    }
    data = (x, arrays["masked_lm_ids"], arrays["masked_lm_weights"])
    return model, tf.data.Dataset.from_tensors(data).repeat()


def main(argv):
    del argv
    keras.mixed_precision.set_dtype_policy(FLAGS.dtype_policy)
    c = AlbertConfig.from_preset(FLAGS.preset)
    b, t, p = FLAGS.batch_size, FLAGS.seq_length, FLAGS.predictions
    flops = training_flops(c, b, t, p)
    shapes = [
        (b * t, c.hidden_size, c.hidden_size),
        (b * t, c.hidden_size, c.intermediate_size),
        (b * t, c.intermediate_size, c.hidden_size),
        (2048, 2048, 2048),
    ]
    matmuls = {shape: MatmulRate(*shape) for shape in shapes}
    print(
        f"machine: {describe_machine()}, TF {tf.__version__}, keras {keras.__version__}, "
        f"keras-hub {keras_hub.__version__}; jit_compile={FLAGS.jit_compile}, "
        f"dtype policy {FLAGS.dtype_policy}"
    )
    print(f"ALBERT-{FLAGS.preset}, seq {t}, batch {b}: {flops / 1e9:.1f} GFLOP per training step")
    arrays = batch_arrays(c, b, t, p)
    timers = {
        name: step_timer(MatmulSkeleton(c, b, t, p, jit_compile=jit))
        for name, jit in zip(SKELETONS, (False, True))
    }
    timers[OURS] = step_timer(model_step(*ours(c, arrays)))
    timers[HUBS] = step_timer(model_step(*keras_hubs(c, arrays)))
    for timer in timers.values():  # compile and warm up all before timing any
        timer(2)
    shape_rates = {shape: 0.0 for shape in shapes}
    seconds = {name: [] for name in timers}
    windows = []  # peak windows: one before each round and one after the last

    def peak_window() -> float:
        rates = {shape: mm.gflops(0.25 * FLAGS.steps) for shape, mm in matmuls.items()}
        for shape, rate in rates.items():
            shape_rates[shape] = max(shape_rates[shape], rate)
        return max(rates.values())

    for _ in range(FLAGS.rounds):
        # Rounds of one step each: the VM's throttling spells last longer, so all the
        # entries of a round see the same machine state.
        windows.append(peak_window())
        for name, timer in timers.items():
            seconds[name].append(timer(FLAGS.steps))
    windows.append(peak_window())
    # A round's peak is the better of the windows around it: a throttled window must not make
    # the round look better than the machine allowed.
    peaks = [max(before, after) for before, after in zip(windows, windows[1:])]
    fractions = {
        name: [flops / step / 1e9 / peak for step, peak in zip(times, peaks)]
        for name, times in seconds.items()
    }
    for round_index, round_peak in enumerate(peaks):
        print(
            f"round {round_index}: peak {round_peak:6.1f} GFLOP/s  "
            + "  ".join(
                f"{SHORT_NAMES[name]} {fractions[name][round_index]:.2f}" for name in timers
            )
        )
    for (m, k, n), rate in shape_rates.items():
        print(f"fp32 matmul [{m}x{k}]x[{k}x{n}]: best {rate:.1f} GFLOP/s")
    peak = max(peaks)
    print(f"matmul peak (best round): {peak:.1f} GFLOP/s")
    for name, times in seconds.items():
        best = min(times)
        rate = flops / best / 1e9
        print(
            f"{name:28s} {1 / best:6.3f} steps/s  {b / best:6.2f} seq/s  "
            f"{rate:6.1f} GFLOP/s = {rate / peak:.2f} of matmul peak (best rounds); "
            f"of its own round's peak: best {max(fractions[name]):.2f}, "
            f"median {statistics.median(fractions[name]):.2f}"
        )
    # The better skeleton of each round is what these kernels allow in that round.
    ceilings = [max(pair) for pair in zip(*(fractions[name] for name in SKELETONS))]
    for name in (OURS, HUBS):
        of_ceiling = [f / ceiling for f, ceiling in zip(fractions[name], ceilings)]
        print(
            f"{name:28s} of the same round's matmul-only step: best {max(of_ceiling):.2f}, "
            f"median {statistics.median(of_ceiling):.2f}"
        )
    ours_s, hubs_s = seconds[OURS], seconds[HUBS]
    print(
        f"ours / keras-hub throughput: {min(hubs_s) / min(ours_s):.2f}x best rounds, "
        f"{statistics.median(h / o for h, o in zip(hubs_s, ours_s)):.2f}x median of rounds "
        f"(target >= 1.0)"
    )
    print(
        f"ours, median fraction of its round's peak: {statistics.median(fractions[OURS]):.2f} "
        f"(target >= 0.85); the matmul-only step alone: "
        f"{statistics.median(ceilings):.2f}"
    )


if __name__ == "__main__":
    app.run(main)
