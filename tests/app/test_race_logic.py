"""The race's logic without Gradio: both lanes decoding at once where the machine allows (the embedded voice, in
two worker processes) and AR streamed before speculative where it does not, lanes that match the comparison,
replays of equal length, the headline's wording, the live chart, and the race as events and as the page's frames
(what the page's handler maps). No wall time is asserted: only what happens before what."""

from __future__ import annotations

import json
import re
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest
import soundfile

from ssd_demo.app import compare as app_logic
from ssd_demo.app.compare import (Done, Failed, Piece, Race, Request, Started, Stopped, Tick, headline, lane_markdown,
                                  race_chart_svg, race_details, race_events, run_race, slow_motion_from_files,
                                  slow_motion_of, together_note, write_replay_files)
from ssd_demo.app.compare.race import lm_speedup
from ssd_demo.errors import TextError
from ssd_demo.speech.streaming import AudioPiece
from support.paths import REPOSITORY
from support.race_lanes import close_lane_workers, lanes_one_after_the_other
from support.toy_backend import TOY_KEY, register_toy_preset

EMBEDDED_ASSETS = REPOSITORY / "assets" / "embedded"


@pytest.fixture
def toy():
    """The toy voice, raced one lane after the other (it exists in this process only: `support.race_lanes`);
    yields why, as `Race.apart` says it."""
    register_toy_preset()
    with lanes_one_after_the_other((TOY_KEY,)) as reason:
        yield reason


class Recorder(Race):
    """A race that also notes each piece's lane in the order they come, and when it came on the race's clock."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []
        self.came: list[tuple[str, float, AudioPiece]] = []

    def piece(self, lane, piece) -> None:
        super().piece(lane, piece)
        self.seen.append(lane)
        self.came.append((lane, self.since_click(), piece))


def _speech_seconds(shown: str) -> float:
    """The seconds of speech a lane's counters say it decoded."""
    return float(re.search(r"([0-9.]+) s of speech", shown).group(1))


def _ratios(shown: str) -> tuple[float, float] | None:
    """The headline's two labelled ratios: (language model, end to end)."""
    lm = re.search(r"Language model \*\*([0-9.]+)×\*\*", shown)
    end = re.search(r"end to end \*\*([0-9.]+)×\*\*", shown)
    return (float(lm.group(1)), float(end.group(1))) if lm and end else None


def _first_audio_in(shown: str, race: Race) -> bool:
    """Whether the headline states both lanes' times to first audio, after the words "first audio"."""
    after = shown.lower().partition("first audio")[2]
    return bool(after) and all(f"{race.lanes[name].time_to_first_audio:.2f} s" in after
                               for name in ("autoregressive", "speculative"))


def _together_note(shown: str) -> bool:
    """Whether the status line says both lanes decode at once, each on a core of its own."""
    return "at once" in shown and "one core each" in shown and "one after the other" not in shown


def _apart_note(shown: str, why: str) -> bool:
    """Whether the status line says the lanes decode one after the other, and why."""
    return "one after the other" in shown and f"({why})" in shown


def _axis_seconds(svg: str) -> float:
    """The live chart's time axis: its end, in seconds after the click."""
    return float(re.search(r"([0-9.]+) s after the click", svg).group(1))


