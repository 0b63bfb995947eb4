"""AlbertConfig: the original json in and out, presets, validation, routing."""

import json
import pathlib

import pytest

from albert_tf import AlbertConfig

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
GROUPED_JSON = FIXTURES / "original_checkpoints/albert_tiny_grouped/albert_config.json"


def test_reads_original_json_and_keeps_the_keys_the_original_carries():
    config = AlbertConfig.from_json_file(GROUPED_JSON)
    assert (config.num_hidden_layers, config.num_hidden_groups, config.inner_group_num) == (4, 2, 2)
    assert (config.embedding_size, config.hidden_size, config.vocab_size) == (16, 32, 300)
    assert config.extra == {"down_scale_factor": 1}
    assert config.sharing == "all"


def test_json_round_trip_writes_the_original_keys(tmp_path):
    original = json.loads(GROUPED_JSON.read_text())
    AlbertConfig.from_json_file(GROUPED_JSON).to_json_file(tmp_path / "c.json")
    assert json.loads((tmp_path / "c.json").read_text()) == original


def test_sharing_is_written_only_when_not_original(tmp_path):
    config = AlbertConfig.from_preset("base", sharing="ffn")
    config.to_json_file(tmp_path / "c.json")
    assert AlbertConfig.from_json_file(tmp_path / "c.json") == config
    assert json.loads((tmp_path / "c.json").read_text())["sharing"] == "ffn"


@pytest.mark.parametrize(
    "name,hidden,layers,heads,inter",
    [
        ("base", 768, 12, 12, 3072),
        ("large", 1024, 24, 16, 4096),
        ("xlarge", 2048, 24, 16, 8192),
        ("xxlarge", 4096, 12, 64, 16384),
    ],
)
def test_presets_are_the_v2_release(name, hidden, layers, heads, inter):
    config = AlbertConfig.from_preset(name)
    assert (
        config.hidden_size,
        config.num_hidden_layers,
        config.num_attention_heads,
        config.intermediate_size,
    ) == (hidden, layers, heads, inter)
    assert config.hidden_dropout_prob == config.attention_probs_dropout_prob == 0.0
    assert (config.vocab_size, config.embedding_size, config.hidden_act) == (30000, 128, "gelu")


def test_class_defaults_are_the_original_xxlarge():
    assert AlbertConfig() == AlbertConfig.from_preset("xxlarge")


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(hidden_size=30, num_attention_heads=4), "multiple of num_attention_heads"),
        (dict(sharing="half"), "sharing must be one of"),
        (dict(hidden_act="swish"), "hidden_act"),
        (dict(num_hidden_groups=13, num_hidden_layers=12), "exceeds num_hidden_layers"),
        (dict(vocab_size=0), "vocab_size"),
        (dict(hidden_dropout_prob=1.0), "hidden_dropout_prob"),
    ],
)
def test_invalid_configs_name_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        AlbertConfig(**kwargs)


def test_bad_json_file_errors_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.json"):
        AlbertConfig.from_json_file(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="bad.json"):
        AlbertConfig.from_json_file(bad)
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"hidden_size": 30, "num_attention_heads": 4}))
    with pytest.raises(ValueError, match="wrong.json.*multiple"):
        AlbertConfig.from_json_file(wrong)


def test_group_routing_is_the_originals():
    # group = int(layer / L * G): 12 layers, 5 groups -> uneven groups, as the original routes.
    config = AlbertConfig(
        num_hidden_layers=12, num_hidden_groups=5, hidden_size=64, num_attention_heads=4
    )
    assert [config.group_of_layer(l) for l in range(12)] == [int(l / 12 * 5) for l in range(12)]
    assert [config.group_of_layer(l) for l in range(12)] == [0, 0, 0, 1, 1, 2, 2, 2, 3, 3, 4, 4]


def test_max_predictions_per_seq_defaults_to_min_20_max_seq_length_everywhere():
    from albert_tf.config import resolve_max_predictions_per_seq
    from albert_tf.export import ExportConfig
    from albert_tf.training.pretraining_options import PretrainingOptions
    from pipelines.demo_pipeline import DemoSettings

    assert resolve_max_predictions_per_seq(None, 16) == 16
    assert resolve_max_predictions_per_seq(None, 512) == 20
    assert resolve_max_predictions_per_seq(20, 16) == 20  # explicit: left to its user to check
    assert ExportConfig(output_dir="out", max_seq_length=16).max_predictions_per_seq == 16
    assert ExportConfig(output_dir="out").max_predictions_per_seq == 20  # max_seq_length 128
    assert (
        ExportConfig(
            output_dir="out", max_seq_length=16, max_predictions_per_seq=4
        ).max_predictions_per_seq
        == 4
    )
    assert PretrainingOptions("in", "out").max_predictions_per_seq == 20  # max_seq_length 512
    assert PretrainingOptions("in", "out", max_seq_length=8).max_predictions_per_seq == 8
    assert DemoSettings().max_predictions_per_seq == 20
    assert DemoSettings(max_seq_length=16).max_predictions_per_seq == 16


def test_explicit_max_predictions_over_max_seq_length_fails_naming_both():
    from albert_tf.export import ExportConfig

    config = ExportConfig(output_dir="out", max_seq_length=16, max_predictions_per_seq=20)
    with pytest.raises(
        ValueError,
        match=r"max_predictions_per_seq=20 must be in \[1, "
        r"max_seq_length=16\]",
    ):
        config.validate(AlbertConfig(max_position_embeddings=64))
