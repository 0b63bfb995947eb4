"""TFLite latency and size at batch 1: our exported variants vs keras-hub's AlbertBackbone.

Both models are ALBERT-base with the same (random, seeded) weights, copied across with
`albert_tf.checkpoints.keras_hub`; latency and size do not depend on the values. Ours is converted
as `pipelines/export.py` converts it (signatures serving_default + mlm + sop, builtin ops only);
keras-hub's through Keras's own LiteRT export (`backbone.export(format="litert")`) with the same
quantization settings; for `tflite_int8`, whose float-kept ops no converter option selects,
through Keras's SavedModel export and the same `albert_tf.export.tflite.converter.convert` as ours. Int8
variants are calibrated on the same real sentences. Timing: LiteRT
interpreter with its default XNNPACK delegate, `serving_default` (the encoder), batch 1, 1 and 2
threads. Per variant, the four runners (ours and keras-hub's, 1 and 2 threads) are called in
turn, run after run, so that this VM's throttling spells fall on all four alike and the ratios
(ours/hub, 1 thread/2 threads) compare like with like.

Beside both models each variant also times a reference: only the encoder's dense layers (L x
[T, H] x [H, I] and [T, I] x [I, H] with a residual add, no attention or layer norm), converted the
same way. Its 2-thread speed-up is what XNNPACK's matmul kernels of that variant give on this
machine, the ceiling for a model whose time they are.

    python benchmarks/tflite_latency.py [--preset=base] [--seq_length=128] [--runs=30]
    python benchmarks/tflite_latency.py --preset=smoke   # a 2-layer model: checks the script only
"""

import os
import pathlib
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # run from a checkout
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf
from absl import app, flags
from ai_edge_litert.interpreter import Interpreter

from benchmarks.machine import describe as describe_machine
from albert_tf import AlbertConfig, AlbertPretrainer
from albert_tf.checkpoints.keras_hub import to_keras_hub
from albert_tf.export.data import examples_from_text
from albert_tf.export.heads import ServingHead
from albert_tf.export.formats import REGISTRY as FORMATS
from albert_tf.export.tflite.converter import (
    batch1_runner,
    convert,
    interleaved_latency,
    non_builtin_ops,
    representative_dataset,
    save_fixed_shape_model,
)
from albert_tf.modeling.layers import MASK_ADDER
from albert_tf.text.tokenization import AlbertTokenizer

REPO = pathlib.Path(__file__).resolve().parents[1]
VARIANTS = tuple(name for name, spec in FORMATS.items() if spec.tflite is not None)
CALIBRATED_VARIANTS = tuple(name for name in VARIANTS if FORMATS[name].calibrated)
FLAGS = flags.FLAGS
flags.DEFINE_enum(
    "preset",
    "base",
    ["base", "large", "smoke"],
    "Model shape (AlbertConfig.from_preset; smoke: 2 layers of width 64, to check the script).",
)
flags.DEFINE_integer("seq_length", 128, "Fixed sequence length of the TFLite models.")
flags.DEFINE_integer("runs", 60, "Timed runs per model, variant and thread count (interleaved).")
flags.DEFINE_integer("calibration_examples", 32, "Sentences the full-int8 variants calibrate on.")
flags.DEFINE_string(
    "corpus",
    str(REPO / "tests/fixtures/original_data/corpus_small.txt"),
    "Text for calibration (one sentence per line).",
)
flags.DEFINE_string(
    "spm_model_file",
    str(REPO / "tests/fixtures/albert_spm/30k-clean.model"),
    "SentencePiece model of the corpus.",
)

# Keras LiteRT export kwargs, the same settings `albert_tf.export.tflite.converter.convert` uses.
HUB_QUANTIZATION = {
    "tflite_fp32": {},
    "tflite_fp16": {
        "optimizations": [tf.lite.Optimize.DEFAULT],
        "target_spec": {"supported_types": [tf.float16]},
    },
    "tflite_int8_dynamic": {"optimizations": [tf.lite.Optimize.DEFAULT]},
    "tflite_int8_integer_only": {
        "optimizations": [tf.lite.Optimize.DEFAULT],
        "target_spec": {"supported_ops": [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]},
    },
}


