"""transformers ALBERT checkpoints in and out (`albert_tf.checkpoints.hf`), against the goldens that
transformers 5.24.0 wrote (tests/fixtures/hf_transformers/, see its README).

Every fixture goes in through `pipelines/convert_checkpoint.py --hf_model` and must reproduce every
array of its `expected.npz`; written back out it must hold transformers' key set with equal tensors
and the same config.json. The original TF1 goldens go TF1 -> ours -> transformers -> ours unchanged.
"""

import json
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest
from safetensors import safe_open

import albert_tf.modeling  # noqa: F401  (registers every model class for load_model)
from albert_tf.checkpoints import load_task_checkpoint, load_tf1_checkpoint, tf1_weights
from albert_tf.checkpoints.hf import load_hf_model, save_hf_model
from albert_tf.config import AlbertConfig
from albert_tf.modeling.heads.multiple_choice import AlbertMultipleChoice
from albert_tf.modeling.heads.squad_v1 import AlbertSquadV1
from albert_tf.modeling.model import encoder_routing
from tests.conftest import FIXTURES, ORIGINAL_CHECKPOINTS, REPO_ROOT
from tests.tolerances import GOLDEN, assert_close_to_scale

HF = FIXTURES / "hf_transformers"
MODELS = ("pretraining", "groups", "classifier", "qa", "mc")
# Index arrays of the 30000-piece model's three-part MLM logits (README, *Outputs*).
INDEX_ARRAYS = {"prediction_logits_vocab_ids", "prediction_logits_full_positions"}


def folder(name: str) -> pathlib.Path:
    return HF / f"albert_tiny_{name}"


def convert(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO_ROOT / "pipelines/convert_checkpoint.py"), *args],
        capture_output=True,
        text=True,
        cwd="/",
    )


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> dict[str, pathlib.Path]:
    """Each fixture folder converted to `.keras` by the CLI."""
    out = tmp_path_factory.mktemp("hf_in")
    files = {}
    for name in MODELS:
        files[name] = out / f"{name}.keras"
        result = convert(f"--hf_model={folder(name)}", f"--output={files[name]}")
        assert result.returncode == 0, result.stderr
    return files


def inputs_of(name: str) -> dict[str, np.ndarray]:
    data = np.load(folder(name) / "inputs.npz")
    names = {
        "input_ids": "input_ids",
        "attention_mask": "input_mask",
        "token_type_ids": "segment_ids",
    }
    return {ours: data[theirs] for theirs, ours in names.items()}


def replayed_hidden_states(backbone, x) -> list[np.ndarray]:
    """transformers 5.x `hidden_states`: the E->H projection's output, then one entry per inner
    layer run (our model exposes only the last; its layers are replayed in routing order)."""
    config = backbone.config
    h = backbone.embeddings(x["input_ids"], x["segment_ids"])
    if config.embedding_size != config.hidden_size:
        h = backbone.get_layer("embedding_hidden_mapping_in")(h)
    states = [h]
    for attention, ffn in encoder_routing(config):
        h = backbone.get_layer(ffn)(backbone.get_layer(attention)(h, x["input_mask"]))
        states.append(h)
    return [np.asarray(s) for s in states]


def our_outputs(name: str, model) -> dict[str, np.ndarray]:
    """The arrays of `expected.npz`, computed by our model under transformers' names."""
    x = inputs_of(name)
    if name == "mc":  # transformers runs the backbone on the [examples x choices] rows
        rows = {k: v.reshape(-1, v.shape[-1]) for k, v in x.items()}
        backbone = model.backbone(rows)
        return {
            "last_hidden_state": np.asarray(backbone["sequence_output"]).reshape(2, 4, 24, -1),
            "pooler_output": np.asarray(backbone["pooled_output"]).reshape(2, 4, -1),
            "logits": np.asarray(model(x)["logits"]),
        }
    backbone = model.backbone if hasattr(model, "backbone") else model
    outputs = {k: np.asarray(v) for k, v in backbone(x).items()}
    ours = {"last_hidden_state": outputs["sequence_output"]}
    if name != "qa":  # transformers' QA model has no pooler
        ours["pooler_output"] = outputs["pooled_output"]
    if name in ("pretraining", "groups"):
        batch, seq = x["input_ids"].shape
        positions = np.tile(np.arange(seq, dtype=np.int32), (batch, 1))
        result = model({**x, "masked_lm_positions": positions})
        logits, ours["sop_logits"] = (
            np.asarray(result["mlm_logits"]),
            np.asarray(result["sop_logits"]),
        )
        for k, state in enumerate(replayed_hidden_states(backbone, x)):
            ours[f"hidden_states_{k}"] = state
        if name == "groups":
            ours["prediction_logits"] = logits
        else:
            expected = np.load(folder(name) / "expected.npz")
            ids, at = (
                expected["prediction_logits_vocab_ids"],
                expected["prediction_logits_full_positions"],
            )
            ours["prediction_logits_at_vocab_ids"] = logits[..., ids]
            ours["prediction_logits_full"] = logits[np.arange(batch), at]
            top = logits.max(-1, keepdims=True)
            ours["prediction_logsumexp"] = (
                top + np.log(np.exp(logits - top).sum(-1, keepdims=True))
            )[..., 0]
    elif name == "classifier":
        ours["logits"] = np.asarray(model(x)["logits"])
    elif name == "qa":
        result = model(x)
        ours["start_logits"], ours["end_logits"] = (
            np.asarray(result[k]) for k in ("start_logits", "end_logits")
        )
    return ours


