"""Listening-test statistics: preference shares, sign tests and MOS, each with a 95% interval.

Preference, per unordered system pair: the share of votes for each system and for "no
preference", each with a Wilson score interval, and an exact two-sided sign test of
"neither system is preferred" on the votes that expressed a preference (ties dropped,
as the sign test prescribes). MOS, per system: the mean of every naturalness score the
system's clips received, with a t-distribution interval.

System names mean different audio in different stimulus sets, so a summary covers one
set (name and manifest checksum): `votes_in_set` selects its votes. A summary of votes
from several sets says so in its text.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

from scipy import stats as scipy_stats

from .store import VoteRecord

CONFIDENCE = 0.95
MOS_NOTE = (
    "*Note: these MOS intervals treat every score as independent, but each rater gives many scores; "
    "when raters differ in how they use the scale, the true uncertainty is larger. For a study, "
    "use a model with a rater effect (or a bootstrap over raters) on the exported votes.*"
)


@dataclass(frozen=True)
class Interval:
    low: float
    high: float


@dataclass(frozen=True)
class PairPreference:
    """Votes on one system pair; system_x < system_y alphabetically so the pair has one name."""

    system_x: str
    system_y: str
    n: int
    wins_x: int
    wins_y: int
    ties: int
    share_x: float
    share_y: float
    share_tie: float
    ci_x: Interval
    ci_y: Interval
    ci_tie: Interval
    p_value: float | None  # exact two-sided sign test on wins_x vs wins_y; None without any preference


@dataclass(frozen=True)
class MosSummary:
    system: str
    n: int
    mean: float
    ci: Interval | None  # None with fewer than two scores
    std: float | None


@dataclass(frozen=True)
class ListeningSummary:
    n_votes: int
    n_sessions: int
    pairs: tuple[PairPreference, ...]
    mos: tuple[MosSummary, ...]
    # Every (set name, manifest sha256) the votes came from; more than one means pooled sets.
    stimulus_sets: tuple[tuple[str, str | None], ...] = ()

    @property
    def empty(self) -> bool:
        return self.n_votes == 0


def wilson_interval(successes: int, n: int, confidence: float = CONFIDENCE) -> Interval:
    """Wilson score interval for a binomial proportion (good at small n and near 0 or 1)."""
    if n <= 0:
        raise ValueError("a proportion needs at least one trial")
    ci = scipy_stats.binomtest(successes, n).proportion_ci(confidence_level=confidence, method="wilson")
    return Interval(float(ci.low), float(ci.high))


def sign_test(wins_x: int, wins_y: int) -> float | None:
    """Exact two-sided sign-test p-value for wins_x vs wins_y (ties excluded beforehand)."""
    n = wins_x + wins_y
    if n == 0:
        return None
    return float(scipy_stats.binomtest(wins_x, n, 0.5, alternative="two-sided").pvalue)


def mos_summary(system: str, scores: Sequence[int], confidence: float = CONFIDENCE) -> MosSummary:
    """Mean opinion score with a Student-t interval: mean +- t(n-1) * s / sqrt(n)."""
    n = len(scores)
    if n == 0:
        raise ValueError(f"no scores for system {system!r}")
    mean = sum(scores) / n
    if n < 2:
        return MosSummary(system=system, n=n, mean=mean, ci=None, std=None)
    std = math.sqrt(sum((s - mean) ** 2 for s in scores) / (n - 1))
    half = float(scipy_stats.t.ppf(0.5 + confidence / 2, n - 1)) * std / math.sqrt(n)
    return MosSummary(system=system, n=n, mean=mean, ci=Interval(mean - half, mean + half), std=std)


def pair_preference(system_x: str, system_y: str, wins_x: int, wins_y: int, ties: int) -> PairPreference:
    n = wins_x + wins_y + ties
    if n == 0:
        raise ValueError(f"no votes for the pair {system_x!r} / {system_y!r}")
    return PairPreference(
        system_x=system_x,
        system_y=system_y,
        n=n,
        wins_x=wins_x,
        wins_y=wins_y,
        ties=ties,
        share_x=wins_x / n,
        share_y=wins_y / n,
        share_tie=ties / n,
        ci_x=wilson_interval(wins_x, n),
        ci_y=wilson_interval(wins_y, n),
        ci_tie=wilson_interval(ties, n),
        p_value=sign_test(wins_x, wins_y),
    )


def votes_in_set(
    votes: Iterable[VoteRecord], stimulus_set: str, stimulus_set_sha256: str | None = None
) -> list[VoteRecord]:
    """The votes on one stimulus set: by name, and by manifest checksum when one is given."""
    return [
        v
        for v in votes
        if v.stimulus_set == stimulus_set
        and (stimulus_set_sha256 is None or v.stimulus_set_sha256 == stimulus_set_sha256)
    ]


def summarize(votes: Iterable[VoteRecord]) -> ListeningSummary:
    """Every pair's preference and every system's MOS from raw votes (select one set first: `votes_in_set`)."""
    votes = list(votes)
    counts: dict[tuple[str, str], list[int]] = {}
    scores: dict[str, list[int]] = {}
    for vote in votes:
        x, y = sorted((vote.system_a, vote.system_b))
        tally = counts.setdefault((x, y), [0, 0, 0])
        if vote.preferred_system is None:
            tally[2] += 1
        else:
            tally[0 if vote.preferred_system == x else 1] += 1
        for system, score in ((vote.system_a, vote.score_a), (vote.system_b, vote.score_b)):
            if score is not None:
                scores.setdefault(system, []).append(score)
    pairs = tuple(pair_preference(x, y, *counts[(x, y)]) for x, y in sorted(counts))
    mos = tuple(mos_summary(system, scores[system]) for system in sorted(scores))
    sets = tuple(sorted({(v.stimulus_set, v.stimulus_set_sha256) for v in votes}, key=lambda s: (s[0], s[1] or "")))
    return ListeningSummary(
        n_votes=len(votes), n_sessions=len({v.session_id for v in votes}), pairs=pairs, mos=mos, stimulus_sets=sets
    )


def set_label(stimulus_set: str, stimulus_set_sha256: str | None) -> str:
    """A set's short name for people: its name and the start of its manifest checksum."""
    return f"{stimulus_set} (sha256 {stimulus_set_sha256[:12]})" if stimulus_set_sha256 else stimulus_set


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def _ci(interval: Interval | None, percent: bool = True) -> str:
    if interval is None:
        return "n/a"
    if percent:
        return f"[{_pct(interval.low)}, {_pct(interval.high)}]"
    return f"[{interval.low:.2f}, {interval.high:.2f}]"


