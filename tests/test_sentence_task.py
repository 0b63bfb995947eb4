"""The sentence task of a pretraining run (SOP, NSP from data prep's summary, or none: MLM alone)
and the held-out evaluation on several named record sets (NSP and SOP records of one text)."""

import json
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from albert_tf import AlbertConfig, AlbertPretrainer
from albert_tf.training.distribution import build_strategy
from albert_tf.training.eval_sets import EvalSet, all_patterns, combined_accuracy, parse_eval_sets
from albert_tf.training.pretraining import run_pretraining
from albert_tf.training.pretraining_options import PretrainingOptions, SettingsError
from albert_tf.training.sentence_task import records_sentence_task, resolve_sentence_task
from data_prep import corpus, instances, pipeline
from tests.model_configs import SAMPLE_VOCAB_TINY

ROOT = pathlib.Path(__file__).resolve().parents[1]
RECORDS = str(ROOT / "tests/fixtures/original_data/orig_small_seq128.tfrecord")
CORPUS = str(ROOT / "tests/fixtures/original_data/corpus_small.txt")
SPM = str(ROOT / "tests/fixtures/albert_spm/30k-clean.model")
# Weights only the sentence loss trains, by their variable paths.
SENTENCE_ONLY = ("pooler", "seq_relationship")


def write_summary(directory: pathlib.Path, name: str, outputs, random_next_sentence) -> None:
    """A data-prep summary as `data_prep.summary.job_summary` writes it (the keys read here)."""
    for output in outputs:
        (directory / output).write_bytes(b"")
    summary = {
        "outputs": [{"file": str(directory / o), "instances": 1} for o in outputs],
        "settings": {"random_next_sentence": random_next_sentence},
    }
    (directory / f"{name}.summary.json").write_text(json.dumps(summary))


def test_the_records_task_comes_from_the_data_prep_summary(tmp_path):
    write_summary(
        tmp_path, "sop", ["sop.tfrecord-00000-of-00002", "sop.tfrecord-00001-of-00002"], False
    )
    write_summary(tmp_path, "nsp", ["nsp.tfrecord"], True)
    (tmp_path / "other.tfrecord").write_bytes(b"")
    sop = sorted(str(p) for p in tmp_path.glob("sop.tfrecord-*"))
    assert records_sentence_task(sop) == ("sop", str(tmp_path / "sop.summary.json"))
    assert records_sentence_task([str(tmp_path / "nsp.tfrecord")])[0] == "nsp"
    assert records_sentence_task([str(tmp_path / "other.tfrecord")]) == (None, None)
    with pytest.raises(SettingsError, match="both sentence tasks"):
        records_sentence_task([*sop, str(tmp_path / "nsp.tfrecord")])
    # auto follows the records; an explicit task must agree with them; none is always allowed.
    nsp_pattern = str(tmp_path / "nsp.tfrecord")
    assert resolve_sentence_task("auto", nsp_pattern) == "nsp"
    assert resolve_sentence_task("nsp", nsp_pattern) == "nsp"
    assert resolve_sentence_task("none", nsp_pattern) == "none"
    with pytest.raises(SettingsError, match="--sentence_task=sop, but .*nsp.summary.json"):
        resolve_sentence_task("sop", nsp_pattern)
    # Without a summary: the original's SOP, or the task as stated.
    assert resolve_sentence_task("auto", str(tmp_path / "other.tfrecord")) == "sop"
    assert resolve_sentence_task("nsp", str(tmp_path / "other.tfrecord")) == "nsp"
    (tmp_path / "broken.summary.json").write_text("{")
    with pytest.raises(SettingsError, match="broken.summary.json"):
        records_sentence_task([str(tmp_path / "other.tfrecord")])


