"""The official SQuAD v1.1 / v2.0 metrics against the original's results and hand-worked cases,
and the RACE accuracy (overall and per level) on the original's dev questions."""

import json

import numpy as np
import pytest

from albert_tf.tasks.race import metrics as race
from albert_tf.tasks.squad import metrics as m
from conftest import FIXTURES

SQUAD = FIXTURES / "original_squad"
RACE = FIXTURES / "original_race"

# Percentages from the same float64 sums as the original's; only summation order could move
# them, by round-off.
SCORES = 1e-5


def load_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def assert_scores(actual, expected):
    for key, value in expected.items():
        assert actual[key] == pytest.approx(value, rel=SCORES, abs=SCORES), key


def dataset(*questions):
    """A one-paragraph SQuAD "data" list from (id, [gold answer texts]) pairs."""
    qas = [{"id": qid, "answers": [{"text": t} for t in answers]} for qid, answers in questions]
    return [{"paragraphs": [{"context": "...", "qas": qas}]}]


def test_normalization_drops_case_punctuation_articles_and_extra_spaces():
    assert m.normalize_answer("The  Cat!") == "cat"
    assert m.normalize_answer("an apple, a pear") == "apple pear"
    assert m.normalize_answer("Theater anthem") == "theater anthem"  # whole words only
    assert m.normalize_answer("U.S. (1990)") == "us 1990"
    assert m.normalize_answer("«Ünïcode»") == "«ünïcode»"  # only ASCII punctuation goes
    assert m.answer_tokens("") == [] and m.answer_tokens("the") == []


def test_exact_and_f1_by_hand():
    assert m.exact_match_v1("the Big dog.", "big dog")
    assert not m.exact_match_v1("big dogs", "big dog")
    # [big, red, dog] vs [red, dog, barked]: 2 common, precision = recall = 2/3.
    assert m.f1_v1("the big red dog", "red dog barked") == pytest.approx(2 / 3)
    # [dog] vs [big, red, dog]: precision 1, recall 1/3, F1 = 2 * 1/3 / (4/3) = 1/2.
    assert m.f1_v2("big red dog", "dog") == pytest.approx(0.5)
    assert m.f1_v1("", "") == 0.0  # v1.1 has no notion of an empty answer
    assert m.f1_v2("", "") == 1.0 and m.exact_v2("", "") == 1  # v2.0: both say "no answer"
    assert m.f1_v2("", "dog") == 0.0 and m.f1_v2("dog", "a") == 0.0


def test_v1_takes_the_best_gold_answer_and_scores_missing_as_zero():
    data = dataset(("q1", ["Denver Broncos", "the Broncos"]), ("q2", ["1990"]))
    scores = m.evaluate_v1(data, {"q1": "Broncos"})
    # q1: exact with "the Broncos"; q2 unanswered: 0 (still counted).
    assert scores == {"exact_match": 50.0, "f1": 50.0}


def test_v1_equals_the_original_on_real_dev_questions():
    fixture = SQUAD / "postprocess_v1.1"
    data = load_json(fixture / "dev-v1.1-subset.json")
    scores = m.evaluate_v1(data, load_json(fixture / "predictions.json"))
    assert_scores(scores, load_json(fixture / "eval_results.json"))
    assert set(scores) == {"exact_match", "f1"}
    assert m.evaluate_v1(data["data"], load_json(fixture / "predictions.json")) == scores


def test_v2_all_null_predictions_score_the_unanswerable_share():
    data = load_json(SQUAD / "postprocess_v2.0" / "dev-v2.0-subset.json")
    has_answer = m.has_answer_by_question(data)
    unanswerable = sum(not v for v in has_answer.values())
    assert (len(has_answer), unanswerable) == (31, 17)
    scores = m.evaluate_v2(data, {qid: "" for qid in has_answer})
    share = 100.0 * 17 / 31
    assert scores["exact"] == pytest.approx(share) and scores["f1"] == pytest.approx(share)
    assert (scores["HasAns_exact"], scores["HasAns_f1"], scores["HasAns_total"]) == (0.0, 0.0, 14)
    assert (scores["NoAns_exact"], scores["NoAns_f1"], scores["NoAns_total"]) == (100.0, 100.0, 17)
    assert "best_f1" not in scores  # only with null odds


