"""Model presets (`--preset`), recipes' sequence lengths fitted to the model, and which classifiers
get single-text client metadata.

The preset table is read from the model page (docs/model.md), so what it documents is what
`from_preset` builds.
"""

import json
import os
import re
import subprocess
import sys
import types

import pytest

from albert_tf import AlbertConfig, AlbertModel
from albert_tf.config import (
    PRESET_SHAPE_FIELDS,
    PRESETS,
    check_preset_or_file,
    check_preset_vocab,
    config_from_preset_or_file,
    preset_shape,
)
from albert_tf.export.tflite.app_metadata import (
    AppMetadataSettings,
    check_before_export,
    check_text_inputs,
)
from albert_tf.tasks.glue.finetune import FinetuneConfig
from pipelines._finetune_cli import fitted_max_seq_length
from tests.cli_help import helpxml
from tests.conftest import FIXTURES, REPO_ROOT
from tests.model_configs import CLASSIFIER_TINY, SAMPLE_VOCAB_TINY

SPM = FIXTURES / "albert_spm" / "30k-clean.model"  # 30,000 pieces
GLUE = FIXTURES / "glue"
# The preset table's columns: the shape's `AlbertConfig` fields, then the parameter count.
COLUMNS = (*PRESET_SHAPE_FIELDS, "parameters")


def run(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO_ROOT / "pipelines" / script), *args],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        timeout=300,
    )


def documented_presets() -> dict[str, dict[str, int]]:
    """{preset: {column: number}} of the preset table of docs/model.md."""
    rows = re.findall(r"^\| `(\w+)` \|(.*)$", (REPO_ROOT / "docs" / "model.md").read_text(), re.M)
    return {
        name: dict(zip(COLUMNS, (int(c.strip().replace(",", "")) for c in cells.split("|")[:8])))
        for name, cells in rows
        if name in PRESETS
    }


def test_the_model_page_documents_every_preset_as_it_is_built():
    documented = documented_presets()
    assert (
        list(documented)
        == list(PRESETS)
        == ["tiny", "small", "smoke", "base", "large", "xlarge", "xxlarge"]
    )
    for name, row in documented.items():
        config = AlbertConfig.from_preset(name)
        assert {c: getattr(config, c) for c in COLUMNS[:-1]} == {c: row[c] for c in COLUMNS[:-1]}
        assert (config.sharing, config.hidden_dropout_prob, config.type_vocab_size) == ("all", 0, 2)
        assert AlbertConfig(**preset_shape(name)) == config
    for name in ("tiny", "small", "smoke"):  # the larger ones' counts are pinned by test_model
        count = AlbertModel(AlbertConfig.from_preset(name)).count_params()
        assert count == documented[name]["parameters"], name


def test_the_bundled_model_is_small_widened_and_tiny_the_tests_and_demos_shape():
    bundled = AlbertConfig.from_json_file(
        REPO_ROOT / "pretrained/albert-small-en/albert_config.json"
    )
    from benchmarks.lift.settings import WIDE_SMALL_MODEL

    assert bundled == AlbertConfig.from_preset("small", **WIDE_SMALL_MODEL)
    assert bundled == AlbertConfig.from_preset(
        "small", hidden_size=256, num_attention_heads=4, intermediate_size=1024
    )
    from pipelines.demo_pipeline import TINY_MODEL

    assert AlbertConfig(vocab_size=1000, **TINY_MODEL) == AlbertConfig.from_preset(
        "tiny", vocab_size=1000
    )
    assert SAMPLE_VOCAB_TINY == preset_shape("tiny", num_attention_heads=4)
    assert CLASSIFIER_TINY == preset_shape("tiny", max_position_embeddings=64)


