"""The race's logic without Gradio: AR streamed before speculative, lanes that match the comparison,
replays of equal length, the headline's wording."""

from __future__ import annotations

import soundfile

from ssd_demo.app import compare as app_logic
from ssd_demo.app.compare import Race, Request, headline, lane_markdown, run_race, write_replay_files
from toy_backend import TOY_KEY, register_toy_preset


def test_race_streams_ar_then_speculative_and_matches_compare(tmp_path):
    register_toy_preset()
    race, seen = Race(), []
    comparison = run_race(Request(text="A toy race.", preset=TOY_KEY, seed=9), race,
                          lambda lane, piece: seen.append((lane, piece.index)))
    lanes = [lane for lane, _ in seen]
    assert lanes == sorted(lanes) and set(lanes) == {"autoregressive", "speculative"}  # AR's pieces first
    same = app_logic.compare(Request(text="A toy race.", preset=TOY_KEY, seed=9))
    for name, result, again in (("autoregressive", comparison.ar, same.ar), ("speculative", comparison.spec, same.spec)):
        lane = race.lanes[name]
        assert result.generation.tokens == again.generation.tokens
        assert lane.tokens == len(result.generation.tokens) and lane.rounds == result.generation.stats.target_calls
        assert lane.seconds is not None and lane.time_to_first_audio <= lane.seconds
        assert f"**{lane.tokens}** tokens" in lane_markdown(lane, name)
    ar_path, spec_path = write_replay_files(race, comparison.ar.sample_rate, tmp_path)
    assert soundfile.info(str(ar_path)).frames == soundfile.info(str(spec_path)).frames > 0
    assert headline(comparison, race).startswith("# Speculative is ")
    assert "first audio after" in headline(comparison, race)


def test_replayed_pieces_are_what_a_stream_yields(monkeypatch):
    """Where pieces cannot stream (ZeroGPU), a decoded-at-once run is handed out as the stream's pieces."""
    from ssd_demo.app.compare import race as race_module
    from ssd_demo.app.compare import runner
    from test_streaming import TEXT, ChunkingToy
    from ssd_demo.synthesis import Synthesizer
    from toy_backend import build_toy_synthesizer

    toy = build_toy_synthesizer(max_new_tokens=24)
    synth = Synthesizer(ChunkingToy(24), toy.target, toy.drafts, default_draft="small")
    stream = synth.stream(TEXT, mode="speculative", config=synth.config(seed=2))
    streamed = list(stream)
    replayed = race_module.replayed_pieces(stream.result)
    assert [(p.text, p.start_sample, len(p.audio), p.tokens_so_far, p.target_calls_so_far) for p in replayed] == \
        [(p.text, p.start_sample, len(p.audio), p.tokens_so_far, p.target_calls_so_far) for p in streamed]
    assert [p.ready_seconds for p in replayed] == sorted(p.ready_seconds for p in replayed)

    # With the GPU path in place, the race takes it and still reports both lanes.
    register_toy_preset()
    monkeypatch.setattr(runner, "run_both", lambda *args, **kwargs: runner._run_both(*args, **kwargs))
    race, seen = Race(), []
    comparison = run_race(Request(text="On the GPU.", preset=TOY_KEY, seed=3), race,
                          lambda lane, piece: seen.append(lane))
    assert seen and seen == sorted(seen)
    assert race.lanes["speculative"].tokens == len(comparison.spec.generation.tokens)
