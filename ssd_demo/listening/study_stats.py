"""The statistics a paper reports for a study, from its ratings (attention checks left out).

- MUSHRA and MOS, per system: the mean over raters of each rater's mean score, with a 95% Student-t
  interval over raters. Each rater counts once, so raters who use the scale differently widen the
  interval instead of being hidden by many correlated ratings (the items are the study's fixed set).
- Paired tests (MUSHRA): Wilcoxon signed-rank (scipy.stats.wilcoxon, two-sided) on the raters' mean
  scores, each system against the reference and every pair of systems under test; one family, whose
  p-values are Holm-corrected together (`holm`). Pairs with no difference at all get p = 1.
  The differences are exact: each rater's mean is the fraction (sum of whole-number scores) / count, and
  the difference of two fractions is rounded to a float only after it is formed, so raters whose means
  differ by the same amount tie (with float means, 60.0 - 58.7 and 60.1 - 58.8 differ in the last bit
  and would get distinct ranks). Zero differences are dropped (zero_method "wilcox"); with n <= 50
  nonzero differences and no ties the p-value is the exact null distribution; with ties (or zeros) and
  n <= 13 it is exact over all sign permutations of the tied (mid-)ranks; otherwise it is the normal
  approximation with the tie correction of the variance and no continuity correction (scipy's "auto";
  its permutation case is computed as a convolution, `signed_rank`, equal to scipy's to the last bit).
- ABX, per pair: accuracy with its exact (Clopper-Pearson) 95% interval and the one-sided binomial
  p-value of "no better than chance" (scipy.stats.binomtest, p = 0.5); Holm over the pairs. Those trials
  are pooled over raters, as ABX studies report; pooling treats every trial as independent, which
  overstates significance when raters differ (a few who hear it and many who do not). So each pair also
  gets the test across raters that does not pool: a one-sided one-sample t test of the raters'
  accuracies against 0.5 (each rater counts once; Holm over the pairs), and per rater: accuracy, the
  exact one-sided binomial p and d' under the independent-observation model of ABX (Macmillan &
  Creelman, Detection Theory, ch. 9: P(correct) = Phi(d'/sqrt 2) Phi(d'/2) + Phi(-d'/sqrt 2) Phi(-d'/2),
  solved for d'; a rater with all or none right is moved half a trial in, the usual 1/(2N) correction;
  at or below chance d' = 0).
- A/B, per pair: wins, ties and an exact two-sided sign test on the wins (ties dropped); Holm over pairs.
- Breakdowns: each rater's mean per system, each item's mean per system.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass


from .signed_rank import signed_rank_test
from .study import Study
from .study_store import RatingRow

CONFIDENCE = 0.95


def _stats():
    """scipy.stats, imported when a study's numbers are computed: importing it costs about 0.5 s of the app's
    start-up."""
    from scipy import stats

    return stats

def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input order: sort ascending, multiply the i-th smallest
    (i from 0) by (m - i), carry the running maximum up, cap at 1."""
    m = len(p_values)
    adjusted = [0.0] * m
    running = 0.0
    for rank, index in enumerate(sorted(range(m), key=lambda i: p_values[i])):
        running = max(running, min(1.0, (m - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted


@dataclass(frozen=True)
class SystemMean:
    system: str
    raters: int
    ratings: int
    mean: float
    low: float | None  # 95% t interval over raters' means, clipped to the scale; None with fewer than two raters
    high: float | None


@dataclass(frozen=True)
class PairedTest:
    system_x: str
    system_y: str
    raters: int
    mean_difference: float  # x minus y, over raters
    statistic: float | None
    p_value: float
    p_holm: float


@dataclass(frozen=True)
class AbxResult:
    system_x: str
    system_y: str
    trials: int
    correct: int
    accuracy: float
    low: float
    high: float
    p_value: float  # one-sided: better than chance
    p_holm: float
    raters: int = 0
    mean_rater_accuracy: float | None = None  # the raters' accuracies, each rater once
    rater_t_p: float | None = None  # one-sided t test of the raters' accuracies > 0.5; None: < 2 raters or no spread
    rater_t_p_holm: float | None = None


@dataclass(frozen=True)
class AbxRater:
    """One rater's ABX trials of one pair."""

    system_x: str
    system_y: str
    rater: str
    trials: int
    correct: int
    accuracy: float
    d_prime: float  # independent-observation model (see the module's docstring)
    p_value: float  # exact one-sided binomial: better than chance


@dataclass(frozen=True)
class AbResult:
    system_x: str
    system_y: str
    trials: int
    wins_x: int
    wins_y: int
    ties: int
    p_value: float | None  # exact two-sided sign test; None without a preference
    p_holm: float | None


@dataclass(frozen=True)
class StudyStatistics:
    raters: int
    mushra: tuple[SystemMean, ...]
    mushra_tests: tuple[PairedTest, ...]
    mos: tuple[SystemMean, ...]
    abx: tuple[AbxResult, ...]
    ab: tuple[AbResult, ...]
    per_rater: dict[str, dict[str, float]]  # {rater: {"kind system": mean}}
    per_item: dict[str, dict[str, float]]  # {item: {"kind system": mean}}
    abx_raters: tuple[AbxRater, ...] = ()


def rater_means(rows: Sequence[RatingRow], kind: str) -> dict[str, dict[str, float]]:
    """{system: {rater: mean score}} for one kind of trial."""
    scores: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        if row.kind == kind:
            scores[row.system][row.rater].append(row.score)
    return {system: {rater: statistics.fmean(v) for rater, v in by_rater.items()} for system, by_rater in scores.items()}


def exact_rater_means(rows: Sequence[RatingRow], kind: str) -> dict[str, dict[str, Fraction]]:
    """{system: {rater: mean score}} as exact fractions (scores are whole numbers; a float score is taken at
    its exact binary value), so differences of means are exact and equal differences tie."""
    sums: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(lambda: [Fraction(0), 0]))
    for row in rows:
        if row.kind == kind:
            total = sums[row.system][row.rater]
            total[0] += Fraction(row.score)
            total[1] += 1
    return {system: {rater: total / count for rater, (total, count) in by_rater.items()}
            for system, by_rater in sums.items()}


SCALE_BOUNDS = {"mushra": (0.0, 100.0), "mos": (1.0, 5.0)}  # a t interval may run past the scale: clipped to it
FEW_RATERS = 5  # below this, the report says the intervals are rough


def system_means(rows: Sequence[RatingRow], kind: str, order: Sequence[str]) -> tuple[SystemMean, ...]:
    means = rater_means(rows, kind)
    counts = defaultdict(int)
    for row in rows:
        if row.kind == kind:
            counts[row.system] += 1
    result = []
    for system in sorted(means, key=lambda s: (order.index(s) if s in order else len(order), s)):
        values = list(means[system].values())
        mean, low, high = t_interval(values)
        if low is not None and kind in SCALE_BOUNDS:
            bottom, top = SCALE_BOUNDS[kind]
            low, high = max(low, bottom), min(high, top)
        result.append(SystemMean(system, len(values), counts[system], mean, low, high))
    return tuple(result)


def t_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float | None, float | None]:
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, None, None
    half = _stats().t.ppf(0.5 + confidence / 2, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def paired_tests(rows: Sequence[RatingRow], study: Study) -> tuple[PairedTest, ...]:
    means = exact_rater_means(rows, "mushra")
    if study.reference not in means:
        return ()
    against_reference = [(s, study.reference) for s in (*study.systems, *study.anchors) if s in means]
    between = list(itertools.combinations([s for s in study.systems if s in means], 2))
    raw = []
    for x, y in against_reference + between:
        raters = sorted(set(means[x]) & set(means[y]))
        exact = [means[x][r] - means[y][r] for r in raters]  # Fractions: equal differences are equal
        if not exact:
            continue
        if all(d == 0 for d in exact):
            statistic, p = None, 1.0
        else:
            statistic, p = signed_rank_test(exact)  # scipy's "auto" p-value, its permutation case made fast
        raw.append((x, y, len(raters), float(sum(exact) / len(exact)), statistic, p))
    adjusted = holm([r[-1] for r in raw])
    return tuple(PairedTest(x, y, n, d, s, p, a) for (x, y, n, d, s, p), a in zip(raw, adjusted))


def _pair_rows(rows: Sequence[RatingRow], kind: str) -> dict[tuple[str, str], list[RatingRow]]:
    pairs: dict[tuple[str, str], list[RatingRow]] = defaultdict(list)
    for row in rows:
        if row.kind == kind and row.other_system is not None:
            pairs[tuple(sorted((row.system, row.other_system)))].append(row)
    return pairs


def abx_proportion_correct(d_prime: float) -> float:
    """P(correct) of an ABX trial at sensitivity d' under the independent-observation model: the order of A
    and B is judged right with P = Phi(d'/sqrt 2) (a - b has variance 2), X's category with Phi(d'/2), and
    the answer is right when both or neither are (Macmillan & Creelman)."""
    phi = _stats().norm.cdf
    return float(phi(d_prime / math.sqrt(2)) * phi(d_prime / 2) + phi(-d_prime / math.sqrt(2)) * phi(-d_prime / 2))


def abx_d_prime(correct: int, trials: int) -> float:
    """d' from `correct` of `trials` ABX answers (`abx_proportion_correct` inverted); 0 at or below chance,
    all or none right moved half a trial in (1/(2N)) so that d' stays finite."""
    share = min(max(correct, 0.5), trials - 0.5) / trials
    if share <= 0.5:
        return 0.0
    from scipy.optimize import brentq  # deferred, as `_stats`

    return float(brentq(lambda d: abx_proportion_correct(d) - share, 0.0, 20.0))


def abx_raters(rows: Sequence[RatingRow]) -> tuple[AbxRater, ...]:
    """Each rater's ABX result per pair: accuracy, d', exact one-sided binomial p."""
    found = []
    for (x, y), pair_rows in sorted(_pair_rows(rows, "abx").items()):
        by_rater: dict[str, list[float]] = defaultdict(list)
        for row in pair_rows:
            by_rater[row.rater].append(row.score)
        for rater, scores in sorted(by_rater.items()):
            correct = int(sum(scores))
            p = float(_stats().binomtest(correct, len(scores), 0.5, alternative="greater").pvalue)
            found.append(AbxRater(x, y, rater, len(scores), correct, correct / len(scores),
                                  abx_d_prime(correct, len(scores)), p))
    return tuple(found)


def _across_raters(accuracies: Sequence[float]) -> float | None:
    """One-sided one-sample t test of the raters' accuracies against chance (None: < 2 raters or no spread)."""
    if len(accuracies) < 2 or len(set(accuracies)) == 1:
        return None
    return float(_stats().ttest_1samp(accuracies, 0.5, alternative="greater").pvalue)


def abx_results(rows: Sequence[RatingRow]) -> tuple[AbxResult, ...]:
    raters = abx_raters(rows)
    raw = []
    for (x, y), pair_rows in sorted(_pair_rows(rows, "abx").items()):
        correct = int(sum(row.score for row in pair_rows))
        test = _stats().binomtest(correct, len(pair_rows), 0.5, alternative="greater")
        interval = _stats().binomtest(correct, len(pair_rows), 0.5).proportion_ci(CONFIDENCE, method="exact")
        accuracies = [r.accuracy for r in raters if (r.system_x, r.system_y) == (x, y)]
        raw.append(((x, y, len(pair_rows), correct, correct / len(pair_rows), interval.low, interval.high,
                     float(test.pvalue)), (len(accuracies), statistics.fmean(accuracies), _across_raters(accuracies))))
    pooled_holm = holm([pooled[-1] for pooled, _ in raw])
    tested = [i for i, (_, across) in enumerate(raw) if across[-1] is not None]
    across_holm = dict(zip(tested, holm([raw[i][1][-1] for i in tested])))
    return tuple(AbxResult(*pooled, pooled_p_holm, *across, across_holm.get(i))
                 for i, ((pooled, across), pooled_p_holm) in enumerate(zip(raw, pooled_holm)))


def ab_results(rows: Sequence[RatingRow]) -> tuple[AbResult, ...]:
    raw = []
    for (x, y), pair_rows in sorted(_pair_rows(rows, "ab").items()):
        wins_x = sum(1 for row in pair_rows if row.system == x and row.score == 1)
        wins_y = sum(1 for row in pair_rows if row.system == y and row.score == 1)
        ties = sum(1 for row in pair_rows if row.system == x and row.score == 0.5)
        p = float(_stats().binomtest(wins_x, wins_x + wins_y, 0.5).pvalue) if wins_x + wins_y else None
        raw.append((x, y, wins_x + wins_y + ties, wins_x, wins_y, ties, p))
    tested = [r for r in raw if r[-1] is not None]
    adjusted = dict(zip([id(r) for r in tested], holm([r[-1] for r in tested])))
    return tuple(AbResult(*r, adjusted.get(id(r))) for r in raw)


def breakdown(rows: Sequence[RatingRow], key) -> dict[str, dict[str, float]]:
    """{key(row): {"kind system": mean score}} over MUSHRA and MOS ratings."""
    scores: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        if row.kind in ("mushra", "mos"):
            scores[key(row)][f"{row.kind} {row.system}"].append(row.score)
    return {k: {column: round(statistics.fmean(v), 3) for column, v in sorted(by.items())} for k, by in scores.items()}


def study_statistics(rows: Sequence[RatingRow], study: Study) -> StudyStatistics:
    """Statistics over `rows` (pass the rows of the raters to include); attention checks are left out here."""
    rows = [row for row in rows if not row.attention_check]
    order = (study.reference, *study.systems, *study.anchors)
    return StudyStatistics(
        raters=len({row.rater for row in rows}), mushra=system_means(rows, "mushra", order),
        mushra_tests=paired_tests(rows, study), mos=system_means(rows, "mos", order), abx=abx_results(rows),
        ab=ab_results(rows), per_rater=breakdown(rows, lambda row: row.rater),
        per_item=breakdown(rows, lambda row: row.item_id), abx_raters=abx_raters(rows))
