"""A SQuAD job's settings: `SquadConfig` (the original `run_squad_v1.py` / `run_squad_v2.py`
flags), the release's recipe, and the training schedule as the original derives it.

As the original: steps = int(questions / train_batch_size * num_train_epochs) unless `train_step`
is given, warmup = int(steps * warmup_proportion) (`with_schedule`).
"""

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
# The settings only the original v2 script has.
V2_ONLY = ("start_n_top", "end_n_top", "dropout_prob")


@dataclasses.dataclass
class SquadConfig(FinetuneSettings):
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
    output_dir: str = setting(
        help="Where checkpoints, results and predictions go.", path=OUTPUT_DIR
    )
    spm_model_file: str | None = spm_model_file_setting()
    train_file: str | None = setting(None, "SQuAD json for training, e.g. train-v1.1.json.")
    predict_file: str | None = setting(
        None, "SQuAD json to predict (and score, when it has answers)."
    )
    train_feature_file: str | None = setting(
        None,
        "TFRecord cache of the training windows (built if missing or built with other "
        "settings). Default: <output_dir>/train.tf_record.",
        path=OUTPUT_FILE,
    )
    predict_feature_file: str | None = setting(
        None,
        "TFRecord cache of the predict windows. Default: <output_dir>/predict.tf_record.",
        path=OUTPUT_FILE,
    )
    predict_feature_left_file: str | None = setting(
        None,
        "What post-processing needs of the predict windows (JSON; the original pickled them). "
        "Default: <output_dir>/predict_left_file.json.",
        path=OUTPUT_FILE,
    )
    max_seq_length: int = setting(384, "Tokens per window, padded.", kw_only=True)
    doc_stride: int = setting(128, "Pieces between the starts of a context's windows.")
    max_query_length: int = setting(64, "Question pieces kept.")
    num_train_epochs: float = setting(3.0, "Epochs over the training questions.")
    warmup_proportion: float = setting(0.1, "Share of the steps with linear warmup.")
    train_step: int | None = setting(
        None,
        "Training steps (default: questions / train_batch_size * num_train_epochs).",
        kw_only=True,
    )
    warmup_step: int | None = setting(
        None, "Warmup steps (default: warmup_proportion of them).", kw_only=True
    )
    n_best_size: int = setting(20, "Answers kept per question in nbest_predictions.json.")
    max_answer_length: int = setting(30, "Longest answer, in pieces.")
    # The original v2's own flags (`V2_ONLY`).
    start_n_top: int = setting(5, "Beam size for the start positions.")
    end_n_top: int = setting(5, "Beam size for the end positions per start.")
    dropout_prob: float = setting(0.1, "Dropout in the answer-class head.")
    export_dir: str | None = setting(
        None,
        "Save squad_v1.keras or squad_v2.keras (with its config, SentencePiece model and "
        "squad_info.json) here, from the best checkpoint (the original v2 had no export).",
        path=OUTPUT_DIR,
        kw_only=True,
    )
    skip_bad_answers: bool = setting(
        False,
        "Skip (and count) training questions whose answer is not at its answer_start instead "
        "of stopping with the file and question id.",
    )

    def __post_init__(self):
        super().__post_init__()
        if self.version not in VERSIONS:
            raise ValueError(f"version must be one of {VERSIONS}, got {self.version!r}")
        check_positive(self, ("doc_stride", "max_query_length", "n_best_size", "max_answer_length"))
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