def test_eval_input_file_names_sets_or_stays_one_set():
    assert parse_eval_sets("a-*, b.tfrecord") == [EvalSet(None, "a-*,b.tfrecord")]
    assert parse_eval_sets("sop=a.tfrecord,nsp=b-*,c-*") == [
        EvalSet("sop", "a.tfrecord"),
        EvalSet("nsp", "b-*,c-*"),
    ]
    assert all_patterns("sop=a.tfrecord,nsp=b-*,c-*") == "a.tfrecord,b-*,c-*"
    assert parse_eval_sets("data/x=1/h.tfrecord") == [EvalSet(None, "data/x=1/h.tfrecord")]
    for bad, message in (
        ("a.tfrecord,nsp=b", "has no name"),
        ("sop=a,sop=b", "twice"),
        ("sop=,nsp=b", "no files"),
        (" , ", "empty"),
    ):
        with pytest.raises(SettingsError, match=message):
            parse_eval_sets(bad)


def test_accuracies_by_task_pool_the_sets_of_each_task():
    sets = {
        "sop": dict(sentence_task="sop", sentence_order_accuracy=0.8, examples=100,
                    masked_lm_accuracy=0.5, masked_tokens=1000.0),
        "sop_more": dict(sentence_task="sop", sentence_order_accuracy=0.5, examples=300,
                         masked_lm_accuracy=0.1, masked_tokens=3000.0),
        "nsp": dict(sentence_task="nsp", sentence_order_accuracy=0.9, examples=50,
                    masked_lm_accuracy=0.2, masked_tokens=1000.0),
    }  # fmt: skip
    accuracy = combined_accuracy(sets)
    assert accuracy["sop"] == pytest.approx((0.8 * 100 + 0.5 * 300) / 400)
    assert accuracy["nsp"] == pytest.approx(0.9)
    assert accuracy["mlm"] == pytest.approx((500 + 300 + 200) / 5000)
    assert combined_accuracy({"sop": sets["sop"]})["nsp"] is None


def options(tmp_path, **overrides) -> PretrainingOptions:
    values = dict(
        input_file=RECORDS,
        output_dir=str(tmp_path),
        max_seq_length=128,
        train_batch_size=16,
        eval_batch_size=16,
        learning_rate=0.01,
        num_train_steps=4,
        num_warmup_steps=1,
        save_checkpoints_steps=4,
        log_every_steps=2,
        max_eval_steps=2,
        seed=1,
    )
    return PretrainingOptions(**{**values, **overrides})


def initial_model(path: pathlib.Path) -> dict[str, np.ndarray]:
    """A seeded fresh pretrainer saved as `.keras` (the runs' init_checkpoint); its weights."""
    keras.utils.set_random_seed(3)
    model = AlbertPretrainer(AlbertConfig(**SAMPLE_VOCAB_TINY))
    model.save(path)
    return {w.path: w.numpy() for w in model.weights}


def trained_weights(path: str) -> dict[str, np.ndarray]:
    return {w.path: w.numpy() for w in keras.saving.load_model(path, compile=False).weights}


def test_none_leaves_the_sentence_head_untrained_and_sop_trains_it(tmp_path):
    init = tmp_path / "init.keras"
    before = initial_model(init)
    after = {}
    for task in ("none", "auto"):
        results = run_pretraining(
            options(tmp_path / task, sentence_task=task, init_checkpoint=str(init)),
            AlbertConfig(**SAMPLE_VOCAB_TINY),
            build_strategy("one_device"),
        )
        assert results["sentence_task"] == ("none" if task == "none" else "sop")
        assert results["train_history"][-1]["masked_lm_loss"] > 0
        after[task] = trained_weights(results["keras_model"])
    # The same layout either way: every weight of the fresh model, in both checkpoints.
    assert set(after["none"]) == set(after["auto"]) == set(before)
    sentence_only = [p for p in before if p.split("/")[0] in SENTENCE_ONLY]
    assert {p.split("/")[0] for p in sentence_only} == set(SENTENCE_ONLY)
    for path in sentence_only:
        np.testing.assert_array_equal(after["none"][path], before[path], err_msg=path)
    kernels = [p for p in sentence_only if not p.endswith("bias")]
    assert all(not np.array_equal(after["auto"][p], before[p]) for p in kernels), (
        "SOP training must change the pooler and the head"
    )
    encoder = [p for p in before if p not in sentence_only and p.endswith("kernel")]
    assert all(not np.array_equal(after["none"][p], before[p]) for p in encoder)


