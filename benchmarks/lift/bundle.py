"""The study's final model as the repository ships it: the pretrainer as `.keras` (weights, no
optimizer state), its config and SentencePiece model, a sample of the held-out records with the
model's MLM accuracy on them (a test re-scores it), and a model card."""

from __future__ import annotations

import os
import shutil
import tempfile

from albert_tf.io import write_json, write_text
from benchmarks.lift import runs
from benchmarks.lift.settings import SEEDED_TASKS, LiftSettings

MODEL_FILE = "albert_pretrainer.keras"
CONFIG_FILE = "albert_config.json"
SPM_FILE = "spiece.model"
SAMPLE_FILE = "heldout_sample.tfrecord"
METRICS_FILE = "metrics.json"
SAMPLE_RECORDS = 128


def score_sample(bundle_dir: str, max_seq_length: int, max_predictions_per_seq: int) -> dict:
    """Held-out MLM and SOP accuracy of the bundled model on its sample (all of it), through
    pretraining's own evaluation."""
    import keras

    from albert_tf.config import AlbertConfig
    from albert_tf.training.distribution import build_strategy
    from albert_tf.training.pretraining import run_pretraining
    from albert_tf.training.pretraining_options import PretrainingOptions

    sample = os.path.join(bundle_dir, SAMPLE_FILE)
    with tempfile.TemporaryDirectory() as scratch:
        keras.backend.clear_session()
        results = run_pretraining(
            PretrainingOptions(
                input_file=sample,
                eval_input_file=f"sop={sample}",
                output_dir=scratch,
                init_checkpoint=os.path.join(bundle_dir, MODEL_FILE),
                max_seq_length=max_seq_length,
                max_predictions_per_seq=max_predictions_per_seq,
                eval_batch_size=SAMPLE_RECORDS // 4,
                max_eval_steps=4,
                do_train=False,
                do_eval=True,
            ),
            AlbertConfig.from_json_file(os.path.join(bundle_dir, CONFIG_FILE)),
            build_strategy("one_device"),
        )
    accuracy = results["eval"]["accuracy"]
    return {"mlm": accuracy["mlm"], "sop": accuracy["sop"]}


def write_bundle(s: LiftSettings, final_model: str, spm: str, heldout: str, r: dict) -> dict:
    """Writes `s.bundle_dir` from the final `.keras`, the vocabulary, the held-out records and
    the results `r`; returns the metrics written beside the model."""
    import keras
    import tensorflow as tf

    from albert_tf.checkpoints.tf1 import assign_tf1_weights, read_weights
    from albert_tf.modeling.model import AlbertPretrainer

    bundle_dir = s.bundle_dir
    os.makedirs(bundle_dir, exist_ok=True)
    keras.backend.clear_session()
    # A fresh float32 model, never compiled: the file holds the weights and no optimizer state,
    # whatever precision pretraining computed in.
    model = AlbertPretrainer(runs.albert_config(s))
    assign_tf1_weights(model, read_weights(final_model), final_model)
    model.save(os.path.join(bundle_dir, MODEL_FILE))
    model.config.to_json_file(os.path.join(bundle_dir, CONFIG_FILE))
    shutil.copyfile(spm, os.path.join(bundle_dir, SPM_FILE))
    records = tf.data.TFRecordDataset(heldout).take(SAMPLE_RECORDS)
    with tf.io.TFRecordWriter(os.path.join(bundle_dir, SAMPLE_FILE)) as writer:
        for record in records:
            writer.write(record.numpy())
    sample = score_sample(bundle_dir, s.max_seq_length, s.max_predictions_per_seq)
    metrics = {
        "pretraining_steps": s.num_train_steps,
        "held_out_mlm": r["held_out_mlm"],
        "held_out_sop": r["held_out_sop"],
        "sample_records": SAMPLE_RECORDS,
        "max_seq_length": s.max_seq_length,
        "max_predictions_per_seq": s.max_predictions_per_seq,
        "sample_mlm": sample["mlm"],
        "sample_sop": sample["sop"],
        "unigram_mlm": r["baselines"]["unigram_mlm_accuracy"],
        "dev_accuracy": {t: r["downstream_curve"][t][str(s.num_train_steps)] for t in SEEDED_TASKS},
        "learning_rates": r["learning_rates"],
    }
    write_json(os.path.join(bundle_dir, METRICS_FILE), metrics, sort_keys=False)
    write_text(os.path.join(bundle_dir, "MODEL_CARD.md"), model_card(s, r, metrics))
    return metrics


