"""The demo behind `python pipelines/pretrain.py` with no flags: the whole pipeline on the bundled
sample corpus, in minutes on 2 CPU cores.

  SentencePiece vocab -> TFRecords (train + held-out book) -> pretrain a small ALBERT -> held-out
  eval against the unigram baseline -> export (SavedModel, TFLite) -> a summary of where it all is.

Every stage records its result in `<output_dir>/stages/<stage>.json`; a re-run reuses finished
stages (and pretraining resumes from its last checkpoint if it was interrupted).
"""

from __future__ import annotations

import collections
import dataclasses
import glob
import json
import os
import pathlib
import sys
import time

sys.path.insert(
    0, str(pathlib.Path(__file__).resolve().parents[1])
)  # run from a checkout, uninstalled

from absl import logging

from albert_tf.config import preset_shape, resolve_max_predictions_per_seq  # TensorFlow-free
from albert_tf.io import write_json
from data_prep import SAMPLE_CORPUS

# Run from a checkout (`python pipelines/pretrain.py`, or an editable install), the demo writes
# under the checkout's runs/; installed from a wheel, under the directory it is run in.
_CHECKOUT = pathlib.Path(__file__).resolve().parents[1]
RUNS_ROOT = _CHECKOUT if (_CHECKOUT / "pyproject.toml").is_file() else pathlib.Path.cwd()


# The small ALBERT of the demo (and of the benchmarks that train like it): the `small` preset's
# 4 layers of width 128, all parameters shared, with E=64; the vocab is the one the run trains.
SMALL_MODEL = preset_shape("small", vocab=False, embedding_size=64)
# A tiny one, for tests and smoke runs: seconds a step's worth (the `tiny` preset; the vocab is
# the one the run trains).
TINY_MODEL = preset_shape("tiny", vocab=False)
# What a small pretraining run takes from its settings by name (`small_run_options`).
SMALL_RUN_FIELDS = (
    "max_seq_length",
    "max_predictions_per_seq",
    "train_batch_size",
    "eval_batch_size",
    "learning_rate",
    "num_train_steps",
    "num_warmup_steps",
    "max_eval_steps",
)


def small_run_options(sizes, **settings):
    """`PretrainingOptions` of a small run: the `SMALL_RUN_FIELDS` of `sizes` (a `DemoSettings`
    or a benchmark's settings with those fields), then `settings`."""
    from albert_tf.training.pretraining_options import PretrainingOptions

    return PretrainingOptions(
        **{name: getattr(sizes, name) for name in SMALL_RUN_FIELDS}, **settings
    )


@dataclasses.dataclass(frozen=True)
class DemoSettings:
    """Sizes of the demo run; `quick()` is a smaller variant for tests.

    Args:
        output_dir: where every stage writes; the other fields: the data, model and training
            sizes, each commented where it is not obvious.

    Example:
        run(DemoSettings.quick("/tmp/demo"))
    """

    output_dir: str = str(RUNS_ROOT / "runs" / "demo")
    train_files: str = str(SAMPLE_CORPUS / "train" / "*.txt.gz")
    heldout_files: str = str(SAMPLE_CORPUS / "heldout" / "*.txt.gz")
    vocab_size: int = 8000
    max_seq_length: int = 128
    max_predictions_per_seq: int | None = None  # None: min(20, max_seq_length)
    dupe_factor: int = 2
    # All-shared and factorized (E=64 < H=128): per step of 32 on 2 CPU cores, ~0.35 s with AMX and
    # ~0.75 s with AVX2 only; 450 steps keep the whole demo under 10 minutes on the latter while the
    # held-out MLM accuracy ends ~1.4-1.6x the unigram baseline and SOP above chance.
    model: dict = dataclasses.field(default_factory=lambda: dict(SMALL_MODEL))
    train_batch_size: int = 32
    num_train_steps: int = 450
    num_warmup_steps: int = 45
    learning_rate: float = 0.005
    save_checkpoints_steps: int = 150
    eval_batch_size: int = 32
    max_eval_steps: int = 100
    export_formats: tuple[str, ...] = ("saved_model", "tflite_fp32", "tflite_int8_dynamic")

    def __post_init__(self):
        object.__setattr__(
            self,
            "max_predictions_per_seq",
            resolve_max_predictions_per_seq(self.max_predictions_per_seq, self.max_seq_length),
        )

    @classmethod
    def quick(cls, output_dir: str) -> "DemoSettings":
        """A tiny run of every stage, in under a minute: for tests."""
        return cls(
            output_dir=output_dir,
            train_files=str(SAMPLE_CORPUS / "train" / "pg11.txt.gz"),
            vocab_size=1000,
            dupe_factor=1,
            model=dict(TINY_MODEL),
            num_train_steps=20,
            num_warmup_steps=2,
            save_checkpoints_steps=10,
            max_eval_steps=4,
            export_formats=("saved_model", "tflite_fp32"),
        )


