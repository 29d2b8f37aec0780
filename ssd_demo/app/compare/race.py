"""The race: both decoders streamed from the click, with what the page shows while they run.

`run_race` runs the `ssd_demo.comparison` pipeline with a `LaneSink`: where the machine has a core for each
decoder, both start at the click, each in a worker process of its own (`comparison.lanes`); elsewhere (one
core, one GPU) the autoregressive run goes first and the speculative one after it, then both are told to the page
on one clock, each at its measured pace (`comparison.replay`), and the page says so.
`Race` is the live state the pipeline streams into: what the page is doing, and per decoder (`RaceLane`) the
tokens, target calls and rejected drafts after every round on one clock from the click, and its audio pieces;
the page reads it to draw both lanes live. Once both are done the result is the same `Comparison` that
`compare` returns, so the statistics, token view and charts are the usual ones. Pure logic, no Gradio.
"""

from __future__ import annotations

import base64
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
from ...comparison import LANES, Comparison, LaneSink, Request, model_turn, prepare, replay_recorded, run
from ...comparison.lanes import lane_workers
from ...comparison.slow_motion import PLAYER_BUFFER, SlowMotion, TimedPiece, pieces_from_timing, slow_motion
from ...comparison.speaking import speaking_now
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
    rejected: int = 0  # drafted tokens the target rejected so far
    pieces: list[AudioPiece] = field(default_factory=list)
    started: float | None = None  # time.perf_counter() when its run began
    seconds: float | None = None  # its whole run until its last audio (wall seconds), once done
    stopped: float | None = None  # how long it had run when the race was stopped (None: not stopped)
    #: (seconds since the click, tokens, rejected drafts) after rounds: what the live chart draws
    timeline: list[tuple[float, int, int]] = field(default_factory=list)

    @property
    def time_to_first_audio(self) -> float | None:
        """Seconds from the start of its run to its first piece, on the clock "done" (`seconds`, the result's
        `elapsed_seconds`) is on, so first audio <= done always: a stream whose codec windows overlap its LM is
        timed by the wall (its first piece's `processing_seconds` is its `ready_seconds`); a whole-chunk codec's
        run by its LM + codec seconds (its first piece's `processing_seconds`), not by the wall, which also
        holds the text front end and a busy machine's waits."""
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
    clicked: float = field(default_factory=time.perf_counter)  # the one clock both lanes are drawn on
    apart: str | None = None  # why the lanes decode one after the other ("": at once; None: not known yet)
    slowdown: dict[str, float] = field(default_factory=dict)  # at once against alone, per lane (start-up's timing)
    #: The lanes decoded one after the other and are shown replayed on one clock at their measured pace
    replayed: bool = False
    listeners: int = 0  # the most listeners' texts the shared voice spoke at once while this race ran (seen so far)

    def since_click(self) -> float:
        return time.perf_counter() - self.clicked

    def report(self, fraction: float = 0.0, desc: str | None = None) -> None:
        if desc is not None:
            self.stage = desc

    def replaying(self) -> None:
        """Both lanes are replayed from now on at their measured pace: the clock they are drawn on starts here."""
        self.replayed = True  # first: a frame drawn in between never labels the replay's clock as the click's
        self.clicked = time.perf_counter()

    def started(self, lane: str) -> None:
        self.lanes[lane].started = time.perf_counter()

    def counted(self, lane: str, tokens: int, calls: int, rejected: int = 0) -> None:
        state = self.lanes[lane]
        state.tokens, state.rounds, state.rejected = tokens, calls, rejected
        state.timeline.append((self.since_click(), tokens, rejected))

    def piece(self, lane: str, piece: AudioPiece) -> None:
        self.lanes[lane].tokens = piece.tokens_so_far
        self.lanes[lane].pieces.append(piece)

    def finished(self, lane: str, result: SynthesisResult, seconds: float) -> None:
        state = self.lanes[lane]
        state.seconds = seconds
        state.rounds, state.tokens = result.generation.stats.target_calls, len(result.generation.tokens)
        state.timeline.append((self.since_click(), state.tokens, state.rejected))

    def stop(self) -> None:
        """The race was stopped: a lane still running keeps the time it had run (its clock stops)."""
        self.stage = "Stopped"
        for lane in self.lanes.values():
            if lane.started is not None and lane.seconds is None and lane.stopped is None:
                lane.stopped = time.perf_counter() - lane.started


