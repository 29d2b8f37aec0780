"""The embedded voice's sequence format: training streams and the decoder's phoneme schedule agree."""

import numpy as np
import torch

from ssd_demo.text import espeak
from ssd_demo import text as text_frontend
from ssd_demo.backends.vocab import VocabLayout
from ssd_demo.speech.codec import Codec, CodecConfig
from ssd_demo.training.dataset import align, make_example
from ssd_demo.training.train import IGNORE, collate

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


def test_allowed_ids_exclude_what_the_schedule_inserts():
    allowed = set(LAYOUT.allowed_ids())
    assert LAYOUT.next_phoneme_id in allowed
    assert LAYOUT.end_of_speech_id not in allowed
    assert not allowed & set(LAYOUT.phoneme_ids(range(LAYOUT.n_phonemes)))


def test_frames_are_aligned_to_the_phoneme_sounding_at_their_centre():
    track = [text_frontend.TimedPhoneme(1, 0, 30), text_frontend.TimedPhoneme(2, 30, 35),
             text_frontend.TimedPhoneme(3, 35, 100)]
    codes = np.arange(6)  # frames centred at 0, 20, 40, 60, 80, 100 ms
    assert align(track, codes, 20.0) == [[0, 1], [], [2, 3, 4, 5]]


def test_training_example_from_espeak_round_trips_through_the_schedule():
    rng = np.random.default_rng(0)
    codec = Codec(CodecConfig(codebook_size=16), rng.normal(size=(16, 80)).astype(np.float32))
    sentence = "Hello there, Bob."
    example = make_example(sentence, espeak.synthesize(sentence), codec, LAYOUT)
    symbols = [t - LAYOUT.phoneme_offset for t in example.prompt[1:-2]]
    assert symbols == text_frontend.phonemes(sentence)  # training and inference read the same phonemes
    assert replay(LAYOUT, symbols, example.speech) == example.speech
    n_frames = len(LAYOUT.codes(example.speech))
    assert abs(n_frames - len(espeak.synthesize(sentence).audio) / 320) <= 1


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
