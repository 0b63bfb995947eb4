"""transformers folders that are bad, unusual or partial (`albert_tf.checkpoints.hf`): one-line
refusals naming the file and the key, and the variants that load (half-precision and sharded
files, tied decoder keys, masked LMs, E = H, regression heads, partial initialisation)."""

import dataclasses
import json
import logging
import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from albert_tf.checkpoints import tf1_weights
from albert_tf.checkpoints.hf import (
    initialize_from_hf,
    is_hf_folder,
    load_hf_config,
    load_hf_model,
    resolve_spm_model_file,
    save_hf_model,
)
from albert_tf.checkpoints.hf_format import HfFormatError
from albert_tf.config import AlbertConfig
from albert_tf.modeling.heads.classifier import AlbertClassifier
from albert_tf.modeling.heads.squad_v2 import AlbertSquadV2
from albert_tf.modeling.model import AlbertPretrainer
from tests.conftest import FIXTURES
from tests.contracts import model_inputs
from tests.model_configs import MICRO
from tests.tolerances import GOLDEN, SAME_MODEL, assert_close_to_scale

HF = FIXTURES / "hf_transformers"
QUERY = "albert.encoder.albert_layer_groups.0.albert_layers.0.attention.query.weight"


def variant(tmp_path, name="classifier", config=None, tensors=None, drop=()):
    """A copy of fixture `name` with config.json values replaced (None deletes), tensors
    replaced or added, and keys dropped."""
    out = tmp_path / name
    shutil.copytree(HF / f"albert_tiny_{name}", out)
    values = json.loads((out / "config.json").read_text())
    for key, value in (config or {}).items():
        values.pop(key) if value is None else values.__setitem__(key, value)
    (out / "config.json").write_text(json.dumps(values))
    stored = load_file(out / "model.safetensors")
    stored.update(tensors or {})
    save_file({k: v for k, v in stored.items() if k not in drop}, out / "model.safetensors")
    return out


def refusal(path) -> str:
    with pytest.raises(HfFormatError) as raised:
        load_hf_model(path)
    message = str(raised.value)
    assert "\n" not in message
    return message


def test_bad_folders_are_refused_in_one_line_naming_the_file_and_the_key(tmp_path):
    (tmp_path / "empty").mkdir()
    assert refusal(tmp_path / "empty").startswith(
        f"{tmp_path / 'empty' / 'config.json'}: not found"
    )
    weights = "model.safetensors"
    cases = [
        (dict(config={"model_type": "bert"}), "config.json: model_type: 'bert'"),
        (
            dict(config={"architectures": ["AlbertForTokenClassification"]}),
            "config.json: architectures",
        ),
        (dict(config={"hidden_act": "swish"}), "config.json: hidden_act: 'swish'"),
        (dict(config={"layer_norm_eps": 1e-5}), "config.json: layer_norm_eps"),
        (dict(config={"problem_type": "multi_label_classification"}), "config.json: problem_type"),
        (
            dict(config={"num_attention_heads": 5}),
            "config.json: hidden_size (32) must be a multiple",
        ),
        (dict(drop=["albert.pooler.weight"]), f"{weights}: albert.pooler.weight: missing"),
        (
            dict(tensors={QUERY: np.zeros((32, 16), np.float32)}),
            f"{weights}: {QUERY}: shape [32, 16]",
        ),
        (dict(tensors={QUERY: np.zeros((32, 32))}), f"{weights}: {QUERY}: dtype F64"),
        (dict(tensors={QUERY: np.zeros((32, 32), np.int32)}), f"{weights}: {QUERY}: dtype I32"),
    ]
    for i, (change, message) in enumerate(cases):
        assert message in refusal(variant(tmp_path / str(i), **change)), message


def test_a_pytorch_pickle_is_refused_with_what_to_do(tmp_path):
    path = variant(tmp_path)
    (path / "model.safetensors").rename(path / "pytorch_model.bin")
    assert f"{path / 'pytorch_model.bin'}: a PyTorch pickle" in refusal(path)
    assert "safetensors" in refusal(path)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_files_load_widened_to_float32(dtype, tmp_path):
    import ml_dtypes

    narrow = getattr(np, dtype, None) or getattr(ml_dtypes, dtype)
    original = load_file(HF / "albert_tiny_classifier" / "model.safetensors")
    path = variant(tmp_path, tensors={k: v.astype(narrow) for k, v in original.items()})
    model = load_hf_model(path)
    written = tmp_path / "out"
    save_hf_model(model, written)
    for key, value in load_file(written / "model.safetensors").items():
        assert value.dtype == np.float32
        np.testing.assert_array_equal(value, original[key].astype(narrow).astype(np.float32))


