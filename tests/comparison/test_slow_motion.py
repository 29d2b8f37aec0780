"""The slow-motion replay: each piece starts at its stretched ready time (or when the piece before it
ends), within a few milliseconds, found by listening for where the sound starts in the rendered track."""

from __future__ import annotations

import numpy as np
import pytest

from ssd_demo.comparison.slow_motion import (AUDIBLE_STALL, GAP_TOLERANCE, MAX_REPLAY_SECONDS, MIN_FACTOR,
                                             NOT_FAST_ENOUGH, ONE_PIECE, MAX_FACTOR, TimedPiece, automatic_factor,
                                             factor_ceiling, longest_stall, parse_factor,
                                             pieces_from_timing, slow_motion, slow_motion_track, stretched_schedule)

RATE = 16_000
TOLERANCE = 0.005  # seconds: a piece's sound may start at most this far from its stretched time


def _lane(durations: list[float], ready: list[float], seed: int) -> tuple[np.ndarray, list[TimedPiece]]:
    """A clip of noise bursts (never silent inside a piece) cut into pieces ready at `ready`."""
    rng = np.random.default_rng(seed)
    sizes = [int(d * RATE) for d in durations]
    audio = (0.2 + 0.5 * rng.random(sum(sizes))).astype(np.float32) * rng.choice([-1, 1], sum(sizes))
    bounds = np.cumsum([0, *sizes])
    return audio, [TimedPiece(int(a), int(b), r) for a, b, r in zip(bounds[:-1], bounds[1:], ready)]


def _onsets(track: np.ndarray) -> list[float]:
    """Where the sound starts after each silence (seconds)."""
    loud = np.abs(track) > 1e-4
    starts = np.flatnonzero(loud & ~np.concatenate([[False], loud[:-1]]))
    return [s / RATE for s in starts]


@pytest.mark.parametrize("factor", [1.0, 2.5, 7.0])
def test_pieces_start_at_their_stretched_ready_times(factor):
    durations, ready = [1.0, 0.6, 1.4, 0.3], [0.30, 0.50, 1.10, 1.15]
    audio, pieces = _lane(durations, ready, seed=1)
    track = slow_motion_track(audio, pieces, RATE, factor)
    # The rule, computed here from the inputs: a piece starts when it is ready (stretched) or when the
    # previous one has finished playing, whichever is later.
    expected, clock = [], 0.0
    for duration, when in zip(durations, ready):
        start = max(factor * when, clock)
        expected.append(start)
        clock = start + duration
    for start, (scheduled, _) in zip(expected, stretched_schedule(pieces, RATE, factor)):
        assert abs(start - scheduled) < 1e-9
    # Heard: the first piece, and every piece after a stall, starts a new sound where it was scheduled.
    ends = [start + duration for start, duration in zip(expected, durations)]
    after_stall = [expected[0]] + [start for start, end in zip(expected[1:], ends) if start > end + 1e-9]
    heard = _onsets(track)
    assert len(heard) == len(after_stall)
    for onset, start in zip(heard, after_stall):
        assert abs(onset - start) <= TOLERANCE, (onset, start)
    assert len(track) / RATE == pytest.approx(clock, abs=1 / RATE)
    for (start, end), piece in zip(stretched_schedule(pieces, RATE, factor), pieces):  # the piece itself, intact
        offset = int(round(start * RATE))
        np.testing.assert_array_equal(track[offset : offset + piece.end_sample - piece.start_sample],
                                      audio[piece.start_sample : piece.end_sample])


def test_silence_fills_each_stall_and_nothing_plays_early():
    durations, ready = [0.5, 0.5, 0.5], [0.2, 1.0, 1.3]
    audio, pieces = _lane(durations, ready, seed=2)
    factor = 3.0
    track = slow_motion_track(audio, pieces, RATE, factor)
    schedule = stretched_schedule(pieces, RATE, factor)
    assert not np.any(track[: int(schedule[0][0] * RATE)])  # silence until the first piece exists
    for (_, end), (start, _) in zip(schedule, schedule[1:]):
        assert not np.any(track[int(round(end * RATE)) : int(round(start * RATE))])  # the stall
        assert start >= end - 1e-9  # no overlap
    heard = _onsets(track)
    assert len(heard) == 3
    for onset, (start, _) in zip(heard, schedule):
        assert abs(onset - start) <= TOLERANCE


