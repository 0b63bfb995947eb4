"""SQuAD post-processing against what the original `squad_utils` wrote from the same inputs:
v1 (`accumulate_predictions_v1` + `write_predictions_v1`) and v2 (`accumulate_predictions_v2` +
`evaluate_v2`, threshold search included), and the prediction files' layout."""

import json

import numpy as np
import pytest

from albert_tf.tasks.squad import postprocess, postprocess_v1, postprocess_v2
from albert_tf.tasks.squad.examples import SquadExample
from albert_tf.tasks.squad.features import SquadFeature
from conftest import FIXTURES

SQUAD = FIXTURES / "original_squad"
V1_DIR = SQUAD / "postprocess_v1.1"
V2_DIR = SQUAD / "postprocess_v2.0"
V1_TINY = SQUAD / "squad_v1_tiny"
V2_TINY = SQUAD / "squad_v2_tiny"
SEQ128_FEATURES = SQUAD / "features_eval_seq128_stride32_q24.json"

# The goldens hold float32 scores widened to Python floats and float64 sums/softmaxes of them;
# recomputed from the same inputs they agree to round-off, far below this bound per unit of
# max(1, |value|).
POSTPROCESS = 1e-5


def load_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def load_examples(path):
    """SquadExamples of every question of a SQuAD file, in file order (eval reading)."""
    examples = []
    for article in load_json(path)["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                examples.append(
                    SquadExample(
                        qa["id"],
                        qa["question"],
                        paragraph["context"],
                        is_impossible=bool(qa.get("is_impossible", False)),
                    )
                )
    return examples


def load_features(path):
    features = []
    for record in load_json(path)["features"]:
        record = dict(record)
        record["token_is_max_context"] = {
            int(k): v for k, v in record["token_is_max_context"].items()
        }
        features.append(SquadFeature(**record))
    return features


