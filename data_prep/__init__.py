"""Text -> masked SOP instances -> TFRecords, faithful to the original ALBERT `create_pretraining_data.py`.

Modules: `corpus` (reading inputs into documents), `instances` (SOP pairs, truncation, n-gram masking),
`records` (tf.train.Example bytes and TFRecord framing, without TensorFlow), `writer` (shuffle buffer and
atomic sharded output), `stats` (summary statistics), `pipeline` (workers, the whole job).
Nothing here imports TensorFlow: process start is part of the job's cost.
"""
