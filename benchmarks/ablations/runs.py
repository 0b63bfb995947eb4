"""One run of the study through the library's entry points: pretraining (`run_pretraining`, with
the held-out evaluation on the SOP and NSP records of the same held-out text), or the random
init scored and saved the same way; then the GLUE fine-tunes (the GLUE task's `run`)."""

from __future__ import annotations

import os

from benchmarks.ablations.settings import GLUE_TASKS, TASK_METRIC, RunSpec, StudySettings
from pipelines.demo_pipeline import small_run_options


def albert_config(s: StudySettings, run: RunSpec, vocab_size: int):
    from albert_tf.config import AlbertConfig

    return AlbertConfig(vocab_size=vocab_size, sharing=run.sharing, **s.model)


def backbone_params(config) -> int:
    """Parameters of the encoder (`AlbertModel`: embeddings, layers, pooler), as the paper counts."""
    import keras

    from albert_tf.modeling.model import AlbertModel

    model = AlbertModel(config)
    count = model.count_params()
    del model
    keras.backend.clear_session()
    return count


def eval_input_file(records: dict) -> str:
    """The held-out SOP and NSP records, named so the results say which is which."""
    return ",".join(f"{task}={records['heldout'][task]['path']}" for task in ("sop", "nsp"))


def pretrain(s: StudySettings, run: RunSpec, records: dict, vocab_size: int) -> dict:
    """Pretrains `run` (or, for the random init, only scores and saves its initial weights);
    returns the intrinsic accuracies, where the model is and the loss curves."""
    import keras

    from albert_tf.training.distribution import build_strategy
    from albert_tf.training.pretraining import run_pretraining

    keras.backend.clear_session()
    keras.utils.set_random_seed(run.seed)  # the initial weights
    trains = run.sentence_task != "random_init"
    output_dir = os.path.join(s.work_dir, "runs", run.name, "pretraining")
    options = small_run_options(
        s,
        input_file=records["train"][run.records]["path"],
        eval_input_file=eval_input_file(records),
        output_dir=output_dir,
        save_checkpoints_steps=s.log_every_steps,
        keep_checkpoint_max=2,
        log_every_steps=s.log_every_steps,
        do_train=trains,
        do_eval=True,
        shuffle_buffer=2000,
        seed=run.seed,  # the order the records are read in
        sentence_task="none" if run.sentence_task == "none" else "auto",
    )
    results = run_pretraining(
        options, albert_config(s, run, vocab_size), build_strategy("one_device")
    )
    if trains and results["sentence_task"] != run.sentence_task:
        raise RuntimeError(
            f"{run.name}: trained {results['sentence_task']}, expected {run.sentence_task}"
        )
    accuracy = results["eval"]["accuracy"]
    return {
        "keras_model": results["keras_model"],
        "intrinsic": {k: accuracy[k] for k in ("mlm", "nsp", "sop")},
        "eval": results["eval"],
        "curves": loss_curves(os.path.join(output_dir, "logs", "train")) if trains else [],
    }


def loss_curves(log_dir: str) -> list[dict]:
    """(step, MLM loss, sentence loss) of every report in a run's TensorBoard logs, the last
    value of a step kept (a resumed run repeats the steps after its last checkpoint). Each value
    is the mean over the steps since the previous report."""
    import tensorflow as tf

    points: dict[int, dict] = {}
    for name in sorted(os.listdir(log_dir)) if os.path.isdir(log_dir) else []:
        for event in tf.compat.v1.train.summary_iterator(os.path.join(log_dir, name)):
            for value in event.summary.value:
                if value.tag in ("masked_lm_loss", "sentence_order_loss"):
                    scalar = float(tf.make_ndarray(value.tensor))
                    points.setdefault(int(event.step), {})[value.tag] = scalar
    return [
        {"step": step, "mlm_loss": p["masked_lm_loss"], "sentence_loss": p["sentence_order_loss"]}
        for step, p in sorted(points.items())
        if len(p) == 2
    ]


def finetune(s: StudySettings, run: RunSpec, task: str, init: str, spm_model_file: str) -> dict:
    """Fine-tunes the run's model on a GLUE task (one checkpoint, at the end, scored on dev)."""
    recipe = s.finetune[task]
    result = finetune_glue(
        task,
        s.glue_dir,
        os.path.join(s.work_dir, "runs", run.name, "finetune", task),
        init,
        spm_model_file,
        max_seq_length=s.finetune_max_seq_length,
        train_step=recipe.train_step,
        warmup_step=recipe.warmup_step,
        learning_rate=s.finetune_learning_rate,
        train_batch_size=recipe.train_batch_size,
        seed=s.finetune_seed,
    )
    return {"metric": TASK_METRIC[task], "value": result["metrics"][TASK_METRIC[task]]}


def finetune_glue(
    task: str, glue_dir: str, output_dir: str, init: str | None, spm_model_file: str, **loop
) -> dict:
    """One GLUE fine-tune on the fine-tuning loop (`init`: a `.keras` or TF1 checkpoint,
    None for the random init; `loop`: the `FinetuneConfig` sizes, rate and seed), scored on dev
    once, at the end; returns the final evaluation (its `metrics` and `baseline`)."""
    import keras

    from albert_tf.finetuning.loop import run
    from albert_tf.tasks.glue import finetune as glue

    keras.backend.clear_session()
    config = glue.FinetuneConfig(
        task_name=task,
        data_dir=glue_dir,
        output_dir=output_dir,
        spm_model_file=spm_model_file,
        init_checkpoint=init,
        eval_batch_size=64,
        save_checkpoints_steps=loop["train_step"],
        log_every_steps=max(1, loop["train_step"] // 5),
        **loop,
    )
    job = glue.GlueFinetuneTask(config)
    evaluation = run(job, do_train=True, do_eval=True, do_predict=False)["eval"]
    return {**evaluation["final"], "baseline": evaluation["baseline"]}


def downstream_average(scores: dict[str, dict]) -> dict:
    """The four dev metrics by task and their plain average."""
    values = {task: scores[task]["value"] for task in GLUE_TASKS}
    return {**values, "avg": sum(values.values()) / len(values)}
