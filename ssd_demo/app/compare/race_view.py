"""The Compare tab's race: a thin Gradio layer over the race's events (`compare.race_events`).

`build_race_view` lays out both decoders' lanes (live counters and a streaming player each) and the
slow-motion replay (`comparison.slow_motion`; `slow_motion_handler` renders it again at a typed factor); `race_handler` returns the `/race` event's generator, which maps each event
to updates of the page: an audio piece to its streaming player as it is decoded, a tick to the live
counters, then the results of `/synthesize` (charts last). The page's players follow one rule, never two
voices at once and each live voice to its end (`race_js.VOICES_JS`). Presenter mode is a class on the
page (`race_js.PRESENTER_JS`; its CSS is `race_js.STAGE_CSS` beside `ssd_demo.app.page.CSS`).
"""

from __future__ import annotations

import inspect
import shutil
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass

import gradio as gr

from .. import compare, jobs
from . import arguments
from ...comparison.slow_motion import MAX_REPLAY_SECONDS, parse_factor
from .race import RaceHistory, done_stage, settings_key
from .race_js import PLAY_BOTH_JS, STAGE_CSS
from ..errors import to_gradio_error

REPLAY_NOTE = (
    "**Slow-motion replay.** The two runs above went one after the other (one machine cannot run both fairly "
    "at once), and on a fast machine both make speech faster than it plays, so both sound the same. These "
    "replays stretch both measured timelines by one factor (as if the same models ran that many times slower: "
    "their speed ratio is kept) and play each piece of audio when it would have arrived, with silence while "
    "the decoder was still working on it. The automatic factor is the largest at which the speculative run "
    "keeps flowing while the autoregressive one audibly stalls (when no factor does, the line says why); pick or type another factor to "
    "hear it at that one (1 = as measured; a factor that would make a replay longer than a minute is "
    "lowered to one that does not). \"Replay both\" plays them one after the other, never at once."
)
#: What the slow-motion factor box offers (any other number can be typed, read by `parse_factor`); "auto":
#: `automatic_factor`. Its label holds a 0 so that a typed 0 filters to it first (0 means automatic).
AUTO_FACTOR = "auto"
FACTOR_CHOICES = (("auto (0)", AUTO_FACTOR), *((str(n), str(n)) for n in (1, 2, 3, 5, 10, 20)))
#: Before a race: the replay row's one line, updated with the factor when a race is done.
REPLAY_WAITING = "**Slow-motion replay** (after a race; pick a factor or leave it on auto)"
#: The browser's own player (an <audio> element the "replay both" button can start).
NATIVE_PLAYER = gr.WaveformOptions(show_recording_waveform=False)
LANE_LABELS = ("Autoregressive", "Speculative")
#: Gradio encodes streamed audio with FFmpeg; without it the live players stay silent and the full clips
#: (and the replay) arrive when both runs are done.
LIVE_AUDIO = shutil.which("ffmpeg") is not None
#: For how long after a piece its stream is sent empty chunks that push the encoder's tail out (seconds).
FLUSH_FOR = 2.0
EMPTY_WAV = compare.empty_wav()
#: Silence sent once a lane is done (seconds). The encoder keeps the last ~0.08 s of its input (a frame of
#: look-ahead and the part of a frame not yet full) until more audio comes or the race ends; without this
#: the end of the first voice would reach its player only after the second voice has played.
TAIL_PADDING = 0.3
#: Silence each live stream starts with (seconds), sent as soon as the voice's models are ready: the stream
#: and its browser player are open and listening before the lane's first piece (a player that opens on the
#: first piece waits seconds for it; a stream opened empty is a playlist without segments, an HLS error).
#: The page knows every live stream begins with it (`race_js.LEAD_IN_S`).
LEAD_IN = 0.2
#: The status line once the Stop button stopped a race.
STOPPED_STATUS = "**Stopped.** Start a race again when ready."


@dataclass
class RaceView:
    """The race's components; `outputs` come before the `/synthesize` outputs in the `/race` event."""

    status: gr.Markdown
    headline: gr.Markdown
    ar_live: gr.Markdown
    spec_live: gr.Markdown
    ar_stream: gr.Audio
    spec_stream: gr.Audio
    replay_ar: gr.Audio
    replay_spec: gr.Audio
    replay_both: gr.Button
    replay_note: gr.Markdown  # the slow-motion factor and both lanes' paces at it
    factor: gr.Number  # the speaker's slow-motion factor (empty or 0: automatic)

    @property
    def outputs(self) -> list[gr.Component]:
        return [self.status, self.ar_live, self.spec_live, self.ar_stream, self.spec_stream, self.headline,
                self.replay_ar, self.replay_spec, self.replay_note]


