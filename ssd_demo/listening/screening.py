"""Rater screening: which raters a study's results leave out, and the rule that excluded each.

Rules (a rater is the rater id, or the session when none was given); a study applies `Study.screening`:
its `[screening] rules`, else ITU-R BS.1534-3's post-screening, section 4.1.2 (the first two below) and
the attention checks, with `anchor-above-reference` in place of the second for a study that has no 7 kHz
mid-range anchor (BS.1534-3's second rule is about that anchor):

- `hidden-reference` (BS.1534-3): the rater scored the hidden reference below 90 in more than 15% of the
  MUSHRA items they rated.
- `mid-anchor` (BS.1534-3): the rater scored the mid-range anchor (the reference low-passed at 7 kHz)
  above 90 in more than 15% of the MUSHRA items they rated.
- `anchor-above-reference` (this project's, an option): the rater scored a low-pass anchor above the hidden
  reference of the same item in more than 15% of their MUSHRA items (an attentive rater never hears a
  low-pass as closer to the reference than the reference itself). The draft-alone anchor is not counted:
  it is another rendition, not a degraded copy, and may sound as good.
- `attention`: the rater failed more attention checks than the study's `max_failures` (default 0); what
  fails a check is `attention.failed`. Noise checks: a MOS score above 2; in A/B, not choosing the clean clip
  (choosing the noisy one or no preference). Spoken checks: a MUSHRA score more than 10 from the spoken
  target; a MOS score other than the target; in A/B, not choosing the sample the instruction names.

MUSHRA items are the answered MUSHRA trials that are not attention checks.
- `invalidated`: the experimenter invalidated the session (`store.invalidate_session`), with its reason.

Ratings of excluded raters stay stored and exported (with `excluded` true); results are reported with
and without them.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from . import attention as checks
from .study import MID_ANCHOR, Study
from .study_store import RatingRow

REFERENCE_THRESHOLD = 90.0
MAX_SHARE = 0.15
MOS_ATTENTION_MAX = checks.MOS_NOISE_MAX


@dataclass(frozen=True)
class Exclusion:
    rater: str
    rule: str  # "hidden-reference" | "mid-anchor" | "anchor-above-reference" | "attention" | "invalidated"
    detail: str


@dataclass(frozen=True)
class RaterSummary:
    rater: str
    sessions: int
    answers: int
    mushra_items: int
    reference_below_90: float | None  # share of MUSHRA items; None without MUSHRA items
    anchor_above_reference: float | None
    mid_anchor_above_90: float | None  # None without the mid-range anchor in the study
    attention_checks: int
    attention_failures: int
    median_seconds: float | None  # per answered trial
    mean_plays: float | None  # completed plays per rating
    excluded: bool
    rules: tuple[str, ...]


def mushra_items(rows: Iterable[RatingRow]) -> dict[tuple[str, str], dict[str, float]]:
    """{(rater, session and trial): {system: score}} for every answered MUSHRA trial but the attention checks."""
    items: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for row in rows:
        if row.kind == "mushra" and not row.attention_check:
            items[(row.rater, f"{row.session_id}:{row.trial_index}")][row.system] = row.score
    return items


def attention_failed(row: RatingRow) -> bool | None:
    """Whether an attention check's rating fails it; None for a row that is not the check's verdict."""
    if not row.attention_check:
        return None
    return checks.failed(row.kind, row.label, row.system, row.score)


def screen(rows: list[RatingRow], study: Study, invalidated: Mapping[str, str] | None = None) -> list[Exclusion]:
    """Every exclusion, rater by rater in the order they first answered; a rater may break several rules."""
    invalidated = invalidated or {}
    order = list(dict.fromkeys(row.rater for row in rows))
    shares = _mushra_shares(rows, study)
    failures = _attention_failures(rows)
    rules = study.screening
    exclusions = []
    for rater in order:
        below, above, mid = shares.get(rater, (None, None, None))
        if "hidden-reference" in rules and below is not None and below > MAX_SHARE:
            exclusions.append(Exclusion(rater, "hidden-reference",
                                        f"hidden reference below {REFERENCE_THRESHOLD:g} in {below:.0%} of MUSHRA items"))
        if "mid-anchor" in rules and mid is not None and mid > MAX_SHARE:
            exclusions.append(Exclusion(rater, "mid-anchor",
                                        f"mid-range anchor above {REFERENCE_THRESHOLD:g} in {mid:.0%} of MUSHRA items"))
        if "anchor-above-reference" in rules and above is not None and above > MAX_SHARE:
            exclusions.append(Exclusion(rater, "anchor-above-reference",
                                        f"an anchor above the hidden reference in {above:.0%} of MUSHRA items"))
        failed, answered = failures.get(rater, (0, 0))
        if "attention" in rules and failed > study.attention_max_failures:
            exclusions.append(Exclusion(rater, "attention", f"failed {failed} of {answered} attention checks "
                                                            f"({study.attention_kind}; at most "
                                                            f"{study.attention_max_failures} allowed)"))
        for session, reason in invalidated.items():
            if any(row.session_id == session and row.rater == rater for row in rows):
                exclusions.append(Exclusion(rater, "invalidated", reason))
    return exclusions


def rater_summaries(rows: list[RatingRow], study: Study, exclusions: list[Exclusion]) -> list[RaterSummary]:
    shares = _mushra_shares(rows, study)
    failures = _attention_failures(rows)
    items = mushra_items(rows)
    rules: dict[str, list[str]] = defaultdict(list)
    for exclusion in exclusions:
        rules[exclusion.rater].append(exclusion.rule)
    by_rater: dict[str, list[RatingRow]] = defaultdict(list)
    for row in rows:
        by_rater[row.rater].append(row)
    summaries = []
    for rater, own in by_rater.items():
        trials = {(row.session_id, row.trial_index): row.trial_seconds for row in own}
        seconds = [s for s in trials.values() if s is not None]
        below, above, mid = shares.get(rater, (None, None, None))
        failed, answered = failures.get(rater, (0, 0))
        summaries.append(RaterSummary(
            rater=rater, sessions=len({row.session_id for row in own}), answers=len(trials),
            mushra_items=sum(1 for key in items if key[0] == rater), reference_below_90=below,
            anchor_above_reference=above, mid_anchor_above_90=mid, attention_checks=answered, attention_failures=failed,
            median_seconds=statistics.median(seconds) if seconds else None,
            mean_plays=statistics.fmean(row.plays for row in own), excluded=rater in rules,
            rules=tuple(dict.fromkeys(rules.get(rater, ())))))
    return summaries


def _mushra_shares(rows: list[RatingRow], study: Study) -> dict[str, tuple[float, float, float | None]]:
    """{rater: (share of items with the hidden reference below 90, share with an anchor above it, share with
    the mid-range anchor above 90 (None when the study has none))}."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    mid_anchor = MID_ANCHOR in study.anchors
    for (rater, _), scores in mushra_items(rows).items():
        reference = scores.get(study.reference)
        if reference is None:
            continue
        count = counts[rater]
        count[0] += 1
        count[1] += reference < REFERENCE_THRESHOLD
        count[2] += any(scores.get(anchor, -1.0) > reference for anchor in study.lowpass_anchors)
        count[3] += scores.get(MID_ANCHOR, -1.0) > REFERENCE_THRESHOLD
    return {rater: (below / n, above / n, mid / n if mid_anchor else None)
            for rater, (n, below, above, mid) in counts.items()}


def _attention_failures(rows: list[RatingRow]) -> dict[str, tuple[int, int]]:
    """{rater: (failed checks, checks answered)}."""
    result: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for row in rows:
        verdict = attention_failed(row)
        if verdict is not None:
            result[row.rater][0] += verdict
            result[row.rater][1] += 1
    return {rater: (failed, answered) for rater, (failed, answered) in result.items()}