def _steady_lane(pace: float, pieces: int, seconds_each: float, seed: int):
    """A lane that makes `seconds_each` of speech per piece, each taking `pace` x its length to produce."""
    ready = [pace * seconds_each * (i + 1) for i in range(pieces)]
    return _lane([seconds_each] * pieces, ready, seed)


@pytest.mark.parametrize("speedup", [1.1, 2.6])
def test_the_automatic_factor_shows_the_difference_or_says_why_not(speedup):
    ar_pace = 0.2  # 1 s of speech in 0.2 s: far faster than real time, as on a fast machine
    _, ar = _steady_lane(ar_pace, 6, 1.0, seed=6)
    _, spec = _steady_lane(ar_pace / speedup, 6, 1.0, seed=7)
    factor, why = automatic_factor(ar, spec, RATE)
    if speedup < 1.3:  # the AR lane cannot stall audibly without the speculative one stalling too
        assert (factor, why) == (MIN_FACTOR, NOT_FAST_ENOUGH)
        return
    assert why is None and factor > MIN_FACTOR
    assert longest_stall(spec, RATE, factor) <= GAP_TOLERANCE  # the speculative lane keeps flowing
    assert longest_stall(ar, RATE, factor) >= AUDIBLE_STALL  # the autoregressive lane is heard to stall
    assert longest_stall(spec, RATE, factor * 1.05) > GAP_TOLERANCE  # the largest such factor
    # Heard in the rendered tracks: the longest silence once the speech has begun.
    ar_audio, _ = _steady_lane(ar_pace, 6, 1.0, seed=6)
    spec_audio, _ = _steady_lane(ar_pace / speedup, 6, 1.0, seed=7)
    assert _longest_silence(slow_motion_track(spec_audio, spec, RATE, factor)) <= GAP_TOLERANCE + TOLERANCE
    assert _longest_silence(slow_motion_track(ar_audio, ar, RATE, factor)) >= AUDIBLE_STALL - TOLERANCE


def _longest_silence(track: np.ndarray) -> float:
    """The longest silent stretch (seconds) after the first sound."""
    loud = np.flatnonzero(np.abs(track) > 1e-4)
    return float(np.diff(loud).max() - 1) / RATE if len(loud) > 1 else 0.0


def test_uneven_arrivals_and_one_piece():
    # Same average pace for both lanes' first pieces but a late speculative piece: the choice is read
    # off the timeline, not the average, so the late piece caps the factor.
    _, ar = _lane([1.0] * 4, [0.2, 0.4, 0.6, 0.8], seed=8)
    _, spec = _lane([1.0] * 4, [0.05, 0.1, 0.35, 0.4], seed=9)
    factor, why = automatic_factor(ar, spec, RATE)
    assert why is None and longest_stall(spec, RATE, factor) <= GAP_TOLERANCE
    _, one = _lane([2.0], [0.3], seed=10)
    assert automatic_factor(one, one, RATE) == (MIN_FACTOR, ONE_PIECE)


def test_both_lanes_at_one_factor_and_equal_length():
    ar_audio, ar_pieces = _lane([1.0, 1.0], [0.1, 0.2], seed=3)
    spec_audio, spec_pieces = _lane([1.0, 1.0], [0.05, 0.1], seed=4)
    ar_rtf, spec_rtf = 0.2 / 2.0, 0.1 / 2.0
    replay = slow_motion(ar_audio, ar_pieces, ar_rtf, spec_audio, spec_pieces, spec_rtf, RATE)
    assert replay.automatic and replay.factor == automatic_factor(ar_pieces, spec_pieces, RATE)[0]
    assert len(replay.ar_track) == len(replay.spec_track) and replay.why_no_factor is None
    assert replay.ar_real_time_factor == pytest.approx(replay.factor * ar_rtf)
    chosen = slow_motion(ar_audio, ar_pieces, ar_rtf, spec_audio, spec_pieces, spec_rtf, RATE, factor=4.0)
    assert not chosen.automatic and chosen.factor == 4.0
    # The AR lane, slower, waits longer for its second piece than the speculative one.
    ar_heard, spec_heard = _onsets(chosen.ar_track), _onsets(chosen.spec_track)
    assert ar_heard[0] == pytest.approx(4.0 * 0.1, abs=TOLERANCE)
    assert spec_heard[0] == pytest.approx(4.0 * 0.05, abs=TOLERANCE)