def test_v2_threshold_search_and_null_threshold_by_hand():
    data = dataset(("a1", ["x"]), ("a2", ["w"]), ("n1", []), ("n2", []))
    predictions = {"a1": "x", "a2": "y", "n1": "z", "n2": ""}
    odds = {"a1": -2.0, "n1": -1.0, "a2": 0.5, "n2": 3.0}
    # Null everywhere scores the 2 unanswerable; answering a1 (odds -2) adds 1 -> 3/4, answering
    # n1 then costs 1, a2 adds 0, n2's "" changes nothing: best 75 at threshold -2.
    assert m.find_best_threshold(
        predictions, {"a1": 1, "a2": 0, "n1": 0, "n2": 1}, odds, m.has_answer_by_question(data)
    ) == (75.0, -2.0)
    scores = m.evaluate_v2(data, predictions, odds)
    # At the default threshold 1.0 only n2 (odds 3) is forced to null: a1 1, a2 0, n1 0, n2 1.
    assert list(scores) == [
        "exact",
        "f1",
        "total",
        "HasAns_exact",
        "HasAns_f1",
        "HasAns_total",
        "NoAns_exact",
        "NoAns_f1",
        "NoAns_total",
        "best_exact",
        "best_exact_thresh",
        "best_f1",
        "best_f1_thresh",
    ]
    assert (scores["exact"], scores["total"], scores["HasAns_exact"], scores["NoAns_exact"]) == (
        50.0,
        4,
        50.0,
        50.0,
    )
    assert (scores["best_exact"], scores["best_exact_thresh"]) == (75.0, -2.0)
    assert (scores["best_f1"], scores["best_f1_thresh"]) == (75.0, -2.0)
    # No threshold improves on "null everywhere": the search keeps its 0.0 start.
    worse = {"a1": "q", "a2": "y", "n1": "z", "n2": "v"}
    assert m.find_best_threshold(
        worse, {"a1": 0, "a2": 0, "n1": 0, "n2": 0}, odds, m.has_answer_by_question(data)
    ) == (50.0, 0.0)
    forced = m.apply_null_threshold(
        {"a1": 1, "n1": 0}, {"a1": 2.0, "n1": 2.0}, {"a1": True, "n1": False}, 1.0
    )
    assert forced == {"a1": 0.0, "n1": 1.0}


def test_v2_missing_prediction_names_the_question():
    data = dataset(("a1", ["x"]), ("n1", []))
    with pytest.raises(ValueError, match="'n1'"):
        m.evaluate_v2(data, {"a1": "x"})
    with pytest.raises(ValueError, match="null odds .*'a1'"):
        m.evaluate_v2(data, {"a1": "x", "n1": ""}, {"n1": 0.0})


@pytest.mark.parametrize("case", ["postprocess_v2.0", "squad_v2_tiny"])
def test_v2_equals_the_original_on_its_predictions(case):
    fixture = SQUAD / case
    data_file = "dev-v2.0-subset.json" if case == "postprocess_v2.0" else "../dev-v2.0-small.json"
    data = load_json(fixture / data_file)
    predictions = load_json(fixture / "predictions.json")
    expected = load_json(fixture / "eval_results.json")
    # The original scores its final predictions with the null odds at threshold 1.0.
    scores = m.evaluate_v2(data, predictions, load_json(fixture / "null_odds.json"))
    assert_scores(scores, {k: expected[k] for k in ("exact", "f1", "total")})
    assert scores["HasAns_total"] + scores["NoAns_total"] == scores["total"]