def test_race_apart_replays_both_lanes_on_one_clock_and_matches_compare(toy, tmp_path):
    """Where the lanes cannot decode at once, AR decodes first, then speculative, and both are replayed on one
    clock at their measured pace (each piece no earlier than its lane had it ready), and the page says why."""
    race = Recorder()
    text = "A toy race. Then a second sentence, and a third one."
    comparison = run_race(Request(text=text, preset=TOY_KEY, seed=9), race)
    assert set(race.seen) == {"autoregressive", "speculative"}
    assert race.apart == comparison.apart == toy and _apart_note(together_note(race), toy) and race.replayed
    assert "replayed at the pace measured" in race_chart_svg(race) and "s after the start" in race_chart_svg(race)
    ar_line, spec_line = race.lanes["autoregressive"].timeline, race.lanes["speculative"].timeline
    assert spec_line[0][0] < ar_line[-1][0]  # on the race's one clock the speculative lane starts with AR's
    came = [t for _, t, _ in race.came]
    assert came == sorted(came)
    assert all(t >= piece.ready_seconds for _, t, piece in race.came)  # at its lane's pace, never ahead of it
    same = app_logic.compare(Request(text=text, preset=TOY_KEY, seed=9))
    for name, result, again in (("autoregressive", comparison.ar, same.ar),
                                ("speculative", comparison.spec, same.spec)):
        lane = race.lanes[name]
        assert result.generation.tokens == again.generation.tokens
        assert lane.tokens == len(result.generation.tokens) and lane.rounds == result.generation.stats.target_calls
        assert lane.time_to_first_audio <= lane.pieces[-1].ready_seconds
        assert f"**{lane.tokens}** tokens" in lane_markdown(lane, name)
        # One source for a run's time: the lane's "done" is the comparison's seconds until its last audio.
        assert lane.seconds == result.elapsed_seconds
        assert lane.timeline[-1][0] >= lane.seconds  # its end shown no earlier than it came
        assert lane.time_to_first_audio <= lane.seconds  # one clock: first audio never after done
        assert f"done {result.elapsed_seconds:.2f} s" in lane_markdown(lane, name)
        # The speech its player plays (the page's player writes when it was heard after it).
        assert _speech_seconds(lane_markdown(lane, name)) == pytest.approx(result.duration_seconds, abs=0.051)
        assert race_details(race)[name]["run_seconds"] == result.elapsed_seconds
        # The live chart's points: on one clock, never going back, ending with the run's tokens.
        assert [t for t, _, _ in lane.timeline] == sorted(t for t, _, _ in lane.timeline)
        assert [n for _, n, _ in lane.timeline] == sorted(n for _, n, _ in lane.timeline)
        assert lane.timeline[-1][1] == lane.tokens
    replay = slow_motion_of(race, comparison)
    ar_path, spec_path = write_replay_files(replay, comparison.ar.sample_rate, tmp_path)
    assert soundfile.info(str(ar_path)).frames == soundfile.info(str(spec_path)).frames > 0
    # The same replay from what the page holds after the race (both clips and the JSON details).
    ar_clip, spec_clip = app_logic.write_audio_files(comparison, tmp_path)
    shown = {**app_logic.details(comparison), "race": race_details(race)}
    again = slow_motion_from_files(ar_clip, spec_clip, shown)
    assert again.factor == replay.factor and len(again.ar_track) == len(replay.ar_track)
    assert slow_motion_from_files(ar_clip, spec_clip, shown, factor=3.0).factor == 3.0
    shown = headline(comparison, race)
    assert shown.lstrip("#").startswith((" Speculative ", " Too short for speculation to show"))
    assert _ratios(shown) == (pytest.approx(lm_speedup(comparison), abs=0.005),
                              pytest.approx(app_logic.end_to_end_speedup(comparison), abs=0.005))
    assert _first_audio_in(shown, race)


def test_the_headline_states_one_run_until_three_then_their_median():
    from ssd_demo.app.compare.race import MEDIAN_AFTER, SHORT_RUN_SECONDS, verdict_lines

    long_run, short_run = 4 * SHORT_RUN_SECONDS, SHORT_RUN_SECONDS / 4
    one = verdict_lines([2.6], long_run)
    assert one[0] == "## Speculative was 2.6× faster on this run"  # never bold on one run
    assert one[1].startswith("One run") and f"{MEDIAN_AFTER - 1} more" in one[1]  # how many more give a median
    slower = verdict_lines([2.0, 1 / 2.8], long_run)
    assert slower[0] == "## Speculative was 2.8× slower on this run" and "1 more" in slower[1]
    short = verdict_lines([5.0], short_run)
    assert short[0] == "## Speculative was 5.0× faster on this run"
    assert f"One short run ({short_run:.1f} s)" in short[1] and f"{MEDIAN_AFTER - 1} more" in short[1]
    # From three races with the same settings: the median, the range and n; bold only for a median >= 1.
    # (The five races of one sentence: 2.20, 1.75, 1.33, 1.79, 2.96.)
    five = verdict_lines([2.20, 1.75, 1.33, 1.79, 2.96], short_run)
    assert five[0] == "# Speculative is 1.8× faster"
    assert "median of 5 races" in five[1] and "range 1.3–3.0×" in five[1] and "this one 3.0×" in five[1]
    assert verdict_lines([0.8, 0.7, 1.3], long_run)[0] == "## Speculative is 1.2× slower"
    assert verdict_lines([1.02, 0.98, 1.0], long_run)[0] == "# Speculative is about as fast as autoregressive"


