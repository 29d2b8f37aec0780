"""The race's logic without Gradio: AR streamed before speculative, lanes that match the comparison,
replays of equal length, the headline's wording, and the race as events (what the page's handler maps)."""

from __future__ import annotations

import threading
import time

import soundfile

from ssd_demo.app import compare as app_logic
from ssd_demo.app.compare import (Done, Failed, Piece, Race, Request, Started, Stopped, Tick, headline, lane_markdown,
                                  race_details, race_events, run_race, slow_motion_from_files, slow_motion_of,
                                  write_replay_files)
from ssd_demo.errors import TextError
from support.toy_backend import TOY_KEY, register_toy_preset


class Recorder(Race):
    """A race that also notes each piece's lane, in the order they come."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def piece(self, lane, piece) -> None:
        super().piece(lane, piece)
        self.seen.append(lane)


def test_race_streams_ar_then_speculative_and_matches_compare(tmp_path):
    register_toy_preset()
    race = Recorder()
    comparison = run_race(Request(text="A toy race.", preset=TOY_KEY, seed=9), race)
    lanes = race.seen
    assert lanes == sorted(lanes) and set(lanes) == {"autoregressive", "speculative"}  # AR's pieces first
    same = app_logic.compare(Request(text="A toy race.", preset=TOY_KEY, seed=9))
    for name, result, again in (("autoregressive", comparison.ar, same.ar), ("speculative", comparison.spec, same.spec)):
        lane = race.lanes[name]
        assert result.generation.tokens == again.generation.tokens
        assert lane.tokens == len(result.generation.tokens) and lane.rounds == result.generation.stats.target_calls
        assert lane.time_to_first_audio <= lane.pieces[-1].ready_seconds
        assert f"**{lane.tokens}** tokens" in lane_markdown(lane, name)
        # One source for a run's time: the lane's "done" is the comparison's LM + codec seconds.
        assert lane.seconds == result.total_seconds
        assert lane.time_to_first_audio <= lane.seconds  # one clock: first audio never after done
        assert f"done {result.total_seconds:.2f} s" in lane_markdown(lane, name)
        # The speech its player must play before the lane's voice is done (the page's voice rule reads it).
        assert f"{len(result.audio) / result.sample_rate:.2f} s of speech" in lane_markdown(lane, name)
        assert race_details(race)[name]["run_seconds"] == result.total_seconds
    replay = slow_motion_of(race, comparison)
    ar_path, spec_path = write_replay_files(replay, comparison.ar.sample_rate, tmp_path)
    assert soundfile.info(str(ar_path)).frames == soundfile.info(str(spec_path)).frames > 0
    # The same replay from what the page holds after the race (both clips and the JSON details).
    ar_clip, spec_clip = app_logic.write_audio_files(comparison, tmp_path)
    shown = {**app_logic.details(comparison), "race": race_details(race)}
    again = slow_motion_from_files(ar_clip, spec_clip, shown)
    assert again.factor == replay.factor and len(again.ar_track) == len(replay.ar_track)
    assert slow_motion_from_files(ar_clip, spec_clip, shown, factor=3.0).factor == 3.0
    assert headline(comparison, race).lstrip("#").startswith(" Speculative ")
    assert "first audio after" in headline(comparison, race)


def test_the_headline_states_one_run_until_three_then_their_median():
    from ssd_demo.app.compare.race import MEDIAN_AFTER, SHORT_RUN_SECONDS, verdict_lines

    long_run, short_run = 4 * SHORT_RUN_SECONDS, SHORT_RUN_SECONDS / 4
    one = verdict_lines([2.6], long_run)
    assert one[0] == "## Speculative was 2.6× faster on this run"  # never bold on one run
    assert one[1].startswith("One run") and "race again" in one[1] and f"{MEDIAN_AFTER - 1} more" in one[1]
    slower = verdict_lines([2.0, 1 / 2.8], long_run)
    assert slower[0] == "## Speculative was 2.8× slower on this run" and "1 more" in slower[1]
    short = verdict_lines([5.0], short_run)
    assert short[0] == "## Speculative was 5.0× faster on this run"
    assert f"One short run ({short_run:.1f} s)" in short[1] and "race again" in short[1]
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
    from support.chunking import TEXT, ChunkingToy
    from ssd_demo.speech.synthesis import Synthesizer
    from support.toy_backend import build_toy_synthesizer

    toy = build_toy_synthesizer(max_new_tokens=24)
    synth = Synthesizer(ChunkingToy(24), toy.target, toy.drafts, default_draft="small")
    stream = synth.stream(TEXT, mode="speculative", config=synth.config(seed=2))
    streamed = list(stream)
    replayed = session.replayed_pieces(stream.result)
    assert [(p.text, p.start_sample, len(p.audio), p.tokens_so_far, p.target_calls_so_far) for p in replayed] == \
        [(p.text, p.start_sample, len(p.audio), p.tokens_so_far, p.target_calls_so_far) for p in streamed]
    assert [p.ready_seconds for p in replayed] == sorted(p.ready_seconds for p in replayed)

    # With the GPU path in place, the race takes it and still reports both lanes.
    register_toy_preset()
    monkeypatch.setattr(session, "_decode_on_gpu", session.decode_job)
    race = Recorder()
    comparison = run_race(Request(text="On the GPU.", preset=TOY_KEY, seed=3), race)
    assert race.seen and race.seen == sorted(race.seen)
    assert race.lanes["speculative"].tokens == len(comparison.spec.generation.tokens)


def test_race_events_come_in_order_and_end_with_the_comparison():
    register_toy_preset()
    events = list(race_events(Request(text="Events, in order.", preset=TOY_KEY, seed=4), live_every=0.001))
    kinds = [type(event) for event in events if not isinstance(event, Tick)]
    assert kinds[0] is Started and kinds[-1] is Done and Failed not in kinds
    lanes = [(type(e).__name__, e.lane) for e in events if isinstance(e, (Started, Piece))]
    starts = [lane for kind, lane in lanes if kind == "Started"]
    assert starts == ["autoregressive", "speculative"]
    second = lanes.index(("Started", "speculative"))
    assert all(lane == "autoregressive" for _, lane in lanes[:second])  # AR's pieces, then the speculative run's
    assert all(lane == "speculative" for _, lane in lanes[second:])
    done = events[-1]
    assert [e.piece for e in events if isinstance(e, Piece) and e.lane == "speculative"] == \
        done.race.lanes["speculative"].pieces
    same = app_logic.compare(Request(text="Events, in order.", preset=TOY_KEY, seed=4))
    assert done.comparison.spec.generation.tokens == same.spec.generation.tokens
    assert done.comparison.ar.generation.tokens == same.ar.generation.tokens
    assert all(isinstance(e.race, Race) for e in events if isinstance(e, Tick))


def test_a_race_that_cannot_run_ends_with_failed():
    register_toy_preset()
    events = list(race_events(Request(text="   ", preset=TOY_KEY)))
    assert isinstance(events[-1], Failed) and isinstance(events[-1].error, TextError)
    assert not any(isinstance(e, (Started, Piece, Done)) for e in events)
    events = list(race_events(Request(text="Hi.", preset="no-such-preset")))
    assert isinstance(events[-1], Failed)


def test_a_stopped_race_ends_with_stopped_and_its_final_counters():
    register_toy_preset()
    stop = threading.Event()
    events = []
    for event in race_events(Request(text="Stop me in the second run.", preset=TOY_KEY, seed=1),
                             should_stop=stop.is_set):
        events.append(event)
        if event == Started("speculative"):
            stop.set()
    assert any(isinstance(e, Piece) for e in events)
    assert not any(isinstance(e, (Done, Failed)) for e in events)
    assert isinstance(events[-1], Stopped)
    race = events[-1].race
    assert race.stage == "Stopped"
    assert "done" in lane_markdown(race.lanes["autoregressive"], "Autoregressive")  # it had finished
    spec = race.lanes["speculative"]
    assert spec.seconds is None and spec.stopped is not None  # its clock stopped where the run did
    time.sleep(0.02)
    assert spec.elapsed() == spec.stopped  # ... and stays there
    shown = lane_markdown(spec, "Speculative")
    assert f"stopped {spec.stopped:.2f} s" in shown and "running" not in shown and f"**{spec.tokens}** tokens" in shown


def test_a_race_stopped_before_it_starts_decoding_ends_with_stopped():
    register_toy_preset()
    events = list(race_events(Request(text="Stopped at once.", preset=TOY_KEY, seed=1), should_stop=lambda: True))
    assert [type(e) for e in events if not isinstance(e, Tick)] == [Stopped]
    assert all(lane.started is None for lane in events[-1].race.lanes.values())


def test_closing_the_events_stops_the_decoding():
    register_toy_preset()
    race = Race()

    def slow_rounds() -> bool:  # every round takes a while, so the race still runs when the events close
        time.sleep(0.02)
        return False

    events = race_events(Request(text="Closed early, stopped early.", preset=TOY_KEY, seed=2), slow_rounds, race)
    next(event for event in events if isinstance(event, Piece))  # AR's audio: the speculative run comes next
    events.close()
    deadline = time.monotonic() + 5
    while any(t.name == "ssd-race" for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not any(t.name == "ssd-race" for t in threading.enumerate())
    assert race.lanes["speculative"].seconds is None  # stopped within a round, never finished


# --- the page's /race handler (its frames, without a server) -------------------------------------------

def _race_page(raise_refusals: bool = False):
    """The race's handler on the toy preset (the page's, or the API's), and where each output sits in its
    frames."""
    import gradio as gr
    from ssd_demo.app.compare.race_view import build_race_view, race_handler
    from ssd_demo.app.compare.tab import OUTPUT_NAMES, synthesize_signature

    register_toy_preset()
    with gr.Blocks():
        view = build_race_view(gr.Markdown(), gr.Markdown())
        results = {name: gr.Markdown() for name in OUTPUT_NAMES}
    handler = race_handler(view, results, synthesize_signature(app_logic.preset_defaults(TOY_KEY)), "race-test",
                           raise_refusals=raise_refusals)
    names = ("status", "ar_live", "spec_live", "ar_stream", "spec_stream", "headline", "replay_ar", "replay_spec",
             "replay_note", *OUTPUT_NAMES)
    return handler, lambda frame: dict(zip(names, frame))


def test_a_stopped_race_ends_with_a_stopped_frame(monkeypatch):
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
    assert final["ar_stream"] is None and final["spec_stream"] is None  # both live players stopped
    assert "running" not in final["ar_live"] and "running" not in final["spec_live"]
    assert not any("Done" in str(frame["status"]) for frame in frames)


def test_a_refused_race_says_why_in_the_status_line_and_only_the_api_raises():
    import gradio as gr
    import pytest

    handler, named = _race_page()
    frames = [named(frame) for frame in handler("   ", preset=TOY_KEY)]  # the page's race: no error raised
    final = frames[-1]
    assert final["status"].startswith("**Not run:**") and "type some text" in final["status"]
    assert final["ar_stream"] is None and final["spec_stream"] is None  # both live players left empty

    api, named = _race_page(raise_refusals=True)
    frames = []
    with pytest.raises(gr.Error, match="type some text"):
        for frame in api("   ", preset=TOY_KEY):
            frames.append(named(frame))
    assert frames[-1]["status"] == final["status"]


def test_done_says_the_speculative_voice_is_still_to_play():
    from ssd_demo.app.compare.race import done_stage

    assert done_stage(True).startswith("Done decoding") and "speculative voice plays next" in done_stage(True)
    assert done_stage(False) == "Done"  # no live audio: nothing queued, the clips are already there


def test_first_audio_and_done_are_on_one_clock():
    from types import SimpleNamespace

    from ssd_demo.speech.streaming import AudioPiece

    race = Race()
    for index, ready in enumerate([1.19, 1.40]):  # wall seconds since the stream began
        race.piece("autoregressive", AudioPiece(index=index, chunk_index=index, text="", audio=soundfile_free(),
                                                sample_rate=16_000, start_sample=0, ready_seconds=ready,
                                                processing_seconds=0.5, tokens_so_far=1, target_calls_so_far=1))
    result = SimpleNamespace(generation=SimpleNamespace(stats=SimpleNamespace(target_calls=3), tokens=[1, 2]))
    race.finished("autoregressive", result, 1.17)  # LM + codec seconds: less than the wall clock
    lane = race.lanes["autoregressive"]
    # Both on the LM + codec clock: the first piece's 0.5 s of processing, the run's 1.17 s.
    assert lane.time_to_first_audio == 0.5 <= lane.seconds == 1.17


def soundfile_free():
    import numpy as np

    return np.zeros(160, dtype=np.float32)


def test_taking_the_model_turn_does_not_claim_a_load():
    from ssd_demo.comparison import model_turn

    said = []
    with model_turn(lambda fraction=0.0, desc=None: said.append(desc)):
        pass
    assert said and not any("Loading" in desc for desc in said)  # the loader says so when it loads


def test_tokens_per_second_uses_the_tables_own_lm_seconds():
    from types import SimpleNamespace

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


def test_the_page_knows_the_live_streams_lead_in():
    """Every live stream begins with `LEAD_IN` of silence; the page's voice rule and its click-to-sound clock
    subtract the same figure."""
    from ssd_demo.app.compare import race_js, race_view

    assert f"LEAD_IN_S = {race_view.LEAD_IN}" in race_js.VOICES_JS


def test_every_live_stream_begins_with_the_lead_in_and_a_finished_lane_is_padded_once(monkeypatch):
    """A stream opened by a piece carries the lead-in in that piece; one opened before its first piece gets
    it alone; a finished lane's stream gets the tail padding once."""
    import io

    import numpy as np
    import pytest

    from ssd_demo.app.compare import race_view
    from ssd_demo.speech.streaming import AudioPiece

    monkeypatch.setattr(race_view, "LIVE_AUDIO", True)
    streams = race_view.LiveStreams({"autoregressive": "ar", "speculative": "spec"})
    seconds = lambda wav: soundfile.info(io.BytesIO(wav)).duration  # noqa: E731
    race = Race()
    assert streams.silences(race) == {}  # the sample rate is not known yet
    piece = AudioPiece(index=0, chunk_index=0, text="Hi.", audio=np.full(1600, 0.1, dtype=np.float32),
                       sample_rate=16_000, start_sample=0, ready_seconds=0.1, processing_seconds=0.1, tokens_so_far=5,
                       target_calls_so_far=5)
    first = streams.piece(Piece("autoregressive", piece))
    assert seconds(first["ar"]) == pytest.approx(race_view.LEAD_IN + 0.1)
    race.sample_rate = 16_000
    opened = streams.silences(race)
    assert list(opened) == ["spec"] and seconds(opened["spec"]) == pytest.approx(race_view.LEAD_IN)
    assert seconds(streams.piece(Piece("autoregressive", piece))["ar"]) == pytest.approx(0.1)
    race.lanes["autoregressive"].seconds = 1.0
    assert seconds(streams.silences(race)["ar"]) == pytest.approx(race_view.TAIL_PADDING)
    assert streams.silences(race) == {}  # once
