"""TFLite (LiteRT) formats at a fixed [1, max_seq_length] input, with parity and latency checks.

Each format is converted by its `formats.TfliteRecipe` with `supported_ops` limited to TFLite
builtins (the converter fails on anything else, so no Flex / SELECT_TF_OPS op can slip in), and
its op list is checked again after conversion. The registered ones (`formats.REGISTRY`):
`tflite_fp32`; `tflite_fp16` (fp16 weights, fp32 compute); `tflite_int8_dynamic` (int8 weights,
activations quantized on the fly); `tflite_int8` (static int8: the matmuls' weights and activations
in int8, their activation ranges calibrated on representative examples; the ops LiteRT's CPU engine
cannot run in int8 stay float); `tflite_int8_integer_only` (every op int8, for integer-only
accelerators). All int8 ones take int32 ids in and give float32 outputs.
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

from albert_tf.export.parity import merge_figures, parity_figures
from albert_tf.export.heads.serving import ServingHead, signature_function
from albert_tf.export.savedmodel import save_with_signatures
from albert_tf.export.tflite.metadata import min_runtime_version
from albert_tf.export.tflite.tied_table import share_tied_embedding_table
from albert_tf.modeling import layers

_BUILTIN_NAMES = {
    value: name for name, value in vars(schema.BuiltinOperator).items() if not name.startswith("_")
}


def convert(
    saved_model_dir: str,
    signatures: list[str],
    recipe,
    representative: Callable[[], Iterator] | None = None,
    shared_weights: bool = False,
) -> bytes:
    """Convert the fixed-shape SavedModel's `signatures` to TFLite as `recipe` (a
    `formats.TfliteRecipe`) says.

    `representative` (needed by calibrated recipes) yields (signature, {input: [1, ...] array})
    pairs.
    `shared_weights`: the model feeds one weight to a dense layer and to another op (the MLM
    decoder is the word-embedding table, also read by GATHER). Recipes `per_tensor_when_tied` then
    quantize dense weights per tensor rather than per output channel, so that both uses can share
    one int8 copy (a second one of ALBERT-base's 3.8M-entry table takes the int8/fp32 size ratio
    from ~0.26 to ~0.34): the converter shares it as it converts dynamic-range models; a recipe
    with `keep_float_ops` shares it after quantizing (`share_tied_embedding_table`); an
    integer-only one keeps two. The parity check covers the accuracy this costs. (The switch is a
    private converter attribute: the public API has no per-layer one.) Recipes `dense_per_tensor`
    quantize dense weights per tensor whatever the head (op versions the Task Library accepts).
    """
    if recipe.calibrated and representative is None:
        raise ValueError("a calibrated TFLite format needs representative examples")
    converter = tf.lite.TFLiteConverter.from_saved_model(saved_model_dir, signature_keys=signatures)
    converter.target_spec.supported_ops = [
        tf.lite.OpsSet.TFLITE_BUILTINS_INT8
        if recipe.integer_only
        else tf.lite.OpsSet.TFLITE_BUILTINS
    ]
    if recipe.optimize:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if recipe.float16_weights:
        converter.target_spec.supported_types = [tf.float16]
    if recipe.calibrated:
        converter.representative_dataset = representative
    tied = shared_weights and recipe.per_tensor_when_tied
    per_tensor = recipe.dense_per_tensor or tied
    if recipe.keep_float_ops is None:
        if recipe.per_tensor_when_tied or recipe.dense_per_tensor:
            converter._experimental_disable_per_channel_quantization_for_dense_layers = per_tensor
        return converter.convert()
    converter._experimental_calibrate_only = True  # float model + ranges, quantized below
    model = lite_convert.mlir_quantize(
        converter.convert(),
        denylisted_ops=list(recipe.keep_float_ops),
        disable_per_channel_for_dense_layers=per_tensor,
    )
    return share_tied_embedding_table(model) if tied else model


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
    functions = {
        name: signature_function(head, name, shapes, batch=1, check=False)
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


def source_model(job, mask_adder: float) -> tuple[str, list[str]]:
    """The fixed-shape SavedModel of `job` (a `formats.ExportJob`) with `mask_adder` that the
    TFLite formats convert from, and its signatures: saved once per export and adder."""
    sources = job.shared.setdefault("tflite_sources", {})
    if mask_adder not in sources:
        path = os.path.join(job.staging, f"tflite_source_{len(sources)}")
        config = job.config
        sources[mask_adder] = (
            path,
            save_fixed_shape_model(
                job.head, path, config.max_seq_length, config.max_predictions_per_seq, mask_adder
            ),
        )
    return sources[mask_adder]


def build(job, spec) -> dict[str, str]:
    """A TFLite format (a `formats.FormatSpec` with a recipe) of a `formats.ExportJob`: converted,
    post-processed, checked (builtin ops only, `spec.parity` on every converted signature),
    written under `job.staging`, timed if it passed, and recorded in `job.artifacts`. Returns
    {artifact: staged path}."""
    head, recipe = job.head, spec.tflite
    (artifact,) = spec.artifacts  # one .tflite file per format
    logging.info("Converting %s", spec.name)
    adder = layers.MASK_ADDER if recipe.mask_adder is None else recipe.mask_adder
    model = convert(
        *source_model(job, adder),
        recipe,
        representative_dataset(head, job.calibration) if recipe.calibrated else None,
        shared_weights=head.spec.shares_embedding_table,
    )
    fields: dict = {"min_runtime_version": min_runtime_version(model)}
    step_failures: list[str] = []
    for step in recipe.post_process:
        model, added = step(model, job, artifact)
        step_failures += added.pop("failures", [])
        fields.update(added)
    failures = [f"non-builtin ops: {ops}"] if (ops := non_builtin_ops(model)) else []
    failures += step_failures
    interpreter = Interpreter(model_content=model)
    examples = job.verification
    figures = merge_figures(
        [
            parity_figures(
                job.reference[name],
                run_signature(interpreter, name, examples, head.signature_inputs[name]),
                examples["masked_lm_weights"],
                head.spec.parity,
            )
            for name in head.spec.converted_signatures
        ]
    )
    failures += spec.parity.failures(figures, job.thresholds)
    staged = os.path.join(job.staging, f"{artifact}.tflite")
    with open(staged, "wb") as f:
        f.write(model)
    record = {"ops": op_names(model), "figures": figures, "failures": failures, **fields}
    job.artifacts[artifact] = record
    if failures:
        logging.error("Refusing %s: %s", artifact, "; ".join(failures))
        return {artifact: staged}
    timed = head.spec.converted_signatures[0]
    first = {k: examples[k][:1] for k in head.signature_inputs[timed]}
    record["latency_batch1"] = interleaved_latency(
        {f"threads_{n}": (batch1_runner(staged, n, timed), first) for n in (1, 2)},
        job.config.latency_runs,
    )
    logging.info("%s: %s", artifact, record)
    return {artifact: staged}