def summary_markdown(summary: ListeningSummary) -> str:
    """Tables for the results view."""
    if summary.empty:
        return "No votes yet. Results appear here once raters have completed trials."
    lines = []
    if len(summary.stimulus_sets) == 1:
        lines += [f"Stimulus set **{set_label(*summary.stimulus_sets[0])}**.", ""]
    elif len(summary.stimulus_sets) > 1:
        names = ", ".join(set_label(*s) for s in summary.stimulus_sets)
        lines += [
            f"**Warning:** these votes pool {len(summary.stimulus_sets)} stimulus sets ({names}); "
            "a system name may mean different audio in each.",
            "",
        ]
    lines += [
        f"**{summary.n_votes} votes** from **{summary.n_sessions} sessions**.",
        "",
        "### Preference (95% Wilson intervals; exact sign test, ties excluded)",
        "",
    ]
    lines += [
        "| Pair | Votes | Prefer first | Prefer second | No preference | p (sign test) |",
        "|---|---|---|---|---|---|",
    ]
    for p in summary.pairs:
        p_text = "n/a" if p.p_value is None else f"{p.p_value:.4g}"
        lines.append(
            f"| {p.system_x} vs {p.system_y} | {p.n} | {p.system_x}: {_pct(p.share_x)} {_ci(p.ci_x)} "
            f"| {p.system_y}: {_pct(p.share_y)} {_ci(p.ci_y)} | {_pct(p.share_tie)} {_ci(p.ci_tie)} | {p_text} |"
        )
    lines += ["", "### Naturalness MOS (1-5; 95% t intervals)", ""]
    if not summary.mos:
        lines.append("No naturalness scores yet.")
    else:
        lines += ["| System | Scores | MOS | 95% CI |", "|---|---|---|---|"]
        for m in summary.mos:
            lines.append(f"| {m.system} | {m.n} | {m.mean:.3f} | {_ci(m.ci, percent=False)} |")
        lines += ["", MOS_NOTE]
    return "\n".join(lines)


def summary_dict(summary: ListeningSummary) -> dict:
    """A JSON-ready form of the summary (for the API)."""
    return asdict(summary)