def model_card(s: LiftSettings, r: dict, metrics: dict) -> str:
    """The model card: what the model is, what it was trained on, how it scores, its licences."""
    m = s.model
    downstream = "\n".join(
        f"| {t.upper()} | {v['mean']:.1f} ± {v['std']:.1f} | "
        f"{r['downstream_curve'][t]['0']['mean']:.1f} ± {r['downstream_curve'][t]['0']['std']:.1f}"
        f" | {v['baseline']:.1f} |"
        for t, v in metrics["dev_accuracy"].items()
    )
    ends = s.phase_ends()
    restarts = "".join(
        f", then again from step {start}: warmup from there to {s.peak_learning_rate(start)} and "
        f"decay to 0 at {end}"
        for start, end in zip(ends, ends[1:])
    )
    tokens = s.num_train_steps * s.train_batch_size * s.max_seq_length
    share = int(round(125_000 * 4096 * 512 / tokens, -2))  # of ALBERT-base's pretraining tokens
    return f"""# albert-small-en: a small English ALBERT pretrained with this repository

A small ALBERT (E={m["embedding_size"]}, H={m["hidden_size"]}, L={m["num_hidden_layers"]} with
all parameters shared, {m["num_attention_heads"]} heads, FFN {m["intermediate_size"]}, vocabulary
{s.vocab_size}, {m["max_position_embeddings"]} positions), pretrained by
`benchmarks/pretraining_lift.py` on two CPU cores: masked LM (n-gram whole-word masking, dynamic)
and sentence-order prediction, {s.num_train_steps} LAMB steps of {s.train_batch_size} sequences of
{s.max_seq_length} tokens (learning rate {s.learning_rate}, warmup {s.num_warmup_steps}, linear
decay to 0{restarts}; precision {r["pretraining_precision"]}). It is a demonstration-scale model:
about 1/{share:,} of ALBERT-base's pretraining tokens (125,000 steps of 4,096 sequences of 512) at
a far smaller width, not a replacement for the released checkpoints.

Files: `{MODEL_FILE}` (an `AlbertPretrainer`: backbone, MLM and SOP heads; no optimizer state),
`{CONFIG_FILE}`, `{SPM_FILE}` (SentencePiece, lower-cased text), `{SAMPLE_FILE}` (the first
{SAMPLE_RECORDS} masked records of the held-out set) and `{METRICS_FILE}`.

## Training data
{r["data"]["train_chars"] / 1e6:.1f} M characters: 11 public-domain Project Gutenberg novels and
English Wikipedia articles (May 2015, CC BY-SA 3.0, by Wikipedia's contributors), one file of each
held out. {r["data"]["records"]["train"]["instances"]} training sequences.

## Scores
- Held-out MLM accuracy {100 * metrics["held_out_mlm"]:.1f}% (always the most frequent token:
  {100 * metrics["unigram_mlm"]:.1f}%), SOP {100 * metrics["held_out_sop"]:.1f}%. On the bundled
  sample: MLM {100 * metrics["sample_mlm"]:.1f}%.
- Dev accuracy after fine-tuning (mean ± std of 3 seeds; QNLI: 4,000 rows of GLUE's dev set for
  training, the other 1,463 for evaluation):

| task | this model | random init | majority class |
|---|---:|---:|---:|
{downstream}

## Use
Fine-tune it with any fine-tuning CLI: `--init_checkpoint=pretrained/albert-small-en/{MODEL_FILE}
--spm_model_file=pretrained/albert-small-en/{SPM_FILE}` (the README's "A pretrained model to
start from" has the SST-2 command); continue pretraining it with `pipelines/pretrain.py
--init_checkpoint=... --albert_config_file=pretrained/albert-small-en/{CONFIG_FILE}`.

## Licence
The weights: Apache-2.0, as this repository. They were trained on public-domain books and on
Wikipedia text (CC BY-SA 3.0, by Wikipedia's contributors). `{SAMPLE_FILE}` holds token ids of
held-out text (Dickens, *A Tale of Two Cities*, public domain, and Wikipedia articles, CC BY-SA
3.0).
"""
