"""GLUE metrics against values computed by hand (worked out in the comments)."""

import math

import numpy as np
import pytest

from albert_tf.tasks.glue import metrics as m

LABELS = [1, 1, 0, 0, 1]
PREDICTIONS = [1, 0, 1, 0, 1]  # TP 2, TN 1, FP 1, FN 1


def test_accuracy_f1_matthews_by_hand():
    assert m.accuracy(LABELS, PREDICTIONS) == pytest.approx(3 / 5)
    assert m.f1_score(LABELS, PREDICTIONS) == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))  # 2/3
    # (2*1 - 1*1) / sqrt(3 * 3 * 2 * 2) = 1/6
    assert m.matthews_corrcoef(LABELS, PREDICTIONS) == pytest.approx(1 / 6)
    assert m.matthews_corrcoef([1, 0, 1], [1, 0, 1]) == pytest.approx(1.0)
    assert m.matthews_corrcoef([1, 0], [0, 1]) == pytest.approx(-1.0)


def test_undefined_cases_follow_the_original():
    assert m.matthews_corrcoef([1, 0, 1], [1, 1, 1]) == 0.0  # div_no_nan
    assert m.f1_score([0, 0], [0, 0]) == 0.0
    assert math.isnan(m.pearson([1, 1, 1], [1, 2, 3]))


def test_pearson_and_spearman_by_hand():
    # dx = [-1.5, -.5, .5, 1.5], dy = [-3, -1, 0, 4]: 11 / sqrt(5 * 26)
    assert m.pearson([1, 2, 3, 4], [2, 4, 5, 9]) == pytest.approx(11 / math.sqrt(130))
    # Ranks [1, 2.5, 2.5, 4] and [1, 3, 2, 4]: 4.5 / sqrt(4.5 * 5)
    assert m.spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(4.5 / math.sqrt(22.5))
    assert m.spearman([1, 2, 3, 4], [1, 4, 9, 16]) == pytest.approx(1.0)  # monotone, not linear
    assert m.pearson([1, 2, 3, 4], [1, 4, 9, 16]) < 0.99


def test_rankdata_averages_ties():
    np.testing.assert_array_equal(m.rankdata([10, 20, 10, 30, 20, 20]), [1.5, 4, 1.5, 6, 4, 4])
    np.testing.assert_array_equal(m.rankdata([3.0, 1.0, 2.0]), [3, 1, 2])


def test_task_metrics_keys_and_loss():
    logits = np.array([[0.0, 0.0], [2.0, 0.0], [0.0, 3.0]])
    labels = np.array([0, 0, 1])
    mrpc = m.task_metrics("mrpc", labels, logits)
    # argmax ties pick class 0; loss: ln 2, ln(1 + e^-2), ln(1 + e^-3)
    expected_loss = (math.log(2) + math.log(1 + math.exp(-2)) + math.log(1 + math.exp(-3))) / 3
    assert mrpc["eval_accuracy"] == 1.0 and mrpc["f1"] == 1.0
    assert mrpc["eval_loss"] == pytest.approx(expected_loss)
    assert mrpc["num_examples"] == 3
    cola = m.task_metrics("cola", labels, logits)
    assert set(cola) == {"num_examples", "eval_accuracy", "eval_loss", "matthew_corr"}
    assert "f1" not in m.task_metrics("sst-2", labels, logits)
    stsb = m.task_metrics("sts-b", np.array([1.0, 2.0, 4.0]), np.array([[1.5], [2.0], [3.0]]))
    assert stsb["MSE"] == pytest.approx((0.25 + 0 + 1) / 3) == stsb["eval_loss"]
    assert stsb["pearson"] == pytest.approx(m.pearson([1.5, 2, 3], [1, 2, 4]))
    assert stsb["spearman"] == pytest.approx(1.0)


def test_selection_metric_is_the_originals():
    assert m.selection_metric("cola") == "matthew_corr"
    assert m.selection_metric("sts-b") == "pearson"
    assert m.selection_metric("mrpc") == m.selection_metric("rte") == "eval_accuracy"


def test_majority_baseline():
    # Train majority is 1; dev [1, 0, 0, 0]: accuracy 1/4, F1 = 2*1 / (2*1 + 3 + 0) = 0.4
    baseline = m.majority_baseline("mrpc", [1, 1, 0], [1, 0, 0, 0])
    assert baseline == {"num_examples": 4, "eval_accuracy": 0.25, "f1": pytest.approx(0.4)}
    assert m.majority_baseline("cola", [1, 1, 0], [1, 0])["matthew_corr"] == 0.0
    stsb = m.majority_baseline("sts-b", [1.0, 3.0], [2.0, 4.0])  # always 2.0
    assert stsb["MSE"] == pytest.approx(2.0) and math.isnan(stsb["pearson"])
