"""ABX per rater and across raters: d' under the independent-observation model (checked by simulating that
model's decision rule), and a test across raters that does not pool trials (a few raters who hear the
difference among many who do not make the pooled binomial significant; the raters' t test is not)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as scipy_stats

from ssd_demo.listening.study_stats import abx_d_prime, abx_proportion_correct, abx_raters, abx_results
from ssd_demo.listening.study_store import RatingRow

X, Y = "AR", "SSD beta=0.3 K=4"


def _rows(answers: dict[str, list[int]]) -> list[RatingRow]:
    """ABX rows (score 1: right) of each rater for the pair (X, Y)."""
    return [RatingRow("s", f"session-{rater}", rater, index, "abx", f"item{index}", False, "X", X, Y, float(score), 3,
                      4.0, "2026-12-04T00:00:00Z")
            for rater, scores in answers.items() for index, score in enumerate(scores)]


@pytest.mark.parametrize("d_prime", [0.5, 1.0, 2.0, 3.0])
def test_the_abx_formula_is_the_independent_observation_model(d_prime):
    # Simulate the model itself: S1 ~ N(0, 1), S2 ~ N(d', 1); the order of A and B is judged by the sign of
    # a - b, X's category by x against d'/2; the answer is right when both judgements are right or both wrong.
    rng = np.random.default_rng(7)
    n = 400_000
    a_is_s1 = rng.random(n) < 0.5
    x_is_a = rng.random(n) < 0.5
    a = rng.normal(np.where(a_is_s1, 0.0, d_prime))
    b = rng.normal(np.where(a_is_s1, d_prime, 0.0))
    x_is_s1 = np.where(x_is_a, a_is_s1, ~a_is_s1)
    x = rng.normal(np.where(x_is_s1, 0.0, d_prime))
    judged_a_s1 = a < b
    judged_x_s1 = x < d_prime / 2
    answer_x_is_a = judged_a_s1 == judged_x_s1
    simulated = float(np.mean(answer_x_is_a == x_is_a))
    assert abx_proportion_correct(d_prime) == pytest.approx(simulated, abs=0.004)


def test_d_prime_inverts_the_model_and_stays_finite():
    assert abx_proportion_correct(0.0) == pytest.approx(0.5)
    assert abx_d_prime(5, 10) == 0.0 and abx_d_prime(2, 10) == 0.0  # at or below chance
    for correct, trials in ((7, 10), (15, 20), (33, 40)):
        assert abx_proportion_correct(abx_d_prime(correct, trials)) == pytest.approx(correct / trials, abs=1e-9)
    perfect = abx_d_prime(10, 10)  # all right: half a trial in, 9.5/10
    assert np.isfinite(perfect) and abx_proportion_correct(perfect) == pytest.approx(0.95, abs=1e-9)
    assert abx_d_prime(9, 10) < abx_d_prime(19, 20) < perfect * 1.5


def test_two_raters_who_hear_it_among_eight_who_do_not_are_not_a_significant_study():
    answers = {f"hears-{i}": [1] * 20 for i in range(2)}
    answers |= {f"guesses-{i}": [1, 0] * 5 for i in range(8)}
    rows = _rows(answers)
    (result,) = abx_results(rows)
    assert (result.correct, result.trials) == (80, 120)
    assert result.p_value == pytest.approx(scipy_stats.binomtest(80, 120, 0.5, alternative="greater").pvalue)
    assert result.p_value < 0.001  # pooled: "highly significant"
    accuracies = [1.0, 1.0] + [0.5] * 8
    expected = scipy_stats.ttest_1samp(accuracies, 0.5, alternative="greater").pvalue
    assert result.raters == 10 and result.mean_rater_accuracy == pytest.approx(0.6)
    assert result.rater_t_p == pytest.approx(expected) and result.rater_t_p > 0.05  # across raters: not
    assert result.rater_t_p_holm == pytest.approx(expected)  # one pair: Holm changes nothing
    per_rater = {r.rater: r for r in abx_raters(rows)}
    assert per_rater["hears-0"].correct == 20 and per_rater["hears-0"].p_value == pytest.approx(0.5 ** 20)
    assert per_rater["guesses-3"].accuracy == 0.5 and per_rater["guesses-3"].d_prime == 0.0
    assert per_rater["hears-1"].d_prime == pytest.approx(abx_d_prime(20, 20))


def test_no_t_test_without_two_raters_or_any_spread():
    (one,) = abx_results(_rows({"only": [1, 1, 0, 1]}))
    assert one.raters == 1 and one.rater_t_p is None and one.rater_t_p_holm is None
    (same,) = abx_results(_rows({"a": [1, 0], "b": [0, 1]}))
    assert same.raters == 2 and same.rater_t_p is None


ABX_STUDY = """
name = "abx-only"
systems = ["SSD beta=0.3 K=4"]
items_per_rater = 6
sentences = ["One.", "Two.", "Three.", "Four.", "Five.", "Six."]
[abx]
pairs = [["AR", "SSD beta=0.3 K=4"]]
"""


def test_the_report_shows_each_rater_and_the_test_across_raters():
    from ssd_demo.listening.study import parse_study
    from ssd_demo.listening.study_report import format_results
    from ssd_demo.listening.study_results import results_from_ratings

    study = parse_study(ABX_STUDY, "abx.toml")
    rows = [RatingRow("abx-only", r.session_id, r.rater_id, r.trial_index, "abx", r.item_id, False, "X", r.system,
                      r.other_system, r.score, 3, 4.0, r.submitted_at)
            for r in _rows({"hears": [1] * 6, "guesses": [1, 0, 1, 0, 0, 1], "half": [1, 1, 1, 0, 0, 0]})]
    text = "\n".join(format_results(results_from_ratings(rows, study)))
    assert "Across raters, not pooled" in text and "3 raters, mean accuracy 67%" in text
    assert "hears" in text and "6/6 = 100%" in text and "d' " in text
    expected = scipy_stats.ttest_1samp([1.0, 0.5, 0.5], 0.5, alternative="greater").pvalue
    assert f"{expected:.3f}"[:4] in text