def build_race_view(status: gr.Markdown, headline: gr.Markdown) -> RaceView:
    """Both lanes side by side, then the replay row (inside the caller's layout)."""
    empty = compare.Race()
    gr.HTML(f"<style>{STAGE_CSS}</style>", elem_id="ssd-stage-css", container=False, padding=False)
    with gr.Row(elem_id="ssd-race"):
        with gr.Column():
            ar_live = gr.Markdown(compare.lane_markdown(empty.lanes["autoregressive"], LANE_LABELS[0]),
                                  elem_id="ssd-ar-live", elem_classes=["ssd-lane"])
            ar_stream = gr.Audio(label="Autoregressive, live", streaming=True, autoplay=True, interactive=False,
                                 buttons=[], elem_id="ssd-ar-stream")
        with gr.Column():
            spec_live = gr.Markdown(compare.lane_markdown(empty.lanes["speculative"], LANE_LABELS[1]),
                                    elem_id="ssd-spec-live", elem_classes=["ssd-lane"])
            spec_stream = gr.Audio(label="Speculative, live", streaming=True, autoplay=True, interactive=False,
                                   buttons=[], elem_id="ssd-spec-stream")
    with gr.Row(elem_id="ssd-replay"):
        with gr.Column(scale=2, min_width=240):
            gr.Markdown(REPLAY_NOTE, elem_classes=["ssd-dev"])
            replay_note = gr.Markdown(REPLAY_WAITING, elem_id="ssd-replay-note")
            with gr.Row(equal_height=True):
                replay_both = gr.Button("▶ Replay both, one after the other", size="sm", elem_id="ssd-replay-both",
                                        scale=3)
                factor = gr.Dropdown(choices=list(FACTOR_CHOICES), value=AUTO_FACTOR, allow_custom_value=True,
                                     label="Slow motion ×", show_label=False, container=False, elem_id="ssd-factor",
                                     scale=1, min_width=90)
        replay_ar = gr.Audio(label="Slow motion: autoregressive", type="filepath", interactive=False,
                             buttons=[], elem_id="ssd-replay-ar", scale=2, waveform_options=NATIVE_PLAYER)
        replay_spec = gr.Audio(label="Slow motion: speculative", type="filepath", interactive=False,
                               buttons=[], elem_id="ssd-replay-spec", scale=2, waveform_options=NATIVE_PLAYER)
    replay_both.click(None, js=PLAY_BOTH_JS, api_visibility="private")
    return RaceView(status, headline, ar_live, spec_live, ar_stream, spec_stream, replay_ar, replay_spec, replay_both,
                    replay_note, factor)


def replay_note(replay: compare.SlowMotion) -> str:
    """The replay row's line: the factor, and how long one second of speech took each lane at it."""
    how = "automatic" if replay.automatic else "chosen"
    if replay.why_no_factor:
        how = replay.why_no_factor
    if replay.capped_from is not None:
        how = (f"×{replay.capped_from:g} would make a replay longer than {MAX_REPLAY_SECONDS:.0f} s: "
               f"lowered to ×{replay.factor:.1f}")
    return (f"**Slow motion ×{replay.factor:.1f}** ({how}): 1 s of speech took "
            f"**{replay.ar_real_time_factor:.2f} s** (autoregressive) vs "
            f"**{replay.spec_real_time_factor:.2f} s** (speculative) on average")


def slow_motion_handler(view: RaceView, ar_audio: gr.Audio, spec_audio: gr.Audio, details: gr.JSON) -> Callable:
    """The factor box's handler: both replays again at the typed factor (empty or 0: automatic), from the
    clips and timings the page holds; nothing to do before a race."""
    def rerender(ar_path, spec_path, shown: dict | None, factor):
        if not ar_path or not spec_path or not shown or "race" not in shown:
            return gr.skip(), gr.skip(), gr.skip()
        try:
            chosen, message = parse_factor(factor)
            replay = compare.slow_motion_from_files(ar_path, spec_path, shown, chosen)
            paths = compare.write_replay_files(replay, shown["autoregressive"]["sample_rate"])
        except Exception as error:  # noqa: BLE001 - a message, never a traceback
            raise to_gradio_error(error) from None
        return str(paths[0]), str(paths[1]), replay_note(replay) + (f" · *{message}*" if message else "")

    return rerender


def warn_if_draft_replaced(comparison: compare.Comparison) -> None:
    """A toast when the preset had no draft of the requested name and its default ran instead."""
    if comparison.requested_draft:
        gr.Warning(f"Draft '{comparison.requested_draft}' is not available for this preset; used "
                   f"'{comparison.draft}'.")


