"""A slow-motion replay of a race: both lanes' measured timelines stretched by one factor, so that an
audience hears what the numbers say.

On a fast machine both decoders produce speech faster than it plays, so a listener hears the same
speech from both and only the counters show the difference. Stretching both measured timelines by the
same factor (as if the same models ran that many times slower) keeps their ratio, and once the
autoregressive lane produces speech slower than real time it stalls audibly while the speculative
lane, faster by the measured speedup, keeps flowing.

Each lane's replay plays every piece as it would have arrived: a piece starts at its stretched ready
time or when the piece before it ends, whichever is later, with silence (a stall) before it. The audio
itself is never stretched, only the time it waited for. Pure functions: numbers and arrays in, numbers
and arrays out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: The automatic factor makes the autoregressive lane this many times slower than real time at least,
#: so that it audibly stalls even when the speedup is small.
MIN_AR_SLOWDOWN = 1.25
#: Factors are kept in this range (a typed 0 or a huge number would make no sense to a listener).
MIN_FACTOR, MAX_FACTOR = 1.0, 200.0


@dataclass(frozen=True)
class TimedPiece:
    """Where a piece sits in its lane's whole clip, and when it was ready (seconds since its run began)."""

    start_sample: int
    end_sample: int
    ready_seconds: float


def stretched_schedule(pieces: Sequence[TimedPiece], sample_rate: int, factor: float) -> list[tuple[float, float]]:
    """(start, end) seconds at which each piece plays when the lane's production is `factor` times
    slower: it starts at `factor` x its ready time, or when the previous piece ends if that is later
    (the listener never hears a piece before it exists, and pieces never overlap)."""
    schedule, clock = [], 0.0
    for piece in pieces:
        start = max(piece.ready_seconds * factor, clock)
        clock = start + (piece.end_sample - piece.start_sample) / sample_rate
        schedule.append((start, clock))
    return schedule


def slow_motion_track(audio: np.ndarray, pieces: Sequence[TimedPiece], sample_rate: int, factor: float,
                      length: int | None = None) -> np.ndarray:
    """The lane as a listener would hear it at `factor`: silence until each piece's stretched start,
    then the piece (`stretched_schedule`); padded with silence to `length` samples when given."""
    schedule = stretched_schedule(pieces, sample_rate, factor)
    end = int(round(schedule[-1][1] * sample_rate)) if schedule else 0
    track = np.zeros(max(end, length or 0), dtype=np.float32)
    for piece, (start, _) in zip(pieces, schedule):
        offset = int(round(start * sample_rate))
        segment = np.asarray(audio[piece.start_sample : piece.end_sample], dtype=np.float32)
        track[offset : offset + len(segment)] = segment[: max(len(track) - offset, 0)]
    return track


def automatic_factor(ar_real_time_factor: float, spec_real_time_factor: float) -> float:
    """The factor that puts real time between the two lanes: the autoregressive lane becomes
    sqrt(speedup) times slower than real time and the speculative one sqrt(speedup) times faster (at
    least `MIN_AR_SLOWDOWN` for AR); never below 1 (a lane already slower than real time stays as measured)."""
    ar, spec = ar_real_time_factor, spec_real_time_factor
    if not (math.isfinite(ar) and math.isfinite(spec)) or ar <= 0 or spec <= 0:
        return MIN_FACTOR
    target = max(math.sqrt(ar / spec), MIN_AR_SLOWDOWN)
    return clamp_factor(target / ar)


def clamp_factor(factor: float) -> float:
    """A factor within [MIN_FACTOR, MAX_FACTOR] (not a number: MIN_FACTOR)."""
    return min(max(factor, MIN_FACTOR), MAX_FACTOR) if math.isfinite(factor) else MIN_FACTOR


@dataclass(frozen=True)
class SlowMotion:
    """Both lanes' replay tracks at one factor, of equal length, and what the page prints about them."""

    factor: float
    automatic: bool
    ar_track: np.ndarray
    spec_track: np.ndarray
    ar_real_time_factor: float  # after stretching: > 1 means the lane stalls
    spec_real_time_factor: float


def slow_motion(ar_audio: np.ndarray, ar_pieces: Sequence[TimedPiece], ar_real_time_factor: float,
                spec_audio: np.ndarray, spec_pieces: Sequence[TimedPiece], spec_real_time_factor: float,
                sample_rate: int, factor: float | None = None) -> SlowMotion:
    """Both lanes' slow-motion tracks, at `factor` or (None) the `automatic_factor` of their measured
    real-time factors (LM + codec seconds per second of audio)."""
    automatic = factor is None or not factor > 0
    chosen = automatic_factor(ar_real_time_factor, spec_real_time_factor) if automatic else clamp_factor(factor)
    ar = slow_motion_track(ar_audio, ar_pieces, sample_rate, chosen)
    spec = slow_motion_track(spec_audio, spec_pieces, sample_rate, chosen)
    length = max(len(ar), len(spec))
    return SlowMotion(chosen, automatic, np.pad(ar, (0, length - len(ar))), np.pad(spec, (0, length - len(spec))),
                      chosen * ar_real_time_factor, chosen * spec_real_time_factor)


def pieces_from_timing(timing: dict, sample_rate: int) -> list[TimedPiece]:
    """`TimedPiece`s from a stream's timing figures (`streaming.stream_timing`: each piece's start,
    duration and ready seconds), e.g. as the app's JSON details hold them."""
    return [TimedPiece(int(round(p["start_seconds"] * sample_rate)),
                       int(round((p["start_seconds"] + p["duration_seconds"]) * sample_rate)),
                       float(p["ready_seconds"])) for p in timing.get("pieces", [])]
