"""The Compare tab's race: a thin Gradio layer over the race's events (`compare.race_events`).

`build_race_view` lays out both decoders' lanes (live counters each), the live chart of both on one clock
(`race_chart`), the live voices (one hidden component whose value carries each new audio piece; the browser
plays them with Web Audio, `race_js.PLAYER_JS`: the first lane with audio first, the other right after it, never
both at once), and `build_replay_row` the "as on a slower machine" replay (`comparison.slow_motion`;
`slow_motion_handler` renders it again at a typed factor). `race_handler` returns the `/race` event's
generator, which maps each event to updates of the page: a piece to the live voices as it is decoded, a tick to
the counters and the chart, then the results of `/synthesize` (charts last). Presenter mode is a class on the
page (`race_js.PRESENTER_JS`; its CSS is `race_js.STAGE_CSS` beside `ssd_demo.app.page.CSS`).
"""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass

import gradio as gr

from .. import compare, jobs
from . import arguments
from ...comparison.slow_motion import MAX_REPLAY_SECONDS, parse_factor
from .race import RaceHistory, done_stage, settings_key
from .race_js import PLAY_BOTH_JS, PLAYER_ON_LOAD_JS, STAGE_CSS
from ..errors import to_gradio_error

REPLAY_NOTE = (
    "**As on a slower machine.** Where both decoders make speech faster than it plays, both live voices flow "
    "and only the numbers differ. These replays stretch both measured timelines by one factor (as if "
    "the same models ran that many times slower: their speed ratio is kept) and play each piece of audio when it "
    "would have arrived, with silence while the decoder was still working on it. The automatic factor is the "
    "largest at which the speculative run keeps flowing while the autoregressive one audibly stalls (when no "
    "factor does, the line says why); pick or type another factor to hear it at that one (1 = as measured; a "
    "factor that would make a replay longer than a minute is lowered to one that does not). \"Replay both\" "
    "plays them one after the other, never at once."
)
#: What the factor box offers (any other number can be typed, read by `parse_factor`); "auto": `automatic_factor`.
AUTO_FACTOR = "auto"
#: Its label holds a 0 so that a typed 0 filters to it first (0 means automatic; "×10" would be taken otherwise).
FACTOR_CHOICES = (("auto (0)", AUTO_FACTOR), *((f"×{n}", str(n)) for n in (1, 2, 3, 5, 10, 20)))
#: Before a race: the replay row's one line, updated with the factor when a race is done.
REPLAY_WAITING = "**As on a slower machine** (after a race; the factor is chosen from the race's measured pace)"
#: The browser's own player (an <audio> element the "replay both" button can start).
NATIVE_PLAYER = gr.WaveformOptions(show_recording_waveform=False)
LANE_LABELS = ("Autoregressive", "Speculative")
#: The status line once the Stop button stopped a race.
STOPPED_STATUS = "**Stopped.** Start a race again when ready."


@dataclass
class RaceView:
    """The race's components; `outputs` come before the `/synthesize` outputs in the `/race` event."""

    status: gr.Markdown
    headline: gr.Markdown
    ar_live: gr.Markdown
    spec_live: gr.Markdown
    live_audio: gr.HTML  # the pieces for the browser's player (JSON; `LiveAudio.payload`)
    chart: gr.HTML | None = None  # both lanes on one clock (SVG; `race_chart.race_chart_svg`): `build_race_chart`
    replay_ar: gr.Audio | None = None
    replay_spec: gr.Audio | None = None
    replay_both: gr.Button | None = None
    replay_note: gr.Markdown | None = None  # the slow-motion factor and both lanes' paces at it
    factor: gr.Dropdown | None = None  # the speaker's slow-motion factor (empty or 0: automatic)

    @property
    def outputs(self) -> list[gr.Component]:
        return [self.status, self.ar_live, self.spec_live, self.live_audio, self.chart, self.headline,
                self.replay_ar, self.replay_spec, self.replay_note]


def build_race_view(status: gr.Markdown, headline: gr.Markdown) -> RaceView:
    """Both lanes' counters side by side and the live voices' player (inside the caller's layout: under the race
    button, so that the whole race fits a 1280x720 screen); the chart goes beside them (`build_race_chart`)."""
    empty = compare.Race()
    gr.HTML(f"<style>{STAGE_CSS}</style>", elem_id="ssd-stage-css", container=False, padding=False, js_on_load=None)
    with gr.Row(elem_id="ssd-race"):
        ar_live = gr.Markdown(compare.lane_markdown(empty.lanes["autoregressive"], LANE_LABELS[0]),
                              elem_id="ssd-ar-live", elem_classes=["ssd-lane"])
        spec_live = gr.Markdown(compare.lane_markdown(empty.lanes["speculative"], LANE_LABELS[1]),
                                elem_id="ssd-spec-live", elem_classes=["ssd-lane"])
    live_audio = gr.HTML("", html_template="<span></span>", js_on_load=PLAYER_ON_LOAD_JS, elem_id="ssd-live-audio")
    return RaceView(status, headline, ar_live, spec_live, live_audio)


