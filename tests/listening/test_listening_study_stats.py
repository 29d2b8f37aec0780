"""A study's statistics and screening: Holm by hand, a simulated study whose careless raters the screening
finds exactly, interval coverage over repeated simulations, and the export round trip."""

from __future__ import annotations

import random

import numpy as np
import pytest
from scipy import stats as scipy_stats

from ssd_demo.listening import study_sessions
from ssd_demo.listening.screening import screen
from ssd_demo.listening.study_store import ListeningStore
from ssd_demo.listening.study import LOWPASS_ANCHOR, parse_study
from ssd_demo.listening.study_results import (read_long_csv, read_summary_json, results_from_ratings, ratings_from_long,
                                              study_results, summary, write_long_csv, write_summary_json)
from ssd_demo.listening import study_stats
from ssd_demo.listening.study_stats import holm, paired_tests, study_statistics
from ssd_demo.listening.study_store import RatingRow
from ssd_demo.listening.stimuli import tone_renderer
from ssd_demo.listening.study_setup import create_study
from support.stats import sample_count

GOOD, FAR = "SSD beta=0.3 K=4", "SSD beta=1.0 K=4"
TRUE_MEANS = {GOOD: 65.0, FAR: 40.0, LOWPASS_ANCHOR: 20.0}
SENTENCES = [f"Sentence number {n}." for n in range(1, 13)]
STUDY = f"""
name = "sim"
systems = ["{GOOD}", "{FAR}"]
items_per_rater = 12
sentences = {SENTENCES!r}
[mushra]
""".replace("'", '"')


def rater_kind(rater: str, rng: np.random.Generator) -> str | float:
    """A careless rater's kind is the rater id's prefix ("random", "reference-low"); an attentive rater gets
    a personal offset (raters use the scale differently)."""
    if rater.startswith("rater"):
        return float(rng.normal(0, 5))
    return rater.rsplit("-", 1)[0]


def rater_scores(kind: str | float, rng: np.random.Generator) -> dict[str, float]:
    """One rater's scores of one item: an attentive rater (offset + noise; the reference near 100), a random
    one (anything from 0 to 100) or one who rates the reference low (everything around 50)."""
    if kind == "random":
        return {s: float(rng.integers(0, 101)) for s in ("AR", *TRUE_MEANS)}
    if kind == "reference-low":
        return {s: float(np.clip(round(rng.normal(50, 15)), 0, 100)) for s in ("AR", *TRUE_MEANS)}
    scores = {s: float(np.clip(round(mean + kind + rng.normal(0, 8)), 0, 100)) for s, mean in TRUE_MEANS.items()}
    scores["AR"] = float(np.clip(round(rng.normal(98, 2.5)), 0, 100))
    return scores


def simulated_rows(raters: list[str], rng: np.random.Generator, study) -> list[RatingRow]:
    """MUSHRA ratings of 12 items by each rater."""
    rows = []
    for index, rater in enumerate(raters):
        kind = rater_kind(rater, rng)
        for item in range(12):
            for system, score in rater_scores(kind, rng).items():
                rows.append(RatingRow(study="sim", session_id=f"s{index}", rater_id=rater, trial_index=item, kind="mushra",
                                      item_id=f"s{item + 1:03d}", attention_check=False, label=system, system=system,
                                      other_system=None, score=score, plays=1, trial_seconds=20.0, submitted_at=""))
    return rows


CARELESS = ["random-1", "random-2", "random-3", "reference-low-1", "reference-low-2"]
RATERS = [f"rater-{n:02d}" for n in range(40)] + CARELESS


def test_holm_matches_a_hand_computation():
    # Sorted: 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06, 0.04*1 = 0.04 -> max(0.06, 0.04) = 0.06.
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # capped at 1
    assert holm([]) == []


def test_paired_tests_are_wilcoxon_on_raters_means_with_holm():
    study = parse_study(STUDY)
    rng = np.random.default_rng(0)
    rows = simulated_rows([f"rater-{n}" for n in range(8)], rng, study)
    tests = paired_tests(rows, study)
    assert [(t.system_x, t.system_y) for t in tests] == [(GOOD, "AR"), (FAR, "AR"), (LOWPASS_ANCHOR, "AR"), (GOOD, FAR)]
    for test in tests:
        x = [np.mean([r.score for r in rows if r.rater == rater and r.system == test.system_x]) for rater in sorted({r.rater for r in rows})]
        y = [np.mean([r.score for r in rows if r.rater == rater and r.system == test.system_y]) for rater in sorted({r.rater for r in rows})]
        assert test.p_value == pytest.approx(scipy_stats.wilcoxon(np.subtract(x, y)).pvalue)
    assert [t.p_holm for t in tests] == pytest.approx(holm([t.p_value for t in tests]))