def test_the_race_history_counts_only_one_page_and_one_setting():
    from ssd_demo.app.compare.race import RaceHistory, settings_key
    from ssd_demo.comparison import Request

    history = RaceHistory(pages=2, races=3)
    key = settings_key(Request(text="Hi.", preset="embedded", beta=0.2, seed=1))
    assert key == settings_key(Request(text="Hi.", preset="embedded", beta=0.2, seed=9))  # any seed
    assert key != settings_key(Request(text="Hi.", preset="embedded", beta=0.3, seed=1))
    assert key != settings_key(Request(text="Hello.", preset="embedded", beta=0.2, seed=1))
    for speedup in (1.5, 2.0, 2.5, 3.0):
        history.add("page-a", key, speedup)
    assert history.earlier("page-a", key) == [2.0, 2.5, 3.0]  # the newest races only
    assert history.earlier("page-b", key) == [] and history.earlier(None, key) == []
    history.add(None, key, 2.0)  # no page (no session): nothing kept
    history.add("page-a", key, float("nan"))
    assert history.earlier("page-a", key) == [2.0, 2.5, 3.0]
    history.add("page-b", key, 1.0)
    history.add("page-c", key, 1.0)  # a third page: the least recently used one goes
    assert history.earlier("page-a", key) == [] and history.earlier("page-c", key) == [1.0]


def test_replayed_pieces_are_what_a_stream_yields(monkeypatch):
    """Where pieces cannot stream (ZeroGPU), a decoded-at-once run is handed out as the stream's pieces."""
    from ssd_demo.comparison import pipeline as session
    from ssd_demo.comparison.replay import replayed_pieces
    from support.chunking import TEXT, ChunkingToy
    from ssd_demo.speech.synthesis import Synthesizer
    from support.toy_backend import build_toy_synthesizer

    toy = build_toy_synthesizer(max_new_tokens=24)
    synth = Synthesizer(ChunkingToy(24), toy.target, toy.drafts, default_draft="small")
    stream = synth.stream(TEXT, mode="speculative", config=synth.config(seed=2))
    streamed = list(stream)
    replayed = replayed_pieces(stream.result)
    assert [(p.text, p.start_sample, len(p.audio), p.tokens_so_far, p.target_calls_so_far) for p in replayed] == \
        [(p.text, p.start_sample, len(p.audio), p.tokens_so_far, p.target_calls_so_far) for p in streamed]
    assert [p.ready_seconds for p in replayed] == sorted(p.ready_seconds for p in replayed)

    # With the GPU path in place, the race takes it and still reports both lanes, on one clock at their pace.
    register_toy_preset()
    monkeypatch.setattr(session, "_decode_on_gpu", session.decode_job)
    race = Recorder()
    comparison = run_race(Request(text="On the GPU.", preset=TOY_KEY, seed=3), race)
    assert set(race.seen) == {"autoregressive", "speculative"} and race.replayed
    assert all(t >= piece.ready_seconds for _, t, piece in race.came)
    assert race.lanes["speculative"].tokens == len(comparison.spec.generation.tokens)
    assert race.apart == comparison.apart == "one GPU runs one decoder at a time"  # never the lane workers


def test_a_replay_tells_both_lanes_on_one_clock_at_their_pace_and_stops_when_asked():
    """Two recorded lanes told together: each event once its lane's own time has passed, in time order (ties in
    lane order); Stop ends the replay between two events."""
    from ssd_demo.comparison.replay import Told, replay_at_pace
    from ssd_demo.engine.cancellation import Cancelled

    class Sink:
        def __init__(self) -> None:
            self.heard: list[tuple[float, str, str, tuple]] = []
            self.start: float | None = None

        def replaying(self) -> None:
            self.start = time.perf_counter()

        def __getattr__(self, method):
            return lambda lane, *args: self.heard.append((time.perf_counter() - self.start, lane, method, args))

    told = [Told(0.0, "autoregressive", "started", ()), Told(0.12, "autoregressive", "counted", (3, 3, 0)),
            Told(0.20, "autoregressive", "finished", ("ar", 0.2)),  # recorded first, one lane after the other
            Told(0.0, "speculative", "started", ()), Told(0.06, "speculative", "counted", (4, 1, 1)),
            Told(0.10, "speculative", "finished", ("spec", 0.1))]
    sink = Sink()
    replay_at_pace(told, sink, lanes=("autoregressive", "speculative"))
    assert [(lane, method) for _, lane, method, _ in sink.heard] == [
        ("autoregressive", "started"), ("speculative", "started"), ("speculative", "counted"),
        ("speculative", "finished"), ("autoregressive", "counted"), ("autoregressive", "finished")]
    assert all(at >= event.at for (at, *_), event in zip(sink.heard, sorted(told, key=lambda e: e.at)))
    assert sink.heard[-1][0] < 0.20 + 0.5  # and no slower than its pace (a loose bound: a busy machine)
    stopped, asked = Sink(), time.perf_counter()
    with pytest.raises(Cancelled):
        replay_at_pace([Told(0.0, "speculative", "started", ()), Told(30.0, "speculative", "finished", ("x", 30))],
                       stopped, should_stop=lambda: time.perf_counter() - asked > 0.1)
    assert [method for _, _, method, _ in stopped.heard] == ["started"]
    assert time.perf_counter() - asked < 5  # within a look or two, not at the 30 s event


