"""A short chunk spoken after a lead-in that is never heard (`backends.lead_in`): the prompt, the codes the codec is
given, whole and streamed, and the voices it applies to."""

import json

import numpy as np
import pytest

from ssd_demo.backends.embedded import DEFAULT_PATH, EmbeddedBackend, load_synthesizer
from ssd_demo.backends.lead_in import LeadIn, LeadInCut
from ssd_demo.backends.vocab import SymbolCodes, VocabLayout

needs_voice = pytest.mark.skipif(not (DEFAULT_PATH / "voice.json").exists(), reason="embedded voice not shipped")
LAYOUT = VocabLayout(n_phonemes=10, n_speech=8, lookahead=2)
NEXT, END, OFF, PH = LAYOUT.next_phoneme_id, LAYOUT.end_of_speech_id, LAYOUT.speech_offset, LAYOUT.phoneme_offset


def stream(frames: list[list[int]], symbols: list[int]) -> list[int]:
    return LAYOUT.stream(symbols, frames)


def test_the_codes_up_to_the_lead_ins_last_next_are_kept_apart_however_the_ids_come():
    # two lead-in phonemes (codes 1 2 and 3), then the chunk's two (codes 4 5 and 6)
    ids = stream([[1, 2], [3], [4, 5], [6]], [7, 8, 2, 3])
    cut = LeadInCut(LAYOUT.codes, NEXT, 2)
    assert cut(ids) == [4, 5, 6] and cut.context == [1, 2, 3]
    cut, pieces = LeadInCut(LAYOUT.codes, NEXT, 2), []
    for token in ids:  # as a stream hands them over, one round at a time
        pieces += cut([token])
    assert pieces == [4, 5, 6] and cut.context == [1, 2, 3]
    cut = LeadInCut(LAYOUT.codes, NEXT, 2)
    assert cut(ids[:4]) == [] and cut.context == [1, 2]  # still in the lead-in
    cut = LeadInCut(LAYOUT.codes, NEXT, 9)
    assert cut(ids) == [] and cut.context == [1, 2, 3, 4, 5, 6]  # a stream that ends inside its lead-in


def test_codes_relative_to_the_phoneme_see_the_phoneme_after_the_lead_in():
    layout = VocabLayout(n_phonemes=10, n_speech=8, lookahead=2, symbol_codes=True)
    ids = layout.stream([7, 8, 2, 3], [[1, 2], [3], [4, 5], [6]])
    cut = LeadInCut(SymbolCodes(layout, 7), layout.next_phoneme_id, 2)
    assert cut(ids) == [2 * 8 + 4, 2 * 8 + 5, 3 * 8 + 6] and cut.context == [7 * 8 + 1, 7 * 8 + 2, 8 * 8 + 3]


def test_a_lead_in_needs_a_text_and_a_limit():
    with pytest.raises(ValueError):
        LeadIn("  ", 12)
    with pytest.raises(ValueError):
        LeadIn("Listen.", 0)
    assert LeadIn.from_meta(None) is None
    assert LeadIn.from_meta({"text": "Listen.", "max_words": 1}) == LeadIn("Listen.", 1)
    assert LeadIn("Listen.", 1).applies("Fantastic!") and not LeadIn("Listen.", 1).applies("No, thanks.")


@pytest.fixture(scope="module")
def backend():
    return EmbeddedBackend.from_directory(DEFAULT_PATH)


@needs_voice
def test_the_shipped_voice_says_a_word_alone_after_its_lead_in_and_more_words_as_they_are(backend):
    lead = backend.lead_in
    assert lead is not None
    prefix = backend.phonemes.ids(lead.text) + [backend.phonemes.id_map[" "]]
    # the phonemizer reads the lead-in before a word as it reads the lead-in alone, then the gap
    assert backend.phonemes.ids(f"{lead.text} Hi!") == prefix + backend.phonemes.ids("Hi!")
    short = backend.prompt_ids("Hi!")
    assert short == backend.layout.prompt(prefix + backend.phonemes.ids("Hi!"))
    for text in ("No, thanks.", "Seven purple kites drift above the harbour."):  # more than one word: as it is
        assert backend.prompt_ids(text) == backend.layout.prompt(backend.phonemes.ids(text))
    # a chunk of the text's own that opens with "Listen." (curly quotes do not end its sentence) is long, but it
    # gets the lead-in too: its own "Listen." is heard, and only the added one is cut
    own = "\u201cListen.\u201d Then she told me about her long day at work."
    assert len(backend.split_text(own)) == 1
    symbols = backend.phonemes.ids(own)
    assert not lead.applies(own) and symbols[: len(prefix)] == prefix
    assert backend.prompt_ids(own) == backend.layout.prompt(prefix + symbols)
    # the forced-token schedule covers the lead-in's phonemes too: the voice says them
    schedule = backend.forced_tokens(short)
    assert len(schedule.phonemes) == len(prefix) + len(backend.phonemes.ids("Hi!"))


@needs_voice
def test_a_short_chunks_audio_leaves_the_lead_in_out_whole_and_streamed():
    synth = load_synthesizer()
    backend = synth.backend
    result = synth.synthesize("Wait!", mode="ar", config=synth.config(seed=3))
    tokens = list(result.chunks[0].generation.tokens)
    prompt = backend.prompt_ids("Wait!")
    lead = len(backend.phonemes.ids(backend.lead_in.text)) + 1
    everything = backend.layout.codes(tokens)
    nexts = [i for i, token in enumerate(tokens) if token == backend.layout.next_phoneme_id]
    heard = backend.layout.codes(tokens[nexts[lead - 1]:])  # after the lead-in's last NEXT
    said = backend.layout.codes(tokens[:nexts[lead - 1]])  # the lead-in and its pause: the codec's context
    assert 0 < len(heard) < len(everything) and said + heard == everything
    assert np.array_equal(backend.tokens_to_audio(tokens, prompt_ids=prompt), backend.codec.decode(heard, said))
    assert len(result.audio) == len(heard) * backend.codec.hop_length  # the clip is the word alone
    pieces = list(synth.stream("Wait!", mode="ar", config=synth.config(seed=3)))
    streamed = np.concatenate([piece.audio for piece in pieces])
    assert len(streamed) == len(result.audio) and np.abs(streamed - result.audio).max() < 0.05
    # without the prompt nothing can tell the lead-in apart: every code is decoded
    assert len(backend.tokens_to_audio(tokens)) == len(everything) * backend.codec.hop_length


@needs_voice
def test_a_voice_without_a_lead_in_speaks_short_chunks_as_they_are(tmp_path):
    folder = tmp_path / "voice"
    folder.mkdir()
    for item in DEFAULT_PATH.iterdir():  # the weights linked, voice.json rewritten
        if item.name != "voice.json":
            (folder / item.name).symlink_to(item)
    meta = json.loads((DEFAULT_PATH / "voice.json").read_text())
    meta.pop("lead_in")
    (folder / "voice.json").write_text(json.dumps(meta))
    backend = EmbeddedBackend.from_directory(folder)
    assert backend.lead_in is None and not backend.codec_reads_prompt
    assert backend.prompt_ids("Hi!") == backend.layout.prompt(backend.phonemes.ids("Hi!"))
