"""The fine-tuning loop runs any `Task`: a made-up benchmark, no GLUE code involved."""

import dataclasses
import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from albert_tf.checkpoints.task_heads import load_task_checkpoint
from albert_tf.checkpoints.tf1 import read_tf1_checkpoint
from albert_tf.config import AlbertConfig
from albert_tf.finetuning import loop
from albert_tf.modeling.heads.classifier import AlbertClassifier
from albert_tf.tasks.glue.finetune import FinetuneConfig
from albert_tf.tasks.race.config import RaceConfig
from albert_tf.tasks.squad.config import SquadConfig, with_schedule
from albert_tf.training import harness
from albert_tf.training.callbacks import NonFiniteLossError
from tests.loss_scaling import overflowing
from tests.model_configs import MICRO

SEQ = 8


@dataclasses.dataclass
class Settings:
    """What the loop reads of a job's settings (`FinetuneSettings`), with no task of GLUE's kind."""

    output_dir: str
    export_dir: str | None = None
    init_checkpoint: str | None = None
    albert_config_file: str | None = None
    max_seq_length: int = SEQ
    train_step: int = 6
    warmup_step: int = 0
    learning_rate: float = 1e-2
    train_batch_size: int = 4
    optimizer: str = "adamw"
    save_checkpoints_steps: int = 3
    keep_all_checkpoints: bool = True
    jit_compile: bool = False
    seed: int = 7
    log_every_steps: int = 2
    mixed_precision: str = "none"
    hf_model: str | None = None
    preset: str | None = None
    spm_model_file: str | None = None


def contains_token_7(count: int, seed: int):
    """Random id rows, labelled 1 when token 7 occurs: learnable, and nothing like GLUE."""
    ids = np.random.default_rng(seed).integers(5, 12, size=(count, SEQ), dtype=np.int32)
    features = {
        "input_ids": ids,
        "input_mask": np.ones_like(ids),
        "segment_ids": np.zeros_like(ids),
    }
    return features, (ids == 7).any(axis=1).astype(np.int32)


class Scorer:
    name, selection_metric = "has-7", "accuracy"

    def __init__(self):
        self.features, self.labels = contains_token_7(32, seed=1)

    def score(self, model):
        logits = model.predict(self.features, batch_size=8, verbose=0)["logits"]
        return {"accuracy": float((logits.argmax(-1) == self.labels).mean())}


class HasSevenTask:
    """The protocol's members, written down by a newcomer's benchmark."""

    name = "has-7"

    def __init__(self, settings):
        self.settings = settings
        self.calls = []

    def build_model(self, albert_config, dtype=None):
        return AlbertClassifier(albert_config, num_labels=2, seed=self.settings.seed, dtype=dtype)

    def initialize(self, model, checkpoint):
        self.calls.append(("initialize", checkpoint))

    def load(self, model, checkpoint):
        self.calls.append(("load", checkpoint))
        load_task_checkpoint(model, checkpoint)

    def train_dataset(self):
        features, labels = contains_token_7(64, seed=0)
        data = tf.data.Dataset.from_tensor_slices((features, labels))
        return data.repeat().batch(self.settings.train_batch_size, drop_remainder=True), 64

    def dev_scorer(self):
        return Scorer()

    def check_predict_inputs(self):
        self.calls.append(("check_predict_inputs",))

    def predict_inputs(self):
        return contains_token_7(3, seed=2)[0]

    def predict(self, model, checkpoint, inputs):
        path = os.path.join(self.settings.output_dir, "answers.txt")
        labels = model.predict(inputs, verbose=0)["logits"].argmax(-1)
        with open(path, "w") as f:
            f.write(" ".join(map(str, labels)))
        return {"answers": path}

    def export(self, model, checkpoint, albert_config):
        self.calls.append(("export", checkpoint))
        return checkpoint

    def checkpoint_to_score(self):
        return None  # without training: the checkpoints in output_dir


