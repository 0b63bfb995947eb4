"""TFLite (LiteRT) variants at a fixed [1, max_seq_length] input, with parity and latency checks.

Each variant is converted with `supported_ops` limited to TFLite builtins (the converter fails on
anything else, so no Flex / SELECT_TF_OPS op can slip in) and its op list is checked again after
conversion. Variants: `tflite_fp32`; `tflite_fp16` (fp16 weights, fp32 compute);
`tflite_int8_dynamic` (int8 weights, activations quantized on the fly); `tflite_int8` (static
int8: the matmuls' weights and activations in int8, their activation ranges calibrated on
representative examples; the ops LiteRT's CPU engine cannot run in int8 stay float);
`tflite_int8_integer_only` (every op int8, for integer-only accelerators). Both int8 ones take
int32 ids in and give float32 outputs.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator

import keras
import numpy as np
import tensorflow as tf
from absl import logging
from ai_edge_litert import schema_py_generated as schema
from ai_edge_litert.interpreter import Interpreter

# The quantizer behind tf.lite.experimental.QuantizationDebugger's op denylist; the converter's
# public options have no per-op switch.
from tensorflow.lite.python import convert as lite_convert

from albert_tf.export.parity import ParityThresholds, merge_figures, parity_failures, parity_figures
from albert_tf.export.savedmodel import ServingHead, save_with_signatures, signature_function
from albert_tf.export.tied_table import share_tied_embedding_table
from albert_tf.modeling import layers

VARIANTS = (
    "tflite_fp32",
    "tflite_fp16",
    "tflite_int8_dynamic",
    "tflite_int8",
    "tflite_int8_integer_only",
)
CALIBRATED_VARIANTS = ("tflite_int8", "tflite_int8_integer_only")
# `tflite_int8` keeps these ops in float. XNNPACK (LiteRT's default CPU engine) has no int8 kernel
# for the first five, and none for the int8 variance + 1e-12 of layer norm (an epsilon 6 orders
# below the variance's scale); each op it cannot take cuts its graph and runs single-threaded on a
# builtin kernel. All int8, ALBERT-base splits into 101 XNNPACK partitions and takes ~130 ms on 1
# thread and as long on 2; with these in float it is one partition per signature, ~30 ms on 1
# thread and ~20 ms on 2 (benchmarks/tflite_latency.py). The matmuls, where the time and the weights
# are, stay int8.
INT8_FLOAT_OPS = (
    "BATCH_MATMUL",
    "SOFTMAX",
    "GELU",
    "RSQRT",
    "SQUARED_DIFFERENCE",
    "MEAN",
    "ADD",
    "SUB",
    "MUL",
)
# Integer-only models quantize `scores + mask bias` to 256 levels over its calibrated range: with
# the original -10000 on padded keys a level is ~40 and every real score rounds to the same value
# (MLM top-1 agreement 0.27 on the original code's tiny checkpoint). -30 keeps padded keys at
# exp(-30) ~ 1e-13 of the softmax (nothing at int8 resolution) and gives 0.91 there.
INT8_MASK_ADDER = -30.0
_BUILTIN_NAMES = {
    value: name for name, value in vars(schema.BuiltinOperator).items() if not name.startswith("_")
}


def convert(
    saved_model_dir: str,
    signatures: list[str],
    variant: str,
    representative: Callable[[], Iterator] | None = None,
    shared_weights: bool = False,
) -> bytes:
    """Convert the fixed-shape SavedModel's `signatures` to the TFLite `variant`.

    `representative` (needed by the calibrated int8 variants) yields
    (signature, {input: [1, ...] array}) pairs.
    `shared_weights`: the model feeds one weight to a dense layer and to another op (the MLM
    decoder is the word-embedding table, also read by GATHER). int8 variants then quantize dense
    weights per tensor rather than per output channel, so that both uses can share one int8 copy
    (a second one of ALBERT-base's 3.8M-entry table takes the int8/fp32 size ratio from ~0.26 to
    ~0.34): the dynamic-range variant shares it as converted; `tflite_int8` after
    `share_tied_embedding_table`; the integer-only one keeps two. The parity check covers the
    accuracy this costs. (The switch is a private converter attribute: the public API has no
    per-layer one.) `tflite_int8_dynamic` quantizes dense weights per tensor whatever the head:
    per-channel hybrid FULLY_CONNECTED is version 12 (LiteRT >= 2.17), which the TFLite Task
    Library's runtime refuses; per tensor it is version 9 (>= 2.9).
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown TFLite variant {variant!r}; choose from {VARIANTS}")
    if variant in CALIBRATED_VARIANTS and representative is None:
        raise ValueError(f"{variant} needs representative examples to calibrate on")
    converter = tf.lite.TFLiteConverter.from_saved_model(saved_model_dir, signature_keys=signatures)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    if variant != "tflite_fp32":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if variant == "tflite_fp16":
        converter.target_spec.supported_types = [tf.float16]
    if variant in CALIBRATED_VARIANTS:
        converter.representative_dataset = representative
    if variant in ("tflite_int8_dynamic", "tflite_int8_integer_only"):
        converter._experimental_disable_per_channel_quantization_for_dense_layers = (
            shared_weights or variant == "tflite_int8_dynamic"
        )
    if variant == "tflite_int8_integer_only":
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    if variant != "tflite_int8":
        return converter.convert()
    converter._experimental_calibrate_only = True  # float model + ranges, quantized below
    model = lite_convert.mlir_quantize(
        converter.convert(),
        denylisted_ops=list(INT8_FLOAT_OPS),
        disable_per_channel_for_dense_layers=shared_weights,
    )
    return share_tied_embedding_table(model) if shared_weights else model