def test_a_recording_of_a_decoded_run_tells_its_pieces_when_they_were_ready():
    """ZeroGPU's runs come back decoded: their recording tells each piece (after its counts) when its chunk's LM and
    codec seconds had passed, and the end no earlier than the last piece."""
    from ssd_demo.comparison.replay import recording_of
    from support.toy_backend import build_toy_synthesizer

    toy = build_toy_synthesizer(max_new_tokens=24)
    result = toy.synthesize("One chunk. And another one.", mode="speculative", config=toy.config(seed=2))
    told = recording_of("speculative", result)
    assert [t.method for t in told][:1] == ["started"] and told[-1].method == "finished"
    assert [t.at for t in told] == sorted(t.at for t in told) and told[-1].at >= result.total_seconds
    pieces = [t.args[0] for t in told if t.method == "piece"]
    assert pieces and all(t.args[0].ready_seconds == t.at for t in told if t.method == "piece")
    counted = [t for t in told if t.method == "counted"]
    assert counted[-1].args[0] == len(result.generation.tokens)


def test_a_race_apart_replays_with_the_models_free_and_a_stop_while_decoding_shows_nothing(toy):
    """The replay runs after the model turn (another job may start meanwhile); a race stopped while both lanes still
    decoded ends with nothing shown as replayed."""
    from ssd_demo.backends.registry import MODEL_JOB_LOCK

    class Watch(Race):
        def __init__(self) -> None:
            super().__init__()
            self.locked_while_replaying: list[bool] = []

        def piece(self, lane, piece) -> None:
            super().piece(lane, piece)
            self.locked_while_replaying.append(MODEL_JOB_LOCK.locked())

    race = Watch()
    run_race(Request(text="Free the models first.", preset=TOY_KEY, seed=3), race)
    assert race.replayed and race.locked_while_replaying and not any(race.locked_while_replaying)

    race = Race()
    events = list(race_events(Request(text="Stopped while decoding.", preset=TOY_KEY, seed=3),
                              should_stop=lambda: race.stage.startswith("Speculative decoding"), race=race))
    assert isinstance(events[-1], Stopped) and not race.replayed
    assert all(lane.started is None for lane in race.lanes.values())


def test_race_events_come_in_order_and_end_with_the_comparison(toy):
    events = list(race_events(Request(text="Events, in order.", preset=TOY_KEY, seed=4), live_every=0.001))
    kinds = [type(event) for event in events if not isinstance(event, Tick)]
    assert kinds[0] is Started and kinds[-1] is Done and Failed not in kinds
    lanes = [(type(e).__name__, e.lane) for e in events if isinstance(e, (Started, Piece))]
    starts = [lane for kind, lane in lanes if kind == "Started"]
    assert starts == ["autoregressive", "speculative"]  # replayed from one start: both lanes start first
    assert {lane for _, lane in lanes[2:]} == {"autoregressive", "speculative"}
    assert [kind for kind, _ in lanes[:2]] == ["Started", "Started"]
    done = events[-1]
    assert [e.piece for e in events if isinstance(e, Piece) and e.lane == "speculative"] == \
        done.race.lanes["speculative"].pieces
    same = app_logic.compare(Request(text="Events, in order.", preset=TOY_KEY, seed=4))
    assert done.comparison.spec.generation.tokens == same.spec.generation.tokens
    assert done.comparison.ar.generation.tokens == same.ar.generation.tokens
    assert all(isinstance(e.race, Race) for e in events if isinstance(e, Tick))


def test_a_race_that_cannot_run_ends_with_failed(toy):
    events = list(race_events(Request(text="   ", preset=TOY_KEY)))
    assert isinstance(events[-1], Failed) and isinstance(events[-1].error, TextError)
    assert not any(isinstance(e, (Started, Piece, Done)) for e in events)
    events = list(race_events(Request(text="Hi.", preset="no-such-preset")))
    assert isinstance(events[-1], Failed)