def _stage(settings: DemoSettings, name: str, work) -> dict:
    """Run `work()` unless the stage already finished; its result dict is kept as JSON."""
    marker = pathlib.Path(settings.output_dir) / "stages" / f"{name}.json"
    if marker.exists():
        logging.info("[%s] done earlier, reusing %s", name, marker)
        return json.loads(marker.read_text())
    logging.info("[%s] starting", name)
    started = time.monotonic()
    result = work()
    result["seconds"] = round(time.monotonic() - started, 1)
    marker.parent.mkdir(parents=True, exist_ok=True)
    write_json(marker, result)
    logging.info("[%s] finished in %.1fs", name, result["seconds"])
    return result


def train_vocabulary(s: DemoSettings) -> dict:
    """Stage 1: the SentencePiece model of the training text; its paths and size."""
    from data_prep.vocab import VocabConfig, train_vocab

    result = train_vocab(
        s.train_files,
        os.path.join(s.output_dir, "vocab"),
        "demo_spm",
        VocabConfig(vocab_size=s.vocab_size, input_sentence_size=2_000_000),
    )
    return {"spm_model_file": result.model_path, "vocab_file": result.vocab_path}


def create_records(s: DemoSettings, spm_model_file: str) -> dict:
    """Stage 2: training and held-out TFRecords of masked SOP pairs; their paths and counts."""
    from data_prep import corpus, instances, pipeline

    outputs = {}
    for split, files, dupe, seed in (
        ("train", s.train_files, s.dupe_factor, 12345),
        ("heldout", s.heldout_files, 1, 54321),
    ):
        path = os.path.join(s.output_dir, "data", f"{split}.tfrecord")
        summary = pipeline.run(
            pipeline.DataPrepConfig(
                input_file=files,
                output_file=path,
                spm_model_file=spm_model_file,
                random_seed=seed,
                dupe_factor=dupe,
                pair=instances.PairConfig(max_seq_length=s.max_seq_length),
                masking=instances.MaskingConfig(max_predictions_per_seq=s.max_predictions_per_seq),
                corpus=corpus.CorpusConfig(input_format="paragraphs"),
                num_workers=min(2, os.cpu_count() or 1),
            )
        )
        outputs[split] = {"tfrecord": path, "instances": summary["instances"]}
    return outputs


