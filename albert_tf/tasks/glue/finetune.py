"""GLUE fine-tuning as the original `run_classifier.py`, in one file: the job's settings
(`FinetuneConfig`, the original flags), the release's `run_glue.sh` recipes, the examples packed
and batched (`encode_split`, `make_dataset`), and the task.

`GlueFinetuneTask` is what the loop (`albert_tf.finetuning.loop`) needs from GLUE: an
`AlbertClassifier`, the task's TSV files encoded as `convert_single_example`, its dev metrics
and selection key, the original's `test_results.tsv` (probabilities) and a GLUE submission file
(`SST-2.tsv`: index<TAB>label), and a `.keras` classifier export.

Deliberate differences, none changing the maths: training examples are fully shuffled (seeded)
instead of the original's file order through a 100-example buffer (CoLA's file here is not in
GLUE's order); batches are padded to their longest example unless `dynamic_padding=False`.
Examples are stored packed and unpadded; padded keys get -10000 before the attention softmax, where
exp underflows to exactly 0, so both paddings give the same outputs up to float rounding, and
dynamic padding is several times faster on short texts such as SST-2.
"""

from __future__ import annotations

import dataclasses
import os

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from albert_tf.checkpoints.hf import is_hf_folder, load_hf_config
from albert_tf.checkpoints.hf_config import HF_EXTRA
from albert_tf.config import AlbertConfig
from albert_tf.finetuning.task import TaskBase
from albert_tf.finetuning.bundle import (
    bundle_label_names,
    write_serving_bundle,
    write_text_classifier,
)
from albert_tf.finetuning.progress import predict_with_progress
from albert_tf.finetuning.selection import BEST_CHECKPOINT, list_checkpoints
from albert_tf.finetuning.settings import (
    FinetuneSettings,
    check_positive,
    check_warmup,
    spm_model_file_setting,
)
from albert_tf.io import write_text
from albert_tf.settings import OUTPUT_DIR, setting
from albert_tf.modeling.heads.classifier import HEAD_NAME, AlbertClassifier
from albert_tf.tasks.glue import metrics as glue_metrics
from albert_tf.tasks.glue import processors as glue
from albert_tf.text.tokenization import AlbertTokenizer

# run_glue.sh: every task also used --max_seq_length=512 --optimizer=adamw --do_lower_case.
_RECIPE_COMMON = dict(max_seq_length=512, optimizer="adamw", do_lower_case=True)
RECIPES: dict[str, dict] = {
    task: dict(
        _RECIPE_COMMON,
        learning_rate=lr,
        train_batch_size=batch,
        train_step=steps,
        warmup_step=warmup,
        save_checkpoints_steps=every,
    )
    for task, lr, batch, steps, warmup, every in (
        ("sst-2", 1e-5, 32, 20935, 1256, 100),
        ("mnli", 3e-5, 128, 10000, 1000, 100),
        ("cola", 1e-5, 16, 5336, 320, 100),
        ("qnli", 1e-5, 32, 33112, 1986, 200),
        ("qqp", 5e-5, 128, 14000, 1000, 100),
        ("rte", 3e-5, 32, 800, 200, 100),
        ("sts-b", 2e-5, 16, 3598, 214, 100),
        ("mrpc", 2e-5, 32, 800, 200, 100),
    )
}


