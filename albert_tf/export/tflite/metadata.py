"""TFLite metadata, written by our own code: what on-device clients read from a `.tflite` file.

MediaPipe Tasks and the TFLite Task Library find a model's inputs, outputs, tokenizer and label
names in a `ModelMetadata` flatbuffer (schema `metadata_schema.fbs`, file identifier "M001")
stored in a buffer of the model that its `metadata` list names "TFLITE_METADATA"; the files it
names (a SentencePiece model, a label list) sit in a zip archive appended to the model file.

`with_metadata` writes the few tables an ALBERT text model needs, field by field in the schema's
slot order, adds them to the model through LiteRT's own flatbuffer classes (every weight buffer
kept 16-byte aligned, as the converter writes them) and appends the zip (stored, not compressed;
offsets from the start of the file). Operators, tensors, weights and signatures are unchanged.
"""

from __future__ import annotations

import dataclasses
import io
import zipfile

import flatbuffers
import numpy as np
from ai_edge_litert import schema_py_generated as schema

METADATA_NAME = b"TFLITE_METADATA"
METADATA_IDENTIFIER = b"M001"
MODEL_IDENTIFIER = b"TFL3"
# The converter's own entry: the oldest LiteRT runtime that has every operator version used.
MIN_RUNTIME_VERSION_NAME = b"min_runtime_version"
_BUFFER_ALIGNMENT = 16
# Enum values of the schema.
TENSOR_AXIS_LABELS = 2  # AssociatedFileType: labels of the last axis of a tensor
_FEATURE_PROPERTIES = 1  # ContentProperties union member
_SENTENCEPIECE_TOKENIZER = 5  # ProcessUnitOptions union member
# Schema versions of the fields we write (the schema's "Added in" notes); the rest are 1.0.0.
_BASE_VERSION = "1.0.0"
_PROCESS_UNITS_VERSION = "1.1.0"  # SubGraphMetadata.input_process_units, SentencePiece options


@dataclasses.dataclass(frozen=True)
class AssociatedFile:
    """A file packed into the model and named by its metadata.

    Args:
        name: its name in the zip archive (and the metadata).
        description: what it holds.
        content: its bytes.
        type: its `AssociatedFileType` (0: unknown; `TENSOR_AXIS_LABELS`).
    """

    name: str
    description: str
    content: bytes
    type: int = 0


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """Metadata of one input or output tensor (its `TensorMetadata`).

    Args:
        name: what clients look the tensor up by (e.g. `ids`, `probability`).
        description: what it holds.
        files: its associated files (e.g. the label names of its last axis).
    """

    name: str
    description: str
    files: tuple[AssociatedFile, ...] = ()


@dataclasses.dataclass(frozen=True)
class ModelInfo:
    """The metadata of a one-subgraph text model.

    Args:
        name, description, version, author, license: the model's own lines.
        inputs, outputs: one `TensorInfo` per tensor, in the subgraph's order.
        tokenizer: the SentencePiece model of the subgraph's input process unit, or None.

    Example:
        info = ModelInfo("albert", "...", "1", "", "", inputs, outputs, spm_file)
        model_with_metadata = with_metadata(model, info)
    """

    name: str
    description: str
    version: str
    author: str
    license: str
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    tokenizer: AssociatedFile | None = None

    @property
    def files(self) -> tuple[AssociatedFile, ...]:
        """Every associated file, each once, in the order they are named."""
        named = [f for t in (*self.inputs, *self.outputs) for f in t.files]
        found = {f.name: f for f in ([self.tokenizer] if self.tokenizer else []) + named}
        return tuple(found.values())

    @property
    def min_parser_version(self) -> str:
        """The oldest metadata parser that understands every field written."""
        return _PROCESS_UNITS_VERSION if self.tokenizer else _BASE_VERSION


class _Table:
    """A flatbuffer table: {slot: value}; a value is a str, a `_Table`, a list of either, or an
    (int, "uint8") scalar."""

    def __init__(self, **slots):
        self.slots = {int(k.removeprefix("s")): v for k, v in slots.items() if v is not None}


