"""The race's live chart and headline: pure functions of the race's state."""

import xml.etree.ElementTree as ElementTree

from ssd_demo.app.compare import race as race_module
from ssd_demo.app.compare.race import Race, together_note
from ssd_demo.app.compare.race_chart import race_chart_svg

SVG = "{http://www.w3.org/2000/svg}"


def _race(ar_done: float | None, spec_done: float | None) -> Race:
    race = Race(clicked=100.0)
    ar, spec = race.lanes["autoregressive"], race.lanes["speculative"]
    ar.started = spec.started = 100.0
    ar.timeline = [(0.1 * i, 10 * i, 0) for i in range(1, 31)]
    spec.timeline = [(0.1 * i, 18 * i, 2 * i) for i in range(1, 21)]
    ar.tokens, spec.tokens, spec.rejected = 300, 360, 40
    ar.seconds, spec.seconds = ar_done, spec_done
    return race


def test_the_chart_draws_both_lanes_on_one_clock_and_marks_rejected_drafts():
    svg = ElementTree.fromstring(race_chart_svg(_race(None, 2.0), now=3.0))
    lines = svg.findall(f"{SVG}polyline")
    assert len(lines) == 2  # one line per lane
    ar_points = [tuple(map(float, p.split(","))) for p in lines[0].get("points").split()]
    spec_points = [tuple(map(float, p.split(","))) for p in lines[1].get("points").split()]
    # One clock: the speculative lane, done at 2 s, ends left of the autoregressive one, still running at 3 s.
    assert spec_points[-1][0] < ar_points[-1][0]
    ticks = [line for line in svg.findall(f"{SVG}line") if line.get("stroke") == "#dc2626"]
    assert ticks  # rejected drafts are marked
    labels = " ".join(text.text for text in svg.findall(f"{SVG}text"))
    assert "Speculative: done 2.00 s" in labels and "Autoregressive: running" in labels
    assert len(svg.findall(f"{SVG}circle")) == 1  # only the finished lane ends in a dot
    assert "Speculative: 360 tokens, done after 2.00 s" in svg.get("aria-label")


def test_the_chart_of_a_race_not_started_is_an_empty_frame():
    svg = ElementTree.fromstring(race_chart_svg(Race(), now=0.0))
    assert not svg.findall(f"{SVG}polyline")


def test_running_together_is_said_with_its_cost_only_above_ten_per_cent():
    race = Race()
    assert together_note(race) == ""  # not known yet
    race.apart = "this machine has one CPU core"
    assert together_note(race) == " · one after the other (this machine has one CPU core)"
    race.replayed = True
    assert together_note(race) == " · one after the other (this machine has one CPU core); replayed at the pace measured"
    race.replayed = False
    race.apart, race.slowdown = "", {"autoregressive": 0.04, "speculative": 0.02}
    assert together_note(race) == " · both at once, one core each"
    race.slowdown = {"autoregressive": 0.16, "speculative": 0.05}
    assert together_note(race) == " · both at once, one core each; slower together: autoregressive +16%"
    race.slowdown = {"autoregressive": 0.27, "speculative": 0.51}
    assert together_note(race).endswith("slower together: autoregressive +27%, speculative +51%")


class _Result:
    def __init__(self, lm: float, elapsed: float, duration: float) -> None:
        self.lm_seconds, self.elapsed_seconds, self.duration_seconds = lm, elapsed, duration
        self.real_time_factor = elapsed / duration


class _Comparison:
    def __init__(self, ar: _Result, spec: _Result) -> None:
        self.ar, self.spec = ar, spec


def test_the_headline_labels_both_ratios_and_says_when_a_text_is_too_short():
    long = _Comparison(_Result(3.0, 3.6, 6.0), _Result(2.0, 2.6, 6.2))
    text = race_module.headline(long)
    assert text.startswith("## Speculative was")
    assert "Language model **1.55×**" in text and "end to end **1.43×**" in text
    short = _Comparison(_Result(0.3, 0.5, 0.6), _Result(0.2, 0.45, 0.7))
    text = race_module.headline(short)
    assert text.startswith("## Too short for speculation to show") and "Language model" in text
    assert "faster" not in text.split("\n")[0] and "slower" not in text.split("\n")[0]