def pretrain(s: DemoSettings, spm_vocab_size: int, records: dict) -> dict:
    """Stage 3: pretraining (resumed where it stopped) and the held-out evaluation."""
    from albert_tf.config import AlbertConfig
    from albert_tf.training.distribution import build_strategy
    from albert_tf.training.pretraining import run_pretraining

    config = AlbertConfig(vocab_size=spm_vocab_size, **s.model)
    config_path = os.path.join(s.output_dir, "albert_config.json")
    config.to_json_file(config_path)
    options = small_run_options(
        s,
        input_file=records["train"]["tfrecord"],
        eval_input_file=records["heldout"]["tfrecord"],
        output_dir=os.path.join(s.output_dir, "pretraining"),
        save_checkpoints_steps=s.save_checkpoints_steps,
        do_eval=True,
        log_every_steps=max(1, s.num_train_steps // 30),
        shuffle_buffer=2000,
        seed=12345,
    )
    results = run_pretraining(options, config, build_strategy("one_device"))
    return {"albert_config_file": config_path, **results}


def unigram_baseline(s: DemoSettings, train_pattern: str, eval_pattern: str) -> dict:
    """Held-out MLM accuracy of always predicting the most frequent masked training token."""
    import numpy as np
    import tensorflow as tf

    from albert_tf.training.input_pipeline import feature_spec

    def masked_ids(pattern):
        spec = feature_spec(s.max_seq_length, s.max_predictions_per_seq)
        ids = []
        for batch in tf.data.TFRecordDataset(tf.io.gfile.glob(pattern)).batch(1024):
            parsed = tf.io.parse_example(batch, spec)
            real = parsed["masked_lm_weights"].numpy() > 0
            ids.append(parsed["masked_lm_ids"].numpy()[real])
        return np.concatenate(ids)

    counts = collections.Counter(masked_ids(train_pattern).tolist())
    top_id, _ = counts.most_common(1)[0]
    eval_ids = masked_ids(eval_pattern)
    return {
        "unigram_top_id": int(top_id),
        "unigram_mlm_accuracy": float(np.mean(eval_ids == top_id)),
    }


def export(s: DemoSettings, pretrained: dict, spm_model_file: str, heldout: str) -> dict:
    """Stage 4: the SavedModel and TFLite files of the pretrained model, verified."""
    import shutil

    from albert_tf.export import ExportConfig, export_model, load_serving_head

    output_dir = os.path.join(s.output_dir, "export")
    shutil.rmtree(output_dir, ignore_errors=True)  # an unfinished earlier attempt: redo it
    report = export_model(
        load_serving_head("pretrainer", keras_model=pretrained["keras_model"]),
        ExportConfig(
            output_dir=output_dir,
            model_name="albert_demo",
            max_seq_length=s.max_seq_length,
            max_predictions_per_seq=s.max_predictions_per_seq,
            formats=s.export_formats,
            spm_model_file=spm_model_file,
            representative_data=heldout,
        ),
    )
    return {"artifacts": {k: a["path"] for k, a in report["artifacts"].items() if "path" in a}}


def run(settings: DemoSettings | None = None) -> dict:
    """All stages; prints where everything is and the held-out accuracies."""
    s = settings or DemoSettings()
    started = time.monotonic()
    vocab = _stage(s, "1_vocab", lambda: train_vocabulary(s))
    records = _stage(s, "2_records", lambda: create_records(s, vocab["spm_model_file"]))
    pretrained = _stage(s, "3_pretrain", lambda: pretrain(s, s.vocab_size, records))
    baseline = _stage(
        s,
        "4_baseline",
        lambda: unigram_baseline(s, records["train"]["tfrecord"], records["heldout"]["tfrecord"]),
    )
    exported = _stage(
        s,
        "5_export",
        lambda: export(s, pretrained, vocab["spm_model_file"], records["heldout"]["tfrecord"]),
    )
    summary = {
        "vocab": vocab,
        "records": records,
        "pretraining": pretrained,
        "baseline": baseline,
        "export": exported,
        "total_seconds": round(time.monotonic() - started, 1),
    }
    _print_summary(s, summary)
    return summary


def _print_summary(s: DemoSettings, summary: dict) -> None:
    evaluation = summary["pretraining"]["eval"]
    baseline = summary["baseline"]
    lines = [
        "",
        "=" * 72,
        f"ALBERT demo finished ({summary['total_seconds']:.0f}s this run). Everything is under "
        f"{s.output_dir}:",
        f"  SentencePiece model   {summary['vocab']['spm_model_file']}",
        f"  TFRecords             {summary['records']['train']['tfrecord']} "
        f"({summary['records']['train']['instances']} instances), held-out "
        f"{summary['records']['heldout']['tfrecord']} "
        f"({summary['records']['heldout']['instances']})",
        f"  Keras model           {summary['pretraining']['keras_model']}",
        f"  TF1 checkpoint        {summary['pretraining']['tf1_checkpoint']}",
        f"  TensorBoard logs      {os.path.join(summary['pretraining']['output_dir'], 'logs')}",
    ]
    for name, path in sorted(summary["export"].get("artifacts", {}).items()):
        lines.append(f"  export {name:14s} {path}")
    lines += [
        f"Held-out ({', '.join(sorted(os.path.basename(f) for f in glob.glob(s.heldout_files)))}"
        f", a book not trained on), step "
        f"{evaluation['global_step']}:",
        f"  MLM accuracy {evaluation['masked_lm_accuracy']:.3f}   vs unigram baseline "
        f"{baseline['unigram_mlm_accuracy']:.3f} (always the most frequent masked token)",
        f"  SOP accuracy {evaluation['sentence_order_accuracy']:.3f}   vs 0.5 for chance",
        "=" * 72,
    ]
    print("\n".join(lines), flush=True)


if __name__ == "__main__":
    # Run directly, this is the command it backs: pretrain.py with no flags (run as a script, so
    # that this module, which pretrain.py imports, imports nothing back).
    import runpy

    runpy.run_path(str(pathlib.Path(__file__).with_name("pretrain.py")), run_name="__main__")