class LiveStreams:
    """What one race sends its two live streams: each lane's pieces, the `LEAD_IN` every stream begins with,
    `TAIL_PADDING` after a finished lane, and empty chunks that collect the frames the encoder hands out late."""

    def __init__(self, streams: dict[str, gr.Audio]) -> None:
        self.streams = streams
        self.last_sent: dict[str, float] = {}  # lane -> when its stream last got audio
        self.opened: set[str] = set()  # lanes whose stream has its lead-in
        self.padded: set[str] = set()  # finished lanes whose tail went out

    def _sent(self, lane: str) -> None:
        self.last_sent[lane] = time.perf_counter()  # the empty chunks after it collect the frames

    def piece(self, event: compare.Piece) -> dict:
        """A piece on its lane's stream; a stream's first chunk begins with the lead-in, as every one does."""
        lead_in = 0.0 if event.lane in self.opened else LEAD_IN
        self.opened.add(event.lane)
        self._sent(event.lane)
        return {self.streams[event.lane]: compare.piece_wav(event.piece, lead_in)}

    def silences(self, race: compare.Race) -> dict:
        """The lead-in on each stream not yet opened, once the voice's sample rate is known, and the tail
        padding once on each finished lane's stream: its real last samples go out now."""
        if race.sample_rate is None or not LIVE_AUDIO:
            return {}
        chunks = {}
        for lane in compare.LANES:
            if lane not in self.opened:
                self.opened.add(lane)
                chunks[self.streams[lane]] = compare.empty_wav(race.sample_rate, LEAD_IN)
            elif race.lanes[lane].seconds is not None and lane not in self.padded:
                self.padded.add(lane)
                chunks[self.streams[lane]] = compare.empty_wav(race.sample_rate, TAIL_PADDING)
            else:
                continue
            self._sent(lane)
        return chunks

    def flushes(self) -> dict:
        """An empty chunk for each stream that got audio lately: Gradio's AAC encoder hands out the frames
        of a chunk's tail only when the next chunk arrives, so without these the end of every piece
        would wait for the next piece (or the end of the race)."""
        now = time.perf_counter()
        return {self.streams[lane]: EMPTY_WAV for lane, sent in self.last_sent.items() if now - sent < FLUSH_FOR}


