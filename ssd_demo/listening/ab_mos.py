"""The built-in A/B + MOS study that the app's listening tab runs, and its summary.

The study (`tab_study`) is made from the served stimulus set: an A/B block comparing every pair of the
set's systems ("which clip sounds more natural?", or no preference), then a MOS block rating every
system's clip from 1 to 5, on the same randomly drawn sentences. Its sessions are ordinary study sessions
named `TAB_STUDY` (schema 5 filed the tab's earlier votes under it), so plays, answers, completion codes,
invalidations and the long CSV export are the study system's.

The summary, per stimulus set (system names mean different audio in different sets):
preference, per unordered system pair: the share of votes for each system and for "no preference", each
with a Wilson score interval, and an exact two-sided sign test of "neither system is preferred" on the
votes that expressed a preference (ties dropped, as the sign test prescribes). MOS, per system: the mean
of every naturalness score the system's clips received, with a t-distribution interval. Raters the
screening excludes (e.g. a session the experimenter invalidated) are left out unless asked for.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

from .errors import ListeningError
from .migrations import TAB_STUDY
from .records import RatingRow
from .screening import screen
from .stimulus_sets import StimulusSet
from .study import DEFAULT_REFERENCE, Block, Study
from .study_store import ListeningStore

DEFAULT_AB_TRIALS = 10  # A/B trials per session, about: whole sentences are drawn
MAX_AB_TRIALS = 200
AB_INSTRUCTIONS = ("Listen to both clips to the end, then choose the one that sounds **more natural** "
                   "(or *no preference*).")
MOS_INSTRUCTIONS = "Listen to the clip to the end, then rate how natural it sounds, from 1 (bad) to 5 (excellent)."
CONFIDENCE = 0.95
MOS_NOTE = (
    "*Note: these MOS intervals treat every score as independent, but each rater gives many scores; "
    "when raters differ in how they use the scale, the true uncertainty is larger. For a study, "
    "use a model with a rater effect (or a bootstrap over raters) on the exported ratings.*"
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
    excluded_raters: tuple[str, ...] = ()  # left out by the screening (e.g. invalidated by the experimenter)

    @property
    def empty(self) -> bool:
        return self.n_votes == 0 and not self.mos


def _scipy_stats():
    """scipy.stats, imported when a summary is computed: importing it costs about 0.5 s of the app's start-up."""
    from scipy import stats

    return stats


def wilson_interval(successes: int, n: int, confidence: float = CONFIDENCE) -> Interval:
    """Wilson score interval for a binomial proportion (good at small n and near 0 or 1)."""
    if n <= 0:
        raise ValueError("a proportion needs at least one trial")
    ci = _scipy_stats().binomtest(successes, n).proportion_ci(confidence_level=confidence, method="wilson")
    return Interval(float(ci.low), float(ci.high))


def sign_test(wins_x: int, wins_y: int) -> float | None:
    """Exact two-sided sign-test p-value for wins_x vs wins_y (ties excluded beforehand)."""
    n = wins_x + wins_y
    if n == 0:
        return None
    return float(_scipy_stats().binomtest(wins_x, n, 0.5, alternative="two-sided").pvalue)


def mos_summary(system: str, scores: Sequence[int], confidence: float = CONFIDENCE) -> MosSummary:
    """Mean opinion score with a Student-t interval: mean +- t(n-1) * s / sqrt(n)."""
    n = len(scores)
    if n == 0:
        raise ValueError(f"no scores for system {system!r}")
    mean = sum(scores) / n
    if n < 2:
        return MosSummary(system=system, n=n, mean=mean, ci=None, std=None)
    std = math.sqrt(sum((s - mean) ** 2 for s in scores) / (n - 1))
    half = float(_scipy_stats().t.ppf(0.5 + confidence / 2, n - 1)) * std / math.sqrt(n)
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


def summarize(rows: Iterable[RatingRow], stimulus_sets: Sequence[tuple[str, str | None]] = (),
              excluded_raters: Sequence[str] = ()) -> ListeningSummary:
    """Every pair's preference and every system's MOS from a study's ratings (select one set's first).

    An A/B answer is one vote: its clip A's rating says who won (1: A, 0: B, 0.5: no preference). A MOS
    answer is one naturalness score. Attention checks are left out."""
    counts: dict[tuple[str, str], list[int]] = {}
    scores: dict[str, list[int]] = {}
    sessions = set()
    n_votes = 0
    for row in rows:
        if row.attention_check:
            continue
        sessions.add(row.session_id)
        if row.kind == "mos":
            scores.setdefault(row.system, []).append(int(row.score))
        elif row.kind == "ab" and row.label == "A" and row.other_system is not None:
            n_votes += 1
            x, y = sorted((row.system, row.other_system))
            tally = counts.setdefault((x, y), [0, 0, 0])
            if row.score == 0.5:
                tally[2] += 1
            else:
                winner = row.system if row.score == 1 else row.other_system
                tally[0 if winner == x else 1] += 1
    pairs = tuple(pair_preference(x, y, *counts[(x, y)]) for x, y in sorted(counts))
    mos = tuple(mos_summary(system, scores[system]) for system in sorted(scores))
    sets = tuple(sorted(set(stimulus_sets), key=lambda s: (s[0], s[1] or "")))
    return ListeningSummary(n_votes=n_votes, n_sessions=len(sessions), pairs=pairs, mos=mos, stimulus_sets=sets,
                            excluded_raters=tuple(excluded_raters))