@contextlib.contextmanager
def _attention_mask_adder(model: keras.Model, value: float):
    """Trace `model` with `value` added to padded keys' scores instead of `layers.MASK_ADDER`."""
    attention = [l for l in model._flatten_layers() if isinstance(l, layers.AlbertAttention)]
    originals = [l.mask_adder for l in attention]
    for layer in attention:
        layer.mask_adder = value
    try:
        yield
    finally:
        for layer, original in zip(attention, originals):
            layer.mask_adder = original


def save_fixed_shape_model(
    head: ServingHead,
    path: str,
    max_seq_length: int,
    max_predictions: int,
    mask_adder: float = layers.MASK_ADDER,
) -> list[str]:
    """Save the head's signatures at batch 1 and fixed lengths, unchecked, for conversion.

    Returns the signature names (`HeadSpec.converted_signatures`).
    """
    shapes = head.spec.shapes(head.model, max_seq_length, max_predictions)
    shapes = {name: [1, *shape] for name, shape in shapes.items()}
    functions = {
        name: signature_function(head, name, shapes, check=False)
        for name in head.spec.converted_signatures
    }
    with _attention_mask_adder(head.model, mask_adder):
        save_with_signatures(path, functions, {})
    return list(functions)


def representative_dataset(
    head: ServingHead, examples: dict[str, np.ndarray]
) -> Callable[[], Iterator]:
    """The converter's calibration source: every example, one at a time, for every signature."""

    def representative():
        for i in range(len(examples["input_ids"])):
            for name in head.spec.converted_signatures:
                names = head.signature_inputs[name]
                yield name, {k: examples[k][i : i + 1] for k in names}

    return representative


def op_names(model: bytes) -> list[str]:
    """The distinct operators of a TFLite flatbuffer: builtin names; custom ones CUSTOM:<code>."""
    parsed = schema.Model.GetRootAsModel(model, 0)
    names = set()
    for i in range(parsed.OperatorCodesLength()):
        code = parsed.OperatorCodes(i)
        builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        if builtin == schema.BuiltinOperator.CUSTOM:
            names.add(f"CUSTOM:{code.CustomCode().decode()}")
        else:
            names.add(_BUILTIN_NAMES.get(builtin, f"BUILTIN_{builtin}"))
    return sorted(names)


def non_builtin_ops(model: bytes) -> list[str]:
    """Custom (including Flex, i.e. SELECT_TF_OPS) operators: they need more than stock LiteRT."""
    return [name for name in op_names(model) if name.startswith("CUSTOM:")]


