"""A slow-motion replay of a race: both lanes' measured timelines stretched by one factor, so that an
audience hears what the numbers say.

On a fast machine both decoders produce speech faster than it plays, so a listener hears the same
speech from both and only the counters show the difference. Stretching both measured timelines by the
same factor (as if the same models ran that many times slower) keeps their ratio. The automatic factor
is read off the measured timelines: the largest one at which the speculative lane keeps flowing while
the autoregressive one audibly stalls; when there is none (one piece only, or a speedup too small on
this run) the replay says so and plays as measured.

Each lane's replay plays every piece as it would have arrived: a piece starts at its stretched ready
time or when the piece before it ends, whichever is later, with silence (a stall) before it. A lane may start
`buffer` seconds after its first piece, as a streaming player buffers (the page: `PLAYER_BUFFER`, the same for
both lanes): jitter of a fraction of a second is then not heard as a stall, while a lane slower than real time
still stalls. The audio itself is never stretched, only the time it waited for. Pure functions: numbers and
arrays in, numbers and arrays out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: A silence between two pieces up to this long (seconds) is not heard as a stall (the speculative lane
#: may have one this short at the automatic factor).
GAP_TOLERANCE = 0.1
#: The automatic factor makes the autoregressive lane stall at least this long (seconds) somewhere
#: between two pieces, so that the stall is heard.
AUDIBLE_STALL = 0.3
#: The factors the automatic choice tries (a geometric grid over the allowed range).
_GRID_STEPS = 400
#: Factors are kept in this range (a typed 0 or a huge number would make no sense to a listener).
MIN_FACTOR, MAX_FACTOR = 1.0, 200.0
#: What a streaming player buffers before it starts a lane (seconds): the page's replays start each lane this long
#: after its first piece (between pieces a speculative lane's arrival jitters by up to about 0.2 s on a busy
#: 2-core machine, which a listener would hear as hiccups where the lane is in fact ahead of real time).
PLAYER_BUFFER = 0.3
#: No replay runs longer than this (seconds) at a factor above 1: a talk can spend a minute on it, not the
#: 54 minutes a paragraph took at x200. A clip longer than this as measured plays at x1.
MAX_REPLAY_SECONDS = 60.0


@dataclass(frozen=True)
class TimedPiece:
    """Where a piece sits in its lane's whole clip, and when it was ready (seconds since its run began)."""

    start_sample: int
    end_sample: int
    ready_seconds: float


def stretched_schedule(pieces: Sequence[TimedPiece], sample_rate: int, factor: float,
                       buffer: float = 0.0) -> list[tuple[float, float]]:
    """(start, end) seconds at which each piece plays when the lane's production is `factor` times
    slower: it starts at `factor` x its ready time, or when the previous piece ends if that is later
    (the listener never hears a piece before it exists, and pieces never overlap); the first piece `buffer`
    seconds after it is ready."""
    schedule, clock = [], pieces[0].ready_seconds * factor + buffer if pieces else 0.0
    for piece in pieces:
        start = max(piece.ready_seconds * factor, clock)
        clock = start + (piece.end_sample - piece.start_sample) / sample_rate
        schedule.append((start, clock))
    return schedule


def slow_motion_track(audio: np.ndarray, pieces: Sequence[TimedPiece], sample_rate: int, factor: float,
                      length: int | None = None, buffer: float = 0.0) -> np.ndarray:
    """The lane as a listener would hear it at `factor`: silence until each piece's stretched start,
    then the piece (`stretched_schedule`); padded with silence to `length` samples when given."""
    schedule = stretched_schedule(pieces, sample_rate, factor, buffer)
    end = int(round(schedule[-1][1] * sample_rate)) if schedule else 0
    track = np.zeros(max(end, length or 0), dtype=np.float32)
    for piece, (start, _) in zip(pieces, schedule):
        offset = int(round(start * sample_rate))
        segment = np.asarray(audio[piece.start_sample : piece.end_sample], dtype=np.float32)
        track[offset : offset + len(segment)] = segment[: max(len(track) - offset, 0)]
    return track


def longest_stall(pieces: Sequence[TimedPiece], sample_rate: int, factor: float, buffer: float = 0.0) -> float:
    """The longest silence (seconds) between two pieces at `factor` (the wait before the first piece is
    not a stall: nothing has been said yet); 0 for one piece."""
    schedule = stretched_schedule(pieces, sample_rate, factor, buffer)
    return max((start - end for (_, end), (start, _) in zip(schedule, schedule[1:])), default=0.0)


def replay_seconds(pieces: Sequence[TimedPiece], sample_rate: int, factor: float, buffer: float = 0.0) -> float:
    """How long the lane's replay lasts at `factor` (its last piece's end; never shorter at a larger factor)."""
    schedule = stretched_schedule(pieces, sample_rate, factor, buffer)
    return schedule[-1][1] if schedule else 0.0


def factor_ceiling(ar_pieces: Sequence[TimedPiece], spec_pieces: Sequence[TimedPiece], sample_rate: int,
                   limit: float = MAX_REPLAY_SECONDS, buffer: float = 0.0) -> float:
    """The largest factor (<= MAX_FACTOR) at which neither replay lasts longer than `limit` seconds, to within
    0.1%; MIN_FACTOR when even the clips as measured are longer (the length only grows with the factor)."""
    def fits(factor: float) -> bool:
        return max(replay_seconds(ar_pieces, sample_rate, factor, buffer),
                   replay_seconds(spec_pieces, sample_rate, factor, buffer)) <= limit

    if fits(MAX_FACTOR):
        return MAX_FACTOR
    if not fits(MIN_FACTOR):
        return MIN_FACTOR
    low, high = MIN_FACTOR, MAX_FACTOR  # fits(low), not fits(high)
    while high / low > 1.001:
        middle = math.sqrt(low * high)
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low