# ----------------------------------------------------------------------------- the study and its results


def tab_study(stimulus_set: StimulusSet, ab_trials: int = DEFAULT_AB_TRIALS) -> Study:
    """The tab's study on `stimulus_set`: about `ab_trials` A/B trials (whole sentences, every pair of
    systems on each), then a naturalness score for every system's clip of the same sentences."""
    if isinstance(ab_trials, bool) or not isinstance(ab_trials, int) or not 1 <= ab_trials <= MAX_AB_TRIALS:
        raise ListeningError(f"The number of trials must be between 1 and {MAX_AB_TRIALS}.")
    systems = stimulus_set.systems
    sentences = tuple(item.text for item in stimulus_set.items if all(s in item.clips for s in systems))
    if len(systems) < 2 or not sentences:
        raise ListeningError(f"Stimulus set {stimulus_set.name!r} has no sentence with two systems to compare.")
    pairs = len(systems) * (len(systems) - 1) // 2
    items = min(len(sentences), math.ceil(ab_trials / pairs))
    return _study(systems, sentences, items, stimulus_set.name, stimulus_set.preset)


def _study(systems: Sequence[str], sentences: tuple[str, ...], items: int, set_name: str, preset: str) -> Study:
    reference = DEFAULT_REFERENCE if DEFAULT_REFERENCE in systems else systems[0]
    blocks = (Block("ab", AB_INSTRUCTIONS, pairs=tuple(itertools.combinations(sorted(systems), 2))),
              Block("mos", MOS_INSTRUCTIONS, systems=tuple(systems)))
    return Study(name=TAB_STUDY, title="Blind listening test", instructions="", reference=reference,
                 systems=tuple(s for s in systems if s != reference), anchors=(), items_per_rater=items,
                 sentences=sentences, seed=0, preset=preset, stimulus_set=set_name, blocks=blocks)


def rated_study(rows: Sequence[RatingRow]) -> Study:
    """The tab's study as far as its ratings tell (systems, sentences): enough to screen and analyse them
    when the stimulus set they were given on is no longer on disk."""
    systems = tuple(sorted({row.system for row in rows} | {row.other_system for row in rows if row.other_system}))
    items = tuple(sorted({row.item_id for row in rows})) or ("none",)
    return _study(systems or ("AR",), items, len(items), TAB_STUDY, "")


def tab_ratings(store: ListeningStore, stimulus_set: str, stimulus_set_sha256: str | None) -> list[RatingRow]:
    """The tab's ratings on one stimulus set: by name, and by manifest checksum when given."""
    versions = {sha for name, sha, _ in store.study_versions(TAB_STUDY) if name == stimulus_set
                and (stimulus_set_sha256 is None or sha == stimulus_set_sha256)}
    return [row for row in store.study_ratings(TAB_STUDY) if row.stimulus_set_sha256 in versions]


def tab_summary(store: ListeningStore, stimulus_set: str, stimulus_set_sha256: str | None,
                exclude: bool = True) -> ListeningSummary:
    """The summary of the tab's votes on one set; with `exclude`, without the raters the screening excludes."""
    rows = tab_ratings(store, stimulus_set, stimulus_set_sha256)
    excluded = sorted({e.rater for e in screen(rows, rated_study(rows), store.invalidations())})
    kept = [row for row in rows if row.rater not in excluded] if exclude else rows
    sets = {(stimulus_set, row.stimulus_set_sha256) for row in kept}
    return summarize(kept, tuple(sets), excluded if exclude else ())


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
    lines += [f"**{summary.n_votes} votes** from **{summary.n_sessions} sessions**.", ""]
    if summary.excluded_raters:
        lines += [f"Left out: {len(summary.excluded_raters)} excluded rater(s) "
                  f"({', '.join(summary.excluded_raters)}), e.g. sessions the experimenter invalidated.", ""]
    lines += [
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
