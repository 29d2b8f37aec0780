"""The embedded voice's sequence format: training streams and the decoder's phoneme schedule agree."""

import numpy as np
import pytest
import torch

from ssd_demo import text as text_frontend
from ssd_demo.backends.vocab import VocabLayout
from ssd_demo.speech.latent_codec import LatentCodec, LatentCodecConfig
from ssd_demo.training.dataset import build_examples
from ssd_demo.training.train import IGNORE, codebook_neighbours, collate, with_neighbour_runs, with_noisy_speech_inputs

LAYOUT = VocabLayout(n_phonemes=len(text_frontend.SYMBOLS), n_speech=16)


def replay(layout: VocabLayout, symbols: list[int], stream: list[int], max_frames: int = 120) -> list[int]:
    """Walk a stream through the schedule, feeding only what the model would sample."""
    schedule = layout.schedule(symbols, max_frames)
    state, out, i = schedule.initial_state(), [], 0
    while i < len(stream):
        token = stream[i]
        out.append(token)
        state, forced = schedule.advance(state, token)
        out += forced
        i += 1 + len(forced)
    return out


def test_schedule_reproduces_every_inserted_token_of_a_training_stream():
    symbols = [7, 20, 3, 40]
    frames = [[1, 2], [], [3, 3, 3], [4]]
    stream = LAYOUT.stream(symbols, frames)
    prompt = LAYOUT.prompt(symbols)
    assert prompt == [LAYOUT.bos_id, *LAYOUT.phoneme_ids(symbols), LAYOUT.speech_start_id, LAYOUT.phoneme_ids(symbols)[0]]
    assert stream[-2:] == [LAYOUT.next_phoneme_id, LAYOUT.end_of_speech_id]
    assert replay(LAYOUT, symbols, stream) == stream
    assert LAYOUT.codes(stream) == [c for f in frames for c in f]


def test_lookahead_inserts_each_phonemes_right_neighbours_and_the_schedule_follows():
    layout = VocabLayout(n_phonemes=len(text_frontend.SYMBOLS), n_speech=16, lookahead=2)
    symbols = [7, 20, 3, 40]
    p = layout.phoneme_ids(symbols)
    frames = [[1, 2], [], [3, 3, 3], [4]]
    stream = layout.stream(symbols, frames)
    bos, nxt, speech = layout.bos_id, layout.next_phoneme_id, layout.speech_offset
    assert layout.prompt(symbols) == [bos, *p, layout.speech_start_id, p[0], p[1], p[2]]
    assert stream == [speech + 1, speech + 2, nxt, p[1], p[2], p[3], nxt, p[2], p[3], bos,
                      speech + 3, speech + 3, speech + 3, nxt, p[3], bos, bos, speech + 4, nxt, layout.end_of_speech_id]
    assert replay(layout, symbols, stream) == stream  # the decoder inserts exactly what training saw
    assert layout.codes(stream) == [c for f in frames for c in f]
    schedule = layout.schedule(symbols[:2], max_frames=2)  # a phoneme held too long ends with its lookahead
    state, forced = schedule.advance(schedule.advance(schedule.initial_state(), speech)[0], speech)
    assert forced == (nxt, p[1], bos, bos)
    # The layout travels in voice.json; one without the field (an older voice) reads as no lookahead.
    assert VocabLayout.from_dict(layout.to_dict()) == layout
    older = {k: v for k, v in layout.to_dict().items() if k != "lookahead"}
    assert VocabLayout.from_dict(older).lookahead == 0


def test_a_phoneme_that_lasts_too_long_is_ended_by_the_schedule():
    schedule = LAYOUT.schedule([7, 20], max_frames=3)
    speech = LAYOUT.speech_offset
    state = schedule.initial_state()
    state, forced = schedule.advance(state, speech)
    state, forced = schedule.advance(state, speech)
    assert forced == ()
    state, forced = schedule.advance(state, speech)
    assert forced == (LAYOUT.next_phoneme_id, LAYOUT.phoneme_ids([20])[0])
    state, forced = schedule.advance(state, LAYOUT.next_phoneme_id)
    assert forced == (LAYOUT.end_of_speech_id,)


def test_the_first_phoneme_has_its_own_cap_for_the_opening_pause():
    schedule = LAYOUT.schedule([7, 20, 3], max_frames=4, first_max_frames=2)
    speech, nxt = LAYOUT.speech_offset, LAYOUT.next_phoneme_id
    state, forced = schedule.advance(schedule.initial_state(), speech)
    assert forced == ()
    state, forced = schedule.advance(state, speech)  # the first phoneme's second frame: ended
    assert forced[0] == nxt and state == (1, 0)
    for _ in range(3):  # the second phoneme runs to the general cap
        state, forced = schedule.advance(state, speech)
        assert forced == ()
    state, forced = schedule.advance(state, speech)
    assert forced[0] == nxt and state == (2, 0)
    # Without its own cap the first phoneme has the general one
    assert LAYOUT.schedule([7, 20], max_frames=4).first_max_frames == 4


