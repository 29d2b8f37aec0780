"""The race drawn live: both lanes' tokens against the seconds since the click, on one clock, as an SVG.

Each lane is a line that climbs as its rounds commit tokens (the autoregressive one a token per target call,
the speculative one a block per call); a red tick under the speculative line marks where drafted tokens were
rejected; a lane that is done ends in a dot, and the legend gives each lane's state and time. The time axis
grows with the race, so the room watches the faster lane reach its end while the other still climbs. Pure function of the
`Race` (`RaceLane.timeline`, written after rounds); no Gradio.
"""

from __future__ import annotations

from html import escape

from .race import Race, RaceLane

WIDTH, HEIGHT = 520, 200
LEFT, RIGHT, TOP, BOTTOM = 44, 12, 40, 24  # margins: the axis labels, the lanes' end labels
COLOURS = {"autoregressive": "#64748b", "speculative": "#16a34a"}
LABELS = {"autoregressive": "Autoregressive", "speculative": "Speculative"}
REJECTED = "#dc2626"
#: Points drawn per lane at most (a long AR run has a point per token; the line looks the same with fewer).
MAX_POINTS = 240
#: Rejection ticks drawn at most (a paragraph has hundreds of rounds with a rejection: a red comb says no more).
MAX_TICKS = 60


def _thinned(points: list[tuple[float, int, int]]) -> list[tuple[float, int, int]]:
    if len(points) <= MAX_POINTS:
        return points
    step = len(points) / MAX_POINTS
    return [points[int(i * step)] for i in range(MAX_POINTS)] + [points[-1]]


def _nice_ceiling(value: float) -> float:
    """The axis end: the next of 1, 1.5, 2, 3, 4, 5, 6, 8 x 10^n at or above `value`."""
    scale = 1.0
    while scale * 10 < value:
        scale *= 10
    while scale > value and scale > 1e-3:
        scale /= 10
    for step in (1, 1.5, 2, 3, 4, 5, 6, 8, 10):
        if step * scale >= value:
            return step * scale
    return 10 * scale


def race_chart_svg(race: Race, now: float | None = None) -> str:
    """Both lanes' tokens over the seconds since the click, up to `now` (default: the race's clock now)."""
    now = race.since_click() if now is None else now
    lanes = list(race.lanes.values())
    ends = [lane.timeline[-1][0] for lane in lanes if lane.timeline]
    running = any(lane.started is not None and lane.seconds is None and lane.stopped is None for lane in lanes)
    x_max = _nice_ceiling(max([1.0, *ends, now if running else 0.0]))
    y_max = _nice_ceiling(max([100, *(lane.tokens for lane in lanes)]))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    origin = "start" if race.replayed else "click"  # a replay's clock starts when the replay does

    def x(seconds: float) -> float:
        return LEFT + plot_w * min(seconds, x_max) / x_max

    def y(tokens: float) -> float:
        return TOP + plot_h * (1 - min(tokens, y_max) / y_max)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="100%" '
             f'role="img" aria-label="{escape(_summary(race))}" class="ssd-race-chart">',
             f'<line x1="{LEFT}" y1="{y(0)}" x2="{LEFT + plot_w}" y2="{y(0)}" stroke="#94a3b8"/>',
             f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{y(0)}" stroke="#94a3b8"/>',
             f'<text x="{LEFT - 4}" y="{TOP + 8}" text-anchor="end" font-size="10" fill="#64748b">{y_max:g}</text>',
             f'<text x="{LEFT - 4}" y="{y(0)}" text-anchor="end" font-size="10" fill="#64748b">0</text>',
             f'<text x="{LEFT - 30}" y="{TOP + plot_h / 2}" font-size="10" fill="#64748b" '
             f'transform="rotate(-90 {LEFT - 30} {TOP + plot_h / 2})" text-anchor="middle">tokens</text>',
             f'<text x="{LEFT + plot_w}" y="{HEIGHT - 6}" text-anchor="end" font-size="10" fill="#64748b">'
             f'{x_max:g} s after the {origin}</text>',
             f'<text x="{LEFT}" y="{HEIGHT - 6}" font-size="10" fill="#64748b">0</text>']
    if race.replayed:  # decoded one after the other: this clock is the replay's (`comparison.replay`)
        parts.append(f'<text x="{LEFT + plot_w}" y="{TOP - 6}" text-anchor="end" font-size="10" fill="#64748b">'
                     'replayed at the pace measured</text>')
    for row, lane in enumerate(lanes):
        parts += _lane(lane, x, y)
        parts.append(_legend(lane, row))
    parts.append("</svg>")
    return "".join(parts)


def _lane(lane: RaceLane, x, y) -> list[str]:
    """The lane's line, its rejection ticks and, once done, the dot at its end."""
    colour = COLOURS.get(lane.name, "#334155")
    if not lane.timeline:
        return []
    points = _thinned(lane.timeline)
    path = " ".join(f"{x(t):.1f},{y(tokens):.1f}" for t, tokens, _ in points)
    start = lane.timeline[0][0]
    parts = [f'<polyline points="{x(start):.1f},{y(0):.1f} {path}" fill="none" stroke="{colour}" '
             f'stroke-width="2.5" stroke-linejoin="round"/>']
    # A tick under the line where drafted tokens were rejected since the tick before.
    step = max(1, len(points) // MAX_TICKS)
    before = 0
    for t, tokens, rejected in points[::step]:
        if rejected > before:
            parts.append(f'<line x1="{x(t):.1f}" y1="{y(tokens) + 2:.1f}" x2="{x(t):.1f}" '
                         f'y2="{y(tokens) + 2 + min(2 + rejected - before, 8):.1f}" stroke="{REJECTED}"/>')
        before = rejected
    if lane.seconds is not None:
        t, tokens, _ = lane.timeline[-1]
        parts.append(f'<circle cx="{x(t):.1f}" cy="{y(tokens):.1f}" r="4.5" fill="{colour}"/>')
    return parts


def _legend(lane: RaceLane, row: int) -> str:
    """The lane's name, state and time, top left, one row per lane."""
    colour = COLOURS.get(lane.name, "#334155")
    label = LABELS.get(lane.name, lane.name)
    if lane.seconds is not None:
        label += f": done {lane.seconds:.2f} s"
    elif lane.stopped is not None:
        label += ": stopped"
    elif lane.started is not None:
        label += ": running"
    top = 12 + row * 15
    return (f'<line x1="{LEFT + 6}" y1="{top - 4}" x2="{LEFT + 24}" y2="{top - 4}" stroke="{colour}" '
            f'stroke-width="3"/><text x="{LEFT + 30}" y="{top}" font-size="12" fill="{colour}" '
            f'font-weight="600">{escape(label)}</text>')


def _summary(race: Race) -> str:
    """What the chart shows, in words (its accessible name)."""
    words = []
    for lane in race.lanes.values():
        state = (f"done after {lane.seconds:.2f} s" if lane.seconds is not None else
                 "stopped" if lane.stopped is not None else "running" if lane.started is not None else "waiting")
        words.append(f"{LABELS.get(lane.name, lane.name)}: {lane.tokens} tokens, {state}")
    return "; ".join(words)
