"""A RACE job's settings: `RaceConfig` (the original `run_race.py` flags, with the TFRecord
caches of its splits) and the release's recipe."""

from __future__ import annotations

import dataclasses
import os

from albert_tf.finetuning.checks import LOOP_SIZES, check_positive, check_warmup

# The original release's recommended recipe (its v2 models also used dropout_prob 0, which
# depends on the model, so it is left to the flag).
RECIPES: dict[str, dict] = {
    "race": dict(
        learning_rate=1e-5,
        train_batch_size=32,
        eval_batch_size=8,
        train_step=12000,
        warmup_step=1000,
        save_checkpoints_steps=100,
        max_seq_length=512,
        max_qa_length=128,
    )
}
_CACHE_NAMES = {"train": "train.tf_record", "dev": "eval.tf_record", "test": "predict.tf_record"}


@dataclasses.dataclass
class RaceConfig:
    """One RACE job; defaults are the original `run_race.py` flag defaults.

    `train_file`, `eval_file`, `predict_file` are the TFRecord caches of the train, dev and test
    splits (default: in `output_dir`).

    Args:
      data_dir: the folder holding `RACE/{train,dev,test}/{middle,high}/all.txt`.
      output_dir, spm_model_file, ...: the original flags of the same names.

    Example:
      config = RaceConfig("data", "out/race", "30k-clean.model", **RECIPES["race"])
    """

    data_dir: str
    output_dir: str
    spm_model_file: str
    albert_config_file: str | None = None
    init_checkpoint: str | None = None
    task_name: str = "race"
    train_file: str | None = None
    eval_file: str | None = None
    predict_file: str | None = None
    do_lower_case: bool = True
    dropout_prob: float = 0.1
    max_seq_length: int = 512
    max_qa_length: int = 128
    high_only: bool = False
    middle_only: bool = False
    train_batch_size: int = 32
    eval_batch_size: int = 8
    predict_batch_size: int = 8
    learning_rate: float = 1e-5
    train_step: int = 12000
    warmup_step: int = 1000
    save_checkpoints_steps: int = 100
    optimizer: str = "adamw"
    export_dir: str | None = None
    keep_all_checkpoints: bool = False
    jit_compile: bool = False
    mixed_precision: str = "none"
    seed: int = 12345
    log_every_steps: int = 50

    def __post_init__(self):
        if self.task_name.lower() != "race":
            raise ValueError(f"Task not found: {self.task_name}")
        if self.high_only and self.middle_only:
            raise ValueError("high_only and middle_only exclude each other")
        check_positive(self, (*LOOP_SIZES, "max_qa_length", "train_step", "eval_batch_size"))
        check_warmup(self.warmup_step, self.train_step)
        if self.max_qa_length + 3 > self.max_seq_length:
            raise ValueError(
                f"max_qa_length={self.max_qa_length} leaves no room for the passage in "
                f"max_seq_length={self.max_seq_length}"
            )
        for split, attribute in (
            ("train", "train_file"),
            ("dev", "eval_file"),
            ("test", "predict_file"),
        ):
            if getattr(self, attribute) is None:
                setattr(self, attribute, os.path.join(self.output_dir, _CACHE_NAMES[split]))

    def cache_file(self, split: str) -> str:
        """The TFRecord cache of a split ("train", "dev" or "test")."""
        return {"train": self.train_file, "dev": self.eval_file, "test": self.predict_file}[split]