@dataclasses.dataclass
class FinetuneConfig(FinetuneSettings):
    """One fine-tuning job; defaults are the original `run_classifier.py` flag defaults (each
    field is that flag, `pipelines/run_classifier.py` defines them from here).

    Args:
      task_name: GLUE task (`processors.TASKS`, case-insensitive).
      data_dir, output_dir, spm_model_file, ...: the original flags of the same names.

    Example:
      config = FinetuneConfig("mrpc", "glue", "out/mrpc", "30k-clean.model", **RECIPES["mrpc"])
    """

    task_name: str = setting(
        help=f"GLUE task: {', '.join(sorted(glue.TASKS))} (case-insensitive). Defaults to --recipe."
    )
    data_dir: str = setting(
        help="GLUE root holding the task folders (SST-2/train.tsv, ...), as the original; the "
        "task folder itself also works, and a file may be gzipped (train.tsv.gz)."
    )
    output_dir: str = setting(
        help="Where checkpoints, eval results and predictions go.", path=OUTPUT_DIR
    )
    spm_model_file: str | None = spm_model_file_setting()
    eval_batch_size: int = setting(8, "Batch size for eval.")
    export_dir: str | None = setting(
        None,
        "Save classifier.keras (outputs `logits`, `probabilities`) with its config, "
        "SentencePiece model and classifier_info.json here, for pipelines/export.py "
        "--head=classifier.",
        path=OUTPUT_DIR,
        kw_only=True,
    )
    skip_malformed_rows: bool = setting(
        False,
        "Skip (and count) TSV rows with a wrong column count, an unknown label or bytes that "
        "are not UTF-8 instead of stopping with file:line.",
    )
    label_names: str | None = setting(
        None,
        "The task's label names in label-id order, comma-separated (e.g. bad,good for SST-2), "
        "for classifier_info.json, the text classifier and the exports; default: the task's "
        "own (SST-2 negative,positive, MRPC not_equivalent,equivalent, ...).",
    )
    dynamic_padding: bool = setting(
        True,
        "Pad each batch to its longest example instead of max_seq_length (same outputs up to "
        "rounding, much faster on short texts); not in training under --jit_compile.",
    )

    @property
    def class_names(self) -> tuple[str, ...] | None:
        """What each label id means: `label_names` if given, else the task's own; None for a
        regression task (STS-B)."""
        if not self.label_names:
            return self.task.label_names
        return glue.parse_label_names(self.label_names, self.task.label_names, self.task.name)

    @property
    def pad_dynamically(self) -> bool:
        """Dynamic padding, except under XLA (which would compile every batch width)."""
        return self.dynamic_padding and not self.jit_compile

    def __post_init__(self):
        super().__post_init__()
        self.task = glue.get_task(self.task_name)
        if self.label_names:  # a wrong count or a regression task fails here, before any work
            glue.parse_label_names(self.label_names, self.task.label_names, self.task.name)
        check_positive(self, ("train_step", "eval_batch_size"))
        check_warmup(self.warmup_step, self.train_step)


def read_split(config: FinetuneConfig, split: str) -> glue.GlueSplit:
    """Reads a split, logging any skipped malformed rows."""
    result = glue.read_split(
        config.task, config.data_dir, split, config.do_lower_case, config.skip_malformed_rows
    )
    if result.skipped:
        line, reason = result.skipped[0]
        logging.warning(
            "%s: skipped %d malformed rows (first: line %d: %s)",
            result.path,
            len(result.skipped),
            line,
            reason,
        )
    logging.info("%s: %d examples", result.path, len(result.examples))
    return result


@dataclasses.dataclass
class EncodedSplit:
    """Packed examples without their padding: `[CLS] A [SEP] (B [SEP])` ids, flat."""

    token_ids: np.ndarray  # int32, all examples concatenated
    lengths: np.ndarray  # real tokens per example
    segment_a_lengths: np.ndarray  # tokens with segment id 0 ([CLS] A [SEP])
    label_ids: np.ndarray  # int32 class ids, float32 scores (STS-B), zeros when unlabelled
    guids: list[str]


def encode_split(
    split: glue.GlueSplit, task: glue.GlueTask, tokenizer: AlbertTokenizer, max_seq_length: int
) -> EncodedSplit:
    """Tokenizes and packs examples exactly as the original `convert_single_example`."""
    examples = split.examples
    ids_a = tokenizer.encode_batch([e.text_a for e in examples])
    with_b = [i for i, e in enumerate(examples) if e.text_b]  # the original: `if text_b:`
    ids_b = dict(zip(with_b, tokenizer.encode_batch([examples[i].text_b for i in with_b])))
    chunks, lengths, segment_a = [], [], []
    for i, ids in enumerate(ids_a):
        packed = tokenizer.pack(ids, ids_b.get(i) or None, max_seq_length)  # `if tokens_b:`
        length = sum(packed.input_mask)
        chunks.append(packed.input_ids[:length])
        lengths.append(length)
        segment_a.append(length - sum(packed.segment_ids))
    if task.is_regression:
        labels = np.array([0.0 if e.label is None else e.label for e in examples], np.float32)
    else:
        index = {label: i for i, label in enumerate(task.labels)}
        labels = np.array([0 if e.label is None else index[e.label] for e in examples], np.int32)
    flat = np.fromiter((t for c in chunks for t in c), np.int32, count=sum(lengths))
    return EncodedSplit(
        flat,
        np.array(lengths, np.int64),
        np.array(segment_a, np.int32),
        labels,
        [e.guid for e in examples],
    )


