"""CLIs from the settings dataclasses (pipelines/_config_flags.py): every flag's default is its
field's default, explicit flags win over recipes, outputs are checked before any work, and every
CLI keeps the original script's flags, names and defaults, listed by its --help."""

import dataclasses
import pathlib

import pytest
from absl import flags

from albert_tf.config import resolve_max_predictions_per_seq
from albert_tf.settings import OUTPUT_DIR, OUTPUT_FILE, flag_name, setting, settings_of
from albert_tf.tasks.glue.finetune import RECIPES, FinetuneConfig
from albert_tf.tasks.race.config import RaceConfig
from albert_tf.tasks.squad.config import SquadConfig
from albert_tf.training.pretraining_options import PretrainingOptions
from data_prep.units import DataPrepConfig
from pipelines import _config_flags
from tests.cli_help import helpxml

ROOT = pathlib.Path(__file__).resolve().parents[1]
SETTINGS = (FinetuneConfig, SquadConfig, RaceConfig, PretrainingOptions, DataPrepConfig)


def defined(config_class, *argv: str) -> flags.FlagValues:
    values = flags.FlagValues()
    _config_flags.define_flags(config_class, flag_values=values)
    values(["prog", *argv])
    return values


@pytest.mark.parametrize("config_class", SETTINGS, ids=lambda c: c.__name__)
def test_every_flag_default_is_its_fields_default(config_class):
    values = defined(config_class)
    expected = _config_flags.flag_defaults(config_class)
    assert {name: values[name].default for name in expected} == expected
    for name, default in expected.items():  # and the dataclass's own, field by field
        assert values[name].help, name
    own = {
        flag_name(f): None if f.default is dataclasses.MISSING else f.default
        for f in settings_of(config_class)
    }
    assert own.items() <= expected.items()


def test_the_config_comes_from_the_flags_nested_settings_and_renamed_flags_included():
    values = defined(DataPrepConfig, "--input_file=a", "--output_file=b", "--spm_model_file=c")
    values(["prog", "--max_seq_length=64", "--sentence_language=de", "--masking=dynamic"])
    config = _config_flags.config_from_flags(DataPrepConfig, values, num_workers=3)
    assert (config.pair.max_seq_length, config.corpus.language) == (64, "de")
    assert (config.masking_mode, config.num_workers, config.masking.ngram) == ("dynamic", 3, 3)
    glue = defined(FinetuneConfig, "--task_name=rte", "--data_dir=d", "--output_dir=o")
    glue(["prog", "--spm_model_file=s", "--random_seed=7"])
    assert _config_flags.config_from_flags(FinetuneConfig, glue) == FinetuneConfig(
        "rte", "d", "o", "s", seed=7
    )
    # A setting whose flag a CLI does not define keeps its default (SQuAD v1: no v2 beam).
    v1 = flags.FlagValues()
    _config_flags.define_flags(SquadConfig, skip=("start_n_top",), flag_values=v1)
    v1(["prog", "--output_dir=o", "--spm_model_file=s"])
    assert "start_n_top" not in v1
    assert _config_flags.config_from_flags(SquadConfig, v1, version="v1").start_n_top == 5


def test_recipes_fill_only_the_flags_not_given():
    values = defined(FinetuneConfig, "--learning_rate=0.5", "--max_seq_length=64")
    applied = _config_flags.apply_recipe(RECIPES["mrpc"], values)
    assert "learning_rate" not in applied and "max_seq_length" not in applied
    assert (values.learning_rate, values.max_seq_length) == (0.5, 64)
    assert (values.train_step, values.warmup_step) == (800, 200)  # from the recipe


def test_a_setting_needs_help_and_a_known_path_kind():
    with pytest.raises(ValueError, match="help"):
        setting(1)
    with pytest.raises(ValueError, match="path must be one of"):
        setting(None, "x", path="input")


