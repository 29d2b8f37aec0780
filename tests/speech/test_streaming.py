"""Streamed synthesis: pieces in order, totals that match, the same tokens and samples as `synthesize`,
and codec windows whose overlap-add joins stay within the stated tolerance."""

from __future__ import annotations

import numpy as np
import pytest

from ssd_demo.speech.streaming import (AudioPiece, CodecWindows, WindowCodec, WindowFeed, decode_windows,
                                      measured_timeline, playback_schedule)
from ssd_demo.speech.synthesis import Synthesizer  # noqa: E402
from support.chunking import PAUSE_MS, TEXT, ChunkingToy  # noqa: E402
from support.toy_backend import build_toy_synthesizer  # noqa: E402


@pytest.fixture(scope="module")
def synth() -> Synthesizer:
    toy = build_toy_synthesizer(max_new_tokens=24)
    return Synthesizer(ChunkingToy(24), toy.target, toy.drafts, default_draft="small")


@pytest.mark.parametrize("mode", ["ar", "speculative"])
def test_stream_yields_in_order_and_equals_synthesize(synth, mode):
    config = synth.config(seed=21)
    stream = synth.stream(TEXT, mode=mode, config=config)
    pieces = list(stream)
    whole = synth.synthesize(TEXT, mode=mode, config=config)
    result = stream.result
    assert result is not None and result.generation.tokens == whole.generation.tokens
    assert np.array_equal(np.concatenate([p.audio for p in pieces]), whole.audio)
    assert np.array_equal(result.audio, whole.audio)
    # In order, contiguous, one clock.
    assert [p.index for p in pieces] == list(range(len(pieces)))
    assert [p.start_sample for p in pieces] == [sum(len(q.audio) for q in pieces[:i]) for i in range(len(pieces))]
    assert [p.ready_seconds for p in pieces] == sorted(p.ready_seconds for p in pieces)
    assert [p.chunk_index for p in pieces] == sorted(p.chunk_index for p in pieces)
    # Three chunks: three speech pieces and two pauses between them.
    speech = [p for p in pieces if p.text]
    assert [p.text for p in speech] == [c.text for c in whole.chunks]
    assert [p.start_sample for p in speech] == [c.start_sample for c in whole.chunks]
    pauses = [p for p in pieces if not p.text]
    assert len(pauses) == 2 and all(len(p.audio) == synth.backend.sample_rate * PAUSE_MS // 1000 for p in pauses)
    # Totals: tokens and target calls so far end at the run's, and every second is charged once.
    assert pieces[-1].tokens_so_far == len(result.generation.tokens) == result.generation.stats.new_tokens
    assert pieces[-1].target_calls_so_far == result.generation.stats.target_calls
    assert sum(p.processing_seconds for p in pieces) == pytest.approx(result.total_seconds)
    assert stream.time_to_first_audio == pieces[0].ready_seconds
    timing = stream.timing()
    assert len(timing["pieces"]) == len(pieces) and timing["time_to_last_audio"] == pieces[-1].ready_seconds


@pytest.mark.parametrize("mode", ["ar", "speculative"])
def test_progress_counts_every_round_across_chunks(synth, mode):
    """`on_progress` hears the whole text's counts after every round (what the race's live counters
    show): never decreasing, many updates inside each chunk, ending at the run's totals."""
    heard: list[tuple[int, int, int]] = []  # (tokens, target calls, pieces yielded so far)
    pieces: list = []
    stream = synth.stream(TEXT, mode=mode, config=synth.config(seed=4),
                          on_progress=lambda tokens, calls: heard.append((tokens, calls, len(pieces))))
    for piece in stream:
        pieces.append(piece)
    result = stream.result
    assert heard[-1][:2] == (len(result.generation.tokens), result.generation.stats.target_calls)
    assert [h[:2] for h in heard] == sorted(h[:2] for h in heard)
    rounds = len(result.generation.steps)
    assert len(heard) == rounds  # one update per round (AR: per token)
    # Counts move before the first chunk's audio exists: the counters are live, not per chunk.
    before_first = [h for h in heard if h[2] == 0]
    assert len(before_first) == len(result.chunks[0].generation.steps) > 1
    assert before_first[-1][0] == len(result.chunks[0].generation.tokens)
    assert pieces[0].tokens_so_far == before_first[-1][0]


def test_a_closed_stream_decodes_nothing_more(synth):
    stream = synth.stream(TEXT, mode="ar", config=synth.config(seed=3))
    first = next(stream)
    stream.close()
    assert first.chunk_index == 0 and stream.result is None
    assert list(stream) == []


def test_bad_text_fails_when_the_stream_is_made(synth):
    from ssd_demo import TextError

    with pytest.raises(TextError):
        synth.stream("Fine sentence. Caf\u00e9 is not ASCII.", mode="ar")


def _piece(ready: float, seconds: float, rate: int = 10) -> AudioPiece:
    return AudioPiece(index=0, chunk_index=0, text="x", audio=np.ones(int(seconds * rate), np.float32),
                      sample_rate=rate, start_sample=0, ready_seconds=ready, processing_seconds=0.0,
                      tokens_so_far=0, target_calls_so_far=0)


def test_playback_on_the_measured_timeline():
    pieces = [_piece(1.0, 2.0), _piece(2.5, 1.0), _piece(5.0, 1.0)]
    # The second piece is ready before the first ends (no gap); the third stalls for a second.
    assert playback_schedule(pieces) == [(1.0, 3.0), (3.0, 4.0), (5.0, 6.0)]
    track = measured_timeline(pieces, 10)
    assert len(track) == 60 and not track[:10].any() and track[10:40].all()
    assert not track[40:50].any() and track[50:].all()


def _smoothing_codec(radius: int, hop: int):
    """A non-causal stand-in codec: each sample depends on the codes within `radius` codes of it."""
    def decode_all(codes: list[int]) -> np.ndarray:
        frames = np.repeat(np.asarray(codes, dtype=np.float32), hop)
        kernel = np.ones(2 * radius * hop + 1, dtype=np.float32) / (2 * radius * hop + 1)
        return np.convolve(frames, kernel, mode="same")

    def decode(before: list[int], codes: list[int]) -> np.ndarray:
        return decode_all([*before, *codes])[len(before) * hop:]

    return decode_all, decode


def test_windows_with_enough_context_and_lookahead_are_exact():
    hop, codes = 4, [int(x) for x in np.random.default_rng(0).integers(0, 50, 37)]
    decode_all, decode = _smoothing_codec(radius=2, hop=hop)
    # Exact when context covers the codec's reach and lookahead its reach plus the crossfade.
    spec = CodecWindows(window=5, context=3, lookahead=5, crossfade=6)
    pieces = [samples for samples, _, _ in decode_windows(codes, decode, hop, spec)]
    assert len(pieces) == 8 and sum(len(p) for p in pieces) == len(codes) * hop
    # Interior samples match exactly; the crossfade blends two equal signals, so it changes nothing.
    whole = decode_all(codes)
    joined = np.concatenate(pieces)
    interior = slice(3 * hop, len(whole) - 5 * hop)  # the clip's own edges see zeros past its ends
    np.testing.assert_allclose(joined[interior], whole[interior], atol=1e-5)


def test_windows_wait_for_their_lookahead_unless_final():
    hop = 2
    _, decode = _smoothing_codec(radius=1, hop=hop)
    spec = CodecWindows(window=4, context=2, lookahead=2, crossfade=2)
    codes = list(range(9))
    partial = list(decode_windows(codes, decode, hop, spec, final=False))
    assert len(partial) == 1  # window [4, 8) needs codes up to 10
    samples, tail, start = partial[-1]
    rest = list(decode_windows(codes + [9, 10, 11], decode, hop, spec, start=start, tail=tail))
    assert sum(len(s) for s, _, _ in partial + rest) == 12 * hop


def test_growing_windows_start_short_and_grow_by_half_of_what_came_before():
    spec = CodecWindows(window=4, context=2, lookahead=2, crossfade=2, max_window=10)
    starts, start = [], 0
    while start < 60:
        starts.append((start, spec.length_at(start)))
        start += spec.length_at(start)
    assert starts[:6] == [(0, 4), (4, 4), (8, 4), (12, 6), (18, 9), (27, 10)]
    quarter = CodecWindows(window=4, context=2, lookahead=2, crossfade=2, max_window=10, growth=0.25)
    assert [quarter.length_at(start) for start in (0, 12, 16, 24, 40, 80)] == [4, 4, 4, 6, 10, 10]
    with pytest.raises(ValueError):
        CodecWindows(window=4, max_window=3)
    with pytest.raises(ValueError, match="growth"):
        CodecWindows(window=4, growth=-0.5)


@pytest.mark.parametrize("max_window", [None, 12])
def test_a_feed_of_rounds_gives_the_samples_of_all_codes_at_once(max_window):
    """Fed each round's tokens as they are committed, the windows are those of one `decode_windows` over all the
    codes: the same windows, the same samples; a window waits for its lookahead."""
    hop = 3
    _, decode = _smoothing_codec(radius=2, hop=hop)
    spec = CodecWindows(window=4, context=3, lookahead=3, crossfade=4, max_window=max_window)
    rng = np.random.default_rng(2)
    tokens = [int(x) for x in rng.integers(-3, 40, 61)]  # negative ids: markers, which carry no code
    codec = WindowCodec(lambda ids: [t for t in ids if t >= 0], decode, hop, spec)
    codes = codec.codes(tokens)
    at_once = np.concatenate([samples for samples, _, _ in decode_windows(codes, decode, hop, spec)])
    feed, pieces, position = WindowFeed(codec), [], 0
    while position < len(tokens):
        size = int(rng.integers(1, 6))  # rounds commit one token (AR) or a block (speculative)
        chunk, position = tokens[position:position + size], position + size
        new = list(feed.feed(chunk, final=position >= len(tokens)))
        decoded = sum(len(p) for p in pieces + new) // hop
        assert position >= len(tokens) or decoded == 0 or decoded + spec.lookahead <= len(feed.codes)  # lookahead first
        pieces += new
    np.testing.assert_array_equal(np.concatenate(pieces), at_once)


@pytest.fixture(scope="module")
def llasa(tmp_path_factory):
    from support.llasa_fixtures import build_llasa_family
    from ssd_demo.backends.llasa_loading import load_llasa_pair
    from ssd_demo.models.hub import LoadOptions

    family = build_llasa_family(tmp_path_factory.mktemp("llasa-stream"))
    return load_llasa_pair(str(family.target), str(family.draft), codec_ref=str(family.codec),
                           options=LoadOptions(device="cpu"))


def _stream_llasa(llasa, mode: str, windows: CodecWindows):
    backend = llasa.backend
    saved, backend.windows = backend.windows, windows
    try:
        config = llasa.config(max_new_tokens=40, seed=5, draft_len=3)
        stream = llasa.stream("Hello there, how are you?", mode=mode, config=config)
        pieces = list(stream)
        whole = llasa.synthesize("Hello there, how are you?", mode=mode, config=config)
    finally:
        backend.windows = saved
    return stream, pieces, whole


@pytest.mark.parametrize("mode", ["ar", "speculative"])
def test_llasa_streams_codec_windows_in_order(llasa, mode):
    hop = llasa.backend.hop_length
    stream, pieces, whole = _stream_llasa(llasa, mode, CodecWindows(window=6, context=6, lookahead=4, crossfade=hop))
    assert stream.result.generation.tokens == whole.generation.tokens  # tokens identical
    codes = llasa.backend.tokens_to_codes(whole.generation.tokens)
    assert len(pieces) == -(-len(codes) // 6) >= 2
    assert all(len(p.audio) == 6 * hop for p in pieces[:-1])
    streamed = np.concatenate([p.audio for p in pieces])
    assert streamed.shape == whole.audio.shape and np.isfinite(streamed).all()
    # Non-streamed synthesis is unchanged: one decode of all the codes.
    assert np.array_equal(whole.audio, llasa.backend.tokens_to_audio(whole.generation.tokens))


def test_llasa_windows_that_reach_the_whole_clip_equal_one_decode(llasa):
    # The tiny random codec's attention reaches across the whole clip, so only windows whose context and
    # lookahead cover it reproduce one decode; the crossfade then blends equal signals.
    hop = llasa.backend.hop_length
    _, pieces, whole = _stream_llasa(llasa, "ar", CodecWindows(window=6, context=64, lookahead=64, crossfade=hop))
    assert len(pieces) >= 2
    np.testing.assert_allclose(np.concatenate([p.audio for p in pieces]), whole.audio, atol=1e-6)