def test_loop_trains_scores_predicts_and_exports_any_task(tmp_path):
    config_file = tmp_path / "albert_config.json"
    AlbertConfig(**MICRO).to_json_file(config_file)
    settings = Settings(
        str(tmp_path / "out"), export_dir=str(tmp_path / "x"), albert_config_file=str(config_file)
    )
    task = HasSevenTask(settings)
    summary = loop.run(task, do_train=True, do_eval=True, do_predict=True)

    out = tmp_path / "out"
    assert [os.path.basename(p) for p in summary["checkpoints"]] == ["model.ckpt-3", "model.ckpt-6"]
    results = json.loads((out / "eval_results.json").read_text())
    assert results["task"] == "has-7" and results["selection_metric"] == "accuracy"
    assert results["baseline"] is None  # its scorer states none: none is made up
    assert [h["step"] for h in results["history"]] == [3, 6]
    assert (out / "model.ckpt-best.index").exists()
    # Prediction and export read the best checkpoint, after the prediction inputs were checked.
    best = str(out / "model.ckpt-best")
    assert task.calls == [
        ("check_predict_inputs",),
        ("load", best),
        ("load", best),
        ("export", best),
    ]
    assert len((out / "answers.txt").read_text().split()) == 3
    # The training harness's TensorBoard scalars, every `log_every_steps`.
    steps, tags = set(), set()
    for event_file in (out / "logs" / "train").iterdir():
        for event in tf.compat.v1.train.summary_iterator(str(event_file)):
            if event.summary.value:
                steps.add(event.step)
            tags.update(v.tag for v in event.summary.value)
    assert steps == {2, 4, 6}
    assert tags >= {"loss", "accuracy", "learning_rate", "gradient_norm", "examples_per_second"}

    # Eval-only re-scores the saved checkpoints with the same figures.
    again = loop.run(HasSevenTask(settings), do_train=False, do_eval=True, do_predict=False)
    assert again["eval"]["history"] == results["history"]


@dataclasses.dataclass
class Float16Settings(Settings):
    mixed_precision: str = "fp16"


class RecordingTask(HasSevenTask):
    def __init__(self, settings):
        super().__init__(settings)
        self.models = []

    def build_model(self, albert_config, dtype=None):
        self.models.append(super().build_model(albert_config, dtype))
        return self.models[-1]


def test_fp16_fine_tuning_scales_the_loss_keeps_float32_weights_and_resumes(tmp_path):
    config_file = tmp_path / "albert_config.json"
    AlbertConfig(**MICRO).to_json_file(config_file)
    settings = Float16Settings(str(tmp_path / "out"), albert_config_file=str(config_file))
    task = RecordingTask(settings)
    summary = loop.run(task, do_train=True, do_eval=True, do_predict=False)

    trained = task.models[0]
    assert isinstance(trained.optimizer, keras.optimizers.LossScaleOptimizer)
    assert trained.backbone.get_layer("embeddings").compute_dtype == "float16"
    assert all(w.dtype == "float32" for w in trained.trainable_weights)
    scale = float(trained.optimizer.dynamic_scale.numpy())
    assert np.isfinite(scale) and scale > 0
    assert keras.config.dtype_policy().name == "float32"  # the job's policy does not leak
    history = summary["eval"]["history"]
    assert [h["step"] for h in history] == [3, 6]
    out = tmp_path / "out"
    weights = read_tf1_checkpoint(out / "model.ckpt-6")
    assert all(v.dtype == np.float32 and np.isfinite(v).all() for v in weights.values())
    start = read_tf1_checkpoint(out / "model.ckpt-3")
    assert any(not np.array_equal(weights[n], start[n]) for n in weights)

    # Stopped after step 3: the resumed run takes up the optimizer's loss scale with its moments.
    for stale in out.glob("model.ckpt-6.*"):
        stale.unlink()
    resumed = RecordingTask(settings)
    loop.run(resumed, do_train=True, do_eval=False, do_predict=False)
    state = tf.train.load_checkpoint(str(out / "train_state" / "optimizer-3"))
    saved_scale = state.get_tensor("optimizer/dynamic_scale/.ATTRIBUTES/VARIABLE_VALUE")
    assert np.isfinite(saved_scale) and saved_scale > 0
    assert int(resumed.models[0].optimizer.iterations.numpy()) == 6
    assert (out / "model.ckpt-6.index").exists()


