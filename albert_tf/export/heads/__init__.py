"""The head kinds an export serves, the only place a head kind is described.

`kinds`: one `HeadSpec` per kind in `REGISTRY` (its model check, signatures, parity outputs, TF1
builder); `squad_race`: what the SQuAD and RACE heads serve; `serving`: `ServingHead` and the
ids SavedModel's signatures; `loading`: a head's model from a `.keras` file, an original TF1
checkpoint or a transformers folder.
"""

from albert_tf.export.heads.kinds import (
    HEADS,
    POSITIONS,
    REGISTRY,
    TF1_PRETRAINING_HEAD,
    HeadSpec,
    ParityKeys,
    Signature,
    head_spec,
    parity_keys_of,
)
from albert_tf.export.heads.serving import ServingHead
from albert_tf.export.heads.loading import load_serving_head, serving_head

__all__ = [
    "HEADS",
    "POSITIONS",
    "REGISTRY",
    "TF1_PRETRAINING_HEAD",
    "HeadSpec",
    "ParityKeys",
    "ServingHead",
    "Signature",
    "head_spec",
    "load_serving_head",
    "parity_keys_of",
    "serving_head",
]
