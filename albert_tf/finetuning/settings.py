"""The settings every fine-tuning task shares (the original scripts' flags of the same names and
defaults, and `hf_model`): a task's settings dataclass adds its own to `FinetuneSettings`; the
CLIs define their flags from here. `resolve_albert_config` reads the model config they name."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable

import tensorflow as tf

from albert_tf.checkpoints.hf import is_hf_folder, load_hf_config
from albert_tf.checkpoints.hf_format import (
    resolve_do_lower_case,
    resolve_spm_model_file,
    warn_if_tokenizer_differs,
)
from albert_tf.checkpoints.keras_files import albert_config_of_keras_file
from albert_tf.checkpoints.tf1 import check_weights_file
from albert_tf.config import (
    PRESET_HELP,
    PRESETS,
    AlbertConfig,
    check_preset_or_file,
    check_preset_vocab,
)
from albert_tf.settings import MIXED_PRECISIONS, OPTIMIZERS, OUTPUT_DIR, setting

# The sizes every task's settings hold for the loop; each must be > 0 (checked here).
LOOP_SIZES = (
    "max_seq_length",
    "train_batch_size",
    "predict_batch_size",
    "save_checkpoints_steps",
    "log_every_steps",
)


def check_positive(settings: object, names: Iterable[str]) -> None:
    """Raises ValueError naming the first setting of `names` that is not > 0."""
    for name in names:
        if getattr(settings, name) <= 0:
            raise ValueError(f"{name} must be > 0, got {getattr(settings, name)}")


def check_warmup(warmup_step: int, train_step: int) -> None:
    """Raises ValueError unless 0 <= warmup_step <= train_step."""
    if not 0 <= warmup_step <= train_step:
        raise ValueError(f"warmup_step must be in [0, train_step={train_step}], got {warmup_step}")


def spm_model_file_setting():
    """The `spm_model_file` field every task's settings hold, positional after its required ones
    (as the original scripts' callers pass it): None takes the `spiece.model` of `hf_model`."""
    return setting(
        None,
        "SentencePiece model, e.g. 30k-clean.model. Optional with an --hf_model folder "
        "holding spiece.model.",
    )


@dataclasses.dataclass(kw_only=True)
class FinetuneSettings:
    """What `run_classifier.py`, `run_squad_v*.py` and `run_race.py` all have, keyword-only, and
    every setting the fine-tuning loop reads. A task's settings dataclass adds its own fields
    (its required ones positional, `output_dir` and `spm_model_file` among them: None takes the
    `spiece.model` of `hf_model`) and re-declares one of these, keyword-only
    (`setting(..., kw_only=True)`), only where its original script's default differs. Its
    `__post_init__` calls this one's first.

    Args:
      albert_config_file, init_checkpoint, ...: the original flags of the same names.
      preset: a named model shape (`AlbertConfig.from_preset`) in place of albert_config_file.
      hf_model: a transformers ALBERT folder to start from instead of `init_checkpoint`.

    Example:
      @dataclasses.dataclass
      class MyTaskConfig(FinetuneSettings):
          output_dir: str = setting(help="Where results go.", path=OUTPUT_DIR)
    """

    albert_config_file: str | None = setting(
        None,
        "albert_config.json of the model. Optional with --hf_model (its config.json), when "
        "--init_checkpoint is a .keras file or a TF1 checkpoint with albert_config.json beside "
        "it, or for scoring an --output_dir that training wrote.",
    )
    preset: str | None = setting(None, PRESET_HELP, choices=tuple(PRESETS))
    init_checkpoint: str | None = setting(
        None,
        "Initial weights: an original TF1 checkpoint (prefix or directory; pretraining or "
        "fine-tuned), ours (TF1 export), or one of our .keras files. The task's head is loaded "
        "too when it has the task's shape.",
    )
    hf_model: str | None = setting(
        None,
        "Initial weights from a Hugging Face transformers ALBERT folder (config.json + "
        "model.safetensors, e.g. a Hub model), instead of --init_checkpoint: the backbone, and "
        "the head when the folder's class has the task's (AlbertForSequenceClassification with "
        "the task's labels, AlbertForQuestionAnswering for SQuAD v1.1, AlbertForMultipleChoice "
        "for RACE). Its config.json is the model config unless --albert_config_file is given, "
        "its spiece.model the SentencePiece model unless --spm_model_file is given, and the "
        "do_lower_case of its tokenizer_config.json, if any, the casing.",
    )
    do_lower_case: bool = setting(
        True, "Lowercase the text (the released English models are uncased)."
    )
    train_batch_size: int = setting(32, "Batch size for training.")
    predict_batch_size: int = setting(8, "Batch size for prediction.")
    optimizer: str = setting("adamw", "The original optimizers.", choices=OPTIMIZERS)
    keep_all_checkpoints: bool = setting(
        False,
        "Keep every checkpoint; by default those neither the best nor the last are deleted, as "
        "the original did.",
    )
    max_seq_length: int = setting(
        512,
        "Maximum total tokens after tokenization; longer inputs are truncated as the original "
        "(longer side first).",
    )
    train_step: int = setting(1000, "Total number of training steps.")
    warmup_step: int = setting(0, "Linear learning-rate warmup steps.")
    learning_rate: float = setting(5e-5, "Initial learning rate (linear decay to 0 at train_step).")
    save_checkpoints_steps: int = setting(
        1000,
        "Save (and, with --do_train --do_eval, evaluate) a checkpoint every this many steps, "
        "and at the last step.",
    )
    export_dir: str | None = setting(
        None, "Save the fine-tuned model as a serving bundle here.", path=OUTPUT_DIR
    )
    jit_compile: bool = setting(False, "XLA-compile training.")
    mixed_precision: str = setting("none", "Compute precision.", choices=MIXED_PRECISIONS)
    seed: int = setting(12345, "Seed of initialisation, dropout and shuffling.", flag="random_seed")
    log_every_steps: int = setting(50, "Log loss and learning rate every this many steps.")

    def __post_init__(self):
        check_preset_or_file(self.preset, self.albert_config_file)
        if self.init_checkpoint and self.hf_model:
            raise ValueError(
                f"init_checkpoint={self.init_checkpoint} and hf_model={self.hf_model} both give "
                "the initial weights: give one of them"
            )
        if self.hf_model:
            warn_if_tokenizer_differs(self.hf_model)
            self.spm_model_file = resolve_spm_model_file(self.spm_model_file, self.hf_model)
            self.do_lower_case = resolve_do_lower_case(self.do_lower_case, self.hf_model)
        if not self.spm_model_file:
            held = ""
            if self.hf_model:
                found = os.path.isdir(self.hf_model)
                held = f" ({self.hf_model} {'holds none' if found else 'is not a folder'})"
            raise ValueError(
                "no SentencePiece model: give spm_model_file, or an hf_model folder holding "
                f"spiece.model{held}"
            )
        check_positive(self, LOOP_SIZES)


def resolve_albert_config(config: FinetuneSettings) -> AlbertConfig:
    """`model_config(config)`, refused (ValueError) when `max_seq_length` exceeds its
    `max_position_embeddings`."""
    albert_config = model_config(config)
    if config.max_seq_length > albert_config.max_position_embeddings:
        raise ValueError(
            f"max_seq_length={config.max_seq_length} exceeds the model's max_position_embeddings="
            f"{albert_config.max_position_embeddings}: the ALBERT model was only trained up to "
            f"{albert_config.max_position_embeddings}"
        )
    return albert_config


def model_config(config: FinetuneSettings) -> AlbertConfig:
    """The model config: `albert_config_file`, else the `preset` (`AlbertConfig.from_preset`,
    its vocab_size checked against `spm_model_file`), else the `config.json` of an `hf_model`
    folder, else the one inside a `.keras` init checkpoint, else `albert_config.json` beside a
    TF1 init checkpoint (release layout) or in `output_dir`. An `init_checkpoint` that does not
    exist or is damaged is refused first (`check_weights_file`)."""
    candidates = []
    preset, hf_model = config.preset, config.hf_model
    init = config.init_checkpoint
    # Checked first: a missing one would otherwise read as a missing albert_config.json beside it.
    if init and not (tf.io.gfile.exists(init) or tf.io.gfile.exists(f"{init}.index")):
        tf1 = "" if init.endswith(".keras") else f" (nor a TF1 checkpoint {init}.index)"
        raise FileNotFoundError(f"init_checkpoint={init}: no such file or directory{tf1}")
    if init and not is_hf_folder(init):
        check_weights_file(init)  # damage found before the output directory is touched
    if config.albert_config_file:
        albert_config = AlbertConfig.from_json_file(config.albert_config_file)
    elif preset:
        albert_config = AlbertConfig.from_preset(preset)
        check_preset_vocab(preset, albert_config, config.spm_model_file)
    elif hf_model:
        albert_config = load_hf_config(hf_model)
    elif config.init_checkpoint and is_hf_folder(config.init_checkpoint):
        raise ValueError(
            f"init_checkpoint={config.init_checkpoint} is a transformers folder: give it as "
            "hf_model (its config.json is then the model config)"
        )
    elif config.init_checkpoint and config.init_checkpoint.endswith(".keras"):
        albert_config = albert_config_of_keras_file(config.init_checkpoint)
    else:
        if config.init_checkpoint:
            base = config.init_checkpoint
            candidates.append(
                os.path.join(
                    base if os.path.isdir(base) else os.path.dirname(base), "albert_config.json"
                )
            )
        candidates.append(os.path.join(config.output_dir, "albert_config.json"))
        found = [c for c in candidates if os.path.isfile(c)]
        if not found:
            raise ValueError(
                f"no model config: pass albert_config_file or preset (looked for {candidates})"
            )
        albert_config = AlbertConfig.from_json_file(found[0])
    return albert_config
