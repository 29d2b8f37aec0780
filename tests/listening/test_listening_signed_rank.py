"""The signed-rank test's exact permutation case, computed as a convolution: equal to scipy's to the last bit,
and a MUSHRA study's paired tests no longer run scipy's permutation test (2**13 sign flips a pair)."""

from __future__ import annotations

import random
from fractions import Fraction

import pytest
from scipy import stats as scipy_stats

from ssd_demo.listening.signed_rank import null_counts, signed_rank_test
from ssd_demo.listening.study import parse_study
from ssd_demo.listening.study_stats import paired_tests
from ssd_demo.listening.study_store import RatingRow


def scipy_reference(differences):
    test = scipy_stats.wilcoxon(differences, zero_method="wilcox", correction=False, alternative="two-sided",
                                method="auto")
    return float(test.statistic), float(test.pvalue)


def test_the_null_counts_are_the_sign_patterns_by_rank_sum():
    assert null_counts([2, 4, 6]) == [1, 0, 1, 0, 1, 0, 2, 0, 1, 0, 1, 0, 1]  # ranks 1, 2, 3 doubled
    assert sum(null_counts([3, 3, 3, 3])) == 16  # tied mid-ranks 1.5 .. : every pattern counted once


def test_tied_and_zero_differences_give_scipys_statistic_and_p_value_to_the_last_bit():
    rng = random.Random(7)
    cases = [[1.0, 1.0, -1.0], [0.0, 2.0, 2.0, -0.5], [0.5] * 13, [1.0, -1.0] * 6 + [0.0], [3.0, 0.0, 0.0]]
    while len(cases) < 60:  # n = 13 (the largest permutation case) is in the study test below
        n = rng.choice([2, 3, 4, 5, 6, 7, 8, 9, 14, 20])  # 14 and 20: the normal approximation, scipy's
        differences = [float(Fraction(rng.randint(-5, 5), rng.choice([1, 2, 3]))) for _ in range(n)]
        if any(differences):
            cases.append(differences)
    cases.append([0.25, -1.5, 2.0, 3.0])  # no ties, no zeros: scipy's exact distribution
    for differences in cases:
        assert signed_rank_test(differences) == scipy_reference(differences), differences


def test_all_zero_differences_are_refused():
    with pytest.raises(ValueError, match="nonzero difference"):
        signed_rank_test([0.0, 0.0])


def test_a_thirteen_rater_mushra_with_ties_never_runs_scipys_permutation_test(monkeypatch):
    systems = [f"SSD beta=0.{n} K=4" for n in range(1, 8)]
    study = parse_study(f'name = "big"\nsystems = {systems!r}\nsentences = ["One.", "Two."]\n[mushra]\n'
                        .replace("'", '"'))
    rng = random.Random(3)
    rows = []
    for rater in range(13):
        for item in range(2):
            for system in ("AR", *systems, *study.anchors):
                score = 100 if system == "AR" else 10 * rng.randint(3, 9)  # multiples of ten: many tied differences
                rows.append(RatingRow("big", f"s{rater}", f"r{rater}", item, "mushra", f"i{item}", False, system, system,
                                      None, score, 1, 10.0, ""))

    def refuse(*args, **kwargs):
        raise AssertionError("scipy's permutation test ran")

    with monkeypatch.context() as patched:
        patched.setattr(scipy_stats, "permutation_test", refuse)
        tests = paired_tests(rows, study)
    assert len(tests) == len(systems) + 1 + 21  # each system and the anchor vs AR, then every pair of systems
    for test in tests[:3]:  # scipy's permutation test takes most of a second each: three are compared
        assert (test.statistic, test.p_value) == scipy_reference(
            [float(d) for d in _differences(rows, test.system_x, test.system_y)])


def _differences(rows, x, y):
    means = {}
    for row in rows:
        means.setdefault((row.rater, row.system), []).append(row.score)
    raters = sorted({row.rater for row in rows})
    return [Fraction(int(sum(means[(r, x)])), len(means[(r, x)])) - Fraction(int(sum(means[(r, y)])), len(means[(r, y)]))
            for r in raters]