@pytest.mark.stats
def test_a_simulated_study_through_the_store_excludes_exactly_the_careless_raters(tmp_path, monkeypatch):
    monkeypatch.setattr(study_sessions, "LISTEN_FRACTION", 0.0)
    (tmp_path / "sim.toml").write_text(STUDY, encoding="utf-8")
    root = tmp_path / "data"
    study, _ = create_study(tmp_path / "sim.toml", root=root, render=tone_renderer(seconds=0.05))
    rng = np.random.default_rng(1)
    with ListeningStore(root / "listening.sqlite3") as store:
        runner = study_sessions.StudyRegistry(store, root).runner("sim")
        for n, rater in enumerate(RATERS):
            kind = rater_kind(rater, rng)
            session = runner.start_session(rater, seed=n)
            view = runner.next_view(session.session_id)
            while view is not None:
                scores = rater_scores(kind, rng)
                for condition in view.conditions:
                    if condition.must_play:
                        runner.fetch_clip(session.session_id, view.trial_id, condition.label)
                        runner.record_play(session.session_id, view.trial_id, condition.label)
                systems = {c.label: c.system for c in store.get_study_trial(session.session_id, view.trial_id).conditions}
                answer = {"scores": {c.label: int(scores[systems[c.label]]) for c in view.conditions if c.rated}}
                view = runner.submit(session.session_id, view.trial_id, answer)
        results = study_results(store, study)
    assert results.excluded_raters == set(CARELESS)
    assert {e.rule for e in results.exclusions if e.rater.startswith("reference-low")} >= {"hidden-reference"}
    assert results.results.raters == 40 and results.results_all_raters.raters == 45
    kept = {m.system: m for m in results.results.mushra}
    for system, true_mean in TRUE_MEANS.items():
        assert kept[system].low < true_mean < kept[system].high
    assert all(t.p_holm < 0.001 for t in results.results.mushra_tests)
    assert len(results.rows) == 45 * 12 * 4 and all(r.plays == 1 for r in results.rows)


@pytest.mark.stats
def test_the_intervals_cover_the_true_means_at_the_nominal_rate():
    study = parse_study(STUDY)
    repetitions = sample_count(200, minimum=100)
    rng = np.random.default_rng(2)
    covered = {system: 0 for system in TRUE_MEANS}
    for _ in range(repetitions):
        raters = [f"rater-{n:02d}" for n in range(40)]
        rows = simulated_rows(raters, rng, study)
        assert screen(rows, study) == []
        for mean in study_statistics(rows, study).mushra:
            if mean.system in covered:
                covered[mean.system] += mean.low <= TRUE_MEANS[mean.system] <= mean.high
    for system, hits in covered.items():
        # Each interval covers with probability 0.95 if the intervals are right: a binomial count.
        assert scipy_stats.binomtest(hits, repetitions, 0.95).pvalue > 1e-3, (system, hits, repetitions)


def test_the_exports_round_trip(tmp_path):
    study = parse_study(STUDY)
    rows = simulated_rows(RATERS[:6] + CARELESS[:2], np.random.default_rng(3), study)
    random.Random(0).shuffle(rows)
    results = results_from_ratings(rows, study)
    assert results.excluded_raters == {"random-1", "random-2"}
    path = write_long_csv(results.rows, tmp_path / "ratings.csv")
    back = read_long_csv(path)
    assert tuple(back) == results.rows
    assert summary(results_from_ratings(ratings_from_long(back), study)) == summary(results)
    stored = read_summary_json(write_summary_json(results, tmp_path / "summary.json"))
    assert stored["exclusions"] == [{"rater": e.rater, "rule": e.rule, "detail": e.detail} for e in results.exclusions]
    assert stored["results"]["raters"] == 6 and stored["results_all_raters"]["raters"] == 8
    assert [m["system"] for m in stored["results"]["mushra"]] == ["AR", GOOD, FAR, LOWPASS_ANCHOR]


def mushra_row(rater: str, system: str, score: float, kind: str = "mushra") -> RatingRow:
    return RatingRow(study="sim", session_id=rater, rater_id=rater, trial_index=0, kind=kind, item_id="s001",
                     attention_check=False, label="A", system=system, other_system=None, score=score, plays=1,
                     trial_seconds=20.0, submitted_at="")


def test_intervals_stay_on_the_scale_and_few_raters_are_flagged():
    from ssd_demo.listening.study_report import format_results

    study = parse_study(STUDY)
    near_top = [mushra_row(f"r{n}", GOOD, score) for n, score in enumerate([100, 100, 60])]
    near_top += [mushra_row(f"r{n}", "AR", score, "mos") for n, score in enumerate([1, 1, 4])]
    results = results_from_ratings(near_top, study)
    (mushra,) = results.results.mushra
    (mos,) = results.results.mos
    _, low, high = study_stats.t_interval([100, 100, 60])
    assert high > 100 and mushra.high == 100 and mushra.low == pytest.approx(low)  # clipped at the top only
    assert mos.low == 1 and mos.high == 5  # [2 - 7.4, 2 + 7.4] with three raters
    report = "\n".join(format_results(results))
    assert "clipped to the scale 0-100" in report and "clipped to the scale 1-5" in report
    assert "3 rater(s), fewer than 5: the intervals are rough" in report