def test_a_preset_or_a_file_never_both(tmp_path):
    config_file = tmp_path / "albert_config.json"
    AlbertConfig.from_preset("tiny", hidden_size=64).to_json_file(config_file)
    assert config_from_preset_or_file(None, str(config_file)).hidden_size == 64
    assert config_from_preset_or_file("tiny", None) == AlbertConfig.from_preset("tiny")
    assert config_from_preset_or_file(None, None) is None
    both = f"--preset=tiny and --albert_config_file={config_file} both give the model config"
    with pytest.raises(ValueError, match=re.escape(both)):
        config_from_preset_or_file("tiny", str(config_file))
    with pytest.raises(ValueError, match=re.escape(both)):  # the fine-tuning settings too
        FinetuneConfig(
            "sst-2", "d", "o", str(SPM), preset="tiny", albert_config_file=str(config_file)
        )
    with pytest.raises(ValueError, match="unknown preset 'huge'"):
        check_preset_or_file("huge", None)


def test_a_presets_vocab_must_be_the_sentencepiece_models():
    check_preset_vocab("tiny", AlbertConfig.from_preset("tiny"), str(SPM))  # 30,000 both
    check_preset_vocab(None, AlbertConfig.from_preset("small"), str(SPM))  # not a preset's
    with pytest.raises(
        ValueError, match="--preset=small has vocab_size 8000 but --spm_model_file="
    ):
        check_preset_vocab("small", AlbertConfig.from_preset("small"), str(SPM))


@pytest.mark.parametrize(
    "script",
    [
        "pretrain.py",
        "run_classifier.py",
        "finetune.py",
        "run_squad_v1.py",
        "run_squad_v2.py",
        "run_race.py",
        "export.py",
        "convert_checkpoint.py",
    ],
)
def test_preset_is_a_flag_wherever_albert_config_file_is(script):
    found = helpxml(script)
    assert found["albert_config_file"][:2] == ("", True)
    assert found["preset"][:2] == ("", True)  # no default, listed by --help
    if script == "export.py":
        assert found["single_text_client"][0] == "false"
        assert found["author"][0] == found["license"][0] == ""


def _glue(tmp_path, **settings) -> FinetuneConfig:
    return FinetuneConfig("mrpc", str(GLUE / "MRPC"), str(tmp_path), str(SPM), **settings)


def test_a_recipes_length_is_fitted_and_a_given_one_refused(tmp_path):
    tiny = _glue(tmp_path, preset="tiny", max_seq_length=512)  # 128 positions
    assert fitted_max_seq_length(tiny, "mrpc", given=False) == 128
    assert (
        fitted_max_seq_length(_glue(tmp_path, preset="tiny", max_seq_length=128), "mrpc", False)
        is None
    )
    assert fitted_max_seq_length(tiny, None, given=False) is None  # the default: the job's check
    line = (
        "--max_seq_length=512 exceeds the model's max_position_embeddings=128 (given with "
        "--recipe=mrpc, whose own length is fitted): give --max_seq_length=128 or less"
    )
    with pytest.raises(ValueError, match=re.escape(line)):
        fitted_max_seq_length(tiny, "mrpc", given=True)
    with pytest.raises(ValueError, match=r"^--max_seq_length=512 exceeds .*=128: give"):
        fitted_max_seq_length(tiny, None, given=True)


