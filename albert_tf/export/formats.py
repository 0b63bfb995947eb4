"""The export formats: one `FormatSpec` each, by name in `REGISTRY` (`--formats`' choices).

A spec holds everything the export does differently per format: how its artifacts are built and
verified (`build`), the gate that verification must pass (`parity`), where each artifact is
published (`artifacts`), and for a TFLite format how the converter runs (`TfliteRecipe`: its
quantization, whether it is calibrated on representative examples, and steps run on the converted
model before it is verified, such as attaching metadata). The pipeline validates, stages, gates and
publishes from the spec alone, so a new format is one more entry here.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from typing import Any

from albert_tf.export import keras_text, savedmodel
from albert_tf.export.tflite import app_metadata, converter
from albert_tf.export.parity import Int8Limit, ParityThresholds, RelativeDiffLimit

REPORT = "report"  # the report's key among `destinations` (the version's manifest, written last)
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


@dataclasses.dataclass(frozen=True)
class Destination:
    """Where an artifact is published: `<output_dir>/<directory>/<version>/[<file>]`.

    Args:
        directory: the TF Serving model directory, `{name}` standing for the model name.
        file: the artifact's file in the version directory (`{name}` likewise); None: the version
            directory itself is the artifact (a SavedModel).

    Example:
        >>> Destination("{name}_tflite", "{name}_fp16.tflite").path("out", "albert", 1)
        'out/albert_tflite/1/albert_fp16.tflite'
    """

    directory: str
    file: str | None = None

    def version_directory(self, output_dir: str, name: str, version: int) -> str:
        """`<output_dir>/<directory>/<version>`: what the export renames into place whole."""
        return os.path.join(output_dir, self.directory.format(name=name), str(version))

    def path(self, output_dir: str, name: str, version: int) -> str:
        """The artifact's final path."""
        directory = self.version_directory(output_dir, name, version)
        return (
            directory if self.file is None else os.path.join(directory, self.file.format(name=name))
        )


@dataclasses.dataclass(frozen=True)
class TfliteRecipe:
    """How a TFLite format is converted from the head's fixed-shape SavedModel
    (`tflite.converter.convert`).

    Args:
        optimize: the converter's default optimizations (any quantization).
        float16_weights: fp16 weights, fp32 compute.
        calibrated: activation ranges calibrated on representative examples, which the export
            then requires (`representative_data`).
        integer_only: every op int8 (TFLite's int8 builtins only).
        keep_float_ops: calibrate, then quantize with these builtin ops left in float; None: the
            converter quantizes on its own.
        per_tensor_when_tied: where the head ties a weight to another op (the MLM decoder is the
            word-embedding table), quantize dense weights per tensor, not per output channel, so
            that both uses can share one int8 copy (`tflite.converter.convert`).
        dense_per_tensor: quantize dense weights per tensor whatever the head: a per-channel
            hybrid FULLY_CONNECTED is op version 12 (LiteRT >= 2.17), which the TFLite Task
            Library's runtime refuses; per tensor it is version 9 (>= 2.9).
        mask_adder: what the source model adds to padded keys' attention scores; None: the
            model's own (`layers.MASK_ADDER`).
        post_process: steps (model bytes, `ExportJob`, artifact key) -> (model bytes, fields),
            run in order on the converted model before it is verified (e.g. attaching metadata
            for on-device clients); `fields` join the artifact's report record, and a
            `failures` list among them refuses the file like a failed parity check.

    Example:
        >>> TfliteRecipe(optimize=True, float16_weights=True)
    """

    optimize: bool = False
    float16_weights: bool = False
    calibrated: bool = False
    integer_only: bool = False
    keep_float_ops: tuple[str, ...] | None = None
    per_tensor_when_tied: bool = False
    dense_per_tensor: bool = False
    mask_adder: float | None = None
    post_process: tuple[Callable[[bytes, Any, str], tuple[bytes, dict]], ...] = ()