def run_signature(
    interpreter: Interpreter,
    signature: str,
    examples: dict[str, np.ndarray],
    input_names: tuple[str, ...],
) -> dict[str, np.ndarray]:
    """Outputs of `signature` on every example, one at a time (batch 1), stacked."""
    runner = interpreter.get_signature_runner(signature)
    rows = [
        runner(**{k: examples[k][i : i + 1] for k in input_names})
        for i in range(len(examples["input_ids"]))
    ]
    return {k: np.concatenate([r[k] for r in rows]) for k in rows[0]}


def interleaved_latency(runners: dict, runs: int, warmup: int = 5) -> dict:
    """p50/p90 wall time (ms) of each {key: (signature runner, inputs)}, called in turn `runs`
    times, so that a slow spell of the machine falls on all of them alike."""
    for runner, inputs in runners.values():
        for _ in range(warmup):
            runner(**inputs)
    times = {key: [] for key in runners}
    for _ in range(runs):
        for key, (runner, inputs) in runners.items():
            start = time.perf_counter()
            runner(**inputs)
            times[key].append((time.perf_counter() - start) * 1000.0)
    return {
        key: {"p50_ms": float(np.percentile(t, 50)), "p90_ms": float(np.percentile(t, 90))}
        for key, t in times.items()
    }


def batch1_runner(model_path: str, num_threads: int, signature: str = "serving_default"):
    """A LiteRT signature runner (with its default XNNPACK delegate) of a TFLite file."""
    return Interpreter(model_path=model_path, num_threads=num_threads).get_signature_runner(
        signature
    )


def source_mask_adder(variant: str) -> float:
    """What the SavedModel `variant` converts from adds to padded keys' attention scores."""
    return INT8_MASK_ADDER if variant == "tflite_int8_integer_only" else layers.MASK_ADDER


def build_tflite_variants(
    head: ServingHead,
    variants: list[str],
    max_seq_length: int,
    max_predictions: int,
    examples,
    calibration,
    reference,
    staging: str,
    thresholds: ParityThresholds,
    latency_runs: int,
    artifacts: dict,
) -> dict[str, str]:
    """Convert, check and time each variant under `staging`; record each in `artifacts`; return
    {variant: staged path} of those that passed (the others are not kept)."""
    sources = {}

    def source(variant):
        """The fixed-shape SavedModel `variant` converts from (integer-only: a finite mask)."""
        adder = source_mask_adder(variant)
        if adder not in sources:
            path = os.path.join(staging, f"tflite_source_{len(sources)}")
            sources[adder] = (
                path,
                save_fixed_shape_model(head, path, max_seq_length, max_predictions, adder),
            )
        return sources[adder]

    staged = {}
    for variant in variants:
        logging.info("Converting %s", variant)
        model = convert(
            *source(variant),
            variant,
            representative_dataset(head, calibration) if variant in CALIBRATED_VARIANTS else None,
            shared_weights=head.spec.shares_embedding_table,
        )
        failures = [f"non-builtin ops: {ops}"] if (ops := non_builtin_ops(model)) else []
        interpreter = Interpreter(model_content=model)
        figures = merge_figures(
            [
                parity_figures(
                    reference[name],
                    run_signature(interpreter, name, examples, head.signature_inputs[name]),
                    examples["masked_lm_weights"],
                    head.spec.parity,
                )
                for name in head.spec.converted_signatures
            ]
        )
        failures += parity_failures(variant, figures, thresholds)
        artifacts[variant] = {
            "size_bytes": len(model),
            "ops": op_names(model),
            "figures": figures,
            "failures": failures,
        }
        if failures:
            logging.error("Refusing %s: %s", variant, "; ".join(failures))
            continue
        staged[variant] = os.path.join(staging, f"{variant}.tflite")
        with open(staged[variant], "wb") as f:
            f.write(model)
        timed = head.spec.converted_signatures[0]
        first = {k: examples[k][:1] for k in head.signature_inputs[timed]}
        artifacts[variant]["latency_batch1"] = interleaved_latency(
            {f"threads_{n}": (batch1_runner(staged[variant], n, timed), first) for n in (1, 2)},
            latency_runs,
        )
        logging.info("%s: %s", variant, artifacts[variant])
    return staged
