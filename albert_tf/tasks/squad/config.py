"""A SQuAD job's settings: `SquadConfig` (the original `run_squad_v1.py` / `run_squad_v2.py`
flags), the release's recipe, and the training schedule as the original derives it.

As the original: steps = int(questions / train_batch_size * num_train_epochs) unless `train_step`
is given, warmup = int(steps * warmup_proportion) (`with_schedule`).
"""

from __future__ import annotations

import dataclasses
import os

from albert_tf.finetuning.checks import LOOP_SIZES, check_positive, check_warmup

VERSIONS = ("v1", "v2")
# The original release's recommended recipe, the same for both versions.
RECIPE = dict(
    learning_rate=5e-5,
    train_batch_size=48,
    num_train_epochs=2.0,
    warmup_proportion=0.1,
    max_seq_length=384,
    doc_stride=128,
    max_query_length=64,
    n_best_size=20,
    max_answer_length=30,
    save_checkpoints_steps=5000,
    do_lower_case=True,
)
RECIPES: dict[str, dict] = {"squad_v1": RECIPE, "squad_v2": RECIPE}


@dataclasses.dataclass
class SquadConfig:
    """One SQuAD job; defaults are the original `run_squad_v1.py` / `run_squad_v2.py` flags.

    `train_step` / `warmup_step` None: from `num_train_epochs` / `warmup_proportion` and the
    number of training questions (`with_schedule`). Feature files default to `output_dir`.

    Args:
      version: "v1" (SQuAD v1.1, `AlbertSquadV1`) or "v2" (SQuAD v2.0, `AlbertSquadV2`).
      output_dir, spm_model_file, ...: the original flags of the same names.

    Example:
      config = SquadConfig("v2", "out/squad2", "30k-clean.model", train_file="train-v2.0.json",
                           predict_file="dev-v2.0.json", **RECIPES["squad_v2"])
    """

    version: str
    output_dir: str
    spm_model_file: str
    albert_config_file: str | None = None
    init_checkpoint: str | None = None
    train_file: str | None = None
    predict_file: str | None = None
    train_feature_file: str | None = None
    predict_feature_file: str | None = None
    predict_feature_left_file: str | None = None
    do_lower_case: bool = True
    max_seq_length: int = 384
    doc_stride: int = 128
    max_query_length: int = 64
    train_batch_size: int = 32
    predict_batch_size: int = 8
    learning_rate: float = 5e-5
    num_train_epochs: float = 3.0
    warmup_proportion: float = 0.1
    train_step: int | None = None
    warmup_step: int | None = None
    save_checkpoints_steps: int = 1000
    n_best_size: int = 20
    max_answer_length: int = 30
    start_n_top: int = 5
    end_n_top: int = 5
    dropout_prob: float = 0.1
    optimizer: str = "adamw"
    export_dir: str | None = None
    keep_all_checkpoints: bool = False
    skip_bad_answers: bool = False
    jit_compile: bool = False
    mixed_precision: str = "none"
    seed: int = 12345
    log_every_steps: int = 50

    def __post_init__(self):
        if self.version not in VERSIONS:
            raise ValueError(f"version must be one of {VERSIONS}, got {self.version!r}")
        check_positive(
            self,
            (*LOOP_SIZES, "doc_stride", "max_query_length", "n_best_size", "max_answer_length"),
        )
        if self.max_seq_length <= self.max_query_length + 3:
            raise ValueError(
                f"The max_seq_length ({self.max_seq_length}) must be greater than "
                f"max_query_length ({self.max_query_length}) + 3"
            )
        if not 0.0 <= self.warmup_proportion <= 1.0:
            raise ValueError(f"warmup_proportion must be in [0, 1], got {self.warmup_proportion}")
        for name, default in (
            ("train_feature_file", "train.tf_record"),
            ("predict_feature_file", "predict.tf_record"),
            ("predict_feature_left_file", "predict_left_file.json"),
        ):
            if getattr(self, name) is None:
                setattr(self, name, os.path.join(self.output_dir, default))

    @property
    def name(self) -> str:
        """The task's name: squad_v1 or squad_v2."""
        return f"squad_{self.version}"


def with_schedule(config: SquadConfig, num_questions: int) -> SquadConfig:
    """`config` with `train_step` and `warmup_step` set as the original computes them from the
    number of training questions (explicit values are kept)."""
    steps = config.train_step
    if steps is None:
        steps = int(num_questions / config.train_batch_size * config.num_train_epochs)
    warmup = config.warmup_step
    if warmup is None:
        warmup = int(steps * config.warmup_proportion)
    if steps <= 0:
        raise ValueError(
            f"{num_questions} training questions / train_batch_size {config.train_batch_size} x "
            f"num_train_epochs {config.num_train_epochs} makes no step; give train_step"
        )
    check_warmup(warmup, steps)
    return dataclasses.replace(config, train_step=steps, warmup_step=warmup)