def build_race_chart(view: RaceView) -> RaceView:
    """The live chart of both lanes on one clock (inside the caller's layout), filled into `view`."""
    view.chart = gr.HTML(compare.race_chart_svg(compare.Race()), elem_id="ssd-race-chart", js_on_load=None)
    return view


def build_replay_row(view: RaceView) -> RaceView:
    """The "as on a slower machine" replay row (after the tab's columns), filled into `view`."""
    with gr.Row(elem_id="ssd-replay"):
        with gr.Column(scale=2, min_width=240):
            gr.Markdown(REPLAY_NOTE, elem_classes=["ssd-dev"])
            replay_note = gr.Markdown(REPLAY_WAITING, elem_id="ssd-replay-note")
            with gr.Row(equal_height=True):
                replay_both = gr.Button("▶ Replay both, one after the other", size="sm", elem_id="ssd-replay-both",
                                        scale=3)
                factor = gr.Dropdown(choices=list(FACTOR_CHOICES), value=AUTO_FACTOR, allow_custom_value=True,
                                     label="Slow motion ×", show_label=False, container=False, elem_id="ssd-factor",
                                     scale=1, min_width=120)
        replay_ar = gr.Audio(label="Slower machine: autoregressive", type="filepath", interactive=False,
                             buttons=[], elem_id="ssd-replay-ar", scale=2, waveform_options=NATIVE_PLAYER)
        replay_spec = gr.Audio(label="Slower machine: speculative", type="filepath", interactive=False,
                               buttons=[], elem_id="ssd-replay-spec", scale=2, waveform_options=NATIVE_PLAYER)
    replay_both.click(None, js=PLAY_BOTH_JS, api_visibility="private")
    view.replay_ar, view.replay_spec, view.replay_both = replay_ar, replay_spec, replay_both
    view.replay_note, view.factor = replay_note, factor
    return view


def replay_note(replay: compare.SlowMotion, typed: float | None = None) -> str:
    """The replay row's line: the factor and why, and how long one second of speech took each lane at it."""
    how = "automatic: the autoregressive voice stalls, the speculative one flows" if replay.automatic else "chosen"
    if replay.why_no_factor:
        how = replay.why_no_factor
    if replay.capped_from is not None:
        asked = typed if typed is not None else replay.capped_from
        how = (f"×{asked:g} would make a replay longer than {MAX_REPLAY_SECONDS:.0f} s: "
               f"lowered to ×{replay.factor:.1f}")
    return (f"**As on a {replay.factor:.1f}× slower machine** ({how}): 1 s of speech took "
            f"**{replay.ar_real_time_factor:.2f} s** (autoregressive) vs "
            f"**{replay.spec_real_time_factor:.2f} s** (speculative)")


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
        if replay.capped_from is not None:  # the line says what was asked and what was used
            return str(paths[0]), str(paths[1]), replay_note(replay, typed_number(factor))
        return str(paths[0]), str(paths[1]), replay_note(replay) + (f" · *{message}*" if message else "")

    return rerender


def typed_number(typed: object) -> float | None:
    """The number typed in the factor box, as typed (None: not a number)."""
    try:
        return float(str(typed).strip().lower().lstrip("×x").strip())
    except ValueError:
        return None


def warn_if_draft_replaced(comparison: compare.Comparison) -> None:
    """A toast when the preset had no draft of the requested name and its default ran instead."""
    if comparison.requested_draft:
        gr.Warning(f"Draft '{comparison.requested_draft}' is not available for this preset; used "
                   f"'{comparison.draft}'.")


class LiveAudio:
    """What one race sends the browser's player: each lane's audio pieces numbered from 0 as 16-bit PCM (the clip's
    one fixed gain) and each lane's state. A payload carries the pieces taken since the one before it and those of
    the one before that again (two updates that reach the page at once show only the last; the player drops what
    it already has)."""

    def __init__(self) -> None:
        self.race = int(time.time() * 1000)  # the player starts over on a new race's number
        self.taken = {lane: 0 for lane in compare.LANES}  # pieces of each lane seen (silent ones included)
        self.sent = {lane: 0 for lane in compare.LANES}  # pieces of each lane numbered for the player
        self.fresh: list[dict] = []
        self.previous: list[dict] = []

    def piece(self, event: compare.Piece) -> None:
        self.taken[event.lane] += 1
        if len(event.piece.audio):
            self.fresh.append({"lane": event.lane, "index": self.sent[event.lane],
                               "pcm": compare.piece_pcm_base64(event.piece)})
            self.sent[event.lane] += 1

    def payload(self, race: compare.Race) -> str:
        """The next update's value. A lane is done once its run ended and every piece of it was taken."""
        lanes = {name: {"pieces": self.sent[name], "stopped": lane.stopped is not None, "tokens": lane.tokens,
                        "done": lane.seconds is not None and self.taken[name] == len(lane.pieces)}
                 for name, lane in race.lanes.items()}
        pieces, self.previous, self.fresh = self.previous + self.fresh, self.fresh, []
        return json.dumps({"race": self.race, "rate": race.sample_rate, "lanes": lanes, "pieces": pieces,
                           "replayed": race.replayed})


