"""albert-tf: ALBERT (Lan et al., 2019) on Keras 3 / TensorFlow 2, faithful to the original code."""

from albert_tf.config import AlbertConfig
from albert_tf.model import AlbertModel, AlbertPretrainer

__all__ = ["AlbertConfig", "AlbertModel", "AlbertPretrainer"]
__version__ = "0.1.0"
