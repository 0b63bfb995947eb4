"""The CLI: the original's flags and defaults, a whole run without TensorFlow, clean fatal errors."""

import json
import pathlib
import subprocess
import sys


REPO = pathlib.Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
SPM = FIXTURES / "albert_spm" / "30k-clean.model"
CORPUS = FIXTURES / "original_data" / "corpus_small.txt"

# The original script's flags, each with its default.
ORIGINAL_FLAGS = {
    "input_file": None,
    "output_file": None,
    "vocab_file": None,
    "spm_model_file": None,
    "input_file_mode": "r",
    "do_lower_case": True,
    "do_whole_word_mask": True,
    "do_permutation": False,
    "favor_shorter_ngram": True,
    "random_next_sentence": False,
    "max_seq_length": 512,
    "ngram": 3,
    "max_predictions_per_seq": 20,
    "random_seed": 12345,
    "dupe_factor": 40,
    "masked_lm_prob": 0.15,
    "short_seq_prob": 0.1,
}
ADDED_FLAGS = {
    "num_workers": None,
    "num_output_shards": 1,
    "input_format": "sentences",
    "single_sentence_random_doc": True,
}


def _python(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=REPO, capture_output=True, text=True, timeout=300
    )


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipelines.create_pretraining_data", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_flags_keep_the_originals_names_and_defaults():
    # max_predictions_per_seq defaults to min(20, --max_seq_length): the original's 20 at its 512.
    names = json.dumps(sorted(ORIGINAL_FLAGS.keys() | ADDED_FLAGS.keys()))
    result = _python(
        "import json, sys\n"
        "import pipelines.create_pretraining_data\n"
        "from absl import flags\n"
        "from albert_tf.config import resolve_max_predictions_per_seq\n"
        "defaults = {n: flags.FLAGS[n].default for n in json.loads(sys.argv[1])}\n"
        "defaults['max_predictions_per_seq'] = resolve_max_predictions_per_seq(\n"
        "    defaults['max_predictions_per_seq'], defaults['max_seq_length'])\n"
        "print(json.dumps(defaults))",
        names,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {**ORIGINAL_FLAGS, **ADDED_FLAGS}


def test_data_prep_library_does_not_import_tensorflow():
    result = _python(
        "import sys\n"
        "import data_prep.pipeline, data_prep.corpus, albert_tf.records, data_prep.writer\n"
        "print('tensorflow' in sys.modules, 'keras' in sys.modules)"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "False"]


def test_whole_run_without_tensorflow(tmp_path):
    out = tmp_path / "out"
    code = (
        "import atexit, runpy, sys\n"
        "atexit.register(lambda: print('TF_IMPORTED', 'tensorflow' in sys.modules))\n"
        "sys.argv = ['create_pretraining_data'] + sys.argv[1:]\n"
        "runpy.run_module('pipelines.create_pretraining_data', run_name='__main__')"
    )
    result = _python(
        code,
        f"--input_file={CORPUS}",
        f"--output_file={out}/train.tfrecord",
        f"--spm_model_file={SPM}",
        "--max_seq_length=128",
        "--dupe_factor=1",
        "--num_workers=2",
    )
    assert result.returncode == 0, result.stderr
    assert json.loads((out / "train.summary.json").read_text())["instances"] > 800
    assert "TF_IMPORTED False" in result.stdout


def test_missing_input_exits_cleanly_naming_it(tmp_path):
    result = _cli(
        f"--input_file={tmp_path}/nope/*.txt",
        f"--output_file={tmp_path}/o.tfrecord",
        f"--spm_model_file={SPM}",
    )
    assert result.returncode == 1
    assert f"input file not found: '{tmp_path}/nope/*.txt' matches no file" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "o.tfrecord").exists()


def test_unwritable_output_exits_cleanly_naming_it(tmp_path):
    (tmp_path / "file").write_text("x")
    result = _cli(
        f"--input_file={CORPUS}",
        f"--output_file={tmp_path}/file/o.tfrecord",
        f"--spm_model_file={SPM}",
        "--dupe_factor=1",
    )
    assert result.returncode == 1
    assert "cannot write output" in result.stderr and f"{tmp_path}/file" in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_sentencepiece_model_is_a_usage_error(tmp_path):
    result = _cli(
        f"--input_file={CORPUS}", f"--output_file={tmp_path}/o.tfrecord", "--vocab_file=vocab.txt"
    )
    assert result.returncode == 1 and "--spm_model_file is required" in result.stderr
    result = _cli(
        f"--input_file={CORPUS}",
        f"--output_file={tmp_path}/o.tfrecord",
        f"--spm_model_file={tmp_path}/none.model",
    )
    assert (
        result.returncode == 1
        and "none.model" in result.stderr
        and "Traceback" not in result.stderr
    )
