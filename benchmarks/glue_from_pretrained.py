r"""Dev metrics on SST-2 and MRPC: pretrained init vs random init (same size) vs majority class.

Fine-tunes each model with the same short budget, sized for 2 CPU cores (200 steps of 32 take
about 2 minutes on SST-2 and 3 on MRPC for the demo's 4-layer H=256 model at seq 128),
evaluating `--num_evals` checkpoints, and prints the final and best-of-checkpoints dev metrics
side by side with the majority-class baseline:

    python benchmarks/glue_from_pretrained.py --data_dir=../shared/data/glue \
        --spm_model_file=runs/demo/vocab/demo_spm.model \
        --init_checkpoint=runs/demo/pretraining/albert_pretrainer.keras

`--spm_model_file` must be the vocabulary the checkpoint was pretrained with. Without
`--init_checkpoint` only the random-init model and the baseline are run (give
`--albert_config_file` then). The model config comes from `--albert_config_file`, else from the
checkpoint (`.keras`, or `albert_config.json` beside a TF1 checkpoint).
"""

import os
import pathlib
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # run from a checkout
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags, logging

from benchmarks.machine import describe as describe_machine
from albert_tf.finetuning import loop
from albert_tf.finetuning.settings import resolve_albert_config
from albert_tf.tasks.glue import finetune as finetuning
from albert_tf.io import write_json
from albert_tf.tasks.glue import metrics as glue_metrics
from albert_tf.tasks.glue import processors as glue

FLAGS = flags.FLAGS
flags.DEFINE_string("data_dir", None, "GLUE root with SST-2/ and MRPC/ (train.tsv, dev.tsv).")
flags.DEFINE_string(
    "spm_model_file", None, "The SentencePiece model the checkpoint was trained with."
)
flags.DEFINE_string("init_checkpoint", None, "Pretrained model: our .keras or a TF1 checkpoint.")
flags.DEFINE_string("albert_config_file", None, "Model config (default: from the checkpoint).")
flags.DEFINE_list("tasks", ["sst-2", "mrpc"], "GLUE tasks to run.")
flags.DEFINE_integer("max_seq_length", 128, "Sequence length (at most the model's positions).")
flags.DEFINE_integer("train_step", 200, "Fine-tuning steps per task and model.")
flags.DEFINE_integer("train_batch_size", 32, "Batch size.")
flags.DEFINE_float("learning_rate", 1e-4, "Peak learning rate (10% warmup, linear decay).")
flags.DEFINE_integer(
    "num_evals", 4, "Checkpoints evaluated on dev per run (best and final reported)."
)
flags.DEFINE_integer("random_seed", 12345, "Seed shared by all runs.")
flags.DEFINE_string("output_dir", None, "Work directory (default: a temporary one).")
flags.DEFINE_string("output_json", None, "Also write the results table as JSON here.")
flags.mark_flags_as_required(["data_dir", "spm_model_file"])


def _fine_tune(task: str, init: str | None, output_dir: str, albert_config_file: str | None):
    config = finetuning.FinetuneConfig(
        task_name=task,
        data_dir=FLAGS.data_dir,
        output_dir=output_dir,
        spm_model_file=FLAGS.spm_model_file,
        albert_config_file=albert_config_file,
        init_checkpoint=init,
        max_seq_length=FLAGS.max_seq_length,
        train_step=FLAGS.train_step,
        warmup_step=FLAGS.train_step // 10,
        learning_rate=FLAGS.learning_rate,
        train_batch_size=FLAGS.train_batch_size,
        eval_batch_size=64,
        save_checkpoints_steps=max(1, -(-FLAGS.train_step // FLAGS.num_evals)),
        seed=FLAGS.random_seed,
        log_every_steps=max(1, FLAGS.train_step // 10),
    )
    start = time.time()
    results = loop.run(
        finetuning.GlueFinetuneTask(config), do_train=True, do_eval=True, do_predict=False
    )["eval"]
    return results, time.time() - start


def _baseline(task: str) -> dict:
    spec = glue.get_task(task)
    labels = []
    for split in ("train", "dev"):
        examples = glue.read_split(spec, FLAGS.data_dir, split).examples
        labels.append([spec.labels.index(e.label) for e in examples])
    return glue_metrics.majority_baseline(task, *labels, num_labels=spec.num_labels)


def _metric_keys(task: str) -> list[str]:
    keys = ["eval_accuracy"]
    if task in glue_metrics.F1_TASKS:
        keys.append("f1")
    if task == "cola":
        keys.append("matthew_corr")
    return keys


def main(argv):
    del argv
    work = FLAGS.output_dir or tempfile.mkdtemp(prefix="glue_from_pretrained.")
    config_file = FLAGS.albert_config_file
    if config_file is None and FLAGS.init_checkpoint is None:
        raise app.UsageError("give --albert_config_file when there is no --init_checkpoint")
    if any(glue.get_task(t).is_regression for t in FLAGS.tasks):
        raise app.UsageError("classification tasks only (STS-B is not supported here)")
    variants = [("random init", None)]
    if FLAGS.init_checkpoint:
        # The random-init model takes the pretrained model's config (same size).
        probe = finetuning.FinetuneConfig(
            FLAGS.tasks[0],
            FLAGS.data_dir,
            work,
            FLAGS.spm_model_file,
            albert_config_file=config_file,
            init_checkpoint=FLAGS.init_checkpoint,
            max_seq_length=FLAGS.max_seq_length,
        )
        config_file = os.path.join(work, "albert_config.json")
        os.makedirs(work, exist_ok=True)
        resolve_albert_config(probe).to_json_file(config_file)
        variants.insert(0, ("pretrained", FLAGS.init_checkpoint))
    rows = []
    for task in FLAGS.tasks:
        keys = _metric_keys(task)
        rows.append(
            {"task": task, "model": "majority class", **{k: _baseline(task)[k] for k in keys}}
        )
        for name, init in variants:
            logging.info("=== %s, %s ===", task, name)
            results, seconds = _fine_tune(
                task, init, os.path.join(work, task, name.replace(" ", "_")), config_file
            )
            for which in ("final", "best"):
                rows.append(
                    {
                        "task": task,
                        "model": f"{name} ({which}, step {results[which]['step']})",
                        **{k: results[which]["metrics"][k] for k in keys},
                        "seconds": round(seconds),
                    }
                )
    print(
        f"\nmachine: {describe_machine()}\nDev metrics, {FLAGS.train_step} steps x batch {FLAGS.train_batch_size}, seq "
        f"{FLAGS.max_seq_length}, lr {FLAGS.learning_rate} (best = best of {FLAGS.num_evals} "
        "checkpoints on dev, as the original reported; final = last step):"
    )
    print(f"{'task':6} {'model':34} {'accuracy':>9} {'F1':>7} {'time s':>7}")
    for row in rows:
        f1 = f"{row['f1']:.4f}" if "f1" in row else ""
        print(
            f"{row['task']:6} {row['model']:34} {row['eval_accuracy']:9.4f} {f1:>7} "
            f"{row.get('seconds', ''):>7}"
        )
    if FLAGS.output_json:
        write_json(FLAGS.output_json, rows)


if __name__ == "__main__":
    app.run(main)
