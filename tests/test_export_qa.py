"""Export of the SQuAD v1.1 / v2.0 and RACE heads: the ids SavedModels and TFLite variants give the
original code's outputs, and the text-in question-answering SavedModel answers every fixture
question as the Python path (features -> model -> post-processing) does, served from a fresh
process that never imports albert_tf."""

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from ai_edge_litert.interpreter import Interpreter

from albert_tf import AlbertConfig, AlbertPretrainer
from albert_tf.export import ExportConfig, ParityError, export_model, serving_head
from albert_tf.export.formats import parity_failures
from albert_tf.export.heads.loading import load_serving_head
from albert_tf.export.parity import ParityThresholds
from albert_tf.export.qa.offsets import ContextPieces
from albert_tf.export.qa.text import QaSettings
from albert_tf.export.qa.verify import PROBE_QUESTIONS, answer_differences, python_path_answers
from albert_tf.export.qa.windows import build_windows
from albert_tf.export.savedmodel import serialize_examples
from albert_tf.export.serving_ops import non_stock_ops, ops_tf_serving_lacks
from albert_tf.export.heads.squad_race import p_mask_of, squad_v2_logits
from albert_tf.modeling.heads.classifier import AlbertClassifier
from albert_tf.tasks.squad.examples import SquadExample, read_squad_examples
from albert_tf.tasks.squad.features import convert_examples_to_features, tokenize_paragraph
from albert_tf.text.tf_tokenization import AlbertPreprocessingLayer
from albert_tf.text.tokenization import AlbertTokenizer
from tests.conftest import FIXTURES, REPO_ROOT
from tests.tolerances import GOLDEN, SAME_MODEL, assert_close_to_scale

# Compares floats against goldens or another form of the model: CI reruns it on other kernels.
pytestmark = [pytest.mark.numerics, pytest.mark.e2e]

SQUAD = FIXTURES / "original_squad"
RACE = FIXTURES / "original_race"
SPM = FIXTURES / "albert_spm" / "30k-clean.model"
CORPUS = FIXTURES / "original_data" / "corpus_small.txt"
DEV_FILES = [
    "dev-v2.0-small.json",
    "postprocess_v1.1/dev-v1.1-subset.json",
    "postprocess_v2.0/dev-v2.0-subset.json",
]
# The fixtures' features: max_seq_length 128 (the tiny models' max positions), stride 32, query 24.
SEQ, STRIDE, QUERY = 128, 32, 24
INPUTS = ("input_ids", "input_mask", "segment_ids")
# Contexts whose normalisation is not one character for one: collapsed and stripped whitespace,
# accents, final sigma, digit-comma pieces, ligature-like expansions, characters SentencePiece
# drops or reads as spaces, unknown pieces, a near tie where SentencePiece's two ops segment
# differently ("2.666"), a single character.
HARD_CONTEXTS = [
    "  Leading and  trailing\twhitespace,\nnew lines\u00a0and\u3000wide spaces.  ",
    "Café au lait, naïve résumé — déjà vu. İstanbul, Straße, ΟΔΥΣΣΕΥΣ sailed.",
    "In 1990, 1,000, and 2,500,000, the fine ½ and ™ marks.",
    "Zero\u200bwidth\u200b\u200b spaces, a byte\ufeff order mark, marks\u200e and ´ accents.",
    "Unknown 你好 characters and 日本語 text between words.",
    "a greater metropolitan area of 2.666 million residents",
    "x",
    "   ",
]