@pytest.fixture(scope="module")
def heldout_sets(tmp_path_factory):
    """SOP and NSP records of the same text, written by data prep with its summaries."""
    directory = tmp_path_factory.mktemp("heldout")
    paths = {}
    for task in ("sop", "nsp"):
        paths[task] = str(directory / f"heldout_{task}.tfrecord")
        pipeline.run(
            pipeline.DataPrepConfig(
                input_file=CORPUS,
                output_file=paths[task],
                spm_model_file=SPM,
                dupe_factor=1,
                pair=instances.PairConfig(max_seq_length=128, random_next_sentence=task == "nsp"),
                corpus=corpus.CorpusConfig(input_format="paragraphs"),
            )
        )
    return paths


def masked_tokens(path: str, records: int) -> int:
    """Real masked positions in the first `records` records of a file."""
    spec = {"masked_lm_weights": tf.io.FixedLenFeature([20], tf.float32)}
    batch = next(iter(tf.data.TFRecordDataset(path).batch(records)))
    return int(tf.reduce_sum(tf.io.parse_example(batch, spec)["masked_lm_weights"]))


def test_one_checkpoint_scored_on_nsp_and_sop_records_of_one_text(tmp_path, heldout_sets):
    init = tmp_path / "init.keras"
    initial_model(init)
    # Named neutrally: what each set holds comes from data prep's summary beside it.
    named = f"first={heldout_sets['nsp']},second={heldout_sets['sop']}"
    score = dict(do_train=False, do_eval=True, init_checkpoint=str(init), max_eval_steps=3)
    config, strategy = AlbertConfig(**SAMPLE_VOCAB_TINY), build_strategy("one_device")
    both = run_pretraining(
        options(tmp_path / "both", eval_input_file=named, **score), config, strategy
    )
    evaluation = both["eval"]
    assert json.loads((tmp_path / "both" / "eval_results.json").read_text()) == evaluation
    assert evaluation["sets"]["first"]["sentence_task"] == "nsp"
    assert evaluation["sets"]["second"]["sentence_task"] == "sop"
    assert evaluation["sets"]["first"]["eval_input_file"] == heldout_sets["nsp"]
    # Each set scores as it does alone under the plain flag.
    for name, task in (("first", "nsp"), ("second", "sop")):
        alone = run_pretraining(
            options(tmp_path / task, eval_input_file=heldout_sets[task], **score), config, strategy
        )["eval"]
        for key in ("masked_lm_accuracy", "masked_lm_loss", "sentence_order_accuracy"):
            assert evaluation["sets"][name][key] == pytest.approx(alone[key], rel=1e-6), key
        assert evaluation["sets"][name]["examples"] == 3 * 16
        assert evaluation["accuracy"][task] == evaluation["sets"][name]["sentence_order_accuracy"]
    tokens = [evaluation["sets"][n]["masked_tokens"] for n in ("first", "second")]
    assert tokens == [masked_tokens(heldout_sets[task], 3 * 16) for task in ("nsp", "sop")]
    mlm = sum(
        evaluation["sets"][n]["masked_lm_accuracy"] * t for n, t in zip(("first", "second"), tokens)
    )
    assert evaluation["accuracy"]["mlm"] == pytest.approx(mlm / sum(tokens))
    assert evaluation["masked_lm_accuracy"] == evaluation["accuracy"]["mlm"]


@pytest.mark.e2e
def test_cli_sentence_task_is_checked_against_the_records(tmp_path, heldout_sets):
    config = tmp_path / "albert_config.json"
    AlbertConfig(**SAMPLE_VOCAB_TINY).to_json_file(config)
    result = subprocess.run(
        [sys.executable, str(ROOT / "pipelines/pretrain.py")]
        + [
            f"--input_file={heldout_sets['nsp']}",
            f"--output_dir={tmp_path / 'run'}",
            f"--albert_config_file={config}",
            "--max_seq_length=128",
            "--sentence_task=sop",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1, result.stderr[-3000:]
    assert "SettingsError: --sentence_task=sop, but" in result.stderr
    assert "NSP ones: use --sentence_task=nsp" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run" / "checkpoints").exists()