def test_allowed_ids_exclude_what_the_schedule_inserts():
    allowed = set(LAYOUT.allowed_ids())
    assert LAYOUT.next_phoneme_id in allowed
    assert LAYOUT.end_of_speech_id not in allowed
    assert not allowed & set(LAYOUT.phoneme_ids(range(LAYOUT.n_phonemes)))


def test_training_example_from_the_teacher_round_trips_through_the_schedule(tmp_path):
    # A rendered chunk (symbols, frames per symbol, latents) -> nearest centroids -> prompt and stream:
    # the schedule reinserts exactly what the stream holds, and every latent frame becomes one speech token.
    import json

    symbols, frames = [12, 40, 3, 51], [3, 0, 2, 4]
    rng = np.random.default_rng(0)
    codebook = rng.normal(size=(16, 192)).astype(np.float32)
    latents = codebook[rng.integers(0, 16, sum(frames))] + rng.normal(0, 1e-3, (sum(frames), 192)).astype(np.float32)
    np.savez(tmp_path / "shard0000.npz", z=latents.astype(np.float16))
    (tmp_path / "shard0000.json").write_text(json.dumps([{"sentence": 0, "chunk": 0, "text": "x", "symbols": symbols,
                                                            "frames": frames, "seconds": 0.1}]))
    decoder = tmp_path / "decoder.onnx"
    decoder.write_bytes(b"")  # never run here: only the codebook is used
    codec = LatentCodec(LatentCodecConfig(codebook_size=16), codebook, decoder)
    layout = VocabLayout(n_phonemes=60, n_speech=16)
    [example] = build_examples([tmp_path / "shard0000.npz"], codec, layout, max_frames=3)
    assert example["prompt"] == layout.prompt(symbols)
    assert replay(layout, symbols, example["speech"], max_frames=3) == example["speech"]
    # Frames past max_frames - 1 are dropped (the decoder ends such a symbol itself).
    assert layout.codes(example["speech"]) == codec.encode_latents(latents)[[0, 1, 3, 4, 5, 6]].tolist()


def test_labels_skip_the_prompt_and_the_inserted_tokens():
    symbols = [7, 20]
    example = {"prompt": LAYOUT.prompt(symbols), "speech": LAYOUT.stream(symbols, [[1], [2, 3]])}
    batch = collate([example], LAYOUT)
    labels = batch["labels"][0].tolist()
    kept = [t for t in labels if t != IGNORE]
    n_prompt = len(example["prompt"])
    assert all(t == IGNORE for t in labels[:n_prompt])
    # Predicted: speech, NEXT, speech, speech, NEXT; inserted (ignored): the second phoneme and END.
    assert kept == [LAYOUT.speech_offset + 1, LAYOUT.next_phoneme_id, LAYOUT.speech_offset + 2,
                    LAYOUT.speech_offset + 3, LAYOUT.next_phoneme_id]
    assert torch.equal(batch["input_ids"][0], torch.tensor(example["prompt"] + example["speech"]))


def test_noisy_speech_inputs_replace_only_speech_tokens_and_keep_the_labels():
    symbols = [7, 20, 9]
    example = {"prompt": LAYOUT.prompt(symbols), "speech": LAYOUT.stream(symbols, [[1, 2, 3] * 20, [4] * 30, [5] * 40])}
    batch = collate([example], LAYOUT)
    noisy = with_noisy_speech_inputs(batch, LAYOUT, 0.5, torch.Generator().manual_seed(0))
    before, after = batch["input_ids"][0], noisy["input_ids"][0]
    speech = before >= LAYOUT.speech_offset
    assert torch.equal(before[~speech], after[~speech])  # prompt, NEXT, inserted phonemes, END untouched
    assert (after[speech] >= LAYOUT.speech_offset).all() and (after[speech] < LAYOUT.vocab_size).all()
    changed = float((before[speech] != after[speech]).float().mean())
    assert 0.3 < changed < 0.55  # half drawn again, some of those by chance the same code (16 codes)
    assert torch.equal(noisy["labels"], batch["labels"]) and torch.equal(noisy["attention_mask"], batch["attention_mask"])
    assert torch.equal(with_noisy_speech_inputs(batch, LAYOUT, 0.0)["input_ids"], batch["input_ids"])