class RaceFrames:
    """The race's events (`events.race_events`) as updates of the page. `results` names the `/synthesize`
    outputs (ar_audio, ..., seed_used). A refused or failed race ends with a frame whose status line says why
    and whose live players are empty; with `raise_refusals` (the API's `/race`) it then raises the error for
    the client, while the page's own race ends there (its status line is the one message: no toast, no error
    badge)."""

    def __init__(self, view: RaceView, results: dict[str, gr.Component], raise_refusals: bool = True) -> None:
        self.view, self.results, self.raise_refusals = view, results, raise_refusals
        self.outputs = [*view.outputs, *results.values()]
        self.streams = {"autoregressive": view.ar_stream, "speculative": view.spec_stream}
        self.lives = {"autoregressive": view.ar_live, "speculative": view.spec_live}
        self.history = RaceHistory()  # each page's speedups per settings: the headline's median

    def frame(self, changes: dict) -> tuple:
        """One update of the race's outputs: the given ones, every other left as it is."""
        return tuple(changes.get(component, gr.skip()) for component in self.outputs)

    def live(self, race: compare.Race) -> dict:
        note = "" if LIVE_AUDIO else " (live audio needs FFmpeg on the server; the clips come when both runs end)"
        return {self.view.status: f"**Now:** {race.stage}{note}",
                **{self.lives[name]: compare.lane_markdown(race.lanes[name], label)
                   for name, label in zip(compare.LANES, LANE_LABELS)}}

    def silent(self) -> dict:
        """Both live players empty (a race ends or starts)."""
        return {self.view.ar_stream: None, self.view.spec_stream: None}

    def refused(self, error: BaseException):
        """The status line says why nothing runs (it would keep its last stage otherwise; the next race
        replaces it) and both live players go back to empty; then the error, for an API client."""
        message = to_gradio_error(error)
        yield self.frame({self.view.status: f"**Not run:** {message.message}", **self.silent()})
        if self.raise_refusals:
            raise message from None

    def stopped(self, race: compare.Race):
        """The final frame of a stopped race: the counters where each run stopped, both live players
        stopped, and the status line says so."""
        yield self.frame({**self.live(race), self.view.status: STOPPED_STATUS, **self.silent()})

    def shown_results(self, comparison: compare.Comparison, race: compare.Race, page: str | None, key) -> dict:
        """Audio, numbers, the headline (over this `page`'s races with these settings, `key`) and the replay
        at the automatic factor (files written now)."""
        view, results = self.view, self.results
        earlier = self.history.earlier(page, key)
        self.history.add(page, key, compare.end_to_end_speedup(comparison))
        ar_path, spec_path = compare.write_audio_files(comparison)
        replay = compare.slow_motion_of(race, comparison)
        replay_paths = compare.write_replay_files(replay, comparison.spec.sample_rate, ar_path.parent)
        return {view.headline: compare.headline(comparison, race, earlier), view.replay_ar: str(replay_paths[0]),
                view.replay_spec: str(replay_paths[1]), view.replay_note: replay_note(replay),
                results["ar_audio"]: str(ar_path), results["spec_audio"]: str(spec_path),
                results["stats"]: compare.stats_markdown(comparison), results["seed_used"]: comparison.seed,
                results["details"]: {**compare.details(comparison), "race": compare.race_details(race)}}

    def finish(self, comparison: compare.Comparison, race: compare.Race, page: str | None, key):
        """Audio, numbers and the headline first; the charts only after them. The last update holds every
        value (what an API client's result is); None ends both streams."""
        warn_if_draft_replaced(comparison)
        results = self.results
        try:
            race.stage = "Both runs done: drawing the charts and the token view"
            shown = self.shown_results(comparison, race, page, key)
            yield self.frame({**self.live(race), **shown})
            figures = compare.figures(comparison)
        except Exception as error:  # noqa: BLE001 - a message, never a traceback
            yield from self.refused(error)
            return
        race.stage = done_stage(LIVE_AUDIO)
        yield self.frame({**self.live(race), **shown, results["tokens"]: compare.comparison_token_view(comparison),
                          results["tokens_vs_time"]: figures["tokens_vs_time"],
                          results["breakdown"]: figures["timing_breakdown"],
                          results["accepted_length"]: figures["accepted_length"],
                          results["by_position"]: figures["acceptance_by_position"], **self.silent()})

    def run(self, request, stop_check: Callable[[], bool], page: str | None = None):
        """Race both decoders: each one's audio streams as it is decoded (AR first, then speculative), with
        live counters; then the replay at measured speed, the statistics and, last, the charts."""
        view = self.view
        race, started = compare.Race(), time.perf_counter()
        streams = LiveStreams(self.streams)
        # Closing this generator (a closed page, a cancel) closes the events, which stops the decoding.
        with closing(compare.race_events(request, stop_check, race)) as events:
            # The live players are left to the lead-ins (`LiveStreams`): None here would open both streams empty.
            yield self.frame({**self.live(race), view.headline: "", view.replay_ar: None,
                              view.replay_spec: None, view.replay_note: REPLAY_WAITING})
            for event in events:
                if isinstance(event, compare.Tick):
                    yield self.frame({**self.live(race), **streams.flushes(), **streams.silences(race)})
                elif isinstance(event, compare.Piece):
                    if len(event.piece.audio) and LIVE_AUDIO:
                        piece = streams.piece(event)  # first: a stream it opens needs no lead-in of its own
                        yield self.frame({**self.live(race), **streams.silences(race), **piece})
                elif isinstance(event, compare.Stopped):
                    yield from self.stopped(race)
                elif isinstance(event, compare.Failed):
                    yield from self.refused(event.error)
                elif isinstance(event, compare.Done):
                    jobs.CLOCK.record(time.perf_counter() - started)
                    tails = streams.silences(race)
                    if tails:
                        yield self.frame({**self.live(race), **tails})
                    yield from self.finish(event.comparison, race, page, settings_key(request))


def race_handler(view: RaceView, results: dict[str, gr.Component], signature: inspect.Signature,
                 concurrency_id: str, raise_refusals: bool = True) -> Callable:
    """The `/race` generator (`RaceFrames` maps its events to the page), taking the /synthesize parameters."""
    frames = RaceFrames(view, results, raise_refusals)

    def race_run(*args, **kwargs):
        values = signature.bind(*args, **kwargs)
        values.apply_defaults()
        chosen = values.arguments
        try:
            request = arguments.admitted_request(chosen, concurrency_id)
        except Exception as error:  # noqa: BLE001
            yield from frames.refused(error)
            return
        page = getattr(chosen["request"], "session_hash", None)
        yield from frames.run(request, jobs.stop_check(chosen["request"]), page)

    race_run.__signature__ = signature  # the /synthesize parameters
    race_run.__annotations__ = {"request": gr.Request}
    return race_run