def test_a_stopped_race_ends_with_stopped_and_its_final_counters(toy):
    """Stopped while both lanes are replayed (they decoded one after the other): each lane still running keeps the
    time it had run, and its counters say it stopped."""
    stop = threading.Event()
    events = []
    for event in race_events(Request(text="Stop me while both lanes are replayed.", preset=TOY_KEY, seed=1),
                             should_stop=stop.is_set):
        events.append(event)
        if isinstance(event, Started):
            stop.set()
    assert not any(isinstance(e, (Done, Failed)) for e in events)
    assert isinstance(events[-1], Stopped)
    race = events[-1].race
    assert race.stage == "Stopped"
    stopped = [lane for lane in race.lanes.values() if lane.started is not None and lane.seconds is None]
    assert stopped and all(lane.stopped is not None for lane in stopped)  # its clock stopped where the run did
    time.sleep(0.02)
    for lane in stopped:
        assert lane.elapsed() == lane.stopped  # ... and stays there
        shown = lane_markdown(lane, lane.name)
        assert f"stopped {lane.stopped:.2f} s" in shown and "running" not in shown
        assert f"**{lane.tokens}** tokens" in shown


def test_a_race_stopped_before_it_starts_decoding_ends_with_stopped(toy):
    events = list(race_events(Request(text="Stopped at once.", preset=TOY_KEY, seed=1), should_stop=lambda: True))
    assert [type(e) for e in events if not isinstance(e, Tick)] == [Stopped]
    assert all(lane.started is None for lane in events[-1].race.lanes.values())


