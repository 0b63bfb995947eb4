"""SQuAD v1.1 / v2.0 fine-tuning as the original `run_squad_v1.py` / `run_squad_v2.py`, on the
task-agnostic loop.

`SquadFinetuneTask` is what the loop (`albert_tf.finetuning.loop`) needs from SQuAD: the v1 or
v2 span model, the training windows cached as TFRecords (`train_feature_file`), the predict
file's windows (`predict_feature_file` + `predict_feature_left_file`), a dev scorer (official
v1.1 EM/F1; v2.0 through the original's null-threshold search) and the original's
`predictions.json`, `nbest_predictions.json` (and v2 `null_odds.json`).

The job's settings and schedule (`SquadConfig`, `RECIPES`, `with_schedule`) are in
`albert_tf.tasks.squad.config`, importable from here too. Each checkpoint is scored on the predict
file when it has gold answers, selected by "f1". Deliberate differences, none changing the
maths: the questions are shuffled with `seed` (the original: a fixed 12345, our default); a
predict file without gold answers is predicted without scores (v2: no threshold, the null odds
written beside).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
import os
import random

import keras
import tensorflow as tf
from absl import logging

from albert_tf.config import AlbertConfig
from albert_tf.finetuning.task import TaskBase
from albert_tf.finetuning.bundle import write_serving_bundle
from albert_tf.finetuning import loop
from albert_tf.finetuning.new_output_dir import emptied_unless_checkpointed
from albert_tf.modeling.heads.squad_v1 import AlbertSquadV1
from albert_tf.modeling.heads.squad_v2 import AlbertSquadV2
from albert_tf.tasks.squad import inputs as squad_inputs
from albert_tf.tasks.squad.config import RECIPE, RECIPES, VERSIONS, SquadConfig, with_schedule
from albert_tf.tasks.squad.examples import SquadExample, SquadFormatError, read_squad
from albert_tf.tasks.squad.features import convert_examples_to_features, iter_features
from albert_tf.tasks.squad.postprocess import write_prediction_files
from albert_tf.tasks.squad.scoring import (
    SquadDevScorer,
    SquadPredictInputs,
    predict_squad,
    read_squad_data,
    scorable,
)
from albert_tf.output_dirs import lock_output_dir
from albert_tf.text.tokenization import AlbertTokenizer
from albert_tf.training.distribution import is_chief

__all__ = [
    "RECIPE",
    "RECIPES",
    "VERSIONS",
    "SquadConfig",
    "SquadFinetuneTask",
    "run",
    "with_schedule",
]


class SquadFinetuneTask(TaskBase):
    """One SQuAD job as the fine-tuning loop sees it (`albert_tf.finetuning.task.Task`).

    Args:
      settings: the job's `SquadConfig` (with `train_step` set to train: `with_schedule`).
      tokenizer: the SentencePiece tokenizer; built from `settings` when not given.
      write_text_model: `(export_dir, model, settings)` writing the bundle's text-in model
        (the export stage's `qa.keras_model.write_text_question_answerer`, which this layer cannot
        import); None: the bundle has the ids-in model only.

    Example:
      task = SquadFinetuneTask(SquadConfig("v2", "out/squad2", "30k-clean.model", ...))
      run(task, do_train=True, do_predict=True)  # the schedule, the caches, then the loop
    """

    def __init__(
        self,
        settings: SquadConfig,
        tokenizer: AlbertTokenizer | None = None,
        write_text_model: Callable | None = None,
    ):
        super().__init__(settings, tokenizer)
        self.name = settings.name
        self.write_text_model = write_text_model
        self._train_examples: list[SquadExample] | None = None
        self._predict_inputs: SquadPredictInputs | None = None

    def build_model(self, albert_config: AlbertConfig, dtype: str | None = None) -> keras.Model:
        """A fresh `AlbertSquadV1` or `AlbertSquadV2` in `dtype`, its pooler frozen: the span
        heads read the sequence output only, so the pooler gets no gradient (the original
        skipped it in the update too)."""
        c = self.settings
        if c.version == "v1":
            model = AlbertSquadV1(albert_config, seed=c.seed, dtype=dtype)
        else:
            model = AlbertSquadV2(
                albert_config, c.start_n_top, c.end_n_top, c.dropout_prob, seed=c.seed, dtype=dtype
            )
        model.backbone.get_layer("pooler").trainable = False
        return model

    def train_examples(self) -> list[SquadExample]:
        """The training questions (read once), as the original training reader keeps them."""
        if self._train_examples is None:
            if not self.settings.train_file:
                raise ValueError("If `do_train` is True, then `train_file` must be specified.")
            self._train_examples = read_squad(
                self.settings.train_file,
                is_training=True,
                skip_bad_answers=self.settings.skip_bad_answers,
            ).examples
            if not self._train_examples:
                raise SquadFormatError(f"{self.settings.train_file}: no training questions")
        return self._train_examples

    def _cache_settings(self, source: str, **extra) -> dict:
        c = self.settings
        return squad_inputs.cache_settings(
            source,
            c.spm_model_file,
            do_lower_case=c.do_lower_case,
            max_seq_length=c.max_seq_length,
            doc_stride=c.doc_stride,
            max_query_length=c.max_query_length,
            **extra,
        )

    def train_dataset(self) -> tuple[tf.data.Dataset, int]:
        """Training batches from `train_feature_file` (built first if missing or stale) and the
        number of training windows."""
        c = self.settings

        def windows():
            examples = list(self.train_examples())
            random.Random(c.seed).shuffle(examples)  # as the original, before the windows
            return iter_features(
                examples,
                self.tokenizer,
                c.max_seq_length,
                c.doc_stride,
                c.max_query_length,
                is_training=True,
            )

        settings = self._cache_settings(
            c.train_file, shuffle_seed=c.seed, skip_bad_answers=c.skip_bad_answers
        )
        count = squad_inputs.cached_train_records(c.train_feature_file, settings, windows)
        if count == 0:
            raise ValueError(f"{c.train_feature_file}: no training windows")
        dataset = squad_inputs.train_dataset(
            c.train_feature_file,
            c.max_seq_length,
            c.train_batch_size,
            c.seed,
            teacher_forcing=c.version == "v2",
        )
        return dataset, count

    def dev_scorer(self) -> SquadDevScorer:
        """The predict file as the dev set (it must have gold answers)."""
        inputs = self.predict_inputs()
        if not inputs.scorable:
            raise ValueError(f"{self.settings.predict_file}: no gold answers to score against")
        return SquadDevScorer(self.name, self.settings, inputs)

    def check_predict_inputs(self) -> None:
        """Raises when `predict_file` is not given or missing."""
        if not self.settings.predict_file:
            raise ValueError("If `do_predict` is True, then `predict_file` must be specified.")
        if not os.path.isfile(self.settings.predict_file):
            raise FileNotFoundError(f"predict_file not found: {self.settings.predict_file}")

    def predict_inputs(self) -> SquadPredictInputs:
        """The predict file's questions and windows (read once; cached on disk)."""
        if self._predict_inputs is None:
            self._predict_inputs = self._read_predict_inputs()
        return self._predict_inputs

    def _read_predict_inputs(self) -> SquadPredictInputs:
        c = self.settings
        self.check_predict_inputs()
        examples = read_squad(c.predict_file, is_training=False).examples
        features = squad_inputs.cached_predict_windows(
            c.predict_feature_file,
            c.predict_feature_left_file,
            self._cache_settings(c.predict_file),
            c.max_seq_length,
            lambda: convert_examples_to_features(
                examples,
                self.tokenizer,
                c.max_seq_length,
                c.doc_stride,
                c.max_query_length,
                is_training=False,
            ),
        )
        dataset = read_squad_data(c.predict_file)
        can_score = scorable(dataset, c.version)
        if not can_score:
            logging.warning(
                "%s: not every question has gold answers (SQuAD %s): predicting without scores",
                c.predict_file,
                c.version,
            )
        logging.info("%s: %d questions, %d windows", c.predict_file, len(examples), len(features))
        return SquadPredictInputs(dataset, examples, features, c.predict_feature_file, can_score)

    def predict(
        self, model: keras.Model, checkpoint: str, inputs: SquadPredictInputs
    ) -> dict[str, str]:
        """Writes predictions.json, nbest_predictions.json (and v2 null_odds.json) into
        `output_dir`; returns {file name: path}."""
        what = f"{self.name} {os.path.basename(self.settings.predict_file)}"
        predictions, scores = predict_squad(model, self.settings, inputs, what)
        paths = write_prediction_files(self.settings.output_dir, predictions)
        logging.info(
            "Wrote the predictions of %s to %s%s",
            checkpoint,
            self.settings.output_dir,
            f" ({', '.join(f'{k}={v:.4g}' for k, v in scores.items())})" if scores else "",
        )
        return paths

    def export(self, model: keras.Model, checkpoint: str, albert_config: AlbertConfig) -> str:
        """Saves `squad_<version>.keras` (+ config, SentencePiece model, `squad_info.json`) to
        `export_dir`, and with `write_text_model` the same model taking strings."""
        c = self.settings
        if self.write_text_model is not None:  # before the manifest, which marks a whole bundle
            self.write_text_model(c.export_dir, model, c)
        names = ("input_ids", "input_mask", "segment_ids") + (
            ("p_mask",) if c.version == "v2" else ()
        )
        info = {
            "version": c.version,
            "inputs": {name: "int32 [batch, seq_length]" for name in names},
            "outputs": sorted(model.output.keys()) if isinstance(model.output, dict) else [],
            "max_seq_length": c.max_seq_length,
            "doc_stride": c.doc_stride,
            "max_query_length": c.max_query_length,
            "n_best_size": c.n_best_size,
            "max_answer_length": c.max_answer_length,
            "do_lower_case": c.do_lower_case,
        }
        return write_serving_bundle(
            c.export_dir,
            model,
            f"{c.name}.keras",
            albert_config,
            c.spm_model_file,
            "squad_info.json",
            info,
            checkpoint,
        )


