"""BS.1534-3's post-screening exactly as section 4.1.2 states it (the hidden reference below 90, the 7 kHz
mid-range anchor above 90, each in more than 15% of a rater's items), the project's "anchor above the
reference" rule as an option, and which rules a study file chooses."""

from __future__ import annotations

import pytest

from ssd_demo.listening.screening import screen
from ssd_demo.listening.study import LOWPASS_ANCHOR, MID_ANCHOR, StudyFileError, parse_study
from ssd_demo.listening.study_store import RatingRow

SYSTEM = "SSD beta=0.3 K=4"


def _study(anchors: list[str], rules: list[str] | None = None):
    screening = "" if rules is None else f"[screening]\nrules = {rules!r}\n".replace("'", '"')
    anchor_list = repr(anchors).replace("'", '"')
    return parse_study(f'name = "s"\nsystems = ["{SYSTEM}"]\nanchors = {anchor_list}\n'
                       f'sentences = ["One.", "Two."]\n[mushra]\n{screening}')


def _rows(rater: str, items: list[dict[str, float]]) -> list[RatingRow]:
    return [RatingRow("s", f"session-{rater}", rater, index, "mushra", f"item{index}", False, f"{system}-label",
                      system, None, score, 1, 10.0, "2026-12-04T00:00:00Z")
            for index, scores in enumerate(items) for system, score in scores.items()]


def _item(reference=100.0, system=70.0, low=20.0, mid=50.0) -> dict[str, float]:
    return {"AR": reference, SYSTEM: system, LOWPASS_ANCHOR: low, MID_ANCHOR: mid}


def test_the_default_rules_are_bs1534s_with_the_substitute_only_without_a_mid_anchor():
    assert _study([LOWPASS_ANCHOR, MID_ANCHOR]).screening == ("hidden-reference", "mid-anchor", "attention")
    assert _study([LOWPASS_ANCHOR]).screening == ("hidden-reference", "anchor-above-reference", "attention")
    chosen = _study([LOWPASS_ANCHOR, MID_ANCHOR], ["hidden-reference", "mid-anchor", "anchor-above-reference"])
    assert chosen.screening == ("hidden-reference", "mid-anchor", "anchor-above-reference")
    with pytest.raises(StudyFileError, match="unknown strict"):
        _study([LOWPASS_ANCHOR], ["strict"])
    with pytest.raises(StudyFileError, match="lack 'anchor lowpass=7000'"):
        _study([LOWPASS_ANCHOR], ["mid-anchor"])


def test_the_mid_range_anchor_above_90_in_more_than_15_percent_of_items_excludes():
    study = _study([LOWPASS_ANCHOR, MID_ANCHOR])
    twelve = [_item() for _ in range(12)]
    two_of_twelve = [_item(mid=95.0) if i < 2 else _item() for i in range(12)]  # 16.7% > 15%: out
    one_of_twelve = [_item(mid=95.0) if i < 1 else _item() for i in range(12)]  # 8.3%: kept
    exactly_90 = [_item(mid=90.0) for _ in range(12)]  # "higher than 90": 90 itself is not
    rows = (_rows("ok", twelve) + _rows("two", two_of_twelve) + _rows("one", one_of_twelve)
            + _rows("ninety", exactly_90))
    exclusions = screen(rows, study)
    assert [(e.rater, e.rule) for e in exclusions] == [("two", "mid-anchor")]
    assert "mid-range anchor above 90 in 17% of MUSHRA items" in exclusions[0].detail


def test_the_hidden_reference_rule_and_the_optional_anchor_rule():
    low_reference = [_item(reference=80.0) if i < 2 else _item() for i in range(12)]  # 2 of 12 below 90
    anchor_above = [_item(reference=60.0, low=70.0) if i < 2 else _item() for i in range(12)]  # also below 90
    rows = _rows("low", low_reference) + _rows("above", anchor_above)
    bs1534 = screen(rows, _study([LOWPASS_ANCHOR, MID_ANCHOR]))
    assert [(e.rater, e.rule) for e in bs1534] == [("low", "hidden-reference"), ("above", "hidden-reference")]
    with_option = screen(rows, _study([LOWPASS_ANCHOR, MID_ANCHOR],
                                      ["hidden-reference", "mid-anchor", "anchor-above-reference"]))
    assert ("above", "anchor-above-reference") in [(e.rater, e.rule) for e in with_option]
    # A study without the mid-range anchor keeps the substitute by default.
    assert ("above", "anchor-above-reference") in [(e.rater, e.rule) for e in screen(rows, _study([LOWPASS_ANCHOR]))]
