"""Long text is spoken chunk by chunk: same chunks and seeds in both modes, totals that add up, no text lost."""

import numpy as np
import pytest

from ssd_demo.speech.synthesis import Synthesizer
from support.chunking import PAUSE_MS, TEXT, ChunkingToy
from support.toy_backend import build_toy_synthesizer


@pytest.fixture(scope="module")
def synth() -> Synthesizer:
    toy = build_toy_synthesizer(max_new_tokens=24)
    return Synthesizer(ChunkingToy(24), toy.target, toy.drafts, default_draft="small")


@pytest.mark.parametrize("mode", ["ar", "speculative"])
def test_each_chunk_is_decoded_and_the_totals_add_up(synth, mode):
    result = synth.synthesize(TEXT, mode=mode, config=synth.config(seed=11))
    assert [c.text for c in result.chunks] == ["First sentence here.", "Second one, a bit longer.", "Third!"]
    assert [c.seed for c in result.chunks] == [11, 12, 13]
    assert result.generation.stats.seed == 11
    stats = result.generation.stats
    per_chunk = [c.generation.stats for c in result.chunks]
    for name in ("new_tokens", "rounds", "drafted_tokens", "accepted_tokens", "target_calls", "draft_calls"):
        assert getattr(stats, name) == sum(getattr(s, name) for s in per_chunk), name
    assert stats.wall_seconds == pytest.approx(sum(s.wall_seconds for s in per_chunk))
    assert result.generation.tokens == [t for c in result.chunks for t in c.generation.tokens]
    assert len(result.generation.steps) == stats.rounds
    ends = [step.end_seconds for step in result.generation.steps]
    assert ends == sorted(ends)  # one clock across chunks
    if mode == "speculative" and stats.drafted_tokens:
        assert stats.acceptance_rate == pytest.approx(stats.accepted_tokens / stats.drafted_tokens)
    # Audio: each chunk's audio in its span, pauses between chunks, none after the last.
    pause = int(synth.backend.sample_rate * PAUSE_MS / 1000)
    assert result.chunks[0].start_sample == 0
    for before, after in zip(result.chunks, result.chunks[1:]):
        assert after.start_sample == before.end_sample + pause
        assert not result.audio[before.end_sample : after.start_sample].any()
    assert result.chunks[-1].end_sample == len(result.audio)
    assert result.lm_seconds == pytest.approx(sum(c.lm_seconds for c in result.chunks))


def test_first_chunk_matches_a_single_chunk_run(synth):
    whole = synth.synthesize(TEXT, mode="speculative", config=synth.config(seed=5))
    alone = build_toy_synthesizer(max_new_tokens=24).synthesize("First sentence here.", mode="speculative",
                                                                config=synth.config(seed=5))
    assert whole.chunks[0].generation.tokens == alone.generation.tokens


def test_greedy_speculative_equals_greedy_ar_over_all_chunks(synth):
    config = synth.config(temperature=0.0)
    ar = synth.synthesize(TEXT, mode="ar", config=config)
    for draft in ("small", "copy"):
        spec = synth.synthesize(TEXT, mode="speculative", config=config, draft=draft)
        assert spec.generation.tokens == ar.generation.tokens
        assert np.array_equal(spec.audio, ar.audio)


def test_unseeded_run_records_the_seed_that_reproduces_it(synth):
    first = synth.synthesize(TEXT, mode="ar", config=synth.config(seed=None))
    again = synth.synthesize(TEXT, mode="ar", config=synth.config(seed=first.generation.stats.seed))
    assert again.generation.tokens == first.generation.tokens


def test_a_bad_chunk_fails_before_any_decoding(synth):
    from ssd_demo import TextError

    with pytest.raises(TextError):
        synth.synthesize("Fine sentence. Caf\u00e9 is not ASCII.", mode="ar")
