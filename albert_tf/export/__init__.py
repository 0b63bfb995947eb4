"""Export stage: SavedModels for TF Serving and TFLite variants, checked against the Keras model."""

from albert_tf.export.pipeline import (
    FORMATS,
    PROBE_TEXTS,
    ExportConfig,
    ParityError,
    export_model,
    load_serving_head,
    serving_head,
)

__all__ = [
    "FORMATS",
    "PROBE_TEXTS",
    "ExportConfig",
    "ParityError",
    "export_model",
    "load_serving_head",
    "serving_head",
]