def source_mask_adder(variant: str) -> float:
    """What the SavedModel `variant` converts from adds to padded keys' attention scores."""
    adder = FORMATS[variant].tflite.mask_adder
    return MASK_ADDER if adder is None else adder


def albert_config() -> AlbertConfig:
    return AlbertConfig.from_preset(FLAGS.preset)


def export_ours(model, examples, directory) -> dict[str, str]:
    head = ServingHead("pretrainer", model, model.config)
    sources = {}
    for adder in {source_mask_adder(variant) for variant in VARIANTS}:
        path = os.path.join(directory, f"ours_source_{len(sources)}")
        sources[adder] = (path, save_fixed_shape_model(head, path, FLAGS.seq_length, 20, adder))

    paths = {}
    for variant in VARIANTS:
        tflite = convert(
            *sources[source_mask_adder(variant)],
            FORMATS[variant].tflite,
            representative_dataset(head, examples) if variant in CALIBRATED_VARIANTS else None,
            shared_weights=True,
        )
        assert not non_builtin_ops(tflite), variant
        paths[variant] = os.path.join(directory, f"ours_{variant}.tflite")
        with open(paths[variant], "wb") as f:
            f.write(tflite)
    return paths


def hub_inputs(examples, i):
    return {
        "token_ids": examples["input_ids"][i : i + 1],
        "segment_ids": examples["segment_ids"][i : i + 1],
        "padding_mask": examples["input_mask"][i : i + 1],
    }


def hub_representative(examples, signature, input_names):
    """Calibration source of keras-hub's model: its inputs matched by name suffix."""

    def representative():
        for i in range(len(examples["input_ids"])):
            x = hub_inputs(examples, i)
            yield (
                signature,
                {name: x[next(k for k in x if name.endswith(k))] for name in input_names},
            )

    return representative


def export_hub(backbone, examples, directory) -> dict[str, str]:
    signature = [
        {
            k: tf.TensorSpec([1, FLAGS.seq_length], tf.int32, name=k)
            for k in ("token_ids", "segment_ids", "padding_mask")
        }
    ]
    paths = {}
    for variant, kwargs in HUB_QUANTIZATION.items():
        kwargs = dict(kwargs)
        if variant in CALIBRATED_VARIANTS:
            ((key, inputs),) = (
                Interpreter(model_path=paths["tflite_fp32"]).get_signature_list().items()
            )
            kwargs["representative_dataset"] = hub_representative(examples, key, inputs["inputs"])
        paths[variant] = os.path.join(directory, f"keras_hub_{variant}.tflite")
        backbone.export(
            paths[variant], format="litert", input_signature=signature, verbose=False, **kwargs
        )
    saved_model = os.path.join(directory, "keras_hub_saved_model")
    backbone.export(saved_model, format="tf_saved_model", input_signature=signature, verbose=False)
    loaded = tf.saved_model.load(saved_model).signatures["serving_default"]
    inputs = [spec.name for spec in loaded.structured_input_signature[1].values()]
    paths["tflite_int8"] = os.path.join(directory, "keras_hub_tflite_int8.tflite")
    with open(paths["tflite_int8"], "wb") as f:
        f.write(
            convert(
                saved_model,
                ["serving_default"],
                FORMATS["tflite_int8"].tflite,
                hub_representative(examples, "serving_default", inputs),
            )
        )
    return paths


def export_dense_stack(config, directory) -> dict[str, str]:
    """The reference: the encoder's dense layers alone, as each variant, fixed [1, T, H] input."""
    rng = np.random.default_rng(0)
    h, i, t = config.hidden_size, config.intermediate_size, FLAGS.seq_length
    kernels = [
        (
            tf.constant(rng.normal(0, 0.02, (h, i)), tf.float32),
            tf.constant(rng.normal(0, 0.02, (i, h)), tf.float32),
        )
        for _ in range(config.num_hidden_layers)
    ]

    class DenseStack(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([1, t, h], tf.float32, name="x")])
        def serve(self, x):
            for up, down in kernels:
                x = x + tf.matmul(tf.nn.relu(tf.matmul(x, up)), down)
            return {"y": x}

    module = DenseStack()
    source = os.path.join(directory, "dense_stack")
    tf.saved_model.save(module, source, signatures={"serving_default": module.serve})

    def representative():
        for _ in range(8):
            yield "serving_default", {"x": rng.normal(0, 1, (1, t, h)).astype(np.float32)}

    paths = {}
    for variant in VARIANTS:
        paths[variant] = os.path.join(directory, f"dense_stack_{variant}.tflite")
        with open(paths[variant], "wb") as f:
            f.write(
                convert(
                    source,
                    ["serving_default"],
                    FORMATS[variant].tflite,
                    representative if variant in CALIBRATED_VARIANTS else None,
                )
            )
    return paths


