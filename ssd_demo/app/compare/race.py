"""The race: both decoders streamed one after the other, with what the page shows while they run.

One machine cannot run the two decoders fairly at the same time, so `run_race` streams the
autoregressive run first and the speculative run second, each on its own clock (the
`ssd_demo.comparison` pipeline, as `compare`, with a `LaneSink`). `Race` is the live state the pipeline
streams into: what the page is doing, and per decoder (`RaceLane`) the rounds so far, tokens and time to first
audio, updated from the decoding thread; the page reads it to show live counters. Once both are done
the result is the same `Comparison` that `compare` returns, so the statistics, token view and charts
are the usual ones. Pure logic, no Gradio.
"""

from __future__ import annotations

import io
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import soundfile

from ...engine.cancellation import StopCheck, check
from ...comparison import LANES, Comparison, LaneSink, Request, model_turn, prepare, run
from ...comparison.slow_motion import SlowMotion, TimedPiece, pieces_from_timing, slow_motion
from ...speech.streaming import AudioPiece, stream_timing
from ...speech.synthesis import SynthesisResult
from .audio_files import audio_directory, to_int16, write_wav
from .views import end_to_end_speedup


@dataclass
class RaceLane:
    """One decoder's run as it happens (written by the decoding thread, read by the page)."""

    name: str  # "autoregressive" | "speculative"
    rounds: int = 0  # target model calls so far (prefills included), updated after every round
    tokens: int = 0  # tokens committed so far (forced ones included), updated after every round
    pieces: list[AudioPiece] = field(default_factory=list)
    started: float | None = None  # time.perf_counter() when its run began
    seconds: float | None = None  # its whole run, once done
    stopped: float | None = None  # how long it had run when the race was stopped (None: not stopped)

    @property
    def time_to_first_audio(self) -> float | None:
        """LM + codec seconds until the first piece: the clock "done" (`seconds`, the comparison's LM +
        codec seconds) is on, so first audio <= done always. (The pieces' `ready_seconds`, wall seconds
        that include the text front end and a busy machine's waits, time the slow-motion replay.)"""
        return self.pieces[0].processing_seconds if self.pieces else None

    def elapsed(self) -> float:
        if self.seconds is not None:
            return self.seconds
        if self.stopped is not None:
            return self.stopped
        return time.perf_counter() - self.started if self.started is not None else 0.0


@dataclass
class Race:
    """The whole race's live state: what the page is doing, and both lanes. It is the `LaneSink` the
    pipeline streams to and the `progress` it reports its stages to."""

    stage: str = "Starting the race"
    lanes: dict[str, RaceLane] = field(default_factory=lambda: {name: RaceLane(name) for name in LANES})
    sample_rate: int | None = None  # the voice's, once its models are ready (the live players open with it)

    def report(self, fraction: float = 0.0, desc: str | None = None) -> None:
        if desc is not None:
            self.stage = desc

    def started(self, lane: str) -> None:
        self.lanes[lane].started = time.perf_counter()

    def counted(self, lane: str, tokens: int, calls: int) -> None:
        self.lanes[lane].tokens, self.lanes[lane].rounds = tokens, calls

    def piece(self, lane: str, piece: AudioPiece) -> None:
        self.lanes[lane].tokens = piece.tokens_so_far
        self.lanes[lane].pieces.append(piece)

    def finished(self, lane: str, result: SynthesisResult, seconds: float) -> None:
        state = self.lanes[lane]
        state.seconds = seconds
        state.rounds, state.tokens = result.generation.stats.target_calls, len(result.generation.tokens)

    def stop(self) -> None:
        """The race was stopped: a lane still running keeps the time it had run (its clock stops)."""
        self.stage = "Stopped"
        for lane in self.lanes.values():
            if lane.started is not None and lane.seconds is None and lane.stopped is None:
                lane.stopped = time.perf_counter() - lane.started


def run_race(request: Request, race: Race, should_stop: StopCheck | None = None,
             lanes: LaneSink | None = None) -> Comparison:
    """The comparison of `compare`, each decoder's audio streamed to `race` (and to `lanes`, which
    should pass everything on to `race`, when given) as it is decoded: AR first, then speculative.

    Raises the same `UserError`s as `compare`; `Cancelled` when `should_stop` says so."""
    with model_turn(race.report):
        check(should_stop)  # stopped while it waited for the model
        prepared = prepare(request, race.report)
        race.sample_rate = prepared.synthesizer.backend.sample_rate
        check(should_stop)  # stopped while the model loaded and warmed up
        comparison = run(prepared, race.report, should_stop, lanes or race)
    race.stage = "Both runs done: drawing the charts"
    return comparison


