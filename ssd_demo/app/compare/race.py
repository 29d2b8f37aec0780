"""The race: both decoders streamed one after the other, with what the page shows while they run.

One machine cannot run the two decoders fairly at the same time, so `run_race` streams the
autoregressive run first and the speculative run second, each on its own clock, and hands every
audio piece to the caller as it is decoded. `RaceLane` is one decoder's live state (rounds so far,
tokens, time to first audio), updated from the decoding thread; the page reads it to show live
counters. Once both are done the result is the same `Comparison` that `compare` returns, so the
statistics, token view and charts are the usual ones. Pure logic, no Gradio.
"""

from __future__ import annotations

import io
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import soundfile
import torch

from ... import model_memory
from ...engine.calibration import calibrated_costs, is_calibrated
from ...cancellation import StopCheck
from ...presets import MODEL_JOB_LOCK
from ...results import compare_runs
from ...streaming import AudioPiece, measured_timeline, stream_timing
from ...synthesis import SynthesisResult
from .audio_files import audio_directory, to_int16, write_wav
from .runner import Comparison, compare, cpu_threads_for, decodes_in_gpu_worker, load, token_label_for, warm_up
from .settings import Request, build_config, check_text, request_seed, resolve_draft, resolve_voice_prompt
from .views import end_to_end_speedup

LANES = ("autoregressive", "speculative")


@dataclass
class RaceLane:
    """One decoder's run as it happens (written by the decoding thread, read by the page)."""

    name: str  # "autoregressive" | "speculative"
    rounds: int = 0  # target model calls so far (prefills included), updated after every round
    tokens: int = 0  # tokens committed so far (forced ones included), updated after every round
    pieces: list[AudioPiece] = field(default_factory=list)
    started: float | None = None  # time.perf_counter() when its run began
    seconds: float | None = None  # its whole run, once done

    @property
    def time_to_first_audio(self) -> float | None:
        return self.pieces[0].ready_seconds if self.pieces else None

    def elapsed(self) -> float:
        if self.seconds is not None:
            return self.seconds
        return time.perf_counter() - self.started if self.started is not None else 0.0


@dataclass
class Race:
    """The whole race's live state: what the page is doing, and both lanes."""

    stage: str = "Waiting for the model"
    lanes: dict[str, RaceLane] = field(default_factory=lambda: {name: RaceLane(name) for name in LANES})


#: on_piece(lane name, piece): called from the decoding thread as each piece is ready.
PieceSink = Callable[[str, AudioPiece], None]


def run_race(request: Request, race: Race, on_piece: PieceSink, should_stop: StopCheck | None = None) -> Comparison:
    """Load, check and warm up as `compare` does, then stream AR and then speculative decoding.

    Raises the same `UserError`s as `compare`; `Cancelled` when `should_stop` says so. On a ZeroGPU
    Space the models only reach a GPU inside its worker process, which pieces cannot stream out of:
    there both runs are decoded in one GPU call (`compare`) and then handed out chunk by chunk with
    the times each chunk took (`replayed_pieces`)."""
    if decodes_in_gpu_worker():
        return _race_in_one_gpu_call(request, race, on_piece, should_stop)
    race.stage = "Waiting for the model" if MODEL_JOB_LOCK.locked() else "Loading the model"
    with MODEL_JOB_LOCK:
        race.stage = "Loading the model"
        preset, synthesizer = load(request.preset, owner=request.owner)
        text = check_text(synthesizer, request.text)
        seed = request_seed(synthesizer, request)
        config = build_config(synthesizer, request, seed)
        draft = resolve_draft(preset, synthesizer, request.draft)
        voice_prompt = resolve_voice_prompt(synthesizer, request.voice_prompt)
        model_memory.check_gpu_memory(synthesizer)
        if synthesizer.device.type == "cpu":
            torch.set_num_threads(cpu_threads_for(synthesizer))  # model jobs run one at a time
        race.stage = "Warming up the models (first run only)"
        warm_up(synthesizer, draft)
        if not is_calibrated(synthesizer.target, synthesizer.drafts[draft]):
            race.stage = "Measuring this machine's draft and verify costs (first run only; up to half a minute on a busy CPU)"
        costs = calibrated_costs(synthesizer.target, synthesizer.drafts[draft])
        if config.adaptive_draft_len and config.verify_costs is None:
            config = config.with_(cost_ratio=costs.draft, verify_costs=costs.verify)
        results = {}
        for name, mode, stage in (("autoregressive", "ar", "Autoregressive decoding (one target call per token)"),
                                  ("speculative", "speculative", f"Speculative decoding (draft '{draft}', "
                                                                 f"K = {config.draft_len})")):
            race.stage = stage
            lane = race.lanes[name]
            results[name] = _stream_lane(synthesizer, lane, text, mode, config, draft, voice_prompt, on_piece,
                                         should_stop)
    ar, spec = results["autoregressive"], results["speculative"]
    race.stage = "Both runs done: drawing the charts"
    return Comparison(
        preset=preset.key, draft=draft, seed=seed,
        config=config.with_(cost_ratio=spec.config.cost_ratio, verify_costs=spec.config.verify_costs),
        ar=ar, spec=spec, report=compare_runs(ar.generation, spec.generation), token_label=token_label_for(synthesizer),
        costs=costs, requested_draft=request.draft if request.draft and request.draft != draft else None,
        left_out=synthesizer.left_out(text),
    )


