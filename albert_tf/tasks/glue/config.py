"""A GLUE job's settings: `FinetuneConfig` (the original `run_classifier.py` flags) and the
release's `run_glue.sh` recipes."""

from __future__ import annotations

import dataclasses

from albert_tf.finetuning.checks import LOOP_SIZES, check_positive, check_warmup
from albert_tf.tasks.glue import processors as glue

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
class FinetuneConfig:
    """One fine-tuning job; defaults are the original `run_classifier.py` flag defaults."""

    task_name: str
    data_dir: str
    output_dir: str
    spm_model_file: str
    albert_config_file: str | None = None
    init_checkpoint: str | None = None
    do_lower_case: bool = True
    max_seq_length: int = 512
    train_step: int = 1000
    warmup_step: int = 0
    learning_rate: float = 5e-5
    train_batch_size: int = 32
    eval_batch_size: int = 8
    predict_batch_size: int = 8
    optimizer: str = "adamw"
    save_checkpoints_steps: int = 1000
    export_dir: str | None = None
    skip_malformed_rows: bool = False
    keep_all_checkpoints: bool = False
    dynamic_padding: bool = True
    jit_compile: bool = False
    seed: int = 12345
    log_every_steps: int = 50

    @property
    def pad_dynamically(self) -> bool:
        """Dynamic padding, except under XLA (which would compile every batch width)."""
        return self.dynamic_padding and not self.jit_compile

    def __post_init__(self):
        self.task = glue.get_task(self.task_name)
        check_positive(self, (*LOOP_SIZES, "train_step", "eval_batch_size"))
        check_warmup(self.warmup_step, self.train_step)