def make_dataset(
    encoded: EncodedSplit,
    batch_size: int,
    max_seq_length: int,
    training: bool,
    seed: int = 0,
    dynamic_padding: bool = True,
) -> tf.data.Dataset:
    """Batches of (features `input_ids, input_mask, segment_ids`, `label_ids`), as `fit` and
    `predict` take them.

    Training: shuffled (seeded, reshuffled each pass), repeated, remainder dropped (as the
    original). Otherwise in file order with a smaller last batch.
    """
    ids = tf.RaggedTensor.from_row_lengths(encoded.token_ids, encoded.lengths)
    dataset = tf.data.Dataset.from_tensor_slices(
        {"ids": ids, "segment_a": encoded.segment_a_lengths, "label_ids": encoded.label_ids}
    )
    if training:
        dataset = dataset.shuffle(
            len(encoded.lengths), seed=seed, reshuffle_each_iteration=True
        ).repeat()

    def unpack(row):
        length = tf.shape(row["ids"])[0]
        segment_ids = tf.concat(
            [
                tf.zeros([row["segment_a"]], tf.int32),
                tf.ones([length - row["segment_a"]], tf.int32),
            ],
            0,
        )
        features = {
            "input_ids": row["ids"],
            "input_mask": tf.ones([length], tf.int32),
            "segment_ids": segment_ids,
        }
        return features, row["label_ids"]

    width = None if dynamic_padding else max_seq_length
    shapes = ({"input_ids": [width], "input_mask": [width], "segment_ids": [width]}, [])
    dataset = dataset.map(unpack, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.padded_batch(batch_size, padded_shapes=shapes, drop_remainder=training).prefetch(
        tf.data.AUTOTUNE
    )


class GlueFinetuneTask(TaskBase):
    """One GLUE job as the fine-tuning loop sees it (`albert_tf.finetuning.task.Task`).

    Args:
      settings: the job's `FinetuneConfig`.
      tokenizer: the SentencePiece tokenizer; built from `settings` when not given.

    Example:
      task = GlueFinetuneTask(FinetuneConfig("mrpc", "glue", "out/mrpc", "30k-clean.model"))
      albert_tf.finetuning.loop.run(task, do_train=True, do_eval=True, do_predict=False)
    """

    def __init__(self, settings: FinetuneConfig, tokenizer: AlbertTokenizer | None = None):
        super().__init__(settings, tokenizer)
        self.name = settings.task.name

    def build_model(
        self, albert_config: AlbertConfig, dtype: str | None = None
    ) -> AlbertClassifier:
        """A fresh `AlbertClassifier` for the task, computing in `dtype`."""
        task = self.settings.task
        return AlbertClassifier(
            albert_config,
            task.num_labels,
            regression=task.is_regression,
            seed=self.settings.seed,
            dtype=dtype,
        )

    def checkpoint_to_score(self) -> str | None:
        """The `hf_model` folder while `output_dir` holds no checkpoint of the job's own (a Hub
        classifier scored, predicted and exported as it is); else None: the checkpoints of
        `output_dir`, as the original `--do_eval` scored them (`init_checkpoint` is only
        the start of training)."""
        config = self.settings
        if not config.hf_model or list_checkpoints(config.output_dir):
            return None
        if os.path.exists(os.path.join(config.output_dir, BEST_CHECKPOINT + ".index")):
            return None
        return config.hf_model

    def initialize(self, model: keras.Model, checkpoint: str) -> bool:
        """As `TaskBase.initialize`; a transformers classifier's head in the task's label order."""
        head_loaded = super().initialize(model, checkpoint)
        if head_loaded and is_hf_folder(checkpoint):
            self._in_task_label_order(model, checkpoint)
        return head_loaded

    def load(self, model: keras.Model, checkpoint: str) -> None:
        """As `TaskBase.load`; a transformers classifier's head in the task's label order."""
        super().load(model, checkpoint)
        if is_hf_folder(checkpoint):
            self._in_task_label_order(model, checkpoint)

    def _in_task_label_order(self, model: keras.Model, folder: str) -> None:
        """Reorders the head's rows when the folder's `id2label` names the task's labels in
        another order (case aside): e.g. an MNLI model trained on transformers' label order."""
        task = self.settings.task
        id2label = load_hf_config(folder).extra[HF_EXTRA].get("id2label")
        if task.labels is None or not isinstance(id2label, dict):
            return
        if len(id2label) != len(task.labels):
            return
        theirs = [str(id2label.get(str(i))).lower() for i in range(len(task.labels))]
        # The folder may name the labels as the TSV files do ("0", "1") or by meaning.
        for names in (task.labels, self.settings.class_names):
            ours = [name.lower() for name in names]
            if sorted(theirs) == sorted(ours):
                break
        if theirs == ours or sorted(theirs) != sorted(ours):
            return
        head = model.get_layer(HEAD_NAME)
        for variable in (head.output_weights, head.output_bias):
            variable.assign(np.asarray(variable)[[theirs.index(label) for label in ours]])
        logging.info("%s: the head's rows reordered from %s to the task's %s", folder, theirs, ours)

    def _encode(self, split: glue.GlueSplit) -> EncodedSplit:
        config = self.settings
        return encode_split(split, config.task, self.tokenizer, config.max_seq_length)

    def _batches(self, encoded: EncodedSplit, batch_size: int, training: bool) -> tf.data.Dataset:
        config = self.settings
        return make_dataset(
            encoded,
            batch_size,
            config.max_seq_length,
            training=training,
            seed=config.seed,
            dynamic_padding=config.pad_dynamically,
        )

    def train_dataset(self) -> tuple[tf.data.Dataset, int]:
        """Shuffled, repeated training batches and the number of training examples."""
        split = read_split(self.settings, "train")
        if not split.examples:
            raise ValueError(f"{split.path}: no training examples")
        encoded = self._encode(split)
        return self._batches(encoded, self.settings.train_batch_size, True), len(encoded.lengths)

    def dev_scorer(self) -> glue_metrics.GlueDevScorer:
        """The dev split, encoded once, as a scorer."""
        dev = self._encode(read_split(self.settings, "dev"))
        return glue_metrics.GlueDevScorer(
            self.name, self._batches(dev, self.settings.eval_batch_size, False), dev.label_ids
        )

    def check_predict_inputs(self) -> None:
        """Reads the test split's rows (not encoded), so that a missing file or a malformed row
        (`MalformedRowError` naming file and line, unless `skip_malformed_rows`) stops the job
        before training; the loop has the dev split read before training too."""
        c = self.settings
        glue.read_split(c.task, c.data_dir, "test", c.do_lower_case, c.skip_malformed_rows)

    def predict_inputs(self) -> EncodedSplit:
        """The test split, encoded."""
        return self._encode(read_split(self.settings, "test"))

    def predict(
        self, model: AlbertClassifier, checkpoint: str, inputs: EncodedSplit
    ) -> dict[str, str]:
        """Writes `test_results.tsv` (probabilities) and the GLUE submission file."""
        config, task = self.settings, self.settings.task
        batches = self._batches(inputs, config.predict_batch_size, False)
        outputs = predict_with_progress(model, batches, f"{self.name} test", len(inputs.guids))
        probabilities = np.asarray(outputs["probabilities"])
        if task.is_regression:
            answers = [str(float(p[0])) for p in probabilities]
        else:
            answers = [task.labels[i] for i in probabilities.argmax(axis=-1)]
        paths = {
            "probabilities": os.path.join(config.output_dir, "test_results.tsv"),
            "submission": os.path.join(config.output_dir, task.submission_file),
        }
        write_text(
            paths["probabilities"],
            "".join("\t".join(str(float(p)) for p in row) + "\n" for row in probabilities),
        )
        write_text(
            paths["submission"],
            "index\tprediction\n"
            + "".join(f"{guid}\t{answer}\n" for guid, answer in zip(inputs.guids, answers)),
        )
        logging.info(
            "Wrote %d predictions of %s to %s", len(answers), checkpoint, paths["submission"]
        )
        return paths

    def export(self, model: AlbertClassifier, checkpoint: str, albert_config: AlbertConfig) -> str:
        """Saves `classifier.keras` (+ config, SentencePiece model, `classifier_info.json`) to
        `export_dir` for `pipelines/export.py --head=classifier`, and `classifier_text.keras`, the
        same classifier taking raw strings (`bundle.write_text_classifier`)."""
        config, task = self.settings, self.settings.task
        info = {
            "task_name": task.name,
            # `labels`: the TSV values (as bundles have always held them); `label_names`: what
            # each id means, which the exports serve.
            "labels": None if task.is_regression else list(task.labels),
            "label_names": None if task.is_regression else list(config.class_names),
            "regression": task.is_regression,
            "inputs": {
                name: "int32 [batch, seq_length]"
                for name in ("input_ids", "input_mask", "segment_ids")
            },
            "outputs": {
                "logits": f"float32 [batch, {task.num_labels}]",
                "probabilities": f"float32 [batch, {task.num_labels}]"
                + (" (the score, as the original)" if task.is_regression else " (softmax)"),
            },
            "max_seq_length": config.max_seq_length,
            "do_lower_case": config.do_lower_case,
        }
        # Before the manifest, which `write_serving_bundle` writes last: a bundle whose manifest
        # is in place is whole.
        write_text_classifier(
            config.export_dir,
            model,
            config.spm_model_file,
            config.max_seq_length,
            config.do_lower_case,
            bundle_label_names(info),
        )
        return write_serving_bundle(
            config.export_dir,
            model,
            "classifier.keras",
            albert_config,
            config.spm_model_file,
            "classifier_info.json",
            info,
            checkpoint,
        )
