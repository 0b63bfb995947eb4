"""Task heads on the ALBERT backbone: the original `run_classifier.py` classifier."""

from albert_tf.modeling.heads import classifier  # noqa: F401  (registers its Keras classes)