# Run in a fresh interpreter: TensorFlow and tensorflow-text only (the text model's ops).
SERVE_SCRIPT = """
import json, sys
import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers SentencePiece and the ragged ops)

assert not [m for m in sys.modules if m.split(".")[0] == "albert_tf"]
spec = json.load(open(sys.argv[1]))
inputs = dict(np.load(spec["inputs"]))
out = {}
for key, path in spec["text"].items():
    serve = tf.saved_model.load(path).signatures["serving_default"]
    rows = [
        serve(question=tf.constant(spec["questions"][i : i + 16]),
              context=tf.constant(spec["contexts"][i : i + 16]))
        for i in range(0, len(spec["questions"]), 16)
    ]
    for name in rows[0]:
        values = np.concatenate([r[name].numpy() for r in rows])
        out[f"{key}/{name}"] = values.astype("S") if values.dtype == object else values
    empty = serve(question=tf.constant([], tf.string), context=tf.constant([], tf.string))
    out[f"{key}/empty_batch"] = np.array([v.shape[0] for v in empty.values()])
for call in spec["ids"]:
    function = tf.saved_model.load(call["path"]).signatures[call["signature"]]
    if call["signature"] == "serve_examples":
        records = [r.numpy() for r in tf.data.TFRecordDataset(call["records"])]
        got = function(examples=tf.constant(records))
    else:
        got = function(**{k: tf.constant(inputs[call["prefix"] + k]) for k in call["inputs"]})
    for name, value in got.items():
        out[f"{call['key']}/{name}"] = value.numpy()
np.savez(sys.argv[2], **out)
"""


@pytest.fixture(scope="module")
def tokenizer():
    return AlbertTokenizer(SPM)


@pytest.fixture(scope="module")
def preprocessing(tokenizer):
    return AlbertPreprocessingLayer(tokenizer.model_proto, max_seq_length=SEQ)


def squad_examples():
    """Every question of the three dev fixtures, then the built-in probes."""
    examples = [e for name in DEV_FILES for e in read_squad_examples(SQUAD / name, False)]
    return examples + [SquadExample(f"probe-{i}", q, c) for i, (q, c) in enumerate(PROBE_QUESTIONS)]


def tiny(kind):
    folder = RACE / "race_tiny" if kind == "race" else SQUAD / f"{kind}_tiny"
    return load_serving_head(
        kind, tf1_checkpoint=str(folder), albert_config_file=str(folder / "albert_config.json")
    )


def squad_features(name="features_eval_seq128_stride32_q24.json"):
    rows = json.loads((SQUAD / name).read_text())["features"]
    keys = (*INPUTS, "p_mask")
    return {k: np.array([r[k] for r in rows], np.int32) for k in keys}


def race_features():
    rows = json.loads((RACE / "features_dev_seq128_qa32.json").read_text())["features"]
    return {k: np.array([r[k] for r in rows], np.int32) for k in INPUTS}


def test_piece_offsets_equal_the_lcs_alignment_on_every_fixture_context(preprocessing, tokenizer):
    files = [*DEV_FILES, "train-v2.0-small.json"]
    contexts = [
        p["context"]
        for name in files
        for article in json.loads((SQUAD / name).read_text())["data"]
        for p in article["paragraphs"]
    ]
    contexts = list(dict.fromkeys(contexts)) + HARD_CONTEXTS
    got = ContextPieces(preprocessing)(tf.constant(contexts))
    for i, context in enumerate(contexts):
        expected = tokenize_paragraph(context, tokenizer) if context.strip() else None
        if expected is None:  # the Python path skips it: no window
            assert not got["aligned"][i], context
            continue
        assert got["aligned"][i], context
        assert got["ids"][i].numpy().tolist() == expected.piece_ids, context
        assert got["start_char"][i].numpy().tolist() == expected.tok_start_to_orig_index, context
        assert got["end_char"][i].numpy().tolist() == expected.tok_end_to_orig_index, context