# --- what the page shows ----------------------------------------------------------------------------

#: The status once both runs are decoded. With live audio the speculative voice is still to play then:
#: the page's players take turns, so it waits for the autoregressive voice to finish, and a new race
#: started before it plays would replace it unheard.
DONE_LIVE = "Done decoding: the speculative voice plays next"
DONE_CLIPS = "Done"


def done_stage(live_audio: bool) -> str:
    """What the status line says when the race is over (`DONE_LIVE` while a voice may still be queued)."""
    return DONE_LIVE if live_audio else DONE_CLIPS

def _seconds(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f} s"


def lane_markdown(lane: RaceLane, label: str) -> str:
    """One decoder's live counters: tokens, rounds (target calls), run time, time to first audio (LM + codec
    seconds) and the seconds of speech decoded so far. The page's voice rule reads the last two words of the
    state ("done") and the speech seconds: a lane's voice has finished only when its player has played them."""
    state = ("done" if lane.seconds is not None else "stopped" if lane.stopped is not None
             else "running" if lane.started is not None else "waiting")
    speech = sum(len(piece.audio) / piece.sample_rate for piece in lane.pieces)
    return (f"### {label}\n"
            f"**{lane.tokens}** tokens · **{lane.rounds}** target calls · {state} {_seconds(lane.elapsed())}  \n"
            f"First audio after **{_seconds(lane.time_to_first_audio)}** · {speech:.2f} s of speech")


#: A race whose slower run took less than this (LM + codec seconds) is too short for a bold claim: one
#: busy moment on the machine can move its speedup a lot.
SHORT_RUN_SECONDS = 3.0


#: Races with the same settings on one page before the headline states their median instead of one run.
MEDIAN_AFTER = 3


def verdict_lines(speedups: Sequence[float], run_seconds: float) -> list[str]:
    """The headline's claim and its basis. `speedups`: this page's races with these settings, this race
    last. From `MEDIAN_AFTER` races on it states their median and range (bold for a median of at least 1);
    before that it says it was one run, that a busy machine moves it, and how many more races give a median."""
    basis = "LM + codec seconds per second of audio, on this machine"
    this = speedups[-1]
    if len(speedups) >= MEDIAN_AFTER:
        middle = float(np.median(speedups))
        spread = (f"median of {len(speedups)} races with these settings on this page (range "
                  f"{min(speedups):.1f}–{max(speedups):.1f}×; this one {this:.1f}×); {basis}")
        return [f"{'#' if middle >= 1 else '##'} Speculative is {_ratio_words(middle)}", spread]
    more = MEDIAN_AFTER - len(speedups)
    why = f"One short run ({run_seconds:.1f} s)" if run_seconds < SHORT_RUN_SECONDS else "One run"
    return [f"## Speculative was {_ratio_words(this)} on this run",
            f"{why}: a busy machine moves it a lot; race again ({more} more with these settings give a median)"]


def _ratio_words(speedup: float) -> str:
    factor = speedup if speedup >= 1 else 1 / speedup
    if round(factor, 1) == 1.0:
        return "about as fast as autoregressive"
    return f"{factor:.1f}× {'faster' if speedup >= 1 else 'slower'}"


def headline(comparison: Comparison, race: Race | None = None, earlier: Sequence[float] = ()) -> str:
    """The big readout: end-to-end speedup per second of audio (`verdict_lines`, with the `earlier` speedups
    of this page's races with the same settings), and both times to first audio."""
    speedup = end_to_end_speedup(comparison)
    if not math.isfinite(speedup) or speedup <= 0:
        return ""
    run_seconds = max(comparison.ar.total_seconds, comparison.spec.total_seconds)
    lines = verdict_lines([*earlier, speedup], run_seconds)
    if race is not None:
        ar, spec = (race.lanes[name].time_to_first_audio for name in LANES)
        if ar is not None and spec is not None:
            lines[-1] += f"; first audio after {spec:.2f} s (speculative) vs {ar:.2f} s (autoregressive)"
    return "\n".join(lines)