def test_closing_the_events_stops_the_decoding(toy):
    race = Race()

    def slow_rounds() -> bool:  # every round takes a while, so the race still runs when the events close
        time.sleep(0.02)
        return False

    events = race_events(Request(text="Closed early, stopped early.", preset=TOY_KEY, seed=2), slow_rounds, race,
                         live_every=0.01)
    next(event for event in events if race.stage.startswith("Speculative decoding"))  # AR's run is done
    events.close()
    deadline = time.monotonic() + 5
    while any(t.name == "ssd-race" for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not any(t.name == "ssd-race" for t in threading.enumerate())
    assert race.lanes["speculative"].seconds is None  # stopped within a round, never finished
    assert race.lanes["speculative"].started is None  # and nothing of either lane was replayed


# --- both lanes at once: the embedded voice in two worker processes ----------------------------------

#: Long enough for both lanes to stream several pieces.
SENTENCE = "The children ran to the park, and they played there until the evening."


@pytest.fixture(scope="module")
def embedded_race():
    """One race of the embedded voice through `run_race`, as the app runs it (its lane workers are spawned
    processes that load and warm up the voice: seconds to start, once for the module); then `compare` of the
    same request, decoded in this process."""
    pytest.importorskip("ssd_demo.backends.embedded")
    if not (EMBEDDED_ASSETS / "voice.json").is_file():
        pytest.skip("the embedded voice's trained assets (assets/embedded/) are not present")
    request = Request(text=SENTENCE, preset="embedded", seed=5)
    race = Recorder()
    try:
        comparison = run_race(request, race)
        yield race, comparison, app_logic.compare(request)
    finally:
        close_lane_workers("embedded")


@pytest.mark.slow
def test_both_lanes_decode_at_once_where_the_machine_allows(embedded_race):
    race, comparison, _ = embedded_race
    ar, spec = race.lanes["autoregressive"], race.lanes["speculative"]
    assert race.apart == comparison.apart  # what the page said is what happened
    if race.apart == "":
        assert _together_note(together_note(race))
        # Both lanes started decoding before either finished: their timelines (one clock, from the click) overlap.
        assert max(ar.timeline[0][0], spec.timeline[0][0]) < min(ar.timeline[-1][0], spec.timeline[-1][0]), \
            (ar.timeline[:1], ar.timeline[-1:], spec.timeline[:1], spec.timeline[-1:])
    else:  # one core, say: one after the other, and the page says why
        assert _apart_note(together_note(race), race.apart)
        assert ar.timeline[-1][0] <= spec.timeline[0][0] and race.seen == sorted(race.seen)


@pytest.mark.slow
def test_the_lanes_workers_decode_what_this_process_decodes(embedded_race):
    race, comparison, same = embedded_race
    for name, result, again in (("autoregressive", comparison.ar, same.ar),
                                ("speculative", comparison.spec, same.spec)):
        lane = race.lanes[name]
        assert result.generation.tokens == again.generation.tokens, name
        assert lane.tokens == len(result.generation.tokens) and lane.rounds == result.generation.stats.target_calls
        assert lane.seconds == result.elapsed_seconds and result.wall_seconds is not None  # codec overlapping the LM
        assert 0 < lane.time_to_first_audio <= lane.seconds  # one clock
        assert len(lane.pieces) > 1  # streamed in codec windows, not one piece at the end
        joined = np.concatenate([piece.audio for piece in lane.pieces])
        assert len(joined) == len(result.audio)
        assert lane.timeline[-1][1] == lane.tokens
    # Only the speculative lane has drafts to reject; its chart marks them.
    assert race.lanes["autoregressive"].rejected == 0
    stats = comparison.spec.generation.stats
    assert race.lanes["speculative"].rejected == stats.drafted_tokens - stats.accepted_tokens
    shown = headline(comparison, race)
    assert _ratios(shown) == (pytest.approx(lm_speedup(comparison), abs=0.005),
                              pytest.approx(app_logic.end_to_end_speedup(comparison), abs=0.005))
    assert _first_audio_in(shown, race)


# --- the page's /race handler (its frames, without a server) -------------------------------------------

RACE_VIEW_OUTPUTS = ("status", "ar_live", "spec_live", "live_audio", "chart", "headline", "replay_ar", "replay_spec",
                     "replay_note")


def _race_page(raise_refusals: bool = False):
    """The race's handler on the toy preset (the page's, or the API's), and where each output sits in its
    frames."""
    import gradio as gr
    from ssd_demo.app.compare.race_view import build_race_chart, build_race_view, build_replay_row, race_handler
    from ssd_demo.app.compare.tab import OUTPUT_NAMES, synthesize_signature

    register_toy_preset()
    with gr.Blocks():
        view = build_replay_row(build_race_chart(build_race_view(gr.Markdown(), gr.Markdown())))
        results = {name: gr.Markdown() for name in OUTPUT_NAMES}
    assert len(view.outputs) == len(RACE_VIEW_OUTPUTS)
    handler = race_handler(view, results, synthesize_signature(app_logic.preset_defaults(TOY_KEY)), "race-test",
                           raise_refusals=raise_refusals)
    return handler, lambda frame: dict(zip((*RACE_VIEW_OUTPUTS, *OUTPUT_NAMES), frame))


def _skipped(value) -> bool:
    """An output a frame leaves as it is (`gr.skip()`)."""
    return isinstance(value, dict) and value.get("__type__") == "update" and len(value) == 1


def _payloads(frames: list[dict]) -> list[dict]:
    """What the frames sent the browser's player, in order."""
    return [json.loads(frame["live_audio"]) for frame in frames if not _skipped(frame["live_audio"])]


def test_a_finished_race_ends_done_with_every_piece_sent_and_both_lanes_done(toy):
    handler, named = _race_page()
    frames = [named(frame) for frame in handler("A race to the end.", preset=TOY_KEY, seed=2)]
    final = frames[-1]
    assert final["status"].startswith("**Now:** Done") and _apart_note(final["status"], toy)
    assert all(frame["status"].startswith("**Now:** ") for frame in frames)
    payloads = _payloads(frames)
    assert len({p["race"] for p in payloads}) == 1 and payloads[-1]["rate"] == 16_000
    for lane in ("autoregressive", "speculative"):
        sent = sorted({p["index"] for payload in payloads for p in payload["pieces"] if p["lane"] == lane})
        assert sent == list(range(payloads[-1]["lanes"][lane]["pieces"])) and sent  # every piece, numbered from 0
        assert payloads[-1]["lanes"][lane]["done"] and not payloads[-1]["lanes"][lane]["stopped"]
        # A lane is never said done before its last piece was sent.
        first_done = next(i for i, p in enumerate(payloads) if p["lanes"][lane]["done"])
        assert payloads[first_done]["lanes"][lane]["pieces"] == payloads[-1]["lanes"][lane]["pieces"]
    assert final["chart"].startswith("<svg") and final["chart"].count("<polyline") == 2
    assert re.search(r"Autoregressive\W+done", final["chart"]) and re.search(r"Speculative\W+done", final["chart"])
    assert "done" in final["ar_live"] and "done" in final["spec_live"]
    assert _ratios(final["headline"]) and final["details"]["race"]["speculative"]["pieces"]
    assert final["replay_note"].startswith("**As on a ")


def test_a_stopped_race_ends_with_a_stopped_frame(toy, monkeypatch):
    from ssd_demo.app import jobs
    from ssd_demo.app.compare.race_view import STOPPED_STATUS

    handler, named = _race_page()
    stop = threading.Event()
    monkeypatch.setattr(jobs, "stop_check", lambda request=None: stop.is_set)
    frames = []
    for frame in handler("Stop me while the first run decodes.", preset=TOY_KEY, seed=1):
        frames.append(named(frame))
        if len(frames) == 1:
            stop.set()  # the Stop button, right after the race began
    final = frames[-1]
    assert final["status"] == STOPPED_STATUS
    # The player's last word (the page's Stop silenced it already): no lane it could still wait for, each one
    # done, stopped where it was, or without a piece.
    last = json.loads(final["live_audio"])
    assert all(lane["done"] or lane["stopped"] or lane["pieces"] == 0 for lane in last["lanes"].values()), last
    assert "running" not in final["ar_live"] and "running" not in final["spec_live"]
    assert not any("Done" in str(frame["status"]) for frame in frames)


def test_a_refused_race_says_why_in_the_status_line_and_only_the_api_raises(toy):
    import gradio as gr

    handler, named = _race_page()
    frames = [named(frame) for frame in handler("   ", preset=TOY_KEY)]  # the page's race: no error raised
    final = frames[-1]
    assert final["status"].startswith("**Not run:**") and "type some text" in final["status"]
    assert not any(payload["pieces"] for payload in _payloads(frames))  # the player is given nothing to play
    assert final["headline"] == "" or _skipped(final["headline"])

    api, named = _race_page(raise_refusals=True)
    frames = []
    with pytest.raises(gr.Error, match="type some text"):
        for frame in api("   ", preset=TOY_KEY):
            frames.append(named(frame))
    assert frames[-1]["status"] == final["status"]


def test_done_is_the_status_once_both_runs_are_decoded():
    from ssd_demo.app.compare.race import done_stage

    assert done_stage() == "Done"  # the voices may still be playing: the page's player plays them in turn


def test_the_status_says_how_the_lanes_decode():
    race = Race()
    assert together_note(race) == ""  # not known before the models are ready
    race.apart = ""
    assert _together_note(together_note(race))
    race.apart = "this machine has one CPU core"
    assert _apart_note(together_note(race), race.apart)


def _piece(index: int, ready: float, processing: float, seconds: float = 0.01, tokens: int = 1):
    from ssd_demo.speech.streaming import AudioPiece

    return AudioPiece(index=index, chunk_index=0, text="", audio=np.zeros(int(16_000 * seconds), dtype=np.float32),
                      sample_rate=16_000, start_sample=0, ready_seconds=ready, processing_seconds=processing,
                      tokens_so_far=tokens, target_calls_so_far=tokens)


def _result(tokens: int, calls: int):
    return SimpleNamespace(generation=SimpleNamespace(stats=SimpleNamespace(target_calls=calls), tokens=[1] * tokens))


def test_first_audio_and_done_are_on_one_clock():
    race = Race()
    # A whole-chunk codec (the LM, then the codec): pieces ready on the wall clock, the run's done on its LM + codec
    # seconds (`SynthesisResult.elapsed_seconds`, less than the wall clock); first audio is on done's clock.
    for index, ready in enumerate([1.19, 1.40]):
        race.piece("autoregressive", _piece(index, ready, processing=0.5))
    race.finished("autoregressive", _result(2, 3), 1.17)
    lane = race.lanes["autoregressive"]
    assert lane.time_to_first_audio == 0.5 <= lane.seconds == 1.17
    # Codec windows overlapping the LM: every clock is the wall's (the first piece's processing is its ready time).
    race.piece("speculative", _piece(0, 0.31, processing=0.31))
    race.piece("speculative", _piece(1, 0.62, processing=0.31))
    race.finished("speculative", _result(2, 1), 0.62)
    lane = race.lanes["speculative"]
    assert lane.time_to_first_audio == 0.31 <= lane.seconds == 0.62


def test_a_lanes_counters_say_its_rejected_drafts_and_state():
    race = Race()
    shown = lane_markdown(race.lanes["speculative"], "Speculative")
    assert "**0** tokens" in shown and "waiting" in shown and "rejected" not in shown
    assert "First audio after **–**" in shown
    race.started("speculative")
    race.counted("speculative", 12, 4, rejected=3)
    shown = lane_markdown(race.lanes["speculative"], "Speculative")
    assert "**12** tokens · **4** target calls" in shown and re.search(r"\b3 (drafts )?rejected", shown)
    assert "running" in shown
    race.piece("speculative", _piece(0, 0.2, 0.2, seconds=0.5, tokens=12))
    race.finished("speculative", _result(12, 4), 0.8)
    shown = lane_markdown(race.lanes["speculative"], "Speculative")
    assert "done 0.80 s" in shown and "First audio after **0.20 s**" in shown and _speech_seconds(shown) == 0.5


def test_the_live_chart_draws_both_lanes_on_one_clock():
    race = Race()
    assert race_chart_svg(race, now=0.0).count("<polyline") == 0  # nothing decoded yet: the axes only
    for lane in ("autoregressive", "speculative"):
        race.started(lane)
    ar, spec = race.lanes["autoregressive"], race.lanes["speculative"]
    ar.timeline += [(0.1 * i, i, 0) for i in range(1, 30)]
    spec.timeline += [(0.1, 4, 0), (0.2, 8, 2), (0.3, 12, 2), (0.4, 16, 5)]  # two rounds with rejected drafts
    ar.tokens, spec.tokens, spec.rejected = 29, 16, 5
    running = race_chart_svg(race, now=2.9)
    assert running.count("<polyline") == 2 and "<circle" not in running  # no lane done yet
    assert running.count('stroke="#dc2626"') == 2  # a tick per round that rejected drafts
    assert _axis_seconds(running) >= 2.9  # the time axis grows with the race: up to now at least
    assert _axis_seconds(race_chart_svg(race, now=10.0)) > _axis_seconds(running)  # ... while a lane runs
    assert "Speculative: 16 tokens, running" in running  # its accessible name says what it shows
    spec.seconds = 0.4
    race.stop()  # the autoregressive lane was still running
    done = race_chart_svg(race, now=3.0)
    assert done.count("<circle") == 1 and re.search(r"Speculative\W+done 0\.40 s", done)
    assert re.search(r"Autoregressive\W+stopped", done)


def _runs(ar_lm: float, spec_lm: float, ar_elapsed: float, spec_elapsed: float, speech: float):
    """A comparison as the headline reads it: both runs' LM seconds, seconds until the last audio and speech."""
    def run(lm: float, elapsed: float):
        return SimpleNamespace(lm_seconds=lm, elapsed_seconds=elapsed, duration_seconds=speech,
                               real_time_factor=elapsed / speech)

    return SimpleNamespace(ar=run(ar_lm, ar_elapsed), spec=run(spec_lm, spec_elapsed))


def test_the_headline_labels_both_ratios_and_says_when_a_text_is_too_short():
    from ssd_demo.app.compare.race import SHORT_SPEECH_SECONDS

    race = Race()
    race.piece("autoregressive", _piece(0, 0.6, 0.6))
    race.piece("speculative", _piece(0, 0.3, 0.3))
    lines = headline(_runs(6.0, 2.0, 8.0, 4.0, speech=4.0), race).split("\n")
    assert lines[0] == "## Speculative was 2.0× faster on this run"  # the verdict: end to end, one run
    assert _ratios(lines[1]) == (3.0, 2.0)  # the basis: both ratios, each labelled, and both first audios
    assert _first_audio_in(lines[1], race)
    assert lines[2].startswith("One run") and len(lines) == 3
    median = headline(_runs(6.0, 2.0, 8.0, 4.0, speech=4.0), race, earlier=[1.8, 2.2]).split("\n")
    assert median[0] == "# Speculative is 2.0× faster" and "median of 3 races" in median[2]
    assert "first audio" not in headline(_runs(6.0, 2.0, 8.0, 4.0, speech=4.0))  # no race: no first audio
    short = headline(_runs(0.6, 0.3, 0.8, 0.4, speech=SHORT_SPEECH_SECONDS / 2), race)
    assert short.startswith("## Too short for speculation to show\n") and "Speculative was" not in short
    assert _ratios(short) == (2.0, 2.0) and _first_audio_in(short, race)
    assert headline(_runs(1.0, 1.0, 1.0, 0.0, speech=4.0)) == ""  # no ratio to state


def test_taking_the_model_turn_does_not_claim_a_load():
    from ssd_demo.comparison import model_turn

    said = []
    with model_turn(lambda fraction=0.0, desc=None: said.append(desc)):
        pass
    assert said and not any("Loading" in desc for desc in said)  # the loader says so when it loads


def test_tokens_per_second_uses_the_tables_own_lm_seconds():
    from ssd_demo.app.compare.views import lm_tokens_per_second

    result = SimpleNamespace(lm_seconds=9.559, generation=SimpleNamespace(stats=SimpleNamespace(sampled_tokens=956)))
    assert lm_tokens_per_second(result) == 956 / 9.559
    assert lm_tokens_per_second(SimpleNamespace(lm_seconds=0.0, generation=result.generation)) != 956  # nan


def test_the_race_scripts_reach_the_browser_as_written():
    """The scripts are plain (non-raw) Python strings: a regular expression's `\\b` written once in the source
    would reach the browser as a backspace character and never match."""
    from ssd_demo.app.compare import race_js

    scripts = {name: value for name, value in vars(race_js).items() if name.endswith("_JS")}
    assert scripts
    for name, script in scripts.items():
        assert not [c for c in script if ord(c) < 32 and c not in "\n"], name