def test_neighbour_runs_swap_whole_runs_for_nearby_codes_and_leave_the_rest():
    # 16 centroids on a line: each code's two nearest others are the codes beside it.
    codebook = np.arange(16, dtype=np.float32)[:, None] * np.array([[1.0, 0.0]], dtype=np.float32)
    near = codebook_neighbours(codebook, 2)
    assert sorted(near[5].tolist()) == [4, 6] and near[0].tolist() == [1, 2]
    symbols = [7, 20, 9]
    runs = [[3] * 5 + [8] * 4, [12] * 6, [1] * 3 + [14] * 2]
    example = {"prompt": LAYOUT.prompt(symbols), "speech": LAYOUT.stream(symbols, runs)}
    batch = collate([example, example], LAYOUT)
    before = batch["input_ids"]
    swapped = 0
    for seed in range(20):
        after = with_neighbour_runs(batch, LAYOUT, 0.5, near, torch.Generator().manual_seed(seed))["input_ids"]
        speech = before >= LAYOUT.speech_offset
        assert torch.equal(before[~speech], after[~speech])  # prompt, NEXT, inserted phonemes, END untouched
        codes_before, codes_after = before - LAYOUT.speech_offset, after - LAYOUT.speech_offset
        for row in range(2):
            positions = speech[row].nonzero().flatten().tolist()
            for start, length in ((positions[0], 5), (positions[5], 4), (positions[9], 6)):
                run = codes_after[row, start : start + length]
                assert (run == run[0]).all()  # a whole run keeps one code, swapped or not
                original = int(codes_before[row, start])
                assert int(run[0]) == original or int(run[0]) in near[original].tolist()
                swapped += int(run[0]) != original
    assert 20 * 2 * 3 * 0.3 < swapped < 20 * 2 * 3 * 0.7  # about half of the runs
    unchanged = with_neighbour_runs(batch, LAYOUT, 0.0, near)
    assert torch.equal(unchanged["input_ids"], before) and torch.equal(unchanged["labels"], batch["labels"])


def test_codes_relative_to_the_phoneme_follow_the_symbol_being_said_piece_by_piece():
    """With codes relative to the phoneme (`symbol_codes`), each code names a row of its symbol's codebook: the
    prompt's first symbol, then the first phoneme inserted after each NEXT (not its lookahead); END stops. Given
    the stream in pieces (as a streamed chunk's rounds come), the rows are the same."""
    from ssd_demo.backends.vocab import SymbolCodes

    layout = VocabLayout(n_phonemes=len(text_frontend.SYMBOLS), n_speech=16, lookahead=2, symbol_codes=True)
    symbols, frames = [7, 20, 3], [[1, 2], [15], [0, 4, 4]]
    prompt, stream = layout.prompt(symbols), layout.stream(symbols, frames)
    assert layout.first_symbol(prompt) == 7
    rows = [symbol * 16 + code for symbol, codes in zip(symbols, frames) for code in codes]
    assert SymbolCodes(layout, layout.first_symbol(prompt))(stream) == rows
    pieces, reader = [], SymbolCodes(layout, 7)
    for start in range(0, len(stream), 3):
        pieces += reader(stream[start : start + 3])
    assert pieces == rows
    assert SymbolCodes(layout, 7)(stream + layout.speech_ids([5, 6])) == rows  # nothing after END
    assert VocabLayout.from_dict(layout.to_dict()) == layout  # voice.json keeps it
    assert not VocabLayout.from_dict({k: v for k, v in layout.to_dict().items() if k != "symbol_codes"}).symbol_codes


def test_symbol_codebooks_encode_each_frame_among_its_own_symbols_centroids():
    from ssd_demo.speech.latent_codec import fit_symbol_codebooks

    rng = np.random.default_rng(0)
    # Three symbols' frames around their own centres; symbol 3 is never seen; symbol 2 has two distinct frames.
    centres = rng.normal(0, 4, (2, 192)).astype(np.float32)
    z = np.concatenate([centres[0] + rng.normal(0, 1, (300, 192)), centres[1] + rng.normal(0, 1, (300, 192)),
                        np.repeat(centres[:1] * 2, 5, axis=0), np.repeat(centres[1:] * 2, 5, axis=0)]).astype(np.float32)
    symbols = np.array([0] * 300 + [1] * 300 + [2] * 10)
    table = fit_symbol_codebooks(z, symbols, n_symbols=4, codebook_size=8, seed=0)
    assert table.shape == (32, 192)
    assert {tuple(row) for row in table[16:24]} == {tuple(centres[0] * 2), tuple(centres[1] * 2)}  # repeated
    codec = LatentCodec(LatentCodecConfig(codebook_size=8, latent_dim=192, symbols=4), table, __file__)
    codes = codec.encode_latents(z, symbols)
    assert codes.min() >= 0 and codes.max() < 8
    for symbol in (0, 1, 2):  # nearest among its own codebook, whatever is nearer in another's
        own = table[symbol * 8 : symbol * 8 + 8]
        frames = symbols == symbol
        brute = ((z[frames][:, None, :] - own[None]) ** 2).sum(-1).argmin(1)
        assert np.array_equal(codes[frames], brute)
    with pytest.raises(ValueError, match="one symbol per frame"):
        codec.encode_latents(z)