class RaceHistory:
    """Each page's end-to-end speedups per settings, newest last: what the headline's median is over. Only a
    page's own races count (keyed by its session); bounded in pages and in races per setting."""

    def __init__(self, pages: int = 500, races: int = 20) -> None:
        self.pages, self.races = pages, races
        self._speedups: OrderedDict[str, dict[Hashable, list[float]]] = OrderedDict()
        self._lock = threading.Lock()

    def earlier(self, page: str | None, key: Hashable) -> list[float]:
        with self._lock:
            return list(self._speedups.get(page, {}).get(key, [])) if page else []

    def add(self, page: str | None, key: Hashable, speedup: float) -> None:
        if not page or not math.isfinite(speedup) or speedup <= 0:
            return
        with self._lock:
            settings = self._speedups.pop(page, {})
            self._speedups[page] = settings  # most recently used last
            settings[key] = (settings.get(key, []) + [speedup])[-self.races:]
            while len(self._speedups) > self.pages:
                self._speedups.popitem(last=False)


def settings_key(request: Request) -> Hashable:
    """What makes two races comparable: the text, the model pair and every decoding setting but the seed."""
    settings = tuple(sorted((name, repr(value)) for name, value in request.settings.items()
                            if name != "seed" and value is not None))
    return request.text, request.preset, request.draft, settings


def race_details(race: Race) -> dict:
    """Both lanes' latency figures (the JSON the page and the API return)."""
    return {name: {**stream_timing(lane.pieces), "run_seconds": lane.seconds, "target_calls": lane.rounds,
                   "tokens": lane.tokens} for name, lane in race.lanes.items()}


def slow_motion_of(race: Race, comparison: Comparison, factor: float | None = None) -> SlowMotion:
    """The race's slow-motion replay (`comparison.slow_motion`): each lane's pieces as they were ready,
    both timelines stretched by `factor` (None: the automatic one)."""
    def timed(name: str) -> list[TimedPiece]:
        return [TimedPiece(p.start_sample, p.start_sample + len(p.audio), p.ready_seconds)
                for p in race.lanes[name].pieces]

    ar, spec = comparison.ar, comparison.spec
    return slow_motion(ar.audio, timed("autoregressive"), ar.real_time_factor, spec.audio, timed("speculative"),
                       spec.real_time_factor, ar.sample_rate, factor)


def slow_motion_from_files(ar_path: str | Path, spec_path: str | Path, details: dict,
                           factor: float | None = None) -> SlowMotion:
    """The same replay again, from what the page holds after a race: both clips' WAV files and the JSON
    details (each piece's timing and each run's real-time factor), e.g. at another factor."""
    clips = [soundfile.read(str(path), dtype="float32", always_2d=False) for path in (ar_path, spec_path)]
    (ar_audio, rate), (spec_audio, _) = clips
    timings = [pieces_from_timing(details["race"][name], rate) for name in LANES]
    ar_rtf, spec_rtf = (details[name]["real_time_factor"] for name in LANES)
    return slow_motion(ar_audio, timings[0], ar_rtf, spec_audio, timings[1], spec_rtf, rate, factor)


def write_replay_files(replay: SlowMotion, sample_rate: int, directory: Path | None = None) -> tuple[Path, Path]:
    """Both slow-motion tracks as WAV files (named by the factor, so a new factor is a new file)."""
    directory = directory or audio_directory()
    paths = []
    for name, track in zip(LANES, (replay.ar_track, replay.spec_track)):
        path = directory / f"slow_motion_x{replay.factor:.2f}_{name}.wav"
        write_wav(path, track, sample_rate)
        paths.append(path)
    return paths[0], paths[1]


def piece_wav(piece: AudioPiece, lead_in: float = 0.0) -> bytes:
    """A piece as 16-bit WAV bytes with the clip's one fixed gain (what a streaming player is fed), after
    `lead_in` seconds of silence."""
    silence = np.zeros(round(lead_in * piece.sample_rate), dtype=np.float32)
    return _wav_bytes(np.concatenate([silence, piece.audio]), piece.sample_rate)


def empty_wav(sample_rate: int = 16_000, seconds: float = 0.0) -> bytes:
    """A WAV of silence (by default no samples: a streamed chunk that adds nothing to the audio)."""
    return _wav_bytes(np.zeros(round(seconds * sample_rate), dtype=np.float32), sample_rate)


def _wav_bytes(audio: np.ndarray, sample_rate: int) -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, to_int16(audio), sample_rate, subtype="PCM_16", format="WAV")
    return buffer.getvalue()