def _race_in_one_gpu_call(request: Request, race: Race, on_piece: PieceSink,
                          should_stop: StopCheck | None) -> Comparison:
    race.stage = "Decoding on the GPU (AR, then speculative); the audio follows chunk by chunk"
    comparison = compare(request, should_stop=should_stop)
    for name, result in (("autoregressive", comparison.ar), ("speculative", comparison.spec)):
        lane = race.lanes[name]
        lane.started = time.perf_counter()
        for piece in replayed_pieces(result):
            lane.tokens, lane.rounds = piece.tokens_so_far, piece.target_calls_so_far
            lane.pieces.append(piece)
            on_piece(name, piece)
        lane.seconds = result.total_seconds
    race.stage = "Both runs done: drawing the charts"
    return comparison


def replayed_pieces(result: SynthesisResult) -> list[AudioPiece]:
    """The pieces a stream of `result` would have yielded, one per chunk and one per pause, each ready
    when its chunk's LM and codec seconds had passed (what a decoded-at-once run can tell)."""
    pieces, clock, tokens, calls = [], 0.0, 0, 0
    for index, chunk in enumerate(result.chunks):
        clock += chunk.lm_seconds + chunk.codec_seconds
        tokens, calls = tokens + len(chunk.generation.tokens), calls + chunk.generation.stats.target_calls
        following = result.chunks[index + 1].start_sample if index + 1 < len(result.chunks) else chunk.end_sample
        spans = [(chunk.text, chunk.start_sample, chunk.end_sample, chunk.lm_seconds + chunk.codec_seconds),
                 ("", chunk.end_sample, following, 0.0)]
        for text, start, end, seconds in spans:
            if end > start or text:
                pieces.append(AudioPiece(index=len(pieces), chunk_index=index, text=text,
                                         audio=result.audio[start:end], sample_rate=result.sample_rate,
                                         start_sample=start, ready_seconds=clock, processing_seconds=seconds,
                                         tokens_so_far=tokens, target_calls_so_far=calls))
    return pieces


def _stream_lane(synthesizer, lane: RaceLane, text, mode, config, draft, voice_prompt, on_piece: PieceSink,
                 should_stop: StopCheck | None):
    def progress(tokens: int, calls: int) -> None:  # after every decoding round: the live counters
        lane.tokens, lane.rounds = tokens, calls

    lane.started = time.perf_counter()
    stream = synthesizer.stream(text, mode=mode, config=config, draft=draft, voice_prompt=voice_prompt,
                                should_stop=should_stop, on_progress=progress)
    for piece in stream:
        lane.tokens = piece.tokens_so_far
        lane.pieces.append(piece)
        on_piece(lane.name, piece)
    lane.seconds = time.perf_counter() - lane.started
    result = stream.result
    lane.rounds, lane.tokens = result.generation.stats.target_calls, len(result.generation.tokens)
    return result


# --- what the page shows ----------------------------------------------------------------------------

def _seconds(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f} s"


def lane_markdown(lane: RaceLane, label: str) -> str:
    """One decoder's live counters: tokens, rounds (target calls), time to first audio, run time."""
    state = "done" if lane.seconds is not None else ("running" if lane.started is not None else "waiting")
    return (f"### {label}\n"
            f"**{lane.tokens}** tokens · **{lane.rounds}** target calls · {state} {_seconds(lane.elapsed())}  \n"
            f"First audio after **{_seconds(lane.time_to_first_audio)}**")


def headline(comparison: Comparison, race: Race | None = None) -> str:
    """The big readout: end-to-end speedup per second of audio, and both times to first audio."""
    speedup = end_to_end_speedup(comparison)
    if not math.isfinite(speedup):
        return ""
    factor = speedup if speedup >= 1 else 1 / speedup
    verdict = ("about as fast as autoregressive" if round(factor, 1) == 1.0
               else f"{factor:.1f}× {'faster' if speedup >= 1 else 'slower'}")
    lines = [f"# Speculative is {verdict}", "LM + codec seconds per second of audio, on this machine"]
    if race is not None:
        ar, spec = (race.lanes[name].time_to_first_audio for name in LANES)
        if ar is not None and spec is not None:
            lines[-1] += f"; first audio after {spec:.2f} s (speculative) vs {ar:.2f} s (autoregressive)"
    return "\n".join(lines)


def race_details(race: Race) -> dict:
    """Both lanes' latency figures (the JSON the page and the API return)."""
    return {name: {**stream_timing(lane.pieces), "run_seconds": lane.seconds, "target_calls": lane.rounds,
                   "tokens": lane.tokens} for name, lane in race.lanes.items()}


def write_replay_files(race: Race, sample_rate: int, directory: Path | None = None) -> tuple[Path, Path]:
    """Each lane as heard live: silence until each piece was ready, then the piece (same length, so
    the two players run side by side)."""
    directory = directory or audio_directory()
    tracks = [measured_timeline(race.lanes[name].pieces, sample_rate) for name in LANES]
    length = max(len(t) for t in tracks)
    paths = []
    for name, track in zip(LANES, tracks):
        path = directory / f"replay_at_measured_speed_{name}.wav"
        write_wav(path, np.pad(track, (0, length - len(track))), sample_rate)
        paths.append(path)
    return paths[0], paths[1]


def piece_wav(piece: AudioPiece) -> bytes:
    """A piece as 16-bit WAV bytes with the clip's one fixed gain (what a streaming player is fed)."""
    return _wav_bytes(piece.audio, piece.sample_rate)


def empty_wav(sample_rate: int = 16_000) -> bytes:
    """A WAV with no samples: a streamed chunk that adds nothing to the audio."""
    return _wav_bytes(np.zeros(0, dtype=np.float32), sample_rate)


def _wav_bytes(audio: np.ndarray, sample_rate: int) -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, to_int16(audio), sample_rate, subtype="PCM_16", format="WAV")
    return buffer.getvalue()