@pytest.mark.numerics
@pytest.mark.parametrize("name", MODELS)
def test_every_fixture_converts_in_and_reproduces_every_output(name, converted):
    model = keras.saving.load_model(converted[name])
    expected = np.load(folder(name) / "expected.npz")
    ours = our_outputs(name, model)
    assert set(ours) == set(expected.files) - INDEX_ARRAYS  # every stored array is compared
    for key, value in ours.items():
        assert_close_to_scale(value, expected[key], GOLDEN, err_msg=f"{name}: {key}")


def stored(path: pathlib.Path) -> tuple[dict, dict[str, np.ndarray]]:
    with safe_open(path, framework="np") as f:
        return f.metadata(), {k: f.get_tensor(k) for k in f.keys()}


@pytest.mark.parametrize("name", MODELS)
def test_converted_back_out_it_is_what_transformers_wrote(name, converted, tmp_path):
    model = keras.saving.load_model(converted[name])
    save_hf_model(model, tmp_path / name)
    (metadata, tensors), (original_metadata, original) = (
        stored(tmp_path / name / "model.safetensors"),
        stored(folder(name) / "model.safetensors"),
    )
    assert metadata == original_metadata == {"format": "pt"}
    assert tensors.keys() == original.keys()
    for key, value in original.items():
        assert tensors[key].dtype == value.dtype, key
        np.testing.assert_array_equal(tensors[key], value, err_msg=key)
    written = json.loads((tmp_path / name / "config.json").read_text())
    assert written == json.loads((folder(name) / "config.json").read_text())
    # Byte for byte, too: the same header layout and JSON formatting as transformers' own files.
    for file in ("config.json", "model.safetensors"):
        assert (tmp_path / name / file).read_bytes() == (folder(name) / file).read_bytes(), file


def tf1_round_trip(model, tmp_path):
    save_hf_model(model, tmp_path / "hf")
    return load_hf_model(tmp_path / "hf")


@pytest.mark.numerics
@pytest.mark.parametrize("name", ["albert_tiny_shared", "albert_tiny_grouped"])
def test_original_tf1_goldens_go_through_transformers_unchanged(name, tmp_path):
    source = ORIGINAL_CHECKPOINTS / name
    model = load_tf1_checkpoint(source, source / "albert_config.json")
    back = tf1_round_trip(model, tmp_path)
    assert type(back).__name__ == "AlbertPretrainer"
    before, after = tf1_weights(model), tf1_weights(back)
    assert before.keys() == after.keys()
    for key in before:
        np.testing.assert_array_equal(after[key], before[key], err_msg=key)
    golden = np.load(source / "expected.npz")
    names = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions")
    outputs = back({k: golden[k] for k in names})
    real = golden["input_mask"].astype(bool)
    assert_close_to_scale(
        np.asarray(outputs["sequence_output"])[real], golden["sequence_output"][real], GOLDEN
    )
    assert_close_to_scale(outputs["pooled_output"], golden["pooled_output"], GOLDEN)
    mlm = np.asarray(keras.ops.log_softmax(outputs["mlm_logits"])).reshape(-1, 300)
    assert_close_to_scale(mlm, golden["mlm_log_probs"], GOLDEN)
    sop = keras.ops.log_softmax(outputs["sop_logits"])
    assert_close_to_scale(sop, golden["sop_log_probs"], GOLDEN)


def feature_inputs(path: pathlib.Path) -> dict[str, np.ndarray]:
    rows = json.loads(path.read_text())["features"]
    return {
        k: np.array([r[k] for r in rows], np.int32)
        for k in ("input_ids", "input_mask", "segment_ids")
    }


@pytest.mark.numerics
@pytest.mark.parametrize(
    "cls,checkpoint,features,outputs",
    [
        (
            AlbertSquadV1,
            FIXTURES / "original_squad/squad_v1_tiny",
            FIXTURES / "original_squad/features_eval_seq128_stride32_q24.json",
            ("start_logits", "end_logits"),
        ),
        (
            AlbertMultipleChoice,
            FIXTURES / "original_race/race_tiny",
            FIXTURES / "original_race/features_dev_seq128_qa32.json",
            ("logits",),
        ),
    ],
)
def test_original_task_goldens_go_through_transformers_unchanged(
    cls, checkpoint, features, outputs, tmp_path
):
    model = cls(AlbertConfig.from_json_file(checkpoint / "albert_config.json"))
    load_task_checkpoint(model, checkpoint)
    back = tf1_round_trip(model, tmp_path)
    assert type(back) is cls
    before, after = tf1_weights(model), tf1_weights(back)
    for key in before:
        if not key.startswith("bert/pooler/") or cls is not AlbertSquadV1:  # QA: no pooler there
            np.testing.assert_array_equal(after[key], before[key], err_msg=key)
    golden, result = np.load(checkpoint / "expected.npz"), back(feature_inputs(features))
    for key in outputs:
        assert_close_to_scale(result[key], golden[key], GOLDEN, err_msg=key)