def assert_same_json(actual, expected, where="$"):
    """Same structure, keys in the same order, equal strings; numbers to POSTPROCESS."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), where
        assert list(actual) == list(expected), where
        for key in expected:
            assert_same_json(actual[key], expected[key], f"{where}.{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), where
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_same_json(a, e, f"{where}[{i}]")
    elif isinstance(expected, (int, float)) and not isinstance(expected, bool):
        assert isinstance(actual, (int, float)), where
        assert abs(actual - expected) <= POSTPROCESS * max(1.0, abs(expected)), where
    else:
        assert actual == expected, where


def assert_same_file_layout(actual_path, expected_path):
    """Line for line the same text, except numbers that differ within POSTPROCESS."""
    actual = actual_path.read_text(encoding="utf-8").splitlines(keepends=True)
    expected = expected_path.read_text(encoding="utf-8").splitlines(keepends=True)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        if a != e:
            key_a, _, value_a = a.rstrip(",\n").rpartition(": ")
            key_e, _, value_e = e.rstrip(",\n").rpartition(": ")
            assert key_a == key_e, (a, e)
            assert_same_json(float(value_a), float(value_e), key_e)


def v1_results(npz_path):
    arrays = np.load(npz_path)
    return postprocess_v1.raw_results_v1(
        arrays["unique_ids"], arrays["start_logits"], arrays["end_logits"]
    )


def v2_results(npz_path):
    arrays = np.load(npz_path)
    names = ["start_top_log_probs", "start_top_index", "end_top_log_probs", "end_top_index"]
    return postprocess_v2.raw_results_v2(
        arrays["unique_ids"], *(arrays[n] for n in names), arrays["cls_logits"]
    )


V1_CASES = {
    "postprocess_v1.1": (
        V1_DIR / "dev-v1.1-subset.json",
        V1_DIR / "features_eval_seq128_stride32_q24.json",
        V1_DIR / "raw_results.npz",
        V1_DIR,
    ),
    "squad_v1_tiny": (
        SQUAD / "dev-v2.0-small.json",
        SEQ128_FEATURES,
        V1_TINY / "expected.npz",
        V1_TINY,
    ),
}


@pytest.mark.parametrize("case", sorted(V1_CASES))
def test_v1_predictions_and_nbest_equal_the_original(case, tmp_path):
    data_path, features_path, results_path, expected_dir = V1_CASES[case]
    examples, features = load_examples(data_path), load_features(features_path)
    predictions = postprocess_v1.postprocess_v1(
        examples, features, v1_results(results_path), n_best_size=20, max_answer_length=30
    )
    assert predictions.null_odds is None
    assert_same_json(predictions.predictions, load_json(expected_dir / "predictions.json"))
    assert_same_json(
        predictions.nbest_predictions, load_json(expected_dir / "nbest_predictions.json")
    )
    paths = postprocess.write_prediction_files(tmp_path, predictions)
    assert sorted(paths) == ["nbest_predictions.json", "predictions.json"]
    for name in paths:
        assert_same_file_layout(tmp_path / name, expected_dir / name)


def test_v1_accumulating_a_pass_twice_keeps_the_scores():
    examples = load_examples(V1_DIR / "dev-v1.1-subset.json")
    features = load_features(V1_DIR / "features_eval_seq128_stride32_q24.json")
    results = v1_results(V1_DIR / "raw_results.npz")
    scores = postprocess_v1.accumulate_predictions_v1(examples, features, results)
    scores = postprocess_v1.accumulate_predictions_v1(
        examples, features, results, span_scores=scores
    )
    twice = postprocess_v1.predictions_v1(examples, features, scores)
    assert_same_json(twice.nbest_predictions, load_json(V1_DIR / "nbest_predictions.json"))


def rollo_window(padding=0):
    """The one window of a question on "Rollo did.": [CLS] who ? [SEP] rollo did . [SEP], then
    `padding` <pad>; doc pieces at positions 4..6."""
    tokens = ["[CLS]", "▁who", "?", "[SEP]", "▁rollo", "▁did", ".", "[SEP]"] + ["<pad>"] * padding
    return SquadFeature(
        unique_id=1000000000,
        example_index=0,
        doc_span_index=0,
        tok_start_to_orig_index=[0, 6, 9],
        tok_end_to_orig_index=[4, 8, 9],
        token_is_max_context={4: True, 5: True, 6: True},
        tokens=tokens,
        input_ids=[0] * len(tokens),
        input_mask=[1] * 8 + [0] * padding,
        segment_ids=[0] * len(tokens),
        paragraph_len=8,
        p_mask=[0] + [1] * 3 + [0] * 3 + [1] * (1 + padding),
    )


def test_v1_no_surviving_span_predicts_empty():
    example = SquadExample("q", "Who?", "Rollo did.")
    feature = rollo_window()
    start, end = [0.0] * 8, [0.0] * 8
    start[1] = end[1] = 5.0  # inside the question: dropped
    start[4], end[5] = 1.0, 1.0  # "Rollo did", the runner-up on both sides
    results = [postprocess_v1.RawResultV1(1000000000, start, end)]
    # n_best 1 keeps only position 1 for starts and ends: nothing survives.
    out = postprocess_v1.postprocess_v1([example], [feature], results, n_best_size=1)
    assert out.predictions == {"q": "empty"}
    assert out.nbest_predictions["q"] == [
        {"text": "empty", "probability": 1.0, "start_log_prob": 0.0, "end_log_prob": 0.0}
    ]
    out = postprocess_v1.postprocess_v1([example], [feature], results, n_best_size=2)
    assert out.predictions == {"q": "Rollo did"}
    assert out.nbest_predictions["q"][0]["start_log_prob"] == 1.0


def test_v1_missing_result_names_the_question():
    examples = load_examples(V1_DIR / "dev-v1.1-subset.json")
    features = load_features(V1_DIR / "features_eval_seq128_stride32_q24.json")
    results = v1_results(V1_DIR / "raw_results.npz")[1:]
    with pytest.raises(ValueError, match=f"1000000000 of question '{examples[0].qas_id}'"):
        postprocess_v1.accumulate_predictions_v1(examples, features, results)


V2_CASES = {
    "postprocess_v2.0": (
        V2_DIR / "dev-v2.0-subset.json",
        V2_DIR / "features_eval_seq128_stride32_q24.json",
        V2_DIR / "raw_results.npz",
        V2_DIR,
    ),
    "squad_v2_tiny": (
        SQUAD / "dev-v2.0-small.json",
        SEQ128_FEATURES,
        V2_TINY / "expected.npz",
        V2_TINY,
    ),
}


@pytest.mark.parametrize("case", sorted(V2_CASES))
def test_v2_evaluate_equals_the_original(case, tmp_path):
    data_path, features_path, results_path, expected_dir = V2_CASES[case]
    examples, features = load_examples(data_path), load_features(features_path)
    scores = postprocess_v2.accumulate_predictions_v2(
        examples, features, v2_results(results_path), max_answer_length=30
    )
    evaluation = postprocess_v2.evaluate_with_null_threshold(
        load_json(data_path), examples, features, scores, n_best_size=20
    )
    assert_same_json(evaluation.eval_results, load_json(expected_dir / "eval_results.json"))
    final = evaluation.predictions
    assert_same_json(final.predictions, load_json(expected_dir / "predictions.json"))
    assert_same_json(final.nbest_predictions, load_json(expected_dir / "nbest_predictions.json"))
    assert_same_json(final.null_odds, load_json(expected_dir / "null_odds.json"))
    if (expected_dir / "predictions_no_threshold.json").exists():
        assert_same_json(
            evaluation.predictions_no_threshold,
            load_json(expected_dir / "predictions_no_threshold.json"),
        )
    # The first pass answers every question with its best span.
    assert all(
        evaluation.predictions_no_threshold[qid] == nbest[0]["text"]
        for qid, nbest in final.nbest_predictions.items()
    )
    threshold = evaluation.eval_results["null_score_diff_threshold"]
    assert threshold == evaluation.official_scores["best_f1_thresh"]
    paths = postprocess.write_prediction_files(tmp_path, final)
    assert sorted(paths) == ["nbest_predictions.json", "null_odds.json", "predictions.json"]
    for name in paths:
        assert_same_file_layout(tmp_path / name, expected_dir / name)


def test_v2_threshold_search_and_rewrite_as_the_original():
    examples = load_examples(V2_DIR / "dev-v2.0-subset.json")
    features = load_features(V2_DIR / "features_eval_seq128_stride32_q24.json")
    scores = postprocess_v2.accumulate_predictions_v2(
        examples, features, v2_results(V2_DIR / "raw_results.npz")
    )
    evaluation = postprocess_v2.evaluate_with_null_threshold(
        load_json(V2_DIR / "dev-v2.0-subset.json"), examples, features, scores
    )
    threshold = evaluation.eval_results["null_score_diff_threshold"]
    assert threshold < 0.0  # the search moved off its 0.0 start
    final = evaluation.predictions
    assert sum(text == "" for text in final.predictions.values()) == 14
    for qid, odds in final.null_odds.items():
        # "" exactly where the null odds reach the threshold (>=, the question at it included).
        expected = "" if odds >= threshold else evaluation.predictions_no_threshold[qid]
        assert final.predictions[qid] == expected
    assert threshold in final.null_odds.values()


def test_v2_tiny_null_scores_are_the_smallest_cls_logits():
    examples = load_examples(SQUAD / "dev-v2.0-small.json")
    features = load_features(SEQ128_FEATURES)
    arrays = np.load(V2_TINY / "expected.npz")
    scores = postprocess_v2.accumulate_predictions_v2(
        examples, features, v2_results(V2_TINY / "expected.npz")
    )
    cls_by_id = dict(zip(arrays["unique_ids"].tolist(), arrays["cls_logits"].tolist()))
    for index in range(len(examples)):
        windows = [f.unique_id for f in features if f.example_index == index]
        assert scores.null_scores[index] == [min(cls_by_id[u] for u in windows)]


def test_v2_no_surviving_span_falls_back_to_empty_text():
    example = SquadExample("q", "Who?", "Rollo did.", is_impossible=True)
    feature = rollo_window(padding=2)
    # Starts in the question or on padding, an end before its start: the original drops all.
    result = postprocess_v2.RawResultV2(
        1000000000, [-0.1, -0.2], [1, 9], [-0.3, -0.4, -0.5, -0.6], [2, 3, 9, 4], 0.25
    )
    scores = postprocess_v2.accumulate_predictions_v2([example], [feature], [result])
    out = postprocess_v2.predictions_v2([example], [feature], scores)
    assert out.predictions == {"q": ""}
    assert out.null_odds == {"q": 0.25}
    assert out.nbest_predictions["q"] == [
        {"text": "", "probability": 1.0, "start_log_prob": -1e6, "end_log_prob": -1e6}
    ]


def test_v2_inconsistent_beam_is_rejected():
    example = SquadExample("q", "Who?", "Rollo did.")
    feature = load_features(SEQ128_FEATURES)[0]
    feature.example_index = 0
    bad = postprocess_v2.RawResultV2(
        feature.unique_id, [-0.1, -0.2], [14, 15], [-0.3] * 3, [16] * 3, 0.0
    )
    with pytest.raises(ValueError, match="start_n_top starts x end_n_top ends"):
        postprocess_v2.accumulate_predictions_v2([example], [feature], [bad])


def test_writer_keeps_order_indent_and_writes_nan_as_null(tmp_path):
    predictions = postprocess.SquadPredictions(
        {"b": "x", "a": "é"},
        {
            "b": [{"text": "x", "probability": 1.0, "start_log_prob": 0.5, "end_log_prob": -0.5}],
            "a": [],
        },
        {"b": float("nan"), "a": -1.5},
    )
    paths = postprocess.write_prediction_files(tmp_path / "out", predictions)
    text = (tmp_path / "out" / "predictions.json").read_text(encoding="utf-8")
    assert text == '{\n    "b": "x",\n    "a": "\\u00e9"\n}\n'
    assert load_json(paths["null_odds.json"]) == {"b": None, "a": -1.5}
    assert list(load_json(paths["nbest_predictions.json"])) == ["b", "a"]
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]