@dataclasses.dataclass(frozen=True)
class FormatSpec:
    """Everything the export does differently for one format.

    Args:
        name: the format (`--formats`, its artifacts' keys in the report).
        summary: what it is, for `--formats`' help.
        build: (`ExportJob`, this spec) -> {artifact key: staged path}: builds the format's
            artifacts under `job.staging`, verifies each against the Keras model (`parity` and
            checks of its own) and records it in `job.artifacts` (`figures`, `failures`, ...);
            those without failures are published.
        artifacts: {artifact key: `Destination`} of everything it may write.
        parity: the gate its artifacts' figures must pass.
        text_artifacts: the artifacts written only with a SentencePiece model.
        tflite: how a TFLite format converts; None for others.
        heads: the head kinds it is written for; None: every head.
    """

    name: str
    summary: str
    build: Callable[[Any, FormatSpec], dict[str, str]]
    artifacts: Mapping[str, Destination]
    parity: RelativeDiffLimit | Int8Limit
    text_artifacts: tuple[str, ...] = ()
    tflite: TfliteRecipe | None = None
    heads: tuple[str, ...] | None = None

    def __post_init__(self):
        if not self.artifacts or REPORT in self.artifacts:
            raise ValueError(f"format {self.name!r}: artifacts must be named, none {REPORT!r}")
        if not set(self.text_artifacts) <= set(self.artifacts):
            raise ValueError(f"format {self.name!r}: text artifacts must be among its artifacts")

    def refusal(self, head: str, has_tokenizer: bool) -> str | None:
        """Why this format cannot be exported for head kind `head` (with or without a
        SentencePiece model); None if it can."""
        if self.heads is not None and head not in self.heads:
            return f"format {self.name!r} is written for --head in {self.heads}, not {head!r}"
        if not has_tokenizer and set(self.artifacts) <= set(self.text_artifacts):
            return f"format {self.name!r} takes text: it needs spm_model_file"
        return None

    @property
    def calibrated(self) -> bool:
        """Whether it needs representative examples to calibrate on."""
        return self.tflite is not None and self.tflite.calibrated


@dataclasses.dataclass
class ExportJob:
    """What a format's `build` works from; `pipeline.export_model` makes one per export.

    Args:
        head: the `heads.ServingHead` exported.
        config: the `pipeline.ExportConfig`.
        tokenizer: its `AlbertTokenizer`; None without `spm_model_file`.
        verification: examples (`export.data` arrays, the head's inputs) every artifact is checked on.
        calibration: examples calibrated formats calibrate on.
        texts: (text_a, text_b or None) pairs the text models are checked on.
        reference: {signature: the Keras model's outputs on `verification`}.
        staging: the export's staging directory; builders write under it only.
        artifacts: the report's {artifact key: record}, which builders fill.
        shared: what the builders of one export share by key (assets, TFLite source models).
        notes: entries of the report's top level that builders add (e.g. `app_metadata`).
    """

    head: Any
    config: Any
    tokenizer: Any
    verification: dict
    calibration: dict
    texts: list
    reference: dict
    staging: str
    artifacts: dict = dataclasses.field(default_factory=dict)
    shared: dict = dataclasses.field(default_factory=dict)
    notes: dict = dataclasses.field(default_factory=dict)

    @property
    def thresholds(self) -> ParityThresholds:
        """The int8 parity gates of the export config."""
        return self.config.thresholds


def tflite_format(variant: str, summary: str, parity, recipe: TfliteRecipe) -> FormatSpec:
    """The TFLite format `tflite_<variant>`: one file, `<name>_tflite/<version>/<name>_<variant>.tflite`,
    converted by `recipe`, given its on-device clients' metadata (`app_metadata.attach`) and gated
    by `parity` (a `RelativeDiffLimit` or `Int8Limit`)."""
    name = f"tflite_{variant}"
    recipe = dataclasses.replace(recipe, post_process=(*recipe.post_process, app_metadata.attach))
    return FormatSpec(
        name=name,
        summary=summary,
        build=converter.build,
        artifacts={name: Destination("{name}_tflite", f"{{name}}_{variant}.tflite")},
        parity=parity,
        tflite=recipe,
    )