def run_race(request: Request, race: Race, should_stop: StopCheck | None = None,
             lanes: LaneSink | None = None) -> Comparison:
    """The comparison of `compare`, each decoder's audio streamed to `race` (and to `lanes`, which
    should pass everything on to `race`, `replaying` included, when given): both at once as they decode where the
    machine allows (`race.apart` is "" then), else AR first, then speculative, then, once the models are free for the
    next job, both replayed on one clock at their measured pace (`race.replayed`; stopped before, nothing is shown).

    Raises the same `UserError`s as `compare`; `Cancelled` when `should_stop` says so."""
    with model_turn(race.report):
        check(should_stop)  # stopped while it waited for the model
        prepared = prepare(request, race.report)
        race.sample_rate = prepared.synthesizer.backend.sample_rate
        race.apart = prepared.apart
        if not prepared.apart:  # what start-up measured of racing at once (the status line says it above 10 %)
            race.slowdown = dict(lane_workers(prepared.preset.key).slowdown)
        check(should_stop)  # stopped while the model loaded and warmed up
        comparison = run(prepared, race.report, should_stop, lanes or race)
        race.apart, race.slowdown = comparison.apart, comparison.slowdown
    if comparison.recorded:  # decoded apart: replayed once the models are free for the next job
        replay_recorded(comparison, lanes or race, should_stop, race.report)
    race.stage = "Both runs done: drawing the charts"
    return comparison


# --- what the page shows ----------------------------------------------------------------------------

#: The status once both runs are decoded (the voices may still be playing: the page plays one after the other).
DONE = "Done"


def done_stage() -> str:
    """What the status line says when the race is over."""
    return DONE


#: Above this, how much slower a lane ran beside the other than alone is said on the page.
SHOWN_SLOWDOWN = 0.10


def together_note(race: Race) -> str:
    """After the status: how the two lanes decode (at once, each on its own core, or one after the other and why),
    and the most listeners' texts the shared voice spoke at once during the race (they share the CPU: the times are
    slower), from when it was first seen to the race's end."""
    race.listeners = listeners = max(getattr(race, "listeners", 0), speaking_now())  # kept: the race's end says it too
    whose = "listeners' texts" if listeners > 1 else "listener's text"
    shared = f" · {listeners} {whose} spoken on this machine meanwhile" if listeners else ""
    return _lanes_note(race) + shared


def _lanes_note(race: Race) -> str:
    if race.apart is None:
        return ""
    if not race.apart:
        # Shown when running together cost a lane more than `SHOWN_SLOWDOWN` against running alone.
        # One line on a 1280x720 stage (the guide says how it is timed: at start-up, one sentence).
        slower = [f"{lane} +{value:.0%}" for lane, value in race.slowdown.items() if value > SHOWN_SLOWDOWN]
        return " · both at once, one core each" + (f"; slower together: {', '.join(slower)}" if slower else "")
    return f" · one after the other ({race.apart})" + ("; replayed at the pace measured" if race.replayed else "")


def _seconds(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f} s"


def lane_markdown(lane: RaceLane, label: str) -> str:
    """One decoder's live counters: tokens, rounds (target calls), rejected drafts, its state and run time, time to
    first audio and the seconds of speech decoded so far (the page's player writes when it was heard after them)."""
    state = ("done" if lane.seconds is not None else "stopped" if lane.stopped is not None
             else "running" if lane.started is not None else "waiting")
    speech = sum(len(piece.audio) / piece.sample_rate for piece in lane.pieces)
    return (f"### {label} · {state} {_seconds(lane.elapsed())}\n"
            f"**{lane.tokens}** tokens · **{lane.rounds}** target calls"
            f"{f' · {lane.rejected} rejected' if lane.rejected else ''} · {speech:.1f} s of speech  \n"
            f"First audio after **{_seconds(lane.time_to_first_audio)}**")


#: A race whose slower run took less than this (seconds until its last audio) is too short for a bold claim: one
#: busy moment on the machine can move its speedup a lot.
SHORT_RUN_SECONDS = 3.0
#: Speech shorter than this (seconds, the longer of the two clips) is too short for speculation to show: a word or
#: two is a handful of rounds, and fixed costs (the prompt, the first codec window) dominate both runs.
SHORT_SPEECH_SECONDS = 1.5
#: Races with the same settings on one page before the headline states their median instead of one run.
MEDIAN_AFTER = 3


def verdict_lines(speedups: Sequence[float], run_seconds: float) -> list[str]:
    """The headline's claim and its basis. `speedups`: this page's races with these settings, this race
    last. From `MEDIAN_AFTER` races on it states their median and range (bold for a median of at least 1);
    before that it says it was one run, that a busy machine moves it, and how many more races give a median."""
    this = speedups[-1]
    if len(speedups) >= MEDIAN_AFTER:
        middle = float(np.median(speedups))
        spread = (f"median of {len(speedups)} races with these settings on this page (range "
                  f"{min(speedups):.1f}–{max(speedups):.1f}×; this one {this:.1f}×)")
        return [f"{'#' if middle >= 1 else '##'} Speculative is {_ratio_words(middle)}", spread]
    more = MEDIAN_AFTER - len(speedups)
    why = f"One short run ({run_seconds:.1f} s)" if run_seconds < SHORT_RUN_SECONDS else "One run"
    return [f"## Speculative was {_ratio_words(this)} on this run",
            f"{why}, which a busy machine moves: {more} more with these settings give a median"]