def test_sharded_checkpoints_load_and_a_missing_shard_is_named(tmp_path):
    tensors = load_file(HF / "albert_tiny_groups" / "model.safetensors")
    path = variant(tmp_path, "groups")
    (path / "model.safetensors").unlink()
    keys = sorted(tensors)
    shards = {
        "model-00001-of-00002.safetensors": keys[::2],
        "model-00002-of-00002.safetensors": keys[1::2],
    }
    for shard, names in shards.items():
        save_file({k: tensors[k] for k in names}, path / shard, metadata={"format": "pt"})
    index = {"metadata": {}, "weight_map": {k: s for s, names in shards.items() for k in names}}
    (path / "model.safetensors.index.json").write_text(json.dumps(index))
    sharded, single = load_hf_model(path), load_hf_model(HF / "albert_tiny_groups")
    for key, value in tf1_weights(single).items():
        np.testing.assert_array_equal(tf1_weights(sharded)[key], value, err_msg=key)
    (path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": list(keys)}))
    assert "weight_map is a list, not an object" in refusal(path)
    (path / "model.safetensors.index.json").write_text(json.dumps(index))
    (path / "model-00002-of-00002.safetensors").unlink()
    assert "model.safetensors.index.json: " in refusal(path)
    assert "its shard model-00002-of-00002.safetensors is not in the folder" in refusal(path)


def test_tied_decoder_keys_load_when_tied_and_are_refused_when_not(tmp_path):
    tensors = load_file(HF / "albert_tiny_groups" / "model.safetensors")
    tied = {
        "predictions.decoder.weight": tensors["albert.embeddings.word_embeddings.weight"],
        "predictions.decoder.bias": tensors["predictions.bias"],
    }
    load_hf_model(variant(tmp_path / "tied", "groups", tensors=tied))
    untied = {**tied, "predictions.decoder.bias": tied["predictions.decoder.bias"] + 1}
    message = refusal(variant(tmp_path / "untied", "groups", tensors=untied))
    assert "model.safetensors: predictions.decoder.bias: differs from predictions.bias" in message


@pytest.mark.numerics
def test_a_masked_lm_loads_without_pooler_and_sop_and_writes_back_as_one(tmp_path, caplog):
    keys = ("albert.pooler.", "sop_classifier.")
    tensors = load_file(HF / "albert_tiny_groups" / "model.safetensors")
    path = variant(
        tmp_path,
        "groups",
        config={"architectures": ["AlbertForMaskedLM"]},
        drop=[k for k in tensors if k.startswith(keys)],
    )
    with caplog.at_level(logging.WARNING):
        model = load_hf_model(path)
    assert isinstance(model, AlbertPretrainer)
    assert "cls/seq_relationship/output_weights" in caplog.text  # says the SOP head is fresh
    inputs = np.load(HF / "albert_tiny_groups" / "inputs.npz")
    x = {"input_ids": inputs["input_ids"], "input_mask": inputs["attention_mask"]}
    x |= {
        "segment_ids": inputs["token_type_ids"],
        "masked_lm_positions": np.tile(np.arange(24), (3, 1)),
    }
    expected = np.load(HF / "albert_tiny_groups" / "expected.npz")["prediction_logits"]
    assert_close_to_scale(model(x)["mlm_logits"], expected, GOLDEN)
    save_hf_model(model, tmp_path / "out")
    written = load_file(tmp_path / "out" / "model.safetensors")
    assert set(written) == {k for k in tensors if not k.startswith(keys)}
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["architectures"] == ["AlbertForMaskedLM"]


@pytest.mark.numerics
def test_equal_widths_write_an_identity_projection_and_refuse_any_other(tmp_path):
    config = AlbertConfig(**dict(MICRO, embedding_size=16))
    model = AlbertPretrainer(config)
    save_hf_model(model, tmp_path / "hf")
    stored = load_file(tmp_path / "hf" / "model.safetensors")
    key = "albert.encoder.embedding_hidden_mapping_in"
    np.testing.assert_array_equal(stored[f"{key}.weight"], np.eye(16, dtype=np.float32))
    np.testing.assert_array_equal(stored[f"{key}.bias"], np.zeros(16, np.float32))
    inputs = model_inputs(config, masked_positions=2)
    back = load_hf_model(tmp_path / "hf")
    for name, value in model(inputs).items():
        assert_close_to_scale(back(inputs)[name], value, SAME_MODEL, err_msg=name)
    stored[f"{key}.weight"][0, 1] = 0.5
    save_file(stored, tmp_path / "hf" / "model.safetensors")
    assert f"{key}.weight: not the identity" in refusal(tmp_path / "hf")


def test_plain_gelu_is_the_erf_form_and_round_trips(tmp_path):
    model = load_hf_model(variant(tmp_path, config={"hidden_act": "gelu"}))
    assert model.config.hidden_act == "gelu_erf"
    save_hf_model(model, tmp_path / "out")
    assert json.loads((tmp_path / "out" / "config.json").read_text())["hidden_act"] == "gelu"


def test_label_names_and_regression_come_in_and_go_back_out(tmp_path):
    names = {"0": "entailment", "1": "neutral", "2": "contradiction"}
    labelled = variant(tmp_path / "a", config={"id2label": names, "label2id": None})
    model = load_hf_model(labelled)
    save_hf_model(model, tmp_path / "a_out")
    written = json.loads((tmp_path / "a_out" / "config.json").read_text())
    assert written["id2label"] == names and written["label2id"]["neutral"] == 1
    regression = variant(
        tmp_path / "b",
        config={"id2label": {"0": "LABEL_0"}, "label2id": None, "problem_type": "regression"},
        tensors={
            "classifier.weight": np.ones((1, 32), np.float32),
            "classifier.bias": np.zeros(1, np.float32),
        },
    )
    model = load_hf_model(regression)
    assert isinstance(model, AlbertClassifier) and model.regression and model.num_labels == 1
    save_hf_model(model, tmp_path / "b_out")
    assert (
        json.loads((tmp_path / "b_out" / "config.json").read_text())["problem_type"] == "regression"
    )


def test_initialize_from_hf_loads_the_backbone_and_a_fitting_head(tmp_path, caplog):
    source = HF / "albert_tiny_classifier"
    config = load_hf_config(source)
    assert config == load_hf_model(source).config
    reference = tf1_weights(load_hf_model(source))
    same = AlbertClassifier(config, num_labels=3)
    assert initialize_from_hf(same, source) is True
    fresh = AlbertClassifier(config, num_labels=2)
    head = fresh.get_layer("classifier").output_weights.numpy()
    assert initialize_from_hf(fresh, source) is False  # 3 labels there, 2 here: head kept
    np.testing.assert_array_equal(fresh.get_layer("classifier").output_weights.numpy(), head)
    for model in (same, fresh):
        for key, value in tf1_weights(model).items():
            if key.startswith("bert/") or model is same:
                np.testing.assert_array_equal(value, reference[key], err_msg=key)
    with pytest.raises(HfFormatError, match="config.json: hidden_act: 'gelu'"):
        initialize_from_hf(
            AlbertClassifier(dataclasses.replace(config, hidden_act="gelu_erf")), source
        )
    with caplog.at_level(logging.WARNING):
        initialize_from_hf(AlbertPretrainer(config), source)  # a classifier has no MLM head
    assert "cls/predictions/output_bias" in caplog.text


def test_models_without_a_transformers_form_are_refused_before_writing(tmp_path):
    with pytest.raises(ValueError, match="AlbertSquadV2 has no transformers counterpart"):
        save_hf_model(AlbertSquadV2(AlbertConfig(**MICRO)), tmp_path / "v2")
    with pytest.raises(ValueError, match="sharing='ffn' has no transformers form"):
        save_hf_model(AlbertPretrainer(AlbertConfig(**MICRO, sharing="ffn")), tmp_path / "ffn")
    assert list(tmp_path.iterdir()) == []


def test_an_existing_folder_keeps_its_other_files_and_gets_spiece(tmp_path):
    spm = FIXTURES / "albert_spm" / "30k-clean.model"
    out = tmp_path / "out"
    out.mkdir()
    (out / "README.md").write_text("model card")
    save_hf_model(load_hf_model(HF / "albert_tiny_qa"), out, spm_model_file=str(spm))
    assert sorted(p.name for p in out.iterdir()) == [
        "README.md",
        "config.json",
        "model.safetensors",
        "spiece.model",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    assert (out / "spiece.model").read_bytes() == spm.read_bytes()
    assert resolve_spm_model_file(None, str(out)) == str(out / "spiece.model")
    assert resolve_spm_model_file("mine.model", str(out)) == "mine.model"
    assert resolve_spm_model_file(None, str(HF / "albert_tiny_qa")) is None
    assert is_hf_folder(out) and not is_hf_folder(FIXTURES / "albert_spm")