def test_fp16_steps_whose_gradients_overflow_still_count_as_batches(tmp_path, monkeypatch):
    # A loss scale of 2**40 overflows float16 gradients: every step is skipped (the optimizer's
    # `iterations` stay at 0) and halves the scale, yet each took a batch.
    monkeypatch.setattr(harness, "create_optimizer", overflowing(harness.create_optimizer))
    config_file = tmp_path / "albert_config.json"
    AlbertConfig(**MICRO).to_json_file(config_file)
    settings = Float16Settings(str(tmp_path / "out"), albert_config_file=str(config_file))
    task = RecordingTask(settings)
    summary = loop.run(task, do_train=True, do_eval=False, do_predict=False)
    out = tmp_path / "out"
    assert [os.path.basename(p) for p in summary["checkpoints"]] == ["model.ckpt-3", "model.ckpt-6"]
    assert int(task.models[0].optimizer.iterations.numpy()) == 0
    assert float(task.models[0].optimizer.dynamic_scale.numpy()) == 2.0**34

    # Stopped after step 3: the resumed run takes up the halved scale (2**37), not 2**40.
    for stale in out.glob("model.ckpt-6.*"):
        stale.unlink()
    resumed = RecordingTask(settings)
    again = loop.run(resumed, do_train=True, do_eval=False, do_predict=False)
    assert [os.path.basename(p) for p in again["checkpoints"]] == ["model.ckpt-6"]
    assert float(resumed.models[0].optimizer.dynamic_scale.numpy()) == 2.0**34
    # Finished: a rerun trains nothing.
    assert loop.run(RecordingTask(settings), True, False, False)["checkpoints"] == []


class DivergingTask(HasSevenTask):
    """A regression whose scores turn NaN after the first 12 examples: the loss of step 4 is."""

    def build_model(self, albert_config, dtype=None):
        return AlbertClassifier(albert_config, num_labels=1, regression=True, dtype=dtype)

    def train_dataset(self):
        features, labels = contains_token_7(64, seed=0)
        scores = np.where(np.arange(64) < 12, labels, np.nan).astype(np.float32)
        data = tf.data.Dataset.from_tensor_slices((features, scores))
        return data.repeat().batch(self.settings.train_batch_size, drop_remainder=True), 64


def test_a_non_finite_loss_stops_fine_tuning_naming_the_last_good_checkpoint(tmp_path):
    config_file = tmp_path / "albert_config.json"
    AlbertConfig(**MICRO).to_json_file(config_file)
    out = tmp_path / "out"
    settings = Settings(str(out), albert_config_file=str(config_file))
    with pytest.raises(NonFiniteLossError, match=f"at step 4.*is {out}/model.ckpt-3"):
        loop.run(DivergingTask(settings), do_train=True, do_eval=False, do_predict=False)
    assert [p.name for p in sorted(out.glob("model.ckpt-*.index"))] == ["model.ckpt-3.index"]


@pytest.mark.parametrize("task", ["glue", "squad", "race"])
def test_every_task_config_refuses_non_positive_sizes_and_warmup_past_training(task, tmp_path):
    def make(**overrides):
        if task == "glue":
            return FinetuneConfig("mrpc", str(tmp_path), str(tmp_path), "spm", **overrides)
        if task == "squad":
            return with_schedule(SquadConfig("v1", str(tmp_path), "spm", **overrides), 100)
        return RaceConfig(str(tmp_path), str(tmp_path), "spm", **overrides)

    make(train_step=10, warmup_step=10)  # warmup may take every step
    with pytest.raises(ValueError, match="train_batch_size must be > 0, got 0"):
        make(train_batch_size=0)
    with pytest.raises(ValueError, match=r"warmup_step must be in \[0, train_step=10\], got 11"):
        make(train_step=10, warmup_step=11)
