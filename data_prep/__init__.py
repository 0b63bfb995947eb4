"""Text -> masked SOP instances -> TFRecords, faithful to the original `create_pretraining_data.py`
(or unmasked instances, for masking at training time).

Modules: `corpus` (reading inputs into documents), `instances` (SOP pairs, truncation, n-gram
masking), `writer` (shuffle buffer and atomic
sharded output), `stats` (summary statistics), `units` (the job config and its unit of work, a
document pool, for any runner), `local_runner` (pools in worker processes, the whole job),
`pipeline` (the entry point: config and `run`), `vocab` (SentencePiece training). The data stage
sits on `albert_tf.text` (the tokenizer) and `albert_tf.records` (the record schema,
tf.train.Example bytes and TFRecord framing). Nothing here imports TensorFlow: process start is
part of the job's cost.
"""

import pathlib

# The bundled sample corpus (a few Gutenberg books, a train and a held-out folder; its README says
# which): the demo's input, installed with the package.
SAMPLE_CORPUS = pathlib.Path(__file__).resolve().parent / "sample_corpus"