def test_v2_official_script_without_null_odds_agrees_on_the_subset():
    fixture = SQUAD / "postprocess_v2.0"
    data = load_json(fixture / "dev-v2.0-subset.json")
    scores = m.evaluate_v2(data, load_json(fixture / "predictions.json"))
    expected = load_json(fixture / "eval_results.json")
    assert_scores(scores, {"exact": expected["exact"], "f1": expected["f1"]})
    # Exact 20/31 and F1 as a fraction over 31 questions.
    assert scores["exact"] == pytest.approx(100.0 * 20 / 31)


def test_race_accuracy_overall_and_per_level_on_the_original_dev_questions():
    features = load_json(RACE / "features_dev_seq128_qa32.json")["features"]
    ids = [f["example_id"] for f in features]
    labels = [f["label_id"] for f in features]
    expected = np.load(RACE / "race_tiny" / "expected.npz")
    scores = race.race_metrics(ids, labels, expected["logits"])
    # Argmax per question: middle 3, 1, 3 vs labels 1, 2, 2 (none right); high 0, 3, 2, 0, 0, 2
    # vs 1, 1, 2, 0, 3, 0 (2 right).
    assert scores["num_examples"] == 9
    assert (scores["middle_accuracy"], scores["middle_num_examples"]) == (0.0, 3)
    assert scores["high_accuracy"] == pytest.approx(2 / 6) and scores["high_num_examples"] == 6
    assert scores["eval_accuracy"] == pytest.approx(2 / 9)
    assert scores["eval_loss"] == pytest.approx(float(expected["loss"]), rel=SCORES)


def test_race_levels_from_ids_and_bad_input():
    assert race.race_level("middle_dev_1.txt") == "middle"
    assert race.race_level("high1234.txt") == "high"
    assert race.race_level("RACE/dev/high/17.txt") == "high"
    with pytest.raises(ValueError, match="'college1.txt'"):
        race.race_level("college1.txt")
    scores = race.race_metrics(["high1.txt", "high2.txt"], [0, 1], [[2, 1, 0, 0], [2, 2, 0, 0]])
    # Ties go to the first option (as tf.argmax): the second question is wrong.
    assert scores["eval_accuracy"] == 0.5 and "middle_accuracy" not in scores
    with pytest.raises(ValueError, match="label 4"):
        race.race_metrics(["high1.txt"], [4], [[0, 0, 0, 0]])
    with pytest.raises(ValueError, match="same questions"):
        race.race_metrics(["high1.txt"], [0, 1], [[0, 0, 0, 0]])


def test_squad_baseline_is_the_empty_answer_scored_officially():
    import gzip
    from types import SimpleNamespace

    from albert_tf.tasks.squad.scoring import SquadDevScorer

    def scorer(version: str, path) -> tuple[SquadDevScorer, list]:
        opened = gzip.open(path, "rt") if path.suffix == ".gz" else open(path)
        with opened as f:
            dataset = json.load(f)["data"]
        questions = [qa for a in dataset for p in a["paragraphs"] for qa in p["qas"]]
        inputs = SimpleNamespace(
            dataset=dataset, examples=[SimpleNamespace(qas_id=qa["id"]) for qa in questions]
        )
        return SquadDevScorer(
            f"squad_{version}", SimpleNamespace(version=version), inputs
        ), questions

    v2, questions = scorer("v2", SQUAD / "dev-v2.0-small.json")
    unanswerable = sum(qa.get("is_impossible", False) for qa in questions) / len(questions)
    assert 0 < unanswerable < 1
    assert v2.baseline["exact"] == pytest.approx(100 * unanswerable)
    assert v2.baseline["NoAns_exact"] == 100 and v2.baseline["HasAns_f1"] == 0
    v1, _ = scorer("v1", FIXTURES / "squad" / "dev-v1.1.json.gz")
    # A few gold answers normalise to nothing ("the"): the empty answer matches those alone.
    assert v1.baseline["f1"] == 0 and 0 <= v1.baseline["exact_match"] < 0.1
