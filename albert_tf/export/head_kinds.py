"""The head kinds an export serves, by name, with what each serves: `--head`'s choices and help.

Their specs (`heads.REGISTRY`, which needs TensorFlow) are registered under these names; this
table loads nothing, so that `pipelines/export.py --help` lists them at once.
"""

HEAD_KINDS = {
    "pretrainer": "serves sequence/pooled outputs, mlm, sop.",
    "classifier": "a Keras model returning `probabilities`.",
    "squad_v1": "SQuAD v1.1 start/end logits (a text-in QA model with --spm_model_file).",
    "squad_v2": "SQuAD v2.0 beam and cls_logits, p_mask input (a text-in QA model likewise).",
    "race": "RACE multiple choice: [batch, choices, seq] ids -> logits over the choices.",
}