def test_no_replay_runs_longer_than_a_talk_can_use():
    # A paragraph's race: 12 pieces of 2 s, the AR lane's ready over 8 s, the speculative one's over 4 s.
    # At x200 its replay would last about 27 minutes; asked for x200 it is lowered so that neither
    # replay lasts longer than MAX_REPLAY_SECONDS, and says from what.
    durations = [2.0] * 12
    ar_audio, ar_pieces = _lane(durations, [0.7 * (i + 1) for i in range(12)], seed=11)
    spec_audio, spec_pieces = _lane(durations, [0.35 * (i + 1) for i in range(12)], seed=12)
    for asked in (MAX_FACTOR, 50.0, None):
        replay = slow_motion(ar_audio, ar_pieces, 0.35, spec_audio, spec_pieces, 0.17, RATE, factor=asked)
        assert len(replay.ar_track) / RATE <= MAX_REPLAY_SECONDS + 1e-6
        assert len(replay.spec_track) == len(replay.ar_track)
        if asked is not None:
            assert replay.capped_from == asked and replay.factor < asked
    ceiling = factor_ceiling(ar_pieces, spec_pieces, RATE)
    assert len(slow_motion_track(ar_audio, ar_pieces, RATE, ceiling * 1.01)) / RATE > MAX_REPLAY_SECONDS
    # A factor that fits is played as asked; a clip longer than the limit as measured plays at x1.
    short = slow_motion(ar_audio, ar_pieces, 0.35, spec_audio, spec_pieces, 0.17, RATE, factor=2.0)
    assert short.factor == 2.0 and short.capped_from is None
    long_audio, long_pieces = _lane([10.0] * 7, [0.5 * (i + 1) for i in range(7)], seed=13)
    assert factor_ceiling(long_pieces, long_pieces, RATE) == MIN_FACTOR


def test_pieces_from_the_timing_figures_match_the_pieces():
    from ssd_demo.speech.streaming import AudioPiece, stream_timing

    audio, timed = _lane([0.5, 0.25], [0.1, 0.3], seed=5)
    pieces = [AudioPiece(index=i, chunk_index=i, text="", audio=audio[p.start_sample : p.end_sample], sample_rate=RATE,
                         start_sample=p.start_sample, ready_seconds=p.ready_seconds, processing_seconds=0.1,
                         tokens_so_far=0, target_calls_so_far=0) for i, p in enumerate(timed)]
    assert pieces_from_timing(stream_timing(pieces), RATE) == timed


@pytest.mark.parametrize("typed, factor, says", [
    (None, None, None), ("", None, None), ("auto", None, None), ("0", None, None), (0, None, None),
    ("3", 3.0, None), ("×2.5", 2.5, None), (7, 7.0, None),
    ("-2", None, "not a factor"), ("abc", None, "not a number"), ("nan", None, "not a factor"),
    ("1000", MAX_FACTOR, "above the most"), ("0.5", MIN_FACTOR, "below"),
])
def test_the_typed_factor_is_read_and_anything_not_taken_as_typed_is_said(typed, factor, says):
    chosen, message = parse_factor(typed)
    assert chosen == factor
    assert (message is None) if says is None else (says in message)


def test_a_players_buffer_absorbs_jitter_but_not_a_lane_slower_than_real_time():
    # Pieces of 0.5 s: a lane whose second piece comes 0.2 s late (jitter), and one that falls behind.
    jittery = [TimedPiece(0, RATE // 2, 0.3), TimedPiece(RATE // 2, RATE, 1.0), TimedPiece(RATE, 3 * RATE // 2, 1.3)]
    behind = [TimedPiece(i * RATE // 2, (i + 1) * RATE // 2, 0.3 + 0.8 * i) for i in range(6)]
    assert longest_stall(jittery, RATE, 1.0) == pytest.approx(0.2)
    assert longest_stall(jittery, RATE, 1.0, buffer=0.3) == 0.0
    assert longest_stall(behind, RATE, 1.0, buffer=0.3) >= AUDIBLE_STALL
    # The buffer delays the first piece, and only the first, by its length when nothing else is late.
    on_time = [TimedPiece(0, RATE // 2, 0.3), TimedPiece(RATE // 2, RATE, 0.5)]
    assert [start for start, _ in stretched_schedule(on_time, RATE, 2.0, buffer=0.3)] == pytest.approx([0.9, 1.4])
