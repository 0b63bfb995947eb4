"""Export stage: SavedModels for TF Serving and TFLite variants, checked against the Keras model.

The format registry is `formats`, the head registry `heads`; the names below load what they need
when first used (PEP 562).
"""

from albert_tf import lazy_attributes

__all__ = [
    "PROBE_TEXTS",
    "ExportConfig",
    "ParityError",
    "export_model",
    "load_serving_head",
    "serving_head",
]
_LAZY = {
    "PROBE_TEXTS": "albert_tf.export.pipeline",
    "ExportConfig": "albert_tf.export.pipeline",
    "ParityError": "albert_tf.export.pipeline",
    "export_model": "albert_tf.export.pipeline",
    "load_serving_head": "albert_tf.export.heads.loading",
    "serving_head": "albert_tf.export.heads.loading",
}


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())
