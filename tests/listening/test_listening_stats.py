"""The listening tab's summary statistics (from the built-in study's ratings) against a hand-computed example."""

from __future__ import annotations

from support.paths import REPOSITORY

import itertools
import math

import pytest

from ssd_demo.app.listening.charts import results_figure
from ssd_demo.listening.ab_mos import (
                                       MOS_NOTE,
                                       mos_summary,
                                       sign_test,
                                       summarize,
                                       summary_markdown,
                                       wilson_interval,
                                       )
from ssd_demo.listening.records import RatingRow

Z = 1.959963984540054  # 97.5% standard normal quantile
_ids = itertools.count(1)


def vote(
    system_a: str,
    system_b: str,
    choice: str,
    score_a: int | None = None,
    score_b: int | None = None,
    session: str = "s1",
    sha: str = "a" * 64,
) -> list[RatingRow]:
    """The study's ratings for one A/B vote (a row per clip), and a MOS trial's row for each score given."""
    n = next(_ids)
    common = dict(study="ab-mos", session_id=session, rater_id=None, item_id="i", attention_check=False,
                  trial_seconds=None, submitted_at="2026-01-01T00:00:00+00:00", stimulus_set_sha256=sha, plays=1)
    share = {"A": (1.0, 0.0), "B": (0.0, 1.0), "none": (0.5, 0.5)}[choice]
    rows = [RatingRow(trial_index=n, kind="ab", label="A", system=system_a, other_system=system_b, score=share[0],
                      **common),
            RatingRow(trial_index=n, kind="ab", label="B", system=system_b, other_system=system_a, score=share[1],
                      **common)]
    for offset, system, score in ((1000, system_a, score_a), (2000, system_b, score_b)):
        if score is not None:
            rows.append(RatingRow(trial_index=offset + n, kind="mos", label="A", system=system, other_system=None,
                                  score=float(score), **common))
    return rows


def example_votes() -> list[list[RatingRow]]:
    """AR vs SSD: AR preferred 7 times, SSD 3 times, no ties; positions alternate.
    AR vs exact: exact preferred twice, 2 ties. MOS: AR 3,4,5,4,4; SSD one score of 2."""
    votes = []
    for i in range(7):
        votes.append(vote("AR", "SSD", "A") if i % 2 else vote("SSD", "AR", "B", session="s2"))
    for i in range(3):
        votes.append(vote("SSD", "AR", "A") if i % 2 else vote("AR", "SSD", "B"))
    votes += [
        vote("exact", "AR", "A"),
        vote("AR", "exact", "B"),
        vote("AR", "exact", "none"),
        vote("exact", "AR", "none"),
    ]
    # Naturalness scores on separate votes (ties, so preference counts above stay as stated).
    votes[-2] = vote("AR", "exact", "none", score_a=3)
    votes[-1] = vote("exact", "AR", "none", score_b=4)
    votes[0] = vote("SSD", "AR", "B", score_a=2, score_b=5, session="s2")
    votes[1] = vote("AR", "SSD", "A", score_a=4)
    votes[2] = vote("SSD", "AR", "B", score_b=4, session="s2")
    return votes


def rows(votes: list[list[RatingRow]]) -> list[RatingRow]:
    return [row for vote_rows in votes for row in vote_rows]


def test_hand_computed_example():
    summary = summarize(rows(example_votes()))
    assert (summary.n_votes, summary.n_sessions) == (14, 2)
    pairs = {(p.system_x, p.system_y): p for p in summary.pairs}
    ar_ssd = pairs[("AR", "SSD")]
    assert (ar_ssd.n, ar_ssd.wins_x, ar_ssd.wins_y, ar_ssd.ties) == (10, 7, 3, 0)
    assert ar_ssd.share_x == pytest.approx(0.7)
    # Wilson, 7 of 10: centre (0.7 + z^2/20) / (1 + z^2/10), half-width z sqrt(0.021 + z^2/400) / (1 + z^2/10)
    # = 0.644493 -+ 0.247715 -> [0.396778, 0.892209]
    assert (ar_ssd.ci_x.low, ar_ssd.ci_x.high) == pytest.approx((0.396778, 0.892209), abs=2e-6)
    # Exact sign test, 7 vs 3: 2 * (C(10,7) + C(10,8) + C(10,9) + C(10,10)) / 2^10 = 2 * 176 / 1024.
    assert ar_ssd.p_value == pytest.approx(0.34375, abs=1e-12)

    ar_exact = pairs[("AR", "exact")]
    assert (ar_exact.n, ar_exact.wins_x, ar_exact.wins_y, ar_exact.ties) == (4, 0, 2, 2)
    # Wilson, 0 of 4: [0, z^2 / (4 + z^2)] = [0, 0.489891]
    assert (ar_exact.ci_x.low, ar_exact.ci_x.high) == pytest.approx((0.0, 0.489891), abs=2e-6)
    # Wilson, 2 of 4 ties: 0.5 -+ z sqrt(1/16 + z^2/64) / (1 + z^2/4) = 0.5 -+ 0.349961
    assert (ar_exact.ci_tie.low, ar_exact.ci_tie.high) == pytest.approx((0.150039, 0.849961), abs=2e-6)
    # Sign test, 0 vs 2 (ties dropped): 2 * (1/2)^2 = 0.5.
    assert ar_exact.p_value == pytest.approx(0.5)

    mos = {m.system: m for m in summary.mos}
    # AR: 5, 4, 4, 3, 4 -> mean 4, s = sqrt(2/4), t(0.975, 4) = 2.776445, half-width 2.776445 * 0.707107 / sqrt(5) = 0.877989
    assert (mos["AR"].n, mos["AR"].mean) == (5, pytest.approx(4.0))
    assert (mos["AR"].ci.low, mos["AR"].ci.high) == pytest.approx((3.122011, 4.877989), abs=2e-6)
    assert (mos["SSD"].n, mos["SSD"].mean, mos["SSD"].ci) == (1, 2.0, None)
    assert "exact" not in mos  # no scores, no MOS