#: Why the automatic choice found no factor (the page prints it, and the replay is at factor 1).
ONE_PIECE = "one piece only: nothing to stall between pieces"
NOT_FAST_ENOUGH = "the speculative run was not fast enough on this run to show the difference in slow motion"


def automatic_factor(ar_pieces: Sequence[TimedPiece], spec_pieces: Sequence[TimedPiece],
                     sample_rate: int, ceiling: float = MAX_FACTOR, buffer: float = 0.0) -> tuple[float, str | None]:
    """The factor that shows the difference, from the measured timelines themselves: the largest factor at
    which the speculative lane has no stall longer than `GAP_TOLERANCE` while the autoregressive lane has
    one of `AUDIBLE_STALL` at least. None such (too few pieces, or a speedup too small on this run, as
    per-piece arrival times vary): (`MIN_FACTOR`, the reason, to print). No factor above `ceiling` is tried
    (`factor_ceiling`: the replay's length)."""
    if len(ar_pieces) < 2 or len(spec_pieces) < 2:
        return MIN_FACTOR, ONE_PIECE
    for factor in np.geomspace(MAX_FACTOR, MIN_FACTOR, _GRID_STEPS):
        if factor > ceiling:
            continue
        if (longest_stall(spec_pieces, sample_rate, factor, buffer) <= GAP_TOLERANCE
                and longest_stall(ar_pieces, sample_rate, factor, buffer) >= AUDIBLE_STALL):
            return float(factor), None
    return MIN_FACTOR, NOT_FAST_ENOUGH


def clamp_factor(factor: float) -> float:
    """A factor within [MIN_FACTOR, MAX_FACTOR] (not a number: MIN_FACTOR)."""
    return min(max(factor, MIN_FACTOR), MAX_FACTOR) if math.isfinite(factor) else MIN_FACTOR


def parse_factor(typed: object) -> tuple[float | None, str | None]:
    """The speaker's typed factor: (the factor, None: automatic; a short message when the text was not
    taken as typed). Empty, "auto" and 0 mean automatic; anything else must be a number from
    `MIN_FACTOR` to `MAX_FACTOR` (outside it: clamped, and said so; not a number or below 0: automatic,
    and said so)."""
    text = str(typed if typed is not None else "").strip().lower().lstrip("×x").strip()
    if text in ("", "auto") or text.startswith("auto"):
        return None, None
    try:
        number = float(text)
    except ValueError:
        return None, f"\"{typed}\" is not a number: automatic factor"
    if not math.isfinite(number) or number < 0:
        return None, f"\"{typed}\" is not a factor (a number from {MIN_FACTOR:g} to {MAX_FACTOR:g}): automatic factor"
    if number == 0:
        return None, None
    if number > MAX_FACTOR:
        return MAX_FACTOR, f"×{number:g} is above the most, ×{MAX_FACTOR:g}: used ×{MAX_FACTOR:g}"
    if number < MIN_FACTOR:
        return MIN_FACTOR, f"×{number:g} is below ×{MIN_FACTOR:g} (as measured): used ×{MIN_FACTOR:g}"
    return number, None


@dataclass(frozen=True)
class SlowMotion:
    """Both lanes' replay tracks at one factor, of equal length, and what the page prints about them."""

    factor: float
    automatic: bool
    ar_track: np.ndarray
    spec_track: np.ndarray
    ar_real_time_factor: float  # after stretching: > 1 means the lane stalls on average
    spec_real_time_factor: float
    why_no_factor: str | None = None  # automatic, but no factor shows the difference (`automatic_factor`)
    capped_from: float | None = None  # the factor asked for, when it would have made the replay too long


def slow_motion(ar_audio: np.ndarray, ar_pieces: Sequence[TimedPiece], ar_real_time_factor: float,
                spec_audio: np.ndarray, spec_pieces: Sequence[TimedPiece], spec_real_time_factor: float,
                sample_rate: int, factor: float | None = None, buffer: float = 0.0) -> SlowMotion:
    """Both lanes' slow-motion tracks, at `factor` or (None) the `automatic_factor` of their measured
    timelines, each lane starting `buffer` seconds after its first piece; the real-time factors (seconds per
    second of audio) are the paces it prints."""
    automatic = factor is None or not factor > 0
    ceiling = factor_ceiling(ar_pieces, spec_pieces, sample_rate, buffer=buffer)
    chosen, why = (automatic_factor(ar_pieces, spec_pieces, sample_rate, ceiling, buffer) if automatic
                   else (clamp_factor(factor), None))
    capped_from = chosen if chosen > ceiling else None
    chosen = min(chosen, ceiling)
    ar = slow_motion_track(ar_audio, ar_pieces, sample_rate, chosen, buffer=buffer)
    spec = slow_motion_track(spec_audio, spec_pieces, sample_rate, chosen, buffer=buffer)
    length = max(len(ar), len(spec))
    return SlowMotion(chosen, automatic, np.pad(ar, (0, length - len(ar))), np.pad(spec, (0, length - len(spec))),
                      chosen * ar_real_time_factor, chosen * spec_real_time_factor, why, capped_from)


def pieces_from_timing(timing: dict, sample_rate: int) -> list[TimedPiece]:
    """`TimedPiece`s from a stream's timing figures (`streaming.stream_timing`: each piece's start,
    duration and ready seconds), e.g. as the app's JSON details hold them."""
    return [TimedPiece(int(round(p["start_seconds"] * sample_rate)),
                       int(round((p["start_seconds"] + p["duration_seconds"]) * sample_rate)),
                       float(p["ready_seconds"])) for p in timing.get("pieces", [])]