def test_a_sentence_given_twice_is_named():
    with pytest.raises(Exception, match="sentences lists the same sentence twice: 'Sentence number 1.'"):
        parse_study(STUDY.replace('"Sentence number 2."', '"Sentence number 1."'))


def _scores(total: int, count: int = 10) -> list[int]:
    """`count` whole-number scores that sum to `total`."""
    base, extra = divmod(total, count)
    return [base + 1] * extra + [base] * (count - extra)


def test_wilcoxon_ranks_exact_differences_so_equal_differences_tie():
    # Rater means over 10 items: 60.0 - 58.7 and 58.8 - 60.1 are both 1.3 apart. As float means the two
    # differences are 1.2999999999999972 and -1.3000000000000043 and would be ranked apart.
    study = parse_study(STUDY)
    totals = {"r1": (600, 587), "r2": (588, 601), "r3": (620, 600), "r4": (630, 600), "r5": (560, 600)}
    rows = []
    for index, (rater, (good, reference)) in enumerate(totals.items()):
        for system, total in ((GOOD, good), ("AR", reference)):
            for item, score in enumerate(_scores(total)):
                rows.append(RatingRow(study="sim", session_id=f"s{index}", rater_id=rater, trial_index=item,
                                      kind="mushra", item_id=f"s{item + 1:03d}", attention_check=False, label=system,
                                      system=system, other_system=None, score=float(score), plays=1,
                                      trial_seconds=20.0, submitted_at=""))
    exact = [1.3, -1.3, 2.0, 3.0, -4.0]
    test = next(t for t in paired_tests(rows, study) if (t.system_x, t.system_y) == (GOOD, "AR"))
    expected = scipy_stats.wilcoxon(exact)
    assert test.p_value == float(expected.pvalue) and test.statistic == float(expected.statistic)
    float_differences = [60.0 - 58.7, 58.8 - 60.1, 2.0, 3.0, -4.0]
    assert scipy_stats.wilcoxon(float_differences).pvalue != expected.pvalue  # what ranking float means gave
    assert test.mean_difference == pytest.approx(sum(exact) / 5, abs=1e-12)


def test_an_export_analysed_again_keeps_its_invalidations(tmp_path):
    from ssd_demo.listening.study_results import EXCLUDED_IN_EXPORT, LONG_COLUMNS, results_from_long

    study = parse_study(STUDY)
    rows = simulated_rows(RATERS[:6] + CARELESS[:1], np.random.default_rng(4), study)
    invalidated = {"s2": "answered in 20 seconds"}  # rater-02's session
    results = results_from_ratings(rows, study, invalidated)
    assert results.excluded_raters == {"rater-02", "random-1"}
    back = read_long_csv(write_long_csv(results.rows, tmp_path / "ratings.csv"))
    assert {row.invalidated for row in back if row.rater == "rater-02"} == {"answered in 20 seconds"}
    assert summary(results_from_long(back, study)) == summary(results)
    # Without the invalidations the screening alone would count rater-02 again.
    assert "rater-02" not in results_from_ratings(ratings_from_long(back), study).excluded_raters

    # An export made before the invalidated column: the rater it marks excluded stays out.
    old = tmp_path / "old.csv"
    lines = (tmp_path / "ratings.csv").read_text(encoding="utf-8").splitlines()
    assert lines[0] == ",".join(LONG_COLUMNS)
    old.write_text("\n".join(line.rsplit(",", 1)[0] for line in lines) + "\n", encoding="utf-8")
    again = results_from_long(read_long_csv(old), study)
    assert again.excluded_raters == results.excluded_raters
    assert [(e.rater, e.rule, e.detail) for e in again.exclusions if e.rater == "rater-02"] == [
        ("rater-02", "invalidated", EXCLUDED_IN_EXPORT)]
    assert summary(again)["results"] == summary(results)["results"]


def test_the_box_plot_says_every_rater_was_excluded():
    from ssd_demo.listening.figures import mushra_boxplot

    study = parse_study(STUDY)
    rows = simulated_rows(CARELESS[:2], np.random.default_rng(5), study)
    results = results_from_ratings(rows, study)
    assert results.excluded_raters == set(CARELESS[:2])
    texts = [t.get_text() for t in mushra_boxplot(results).axes[0].texts]
    assert len(texts) == 1 and "every rater (2) was excluded" in texts[0] and "yet" not in texts[0]
    assert list(mushra_boxplot(results, exclude=False).axes[0].texts) == []  # all raters: the boxes
    empty = results_from_ratings([], study)
    assert [t.get_text() for t in mushra_boxplot(empty).axes[0].texts] == ["no MUSHRA ratings yet"]