SAVED_MODEL = FormatSpec(
    name="saved_model",
    summary="SavedModels for TF Serving: ids in (stock TF ops only); with --spm_model_file also "
    "text -> ids and text -> outputs (tensorflow-text ops; SQuAD heads: question, context -> answer)",
    build=savedmodel.build,
    artifacts={
        "saved_model": Destination("{name}"),
        "preprocessing": Destination("{name}_preprocessing"),
        "text": Destination("{name}_text"),
    },
    parity=RelativeDiffLimit("saved_model_relative_diff"),
    text_artifacts=("preprocessing", "text"),
)
KERAS_TEXT = FormatSpec(
    name="keras_text",
    summary="a .keras model taking raw strings (tokenization in the graph, the SentencePiece "
    "model inside) for keras.saving.load_model: a classifier (probabilities and label names "
    "out) or a SQuAD model (question and context in, answers out); with --spm_model_file",
    build=keras_text.build,
    artifacts={"keras_text": Destination("{name}_keras", "{name}_text.keras")},
    parity=RelativeDiffLimit("saved_model_relative_diff"),
    text_artifacts=("keras_text",),
    heads=("classifier", "squad_v1", "squad_v2"),
)
TFLITE_FP32 = tflite_format(
    "fp32", "TFLite, fp32: the reference", RelativeDiffLimit("fp32_relative_diff"), TfliteRecipe()
)
TFLITE_FP16 = tflite_format(
    "fp16",
    "TFLite, fp16 weights and fp32 compute: half the size, GPU delegates",
    RelativeDiffLimit("fp16_relative_diff"),
    TfliteRecipe(optimize=True, float16_weights=True),
)
TFLITE_INT8_DYNAMIC = tflite_format(
    "int8_dynamic",
    "TFLite, int8 weights, activations quantized per call: no calibration data",
    Int8Limit(),
    TfliteRecipe(optimize=True, dense_per_tensor=True),
)
TFLITE_INT8 = tflite_format(
    "int8",
    "TFLite, static int8 matmuls calibrated on --representative_data, float elsewhere: "
    "XNNPACK runs it whole",
    Int8Limit(),
    TfliteRecipe(
        optimize=True, calibrated=True, keep_float_ops=INT8_FLOAT_OPS, per_tensor_when_tied=True
    ),
)
TFLITE_INT8_INTEGER_ONLY = tflite_format(
    "int8_integer_only",
    "TFLite, every op int8 (calibrated likewise): for integer-only accelerators",
    Int8Limit(),
    TfliteRecipe(
        optimize=True,
        calibrated=True,
        integer_only=True,
        per_tensor_when_tied=True,
        mask_adder=INT8_MASK_ADDER,
    ),
)

REGISTRY: dict[str, FormatSpec] = {
    spec.name: spec
    for spec in (
        SAVED_MODEL,
        TFLITE_FP32,
        TFLITE_FP16,
        TFLITE_INT8_DYNAMIC,
        TFLITE_INT8,
        TFLITE_INT8_INTEGER_ONLY,
        KERAS_TEXT,
    )
}


def format_of(artifact: str) -> FormatSpec:
    """The registered format that writes `artifact` (a key of some spec's `artifacts`)."""
    for spec in REGISTRY.values():
        if artifact in spec.artifacts:
            return spec
    raise KeyError(f"no registered format writes {artifact!r}")


def parity_failures(
    artifact: str, figures: dict[str, float], thresholds: ParityThresholds
) -> list[str]:
    """Why `artifact` (a format's artifact key: `saved_model`, `text`, `tflite_int8`, ...) with
    these `figures` fails its format's gate; empty if it passes."""
    return format_of(artifact).parity.failures(figures, thresholds)


def destinations(output_dir: str, name: str, version: int) -> dict[str, str]:
    """Final path of every artifact any registered format may write, and of the report."""
    paths = {
        key: destination.path(output_dir, name, version)
        for spec in REGISTRY.values()
        for key, destination in spec.artifacts.items()
    }
    paths[REPORT] = os.path.join(output_dir, f"export_report_{name}_{version}.json")
    return paths


def _check_registry(registry: Mapping[str, FormatSpec]) -> None:
    """Every artifact key and destination belongs to one format only."""
    keys = [key for spec in registry.values() for key in spec.artifacts]
    places = [d for spec in registry.values() for d in spec.artifacts.values()]
    if len(set(keys)) != len(keys) or len(set(places)) != len(places):
        raise ValueError("two formats write the same artifact key or destination")


_check_registry(REGISTRY)