def main(argv):
    del argv
    config = albert_config()
    keras.utils.set_random_seed(0)
    model = AlbertPretrainer(config)
    backbone = to_keras_hub(model.backbone)
    examples, _ = examples_from_text(
        FLAGS.corpus,
        AlbertTokenizer(FLAGS.spm_model_file),
        FLAGS.seq_length,
        20,
        FLAGS.calibration_examples,
        seed=0,
    )
    with tempfile.TemporaryDirectory() as directory:
        ours = export_ours(model, examples, directory)
        hub = export_hub(backbone, examples, directory)
        dense = export_dense_stack(config, directory)
        dense_in = {
            "x": np.random.default_rng(1)
            .normal(0, 1, (1, FLAGS.seq_length, config.hidden_size))
            .astype(np.float32)
        }
        sizes = {
            (who, v): os.path.getsize(p[v])
            for who, p in (("ours", ours), ("hub", hub))
            for v in VARIANTS
        }
        ours_in = {k: examples[k][:1] for k in ("input_ids", "input_mask", "segment_ids")}
        latency = {}
        for variant in VARIANTS:
            runners = {
                (who, variant, threads): (batch1_runner(path, threads), inputs)
                for threads in (1, 2)
                for who, path, inputs in (
                    ("ours", ours[variant], ours_in),
                    ("hub", hub[variant], hub_inputs(examples, 0)),
                    ("dense", dense[variant], dense_in),
                )
            }
            latency.update(interleaved_latency(runners, FLAGS.runs))
    print(
        f"\nmachine: {describe_machine()}\nALBERT-{FLAGS.preset}, seq {FLAGS.seq_length}, batch 1, "
        "LiteRT + XNNPACK, "
        f"{FLAGS.runs} interleaved runs\n"
    )
    print(
        f"{'variant':26s}{'size MB ours/hub':>20s}{'thr':>5s}{'ours p50/p90 ms':>20s}"
        f"{'hub p50/p90 ms':>20s}{'ours/hub p50':>14s}"
    )
    for variant in VARIANTS:
        for threads in (1, 2):
            o, h = latency["ours", variant, threads], latency["hub", variant, threads]
            size = f"{sizes['ours', variant] / 1e6:.1f}/{sizes['hub', variant] / 1e6:.1f}"
            print(
                f"{variant:26s}{size:>20s}{threads:>5d}"
                f"{o['p50_ms']:>11.1f}/{o['p90_ms']:<8.1f}"
                f"{h['p50_ms']:>11.1f}/{h['p90_ms']:<8.1f}{o['p50_ms'] / h['p50_ms']:>14.2f}"
            )
    print()
    for variant in ("tflite_int8_dynamic", *CALIBRATED_VARIANTS):
        for who in ("ours", "hub"):
            size_ratio = sizes[who, variant] / sizes[who, "tflite_fp32"]
            latency_ratio = (
                latency[who, variant, 1]["p50_ms"] / latency[who, "tflite_fp32", 1]["p50_ms"]
            )
            print(
                f"{who:5s} {variant}/fp32: size {size_ratio:.3f}, "
                f"latency (1 thread) {latency_ratio:.3f}"
            )
    print(
        "\n2-thread speed-up (p50 1 thread / p50 2 threads); dense = the dense-layers-only reference"
    )
    for variant in VARIANTS:
        speedups = {
            who: latency[who, variant, 1]["p50_ms"] / latency[who, variant, 2]["p50_ms"]
            for who in ("ours", "hub", "dense")
        }
        print(
            f"{variant:26s}"
            + "  ".join(f"{who} {x:.2f}x" for who, x in speedups.items())
            + f"   (dense 1 thread: {latency['dense', variant, 1]['p50_ms']:.1f} ms)"
        )


if __name__ == "__main__":
    app.run(main)