def _write(builder: flatbuffers.Builder, value) -> int:
    """Write `value` (children first: flatbuffers cannot nest) and return its offset."""
    if isinstance(value, str):
        return builder.CreateString(value)
    if isinstance(value, list):
        offsets = [_write(builder, v) for v in value]
        builder.StartVector(4, len(offsets), 4)
        for offset in reversed(offsets):
            builder.PrependUOffsetTRelative(offset)
        return builder.EndVector()
    children = {s: _write(builder, v) for s, v in value.slots.items() if not isinstance(v, tuple)}
    builder.StartObject(max(value.slots, default=-1) + 1)
    for slot, v in value.slots.items():
        if isinstance(v, tuple):
            builder.PrependUint8Slot(slot, v[0], 0)
        else:
            builder.PrependUOffsetTRelativeSlot(slot, children[slot], 0)
    return builder.EndObject()


def _associated_file(f: AssociatedFile) -> _Table:
    # AssociatedFile: name, description, type, locale, version.
    return _Table(s0=f.name, s1=f.description, s2=(f.type, "uint8") if f.type else None)


def _tensor(t: TensorInfo) -> _Table:
    # Content: content_properties (type, value), range.
    content = _Table(s0=(_FEATURE_PROPERTIES, "uint8"), s1=_Table())
    # TensorMetadata: name, description, dimension_names, content, process_units, stats,
    # associated_files.
    files = [_associated_file(f) for f in t.files] or None
    return _Table(s0=t.name, s1=t.description, s3=content, s6=files)


def metadata_flatbuffer(info: ModelInfo) -> bytes:
    """The serialized `ModelMetadata` of `info` (file identifier "M001")."""
    units = None
    if info.tokenizer is not None:
        # SentencePieceTokenizerOptions: sentencePiece_model, vocab_file.
        options = _Table(s0=[_associated_file(info.tokenizer)])
        # ProcessUnit: options (type, value).
        units = [_Table(s0=(_SENTENCEPIECE_TOKENIZER, "uint8"), s1=options)]
    # SubGraphMetadata: name, description, input_tensor_metadata, output_tensor_metadata,
    # associated_files, input_process_units, ...
    subgraph = _Table(
        s0=info.name,
        s2=[_tensor(t) for t in info.inputs],
        s3=[_tensor(t) for t in info.outputs],
        s5=units,
    )
    # ModelMetadata: name, description, version, subgraph_metadata, author, license,
    # associated_files, min_parser_version.
    root = _Table(
        s0=info.name,
        s1=info.description,
        s2=info.version,
        s3=[subgraph],
        s4=info.author or None,
        s5=info.license or None,
        s7=info.min_parser_version,
    )
    builder = flatbuffers.Builder(1024)
    builder.Finish(_write(builder, root), file_identifier=METADATA_IDENTIFIER)
    return bytes(builder.Output())


class _AlignedBufferT(schema.BufferT):
    """A model buffer packed with its bytes 16-byte aligned (LiteRT's generated code aligns
    them to 1)."""

    def Pack(self, builder):
        data = None
        if self.data is not None:
            payload = np.asarray(self.data, np.uint8).tobytes()
            builder.StartVector(1, len(payload), _BUFFER_ALIGNMENT)
            builder.head -= len(payload)
            builder.Bytes[builder.head : builder.head + len(payload)] = payload
            data = builder.EndVector()
        schema.BufferStart(builder)
        if data is not None:
            schema.BufferAddData(builder, data)
        schema.BufferAddOffset(builder, self.offset)
        schema.BufferAddSize(builder, self.size)
        return schema.BufferEnd(builder)


def _aligned(buffer: schema.BufferT) -> _AlignedBufferT:
    aligned = _AlignedBufferT()
    aligned.data, aligned.offset, aligned.size = buffer.data, buffer.offset, buffer.size
    return aligned


def _flatbuffer_end(model: bytes) -> int:
    """Where the model's flatbuffer ends: before an appended zip archive, if any."""
    try:
        with zipfile.ZipFile(io.BytesIO(model)) as archive:
            return min(i.header_offset for i in archive.infolist()) if archive.infolist() else 0
    except zipfile.BadZipFile:
        return len(model)