def run(
    task: SquadFinetuneTask,
    do_train: bool,
    do_predict: bool,
    strategy: tf.distribute.Strategy | None = None,
) -> dict:
    """The original scripts' main(): train (scoring every checkpoint on the predict file when it
    has answers), then predict with the best checkpoint; without `do_train`, an
    `init_checkpoint` (or `hf_model`) is itself scored and predicted (else the checkpoints of
    `output_dir`)."""
    config = task.settings
    if not (do_train or do_predict or config.export_dir):
        raise ValueError("At least one of `do_train` or `do_predict` or `export_dir` must be True.")
    # The predict file's windows are cached in output_dir before the loop claims it: held from
    # here on, so that a second job stops before any work.
    chief = strategy is None or is_chief(strategy)
    # The cache is this run's too: a run that ends before its first checkpoint in a directory new
    # to it removes it with the rest (the loop's own check comes after the cache is written).
    created = not os.path.lexists(config.output_dir)
    with (
        lock_output_dir(config.output_dir) if chief else contextlib.nullcontext(),
        emptied_unless_checkpointed(config.output_dir, writes=chief, created=created),
    ):
        if do_train:
            task.settings = with_schedule(config, len(task.train_examples()))
        do_eval = do_predict and task.predict_inputs().scorable
        return loop.run(task, do_train, do_eval, do_predict, strategy=strategy)