@pytest.mark.parametrize(
    "name, seq, stride, query", [(DEV_FILES[1], SEQ, STRIDE, QUERY), (DEV_FILES[2], 64, 16, 8)]
)
def test_windows_equal_the_python_features(preprocessing, tokenizer, name, seq, stride, query):
    examples = read_squad_examples(SQUAD / name, False)
    features = convert_examples_to_features(examples, tokenizer, seq, stride, query, False)
    pieces = ContextPieces(preprocessing)(tf.constant([e.paragraph_text for e in examples]))
    questions = preprocessing.tokenize(tf.constant([e.question_text for e in examples]))
    windows = build_windows(
        questions[:, :query],
        pieces["ids"],
        pieces["aligned"],
        seq,
        stride,
        tokenizer.cls_id,
        tokenizer.sep_id,
    )
    assert len(windows["example"]) == len(features)
    for i, feature in enumerate(features):
        for key in (*INPUTS, "p_mask"):
            assert windows[key][i].numpy().tolist() == getattr(feature, key), (i, key)
        assert windows["example"][i] == feature.example_index
        max_context = windows["max_context"][i].numpy()
        assert sorted(np.flatnonzero(max_context)) == sorted(
            p for p, is_max in feature.token_is_max_context.items() if is_max
        )
        start, length = int(windows["doc_start"][i]), int(windows["doc_length"][i])
        starts = pieces["start_char"][feature.example_index][start : start + length]
        assert starts.numpy().tolist() == feature.tok_start_to_orig_index


@pytest.fixture(scope="module")
def exported(tmp_path_factory, tokenizer):
    """squad_v1 (in-process), squad_v2 (through the CLI, with a null threshold between the
    fixture questions' null odds) and race exports of the original code's tiny checkpoints."""
    out = tmp_path_factory.mktemp("qa_export")
    heads = {kind: tiny(kind) for kind in ("squad_v1", "squad_v2", "race")}
    settings = QaSettings(doc_stride=STRIDE, max_query_length=QUERY)
    answers = python_path_answers(heads["squad_v2"], tokenizer, squad_examples(), SEQ, settings)
    # Halfway between the two middle null odds: the stored threshold decides both ways, and no
    # question sits on it.
    odds = sorted({a["null_odds"] for a in answers.values() if a["null_odds"] < 1e5})
    threshold = (odds[len(odds) // 2 - 1] + odds[len(odds) // 2]) / 2
    reports = {}
    v1 = ExportConfig(
        output_dir=str(out),
        model_name="squad_v1",
        max_seq_length=SEQ,
        formats=("saved_model", "tflite_fp32", "tflite_fp16", "tflite_int8_dynamic", "tflite_int8"),
        spm_model_file=str(SPM),
        representative_data=str(CORPUS),
        num_verification_examples=32,
        num_calibration_examples=16,
        latency_runs=2,
        qa=QaSettings(STRIDE, QUERY, verification_file=str(SQUAD / DEV_FILES[0])),
    )
    try:
        reports["squad_v1"] = export_model(heads["squad_v1"], v1)
    except ParityError:  # calibrated int8 of random weights may be refused: checked below
        reports["squad_v1"] = json.loads((out / "export_report_squad_v1_1.json").read_text())
    cli = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "pipelines" / "export.py"),
            "--head=squad_v2",
            f"--tf1_checkpoint={SQUAD / 'squad_v2_tiny'}",
            f"--albert_config_file={SQUAD / 'squad_v2_tiny' / 'albert_config.json'}",
            f"--spm_model_file={SPM}",
            f"--representative_data={CORPUS}",
            f"--output_dir={out}",
            "--model_name=squad_v2",
            f"--max_seq_length={SEQ}",
            f"--doc_stride={STRIDE}",
            f"--max_query_length={QUERY}",
            f"--null_score_diff_threshold={threshold!r}",
            f"--qa_verification_file={SQUAD / DEV_FILES[2]}",
            "--formats=saved_model,tflite_fp32,tflite_fp16,tflite_int8_dynamic",
            "--num_verification_examples=32",
            "--latency_runs=2",
        ],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={"TF_CPP_MIN_LOG_LEVEL": "2", "PATH": "/usr/bin:/bin"},
    )
    reports["squad_v2"] = json.loads((out / "export_report_squad_v2_1.json").read_text())
    reports["race"] = export_model(
        heads["race"],
        ExportConfig(
            output_dir=str(out),
            model_name="race",
            max_seq_length=SEQ,
            formats=("saved_model", "tflite_fp32"),
            num_verification_examples=32,
            latency_runs=2,
        ),
    )
    return {"dir": out, "heads": heads, "reports": reports, "cli": cli, "threshold": threshold}