def test_output_paths_are_checked_before_any_work(tmp_path):
    (tmp_path / "a_directory").mkdir()
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(IsADirectoryError, match=r"--output_file=.*a_directory is a directory"):
        _config_flags.check_output_path("output_file", OUTPUT_FILE, str(tmp_path / "a_directory"))
    with pytest.raises(NotADirectoryError, match=r"--output_dir=.*a_file is a file"):
        _config_flags.check_output_path("output_dir", OUTPUT_DIR, str(tmp_path / "a_file"))
    # A directory still to be created is checked where it would be created; nothing is left.
    _config_flags.check_output_path("output_dir", OUTPUT_DIR, str(tmp_path / "new" / "deeper"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_directory", "a_file"]
    config = SquadConfig("v1", str(tmp_path), "s", predict_feature_file=str(tmp_path / "a_file"))
    assert ("predict_feature_file", OUTPUT_FILE, str(tmp_path / "a_file")) in (
        _config_flags.output_paths(config)
    )
    _config_flags.check_output_paths(config)
    config = SquadConfig("v1", str(tmp_path), "s", train_feature_file=str(tmp_path / "a_directory"))
    with pytest.raises(IsADirectoryError, match="--train_feature_file="):
        _config_flags.check_output_paths(config)


TPU_FLAGS = {
    **dict.fromkeys(("tpu_name", "tpu_zone", "gcp_project", "master"), ""),
    "use_tpu": "false",
    "num_tpu_cores": "8",
    "iterations_per_loop": "1000",
}
# Every flag of the original run_classifier.py, with its default.
RUN_CLASSIFIER = {
    **dict.fromkeys(
        ("data_dir", "albert_config_file", "task_name", "vocab_file", "spm_model_file"), ""
    ),
    **dict.fromkeys(
        ("output_dir", "cached_dir", "init_checkpoint", "albert_hub_module_handle"), ""
    ),
    "do_lower_case": "true",
    "max_seq_length": "512",
    **dict.fromkeys(("do_train", "do_eval", "do_predict"), "false"),
    "train_batch_size": "32",
    "eval_batch_size": "8",
    "predict_batch_size": "8",
    "learning_rate": "5e-05",
    "train_step": "1000",
    "warmup_step": "0",
    "save_checkpoints_steps": "1000",
    "keep_checkpoint_max": "5",
    "optimizer": "adamw",
    **TPU_FLAGS,
}
# Every flag of the original run_pretraining.py, with its default (max_predictions_per_seq's 20
# is min(20, --max_seq_length) here, 20 at the default 512).
RUN_PRETRAINING = {
    **dict.fromkeys(("albert_config_file", "input_file", "output_dir", "init_checkpoint"), ""),
    "max_seq_length": "512",
    "max_predictions_per_seq": "20",
    "do_train": "true",
    "do_eval": "false",
    "train_batch_size": "4096",
    "eval_batch_size": "64",
    "optimizer": "lamb",
    "learning_rate": "0.00176",
    "poly_power": "1.0",
    "num_train_steps": "125000",
    "num_warmup_steps": "3125",
    "start_warmup_step": "0",
    "save_checkpoints_steps": "5000",
    "keep_checkpoint_max": "5",
    "max_eval_steps": "100",
    "init_from_group0": "false",
    "masked_lm_budget": "0.0",
    **TPU_FLAGS,
}


@pytest.mark.parametrize("script", ["run_classifier.py", "finetune.py"])
def test_glue_cli_has_every_original_flag_and_the_distribution_flags(script):
    found = helpxml(script)
    assert {name: found.get(name, (None,))[0] for name in RUN_CLASSIFIER} == RUN_CLASSIFIER
    assert all(found[name][1] for name in RUN_CLASSIFIER)  # --help lists them
    assert found["strategy"][:2] == ("auto", True)
    assert found["mixed_precision"][:2] == ("none", True)
    assert found["recipe"][:2] == ("", True) and found["random_seed"][:2] == ("12345", True)


def test_pretraining_cli_has_every_original_flag():
    found = helpxml("pretrain.py")
    defaults = {name: found.get(name, (None,))[0] for name in RUN_PRETRAINING}
    resolved = resolve_max_predictions_per_seq(None, int(defaults["max_seq_length"]))
    assert defaults["max_predictions_per_seq"] == ""
    defaults["max_predictions_per_seq"] = str(resolved)
    assert defaults == RUN_PRETRAINING
    assert all(found[name][1] for name in RUN_PRETRAINING)


@pytest.mark.parametrize(
    "script", ["run_squad_v1.py", "run_squad_v2.py", "run_race.py", "create_pretraining_data.py"]
)
def test_help_lists_every_flag_but_absls_and_tensorflows_own(script):
    found = helpxml(script)
    # TensorFlow defines absl flags of its own (TPU tracing settings) when it loads, which the
    # fine-tuning CLIs do on start-up: --helpfull lists them, --help does not.
    theirs = ("absl.", "tensorflow.")
    ours = {name for name, (_, _, module) in found.items() if not module.startswith(theirs)}
    assert ours and all(found[name][1] for name in ours), sorted(
        name for name in ours if not found[name][1]
    )


@pytest.mark.parametrize(
    "script",
    [
        "run_classifier.py",
        "finetune.py",
        "run_squad_v1.py",
        "run_squad_v2.py",
        "run_race.py",
        "pretrain.py",
        "export.py",
    ],
)
def test_hf_model_is_a_flag_wherever_initial_weights_are(script):
    found = helpxml(script)
    assert found["hf_model"][:2] == ("", True)  # no default: a transformers folder when given
    if script != "export.py":
        assert found["init_checkpoint"][:2] == ("", True)


def test_each_choice_list_is_what_the_library_builds():
    """The TF-free choice lists the flags offer name exactly what the library builds from them."""
    from albert_tf import settings
    from albert_tf.training import harness, optimization
    from data_prep.beam_stages import UNWRITABLE
    from pipelines._failures import RESOURCE_ERRORS

    assert set(settings.MIXED_PRECISIONS) == set(harness.MIXED_PRECISION_POLICIES)
    assert set(settings.OPTIMIZERS) == set(optimization._OPTIMIZERS)
    # What Beam's workers count as unwritable is what a CLI ends on in one line.
    assert set(UNWRITABLE) == set(RESOURCE_ERRORS)