def with_metadata(model: bytes, info: ModelInfo) -> bytes:
    """`model` (a TFLite flatbuffer) carrying `info`'s metadata and associated files.

    Replaces metadata written before. ValueError if `info`'s tensors do not match the model's
    first subgraph.
    """
    model = model[: _flatbuffer_end(model)] or model
    parsed = schema.ModelT.InitFromPackedBuf(model, 0)
    graph = parsed.subgraphs[0]
    if (len(info.inputs), len(info.outputs)) != (len(graph.inputs), len(graph.outputs)):
        raise ValueError(
            f"metadata names {len(info.inputs)} inputs and {len(info.outputs)} outputs, the "
            f"model's subgraph has {len(graph.inputs)} and {len(graph.outputs)}"
        )
    buffer = schema.BufferT()
    buffer.data = np.frombuffer(metadata_flatbuffer(info), np.uint8)
    parsed.metadata = parsed.metadata or []
    entry = next((m for m in parsed.metadata if m.name == METADATA_NAME), None)
    if entry is None:
        entry = schema.MetadataT()
        entry.name, entry.buffer = METADATA_NAME, len(parsed.buffers)
        parsed.metadata.append(entry)
        parsed.buffers.append(buffer)
    parsed.buffers[entry.buffer] = buffer
    parsed.buffers = [_aligned(b) for b in parsed.buffers]
    builder = flatbuffers.Builder(len(model) + 4096)
    builder.Finish(parsed.Pack(builder), file_identifier=MODEL_IDENTIFIER)
    stream = io.BytesIO()
    stream.write(builder.Output())
    with zipfile.ZipFile(stream, "a", zipfile.ZIP_STORED) as archive:
        for f in info.files:  # a fixed date: the same inputs give the same bytes
            archive.writestr(zipfile.ZipInfo(f.name, date_time=(1980, 1, 1, 0, 0, 0)), f.content)
    return stream.getvalue()


def _named_buffer(model: bytes, name: bytes) -> bytes | None:
    parsed = schema.Model.GetRootAsModel(model, 0)
    for i in range(parsed.MetadataLength()):
        if parsed.Metadata(i).Name() == name:
            return parsed.Buffers(parsed.Metadata(i).Buffer()).DataAsNumpy().tobytes()
    return None


def metadata_of(model: bytes) -> bytes | None:
    """The raw `ModelMetadata` flatbuffer a model carries, or None."""
    return _named_buffer(model, METADATA_NAME)


def associated_files(model: bytes) -> dict[str, bytes]:
    """{name: content} of the zip archive appended to a model (empty if there is none)."""
    try:
        with zipfile.ZipFile(io.BytesIO(model)) as archive:
            return {i.filename: archive.read(i) for i in archive.infolist()}
    except zipfile.BadZipFile:
        return {}


def min_runtime_version(model: bytes) -> str | None:
    """The oldest LiteRT runtime the converter found able to run `model` (e.g. "2.9.0")."""
    value = _named_buffer(model, MIN_RUNTIME_VERSION_NAME)
    return None if value is None else value.rstrip(b"\0").decode()


def subgraph_tensor_names(model: bytes) -> tuple[list[str], list[str]]:
    """The first subgraph's input and output names, in its order, as its signature names them."""
    parsed = schema.ModelT.InitFromPackedBuf(model[: _flatbuffer_end(model)] or model, 0)
    graph, signature = parsed.subgraphs[0], parsed.signatureDefs[0]
    if signature.subgraphIndex != 0:
        raise ValueError("the model's first signature does not run its first subgraph")
    names = {t.tensorIndex: t.name.decode() for t in [*signature.inputs, *signature.outputs]}
    return [names[i] for i in graph.inputs], [names[i] for i in graph.outputs]


def operator_versions(model: bytes) -> dict[str, int]:
    """{builtin operator name: highest version used}."""
    parsed = schema.Model.GetRootAsModel(model, 0)
    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    versions: dict[str, int] = {}
    for i in range(parsed.OperatorCodesLength()):
        code = parsed.OperatorCodes(i)
        name = names.get(max(code.BuiltinCode(), code.DeprecatedBuiltinCode()), "CUSTOM")
        versions[name] = max(versions.get(name, 0), code.Version())
    return versions