def _ratio_words(speedup: float) -> str:
    factor = speedup if speedup >= 1 else 1 / speedup
    if round(factor, 1) == 1.0:
        return "about as fast as autoregressive"
    return f"{factor:.1f}× {'faster' if speedup >= 1 else 'slower'}"


def lm_speedup(comparison: Comparison) -> float:
    """Language-model seconds per second of speech, AR over speculative (the decoders alone, codec left out)."""
    ar, spec = comparison.ar, comparison.spec
    if min(ar.duration_seconds, spec.duration_seconds, ar.lm_seconds, spec.lm_seconds) <= 0:
        return float("nan")
    return (ar.lm_seconds / ar.duration_seconds) / (spec.lm_seconds / spec.duration_seconds)


def headline(comparison: Comparison, race: Race | None = None, earlier: Sequence[float] = ()) -> str:
    """The big readout: the end-to-end speedup per second of speech (`verdict_lines`, with the `earlier` speedups
    of this page's races with the same settings), then both ratios, each labelled, and both times to first audio.
    A text too short for speculation to show says so instead of a verdict that flips between races."""
    speedup = end_to_end_speedup(comparison)
    if not math.isfinite(speedup) or speedup <= 0:
        return ""
    run_seconds = max(comparison.ar.elapsed_seconds, comparison.spec.elapsed_seconds)
    # Both per second of speech: the language model's seconds alone, and the seconds until the last audio.
    basis = f"Language model **{lm_speedup(comparison):.2f}×** · end to end **{speedup:.2f}×** (to the last audio)"
    if race is not None:
        ar, spec = (race.lanes[name].time_to_first_audio for name in LANES)
        if ar is not None and spec is not None:
            basis += f" · first audio: speculative {spec:.2f} s, autoregressive {ar:.2f} s"
    speech = max(comparison.ar.duration_seconds, comparison.spec.duration_seconds)
    if speech < SHORT_SPEECH_SECONDS:
        return "\n".join(["## Too short for speculation to show",
                           f"{speech:.1f} s of speech is a few decoding rounds, and fixed costs dominate both runs: "
                           "speculation pays from a sentence on. This run: " + basis])
    lines = verdict_lines([*earlier, speedup], run_seconds)
    return "\n".join([lines[0], basis + "  ", lines[1]])


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
                   "tokens": lane.tokens, "replayed": race.replayed} for name, lane in race.lanes.items()}


def slow_motion_of(race: Race, comparison: Comparison, factor: float | None = None) -> SlowMotion:
    """The race's slow-motion replay (`comparison.slow_motion`): each lane's pieces as they were ready,
    both timelines stretched by `factor` (None: the automatic one)."""
    def timed(name: str) -> list[TimedPiece]:
        return [TimedPiece(p.start_sample, p.start_sample + len(p.audio), p.ready_seconds)
                for p in race.lanes[name].pieces]

    ar, spec = comparison.ar, comparison.spec
    return slow_motion(ar.audio, timed("autoregressive"), ar.real_time_factor, spec.audio, timed("speculative"),
                       spec.real_time_factor, ar.sample_rate, factor, buffer=PLAYER_BUFFER)


def slow_motion_from_files(ar_path: str | Path, spec_path: str | Path, details: dict,
                           factor: float | None = None) -> SlowMotion:
    """The same replay again, from what the page holds after a race: both clips' WAV files and the JSON
    details (each piece's timing and each run's real-time factor), e.g. at another factor."""
    clips = [soundfile.read(str(path), dtype="float32", always_2d=False) for path in (ar_path, spec_path)]
    (ar_audio, rate), (spec_audio, _) = clips
    timings = [pieces_from_timing(details["race"][name], rate) for name in LANES]
    ar_rtf, spec_rtf = (details[name]["real_time_factor"] for name in LANES)
    return slow_motion(ar_audio, timings[0], ar_rtf, spec_audio, timings[1], spec_rtf, rate, factor,
                       buffer=PLAYER_BUFFER)


def write_replay_files(replay: SlowMotion, sample_rate: int, directory: Path | None = None) -> tuple[Path, Path]:
    """Both slow-motion tracks as WAV files (named by the factor, so a new factor is a new file)."""
    directory = directory or audio_directory()
    paths = []
    for name, track in zip(LANES, (replay.ar_track, replay.spec_track)):
        path = directory / f"slow_motion_x{replay.factor:.2f}_{name}.wav"
        write_wav(path, track, sample_rate)
        paths.append(path)
    return paths[0], paths[1]


def piece_pcm_base64(piece: AudioPiece) -> str:
    """A piece's samples as base64 16-bit PCM with the clip's one fixed gain (what the page's player decodes)."""
    return base64.b64encode(to_int16(piece.audio).astype("<i2").tobytes()).decode("ascii")
