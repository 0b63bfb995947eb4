"""Task heads on the ALBERT backbone: the original `run_classifier.py` classifier, the SQuAD v1.1
and v2.0 span heads (`run_squad_v1.py`, `run_squad_v2.py`), the RACE multiple-choice head, and
`AlbertTextClassifier` (a classifier taking raw strings)."""

# Imported for their side effect: each registers its Keras classes.
from albert_tf.modeling.heads import (  # noqa: F401
    classifier,
    losses,
    multiple_choice,
    squad_v1,
    squad_v2,
    squad_v2_layers,
    text_classifier,
)
