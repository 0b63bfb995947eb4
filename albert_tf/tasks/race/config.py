"""A RACE job's settings: `RaceConfig` (the original `run_race.py` flags, with the TFRecord
caches of its splits) and the release's recipe."""

from __future__ import annotations

import dataclasses
import os

from albert_tf.finetuning.settings import (
    FinetuneSettings,
    check_positive,
    check_warmup,
    spm_model_file_setting,
)
from albert_tf.settings import OUTPUT_DIR, OUTPUT_FILE, setting

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
class RaceConfig(FinetuneSettings):
    """One RACE job; defaults are the original `run_race.py` flag defaults.

    `train_file`, `eval_file`, `predict_file` are the TFRecord caches of the train, dev and test
    splits (default: in `output_dir`).

    Args:
      data_dir: the folder holding `RACE/{train,dev,test}/{middle,high}/all.txt`.
      output_dir, spm_model_file, ...: the original flags of the same names.

    Example:
      config = RaceConfig("data", "out/race", "30k-clean.model", **RECIPES["race"])
    """

    data_dir: str = setting(help="The folder holding RACE/{train,dev,test}/{middle,high}/.")
    output_dir: str = setting(
        help="Where checkpoints, results and predictions go.", path=OUTPUT_DIR
    )
    spm_model_file: str | None = spm_model_file_setting()
    task_name: str = setting("race", "The task: race.")
    train_file: str | None = setting(
        None,
        "TFRecord cache of the train split. Default: <output_dir>/train.tf_record.",
        path=OUTPUT_FILE,
    )
    eval_file: str | None = setting(
        None,
        "TFRecord cache of the dev split. Default: <output_dir>/eval.tf_record.",
        path=OUTPUT_FILE,
    )
    predict_file: str | None = setting(
        None,
        "TFRecord cache of the test split. Default: <output_dir>/predict.tf_record.",
        path=OUTPUT_FILE,
    )
    dropout_prob: float = setting(0.1, "Dropout on the pooled output (the v2 recipe used 0).")
    max_seq_length: int = setting(512, "Tokens per packed choice, padded.", kw_only=True)
    max_qa_length: int = setting(128, "Pieces kept from the end of question + option.")
    high_only: bool = setting(False, "Read the high school questions only.")
    middle_only: bool = setting(False, "Read the middle school questions only.")
    eval_batch_size: int = setting(8, "Batch size for eval.")
    learning_rate: float = setting(1e-5, "Initial learning rate (linear decay to 0).", kw_only=True)
    train_step: int = setting(12000, "Total number of training steps.", kw_only=True)
    warmup_step: int = setting(1000, "Linear learning-rate warmup steps.", kw_only=True)
    save_checkpoints_steps: int = setting(
        100, "Save (and evaluate) a checkpoint every N steps.", kw_only=True
    )
    export_dir: str | None = setting(
        None,
        "Save race.keras (with its config, SentencePiece model and race_info.json) here.",
        path=OUTPUT_DIR,
        kw_only=True,
    )

    def __post_init__(self):
        super().__post_init__()
        if self.task_name.lower() != "race":
            raise ValueError(f"Task not found: {self.task_name}")
        if self.high_only and self.middle_only:
            raise ValueError("high_only and middle_only exclude each other")
        check_positive(self, ("max_qa_length", "train_step", "eval_batch_size"))
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