@pytest.mark.e2e
def test_the_mrpc_recipe_fine_tunes_a_tiny_preset_at_its_128_positions(tmp_path):
    out = tmp_path / "mrpc"
    common = (
        "--recipe=mrpc",
        f"--data_dir={GLUE / 'MRPC'}",
        f"--spm_model_file={SPM}",
        f"--output_dir={out}",
    )
    result = run(
        "run_classifier.py",
        *common,
        "--preset=tiny",
        "--do_train",
        "--train_step=1",
        "--warmup_step=0",
        "--save_checkpoints_steps=1",
        "--train_batch_size=2",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (
        "--recipe=mrpc sets --max_seq_length=512, more than the model's "
        "max_position_embeddings=128: using --max_seq_length=128" in result.stderr
    )
    assert "max_seq_length=128" in next(
        line for line in result.stderr.splitlines() if "Fine-tuning config:" in line
    )
    written = json.loads((out / "albert_config.json").read_text())
    assert AlbertConfig.from_dict(written) == AlbertConfig.from_preset("tiny")
    assert (out / "model.ckpt-1.index").is_file()

    both = run("run_classifier.py", *common, "--preset=tiny", f"--albert_config_file={SPM}")
    lines = [line for line in both.stderr.splitlines() if line.strip()]
    assert both.returncode == 1 and len(lines) == 1, both.stderr[-3000:]
    assert "--preset=tiny and --albert_config_file=" in lines[0]


CLASSIFIER = types.SimpleNamespace(kind="classifier")


@pytest.mark.parametrize(
    "task, single_text_client, refusal",
    [
        ("sst-2", False, None),  # a single-text task: no flag needed
        ("SST-2", True, None),
        (None, True, None),  # unknown, and the user says it takes one text
        (None, False, "no classifier_info.json names its task"),
        ("my-task", False, "task 'my-task' is no GLUE task"),
        ("mrpc", True, "mrpc, a sentence-pair task"),
    ],
)
def test_single_text_metadata_needs_a_known_or_stated_single_text_classifier(
    task, single_text_client, refusal
):
    settings = AppMetadataSettings(task_name=task, single_text_client=single_text_client)
    config = types.SimpleNamespace(
        app_metadata=settings, spm_model_file=str(SPM), max_seq_length=32
    )
    if refusal is None:
        check_text_inputs("classifier", settings)
        check_before_export(CLASSIFIER, config, writes_tflite=True)
        return
    with pytest.raises(ValueError, match=re.escape(refusal)) as raised:
        check_before_export(CLASSIFIER, config, writes_tflite=True)
    assert "\n" not in str(raised.value)
    if not single_text_client:
        assert "--single_text_client" in str(raised.value)


def test_unknown_classifiers_pass_where_no_metadata_would_be_written():
    unknown = AppMetadataSettings()

    def config(settings=unknown, spm=str(SPM)):
        return types.SimpleNamespace(app_metadata=settings, spm_model_file=spm, max_seq_length=32)

    check_before_export(CLASSIFIER, config(), writes_tflite=False)  # SavedModels only
    check_before_export(CLASSIFIER, config(spm=None), writes_tflite=True)  # no tokenizer to pack
    check_before_export(CLASSIFIER, config(AppMetadataSettings(enabled=False)), writes_tflite=True)
    # A known sentence-pair task gets no metadata (and a note), without refusal.
    check_before_export(CLASSIFIER, config(AppMetadataSettings(task_name="rte")), True)
    with pytest.raises(ValueError, match="describes a classifier, not head=squad_v1"):
        check_before_export(
            types.SimpleNamespace(kind="squad_v1"),
            config(AppMetadataSettings(single_text_client=True)),
            writes_tflite=True,
        )


@pytest.mark.e2e
def test_the_export_cli_refuses_an_unknown_classifier_unless_told_it_takes_one_text(tmp_path):
    import keras

    from albert_tf.export.tflite import metadata as tm
    from albert_tf.modeling.heads.classifier import AlbertClassifier

    keras.utils.set_random_seed(4)
    config = AlbertConfig(**dict(CLASSIFIER_TINY, num_hidden_layers=1), initializer_range=0.2)
    AlbertClassifier(config, num_labels=2).save(tmp_path / "classifier.keras")  # no bundle
    export = (
        "export.py",
        "--head=classifier",
        f"--keras_model={tmp_path / 'classifier.keras'}",
        f"--spm_model_file={SPM}",
        f"--output_dir={tmp_path / 'out'}",
        "--max_seq_length=16",
        "--formats=tflite_fp32",
        "--num_verification_examples=4",
        "--latency_runs=1",
    )
    refused = run(*export)
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert refused.returncode == 1 and len(lines) == 1, refused.stderr[-3000:]
    assert "no classifier_info.json names its task" in lines[0]
    assert "--single_text_client" in lines[0] and not (tmp_path / "out").exists()
    done = run(*export, "--single_text_client", "--author=A. Author", "--license=Apache-2.0")
    assert done.returncode == 0, done.stderr[-3000:]
    model = (tmp_path / "out" / "albert_tflite" / "1" / "albert_fp32.tflite").read_bytes()
    assert b"A. Author" in tm.metadata_of(model) and b"Apache-2.0" in tm.metadata_of(model)
    assert tm.associated_files(model)["labels.txt"] == b"0\n1\n"