@pytest.fixture(scope="module")
def served(exported, tmp_path_factory):
    """What a fresh interpreter without albert_tf gets from the exported SavedModels."""
    work = tmp_path_factory.mktemp("served")
    out = exported["dir"]
    examples = squad_examples()
    squad, race = squad_features(), race_features()
    inputs = {f"squad/{k}": v for k, v in squad.items()} | {f"race/{k}": v for k, v in race.items()}
    np.savez(work / "inputs.npz", **inputs)
    for kind, names, features in (("squad_v2", (*INPUTS, "p_mask"), squad), ("race", INPUTS, race)):
        with tf.io.TFRecordWriter(str(work / f"{kind}.tfrecord")) as writer:
            for record in serialize_examples(features, names):
                writer.write(record)
    ids = [
        {
            "key": "v1",
            "path": str(out / "squad_v1" / "1"),
            "signature": "serving_default",
            "prefix": "squad/",
            "inputs": INPUTS,
        },
        {
            "key": "v2",
            "path": str(out / "squad_v2" / "1"),
            "signature": "serving_default",
            "prefix": "squad/",
            "inputs": (*INPUTS, "p_mask"),
        },
        {
            "key": "v2_records",
            "path": str(out / "squad_v2" / "1"),
            "signature": "serve_examples",
            "records": str(work / "squad_v2.tfrecord"),
        },
        {
            "key": "race",
            "path": str(out / "race" / "1"),
            "signature": "serving_default",
            "prefix": "race/",
            "inputs": INPUTS,
        },
        {
            "key": "race_records",
            "path": str(out / "race" / "1"),
            "signature": "serve_examples",
            "records": str(work / "race.tfrecord"),
        },
    ]
    spec = {
        "text": {k: str(out / f"squad_{k}_text" / "1") for k in ("v1", "v2")},
        "questions": [e.question_text for e in examples],
        "contexts": [e.paragraph_text for e in examples],
        "ids": ids,
        "inputs": str(work / "inputs.npz"),
    }
    (work / "spec.json").write_text(json.dumps(spec))
    (work / "serve.py").write_text(SERVE_SCRIPT)
    run = subprocess.run(
        [sys.executable, str(work / "serve.py"), str(work / "spec.json"), str(work / "out.npz")],
        capture_output=True,
        text=True,
        cwd=work,
        env={"TF_CPP_MIN_LOG_LEVEL": "2", "PATH": "/usr/bin:/bin"},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return dict(np.load(work / "out.npz"))


def test_every_export_is_written_exactly_when_it_passes_its_gate(exported):
    assert exported["cli"].returncode == 0, exported["cli"].stderr[-3000:]
    thresholds = ParityThresholds()
    for kind, report in exported["reports"].items():
        assert report["head"] == kind
        for key, artifact in report["artifacts"].items():
            if key.startswith("tflite"):
                assert parity_failures(key, artifact["figures"], thresholds) == [
                    f for f in artifact["failures"] if "ops" not in f
                ], (kind, key)
                assert not [op for op in artifact["ops"] if op.startswith("CUSTOM")], (kind, key)
            destination = ExportConfig(str(exported["dir"]), kind).destinations()[key]
            assert artifact.get("path", destination) == destination
            assert pathlib.Path(destination).exists() == (artifact["failures"] == []), (kind, key)
    for kind in ("squad_v1", "squad_v2"):
        artifacts = exported["reports"][kind]["artifacts"]
        assert artifacts["text"]["failures"] == [] and artifacts["saved_model"]["failures"] == []
        # The ids model needs core TensorFlow only; the text one tensorflow-text's ops too, all
        # of them linked into the stock TF Serving model server.
        paths = ExportConfig(str(exported["dir"]), kind).destinations()
        assert "TFText>FastSentencepieceTokenize" in non_stock_ops(paths["text"]), kind
        assert ops_tf_serving_lacks(paths["text"]) == [], kind
        assert non_stock_ops(paths["saved_model"]) == [], kind
        assert artifacts["tflite_fp32"]["failures"] == artifacts["tflite_fp16"]["failures"] == []
    assert exported["reports"]["race"]["artifacts"]["tflite_fp32"]["failures"] == []


def test_ids_saved_models_give_the_original_outputs_from_a_fresh_process(exported, served):
    heads = exported["heads"]
    squad, race = squad_features(), race_features()
    for prefix, kind, features in (
        ("v1", "squad_v1", squad),
        ("v2", "squad_v2", squad),
        ("v2_records", "squad_v2", squad),
        ("race", "race", race),
        ("race_records", "race", race),
    ):
        reference = heads[kind].keras_outputs(features, "serving_default")
        for key, value in reference.items():
            if value.dtype.kind == "i":  # beam positions
                np.testing.assert_array_equal(served[f"{prefix}/{key}"], value, key)
            else:
                assert_close_to_scale(served[f"{prefix}/{key}"], value, SAME_MODEL, key)
    golden_v1 = np.load(SQUAD / "squad_v1_tiny" / "expected.npz")
    for key in ("start_logits", "end_logits"):
        assert_close_to_scale(served[f"v1/{key}"], golden_v1[key], GOLDEN, key)
    golden_v2 = np.load(SQUAD / "squad_v2_tiny" / "expected.npz")
    for prefix in ("v2", "v2_records"):
        for key in ("start_top_index", "end_top_index"):
            np.testing.assert_array_equal(served[f"{prefix}/{key}"], golden_v2[key])
        for key in ("start_top_log_probs", "end_top_log_probs", "cls_logits"):
            assert_close_to_scale(served[f"{prefix}/{key}"], golden_v2[key], GOLDEN, key)
    golden_race = np.load(RACE / "race_tiny" / "expected.npz")
    for prefix in ("race", "race_records"):
        assert_close_to_scale(served[f"{prefix}/logits"], golden_race["logits"], GOLDEN)


def test_text_models_answer_like_the_python_path_from_a_fresh_process(exported, served, tokenizer):
    examples = squad_examples()
    ids = [e.qas_id for e in examples]
    for key, kind in (("v1", "squad_v1"), ("v2", "squad_v2")):
        threshold = exported["threshold"] if kind == "squad_v2" else 0.0
        settings = QaSettings(STRIDE, QUERY, null_score_diff_threshold=threshold)
        expected = python_path_answers(exported["heads"][kind], tokenizer, examples, SEQ, settings)
        got = {k.split("/", 1)[1]: v for k, v in served.items() if k.startswith(f"{key}/")}
        null_threshold = threshold if kind == "squad_v2" else None
        assert answer_differences(expected, got, ids, null_threshold) == []
        assert (got["empty_batch"] == 0).all()
        if kind == "squad_v2":
            no_answer = [expected[i]["null_odds"] >= threshold for i in ids]
            assert 0 < sum(no_answer) < len(ids)  # the stored threshold decides both ways
            np.testing.assert_array_equal(got["no_answer"], no_answer)
            assert [got["answer"][r].decode() == "" for r in range(len(ids))] == [
                n or expected[i]["best_span"] == "" for n, i in zip(no_answer, ids)
            ]
            assert [t.decode() for t in got["best_span"]] == [
                t.decode() for t in got["nbest_text"][:, 0]
            ]


def tflite_runner(exported, kind, variant, signature):
    path = exported["dir"] / f"{kind}_tflite" / "1" / f"{kind}_{variant}.tflite"
    return Interpreter(model_path=str(path)).get_signature_runner(signature)


def log_softmax(x):
    shifted = x - x.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def test_tflite_squad_models_give_the_original_scores(exported):
    features = squad_features()
    rows = range(0, 39, 4)
    v1 = tflite_runner(exported, "squad_v1", "fp32", "serving_default")
    golden = np.load(SQUAD / "squad_v1_tiny" / "expected.npz")
    limit = ParityThresholds().fp32_relative_diff
    for i in rows:
        got = v1(**{k: features[k][i : i + 1] for k in INPUTS})
        for key in ("start_logits", "end_logits"):
            assert_close_to_scale(got[key][0], golden[key][i], limit, key)
    # SQuAD v2 in TFLite: logits before p_mask; the client's mask, log-softmax and top-k give the
    # original beam.
    head = exported["heads"]["squad_v2"]
    golden = np.load(SQUAD / "squad_v2_tiny" / "expected.npz")
    logits = tflite_runner(exported, "squad_v2", "fp32", "logits")
    ends = tflite_runner(exported, "squad_v2", "fp32", "end_logits")
    k = head.model.start_n_top
    for i in rows:
        row = {key: features[key][i : i + 1] for key in (*INPUTS, "p_mask")}
        got = logits(**row)
        reference = squad_v2_logits(head.model, {key: tf.constant(v) for key, v in row.items()})
        for key in ("start_logits", "cls_logits"):
            assert_close_to_scale(got[key], reference[key].numpy(), limit, key)
        p_mask = row["p_mask"][0].astype(np.float32)
        start_log_probs = log_softmax(got["start_logits"][0] * (1 - p_mask) - 1e30 * p_mask)
        starts = np.argsort(-start_log_probs, kind="stable")[:k]
        np.testing.assert_array_equal(starts, golden["start_top_index"][i])
        assert_close_to_scale(start_log_probs[starts], golden["start_top_log_probs"][i], limit)
        end_logits = ends(
            **{key: row[key] for key in INPUTS}, start_positions=starts[None].astype(np.int32)
        )
        end_log_probs = log_softmax(end_logits["end_logits"][0] * (1 - p_mask) - 1e30 * p_mask)
        top_ends = np.argsort(-end_log_probs, axis=-1, kind="stable")[:, : head.model.end_n_top]
        np.testing.assert_array_equal(top_ends.reshape(-1), golden["end_top_index"][i])
    assert set(
        Interpreter(
            model_path=str(exported["dir"] / "squad_v2_tflite" / "1" / "squad_v2_fp16.tflite")
        ).get_signature_list()
    ) == {"logits", "end_logits"}


def test_race_tflite_gives_the_original_logits(exported):
    features = race_features()
    golden = np.load(RACE / "race_tiny" / "expected.npz")
    runner = tflite_runner(exported, "race", "fp32", "serving_default")
    for i in range(len(golden["logits"])):
        got = runner(**{k: features[k][i : i + 1] for k in INPUTS})
        assert_close_to_scale(
            got["logits"][0], golden["logits"][i], ParityThresholds().fp32_relative_diff
        )


def test_bad_requests_and_settings_are_clear_errors(exported, tmp_path):
    out = exported["dir"]
    text = tf.saved_model.load(str(out / "squad_v1_text" / "1")).signatures["serving_default"]
    with pytest.raises(tf.errors.InvalidArgumentError, match="same batch size"):
        text(question=tf.constant(["a", "b"]), context=tf.constant(["c"]))
    v2 = tf.saved_model.load(str(out / "squad_v2" / "1")).signatures["serving_default"]
    features = {k: tf.constant(v[:2]) for k, v in squad_features().items()}
    with pytest.raises(tf.errors.InvalidArgumentError, match="p_mask has values >= 2"):
        v2(**{**features, "p_mask": features["p_mask"] * 2})
    with pytest.raises(tf.errors.InvalidArgumentError, match="p_mask must have the shape"):
        v2(**{**features, "p_mask": features["p_mask"][:, :64]})
    race = tf.saved_model.load(str(out / "race" / "1")).signatures["serving_default"]
    with pytest.raises(
        tf.errors.InvalidArgumentError, match=r"Shape of tensor \w+ \[2,128\] is not compatible"
    ):
        race(**{k: features[k] for k in INPUTS})  # [B, T] where [B, choices, T] is served
    for settings, message in (
        (QaSettings(doc_stride=0), "doc_stride=0 must be >= 1"),
        (QaSettings(max_query_length=125), "leaves no room for the document"),
        (QaSettings(n_best_size=0), "n_best_size=0"),
        (QaSettings(verification_file=str(tmp_path / "no.json")), "QA verification file not"),
    ):
        config = ExportConfig(output_dir=str(tmp_path / "x"), max_seq_length=SEQ, qa=settings)
        with pytest.raises((ValueError, FileNotFoundError), match=message):
            export_model(exported["heads"]["squad_v1"], config)
    assert not (tmp_path / "x").exists()
    with pytest.raises(ValueError, match="exports as one of"):
        load_serving_head(
            "classifier",
            tf1_checkpoint=str(SQUAD / "squad_v1_tiny"),
            albert_config_file="albert_config.json",
        )
    with pytest.raises(FileNotFoundError, match="albert_config_file not found"):
        load_serving_head(
            "squad_v1",
            tf1_checkpoint=str(SQUAD / "squad_v1_tiny"),
            albert_config_file=str(tmp_path / "none.json"),
        )
    config = AlbertConfig.from_json_file(SQUAD / "squad_v1_tiny" / "albert_config.json")
    with pytest.raises(ValueError, match="is no AlbertSquadV2"):
        serving_head("squad_v2", exported["heads"]["squad_v1"].model)
    with pytest.raises(ValueError, match="is no SQuAD v1.1 model"):
        serving_head("squad_v1", AlbertClassifier(config, num_labels=2))
    with pytest.raises(ValueError, match="is no multiple-choice model"):
        serving_head("race", AlbertPretrainer(config))


def test_p_mask_of_generic_examples_is_the_squad_features_p_mask():
    features = squad_features()
    np.testing.assert_array_equal(
        p_mask_of(features["input_mask"], features["segment_ids"]), features["p_mask"]
    )


def test_answer_check_lets_only_float_ties_go_either_way():
    def entry(text, score):
        return {"text": text, "start_log_prob": score, "end_log_prob": 0.0, "probability": 0.5}

    def served(texts, scores, odds=0.5, no_answer=False):
        return {
            "answer": np.array([b"" if no_answer else texts[0].encode()], object),
            "nbest_text": np.array([[t.encode() for t in texts]], object),
            "nbest_score": np.array([scores]),
            "nbest_probability": np.array([[0.5, 0.5]]),
            "nbest_size": np.array([2]),
            "null_odds": np.array([odds]),
        }

    tied = {
        "q": {"answer": "a", "nbest": [entry("a", -1.0), entry("b", -1.0 - 1e-7)], "null_odds": 0.5}
    }
    assert answer_differences(tied, served(["b", "a"], [-1.0, -1.0]), ["q"]) == []
    apart = {"q": {"answer": "a", "nbest": [entry("a", -1.0), entry("b", -1.5)], "null_odds": 0.5}}
    assert answer_differences(apart, served(["b", "a"], [-1.0, -1.5]), ["q"]) != []
    # Null odds on the threshold itself: either decision is round-off.
    assert (
        answer_differences(apart, served(["a", "b"], [-1.0, -1.5], no_answer=True), ["q"], 0.5)
        == []
    )
    assert (
        answer_differences(apart, served(["a", "b"], [-1.0, -1.5], no_answer=True), ["q"], 0.2)
        != []
    )