class RaceFrames:
    """The race's events (`events.race_events`) as updates of the page. `results` names the `/synthesize`
    outputs (ar_audio, ..., seed_used). A refused or failed race ends with a frame whose status line says why;
    with `raise_refusals` (the API's `/race`) it then raises the error for the client, while the page's own race
    ends there (its status line is the one message: no toast, no error badge)."""

    def __init__(self, view: RaceView, results: dict[str, gr.Component], raise_refusals: bool = True) -> None:
        self.view, self.results, self.raise_refusals = view, results, raise_refusals
        self.outputs = [*view.outputs, *results.values()]
        self.lives = {"autoregressive": view.ar_live, "speculative": view.spec_live}
        self.history = RaceHistory()  # each page's speedups per settings: the headline's median

    def frame(self, changes: dict) -> tuple:
        """One update of the race's outputs: the given ones, every other left as it is."""
        return tuple(changes.get(component, gr.skip()) for component in self.outputs)

    def live(self, race: compare.Race) -> dict:
        """The status line, both lanes' counters and the chart, as they are now."""
        return {self.view.status: f"**Now:** {race.stage}{compare.together_note(race)}",
                self.view.chart: compare.race_chart_svg(race),
                **{self.lives[name]: compare.lane_markdown(race.lanes[name], label)
                   for name, label in zip(compare.LANES, LANE_LABELS)}}

    def refused(self, error: BaseException):
        """The status line says why nothing runs (it would keep its last stage otherwise; the next race
        replaces it); then the error, for an API client."""
        message = to_gradio_error(error)
        yield self.frame({self.view.status: f"**Not run:** {message.message}"})
        if self.raise_refusals:
            raise message from None

    def stopped(self, race: compare.Race, audio: LiveAudio):
        """The final frame of a stopped race: the counters where each run stopped, the player told both lanes
        stopped (the page's Stop silenced it already), and the status line says so."""
        yield self.frame({**self.live(race), self.view.status: STOPPED_STATUS,
                          self.view.live_audio: audio.payload(race)})

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

    def finish(self, comparison: compare.Comparison, race: compare.Race, page: str | None, key, audio: LiveAudio):
        """Audio, numbers and the headline first; the charts only after them. The last update holds every
        value (what an API client's result is)."""
        warn_if_draft_replaced(comparison)
        results = self.results
        try:
            race.stage = "Both runs done: drawing the charts and the token view"
            shown = self.shown_results(comparison, race, page, key)
            yield self.frame({**self.live(race), **shown, self.view.live_audio: audio.payload(race)})
            figures = compare.figures(comparison)
        except Exception as error:  # noqa: BLE001 - a message, never a traceback
            yield from self.refused(error)
            return
        race.stage = done_stage()
        yield self.frame({**self.live(race), **shown, results["tokens"]: compare.comparison_token_view(comparison),
                          results["tokens_vs_time"]: figures["tokens_vs_time"],
                          results["breakdown"]: figures["timing_breakdown"],
                          results["accepted_length"]: figures["accepted_length"],
                          results["by_position"]: figures["acceptance_by_position"],
                          self.view.live_audio: audio.payload(race)})

    def run(self, request, stop_check: Callable[[], bool], page: str | None = None):
        """Race both decoders: each one's audio goes to the page's player as it is decoded, with live counters
        and the chart; then the replay, the statistics and, last, the charts."""
        view = self.view
        race, started, audio = compare.Race(), time.perf_counter(), LiveAudio()
        # Closing this generator (a closed page, a cancel) closes the events, which stops the decoding.
        with closing(compare.race_events(request, stop_check, race)) as events:
            yield self.frame({**self.live(race), view.headline: "", view.replay_ar: None,
                              view.replay_spec: None, view.replay_note: REPLAY_WAITING})
            for event in events:
                if isinstance(event, compare.Tick):
                    yield self.frame({**self.live(race), view.live_audio: audio.payload(race)})
                elif isinstance(event, compare.Piece):
                    audio.piece(event)
                    yield self.frame({**self.live(race), view.live_audio: audio.payload(race)})
                elif isinstance(event, compare.Stopped):
                    yield from self.stopped(race, audio)
                elif isinstance(event, compare.Failed):
                    yield from self.refused(event.error)
                elif isinstance(event, compare.Done):
                    jobs.CLOCK.record(time.perf_counter() - started)
                    yield from self.finish(event.comparison, race, page, settings_key(request), audio)


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