def test_formulas_directly():
    k, n = 7, 10
    centre = (k / n + Z**2 / (2 * n)) / (1 + Z**2 / n)
    half = Z * math.sqrt(k / n * (1 - k / n) / n + Z**2 / (4 * n**2)) / (1 + Z**2 / n)
    ci = wilson_interval(k, n)
    assert (ci.low, ci.high) == pytest.approx((centre - half, centre + half), abs=1e-12)
    assert sign_test(0, 0) is None
    assert sign_test(5, 5) == pytest.approx(1.0)
    assert sign_test(10, 0) == pytest.approx(2 / 1024)
    with pytest.raises(ValueError):
        wilson_interval(0, 0)
    with pytest.raises(ValueError):
        mos_summary("AR", [])


def test_empty_results_and_chart():
    summary = summarize([])
    assert summary.empty and summary.pairs == () and summary.mos == ()
    assert "No votes yet" in summary_markdown(summary)
    results_figure(summary)  # draws a placeholder, does not fail


def test_markdown_and_chart_with_votes():
    summary = summarize(rows(example_votes()))
    text = summary_markdown(summary)
    assert "AR vs SSD" in text and "0.3438" in text and "4.000" in text
    figure = results_figure(summary)
    assert len(figure.axes) == 2


def test_summaries_name_their_stimulus_sets_and_warn_when_pooled():
    # "AR" wins every vote in set one and loses every vote in set two: pooled, it looks like a draw.
    one = rows([vote("AR", "SSD", "A", score_a=5, sha="1" * 64) for _ in range(4)])
    two = rows([vote("AR", "SSD", "B", score_a=1, sha="2" * 64) for _ in range(4)])
    summary = summarize(one, [("one", "1" * 64)])
    assert summary.n_votes == 4 and summary.stimulus_sets == (("one", "1" * 64),)
    assert (summary.pairs[0].wins_x, summary.pairs[0].wins_y) == (4, 0) and summary.mos[0].mean == 5.0
    text = summary_markdown(summary)
    assert "Stimulus set **one (sha256 111111111111)**" in text and "Warning" not in text
    pooled = summarize(one + two, [("one", "1" * 64), ("two", "2" * 64), ("one", "3" * 64)])
    assert (pooled.pairs[0].wins_x, pooled.pairs[0].wins_y) == (4, 4)
    assert len(pooled.stimulus_sets) == 3 and "pool 3 stimulus sets" in summary_markdown(pooled)


def test_attention_checks_and_excluded_raters():
    check = RatingRow(study="ab-mos", session_id="s9", rater_id=None, trial_index=0, kind="mos", item_id="i",
                      attention_check=True, label="A", system="attention noise", other_system=None, score=5.0,
                      plays=1, trial_seconds=None, submitted_at="", stimulus_set_sha256="")
    summary = summarize([*rows([vote("AR", "SSD", "A", score_a=4)]), check], excluded_raters=["rater-2"])
    assert [m.system for m in summary.mos] == ["AR"] and summary.n_sessions == 1
    assert "Left out: 1 excluded rater(s) (rater-2)" in summary_markdown(summary)
    only_scores = summarize(rows([vote("AR", "SSD", "none", score_b=3)])[2:])
    assert not only_scores.empty and only_scores.n_votes == 0 and "No votes yet" not in summary_markdown(only_scores)
    assert len(results_figure(only_scores).axes) == 2  # scores before any vote: the MOS chart alone


def test_results_note_that_mos_intervals_ignore_rater_clustering():
    assert MOS_NOTE in summary_markdown(summarize(rows(example_votes())))
    assert "independent" in MOS_NOTE and "rater" in MOS_NOTE
    no_scores = summarize(vote("AR", "SSD", "A"))
    assert MOS_NOTE not in summary_markdown(no_scores)


@pytest.mark.slow  # several seconds (loading models in a fresh process): left out of the quick run
def test_model_free_modules_do_not_import_gradio():
    import subprocess
    import sys

    modules = "ab_mos, migrations, study_sessions, study_store, stimulus_sets"
    code = (f"import sys; from ssd_demo.listening import {modules}; import ssd_demo.listening.stimuli, "
            "ssd_demo.app.listening.charts; sys.exit(1 if 'gradio' in sys.modules else 0)")
    repository = REPOSITORY
    assert subprocess.run([sys.executable, "-c", code], check=False, cwd=repository, timeout=120).returncode == 0
