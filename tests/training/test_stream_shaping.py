"""Training streams shaped against the teacher's rare long pauses: the opening pause cut to its common length,
and how long a voice may hold one phoneme (the longest the teacher held one in training, plus a margin)."""

import json

import numpy as np
import pytest

from ssd_demo.backends.vocab import VocabLayout
from ssd_demo.training.dataset import (longest_opening, longest_symbol, pack, phoneme_caps, symbol_frame_cap,
                                       trim_leading_run)

LAYOUT = VocabLayout(n_phonemes=10, n_speech=16, lookahead=2)


def _streams(*rows: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Packed training streams, one per row of per-phoneme code lists (phoneme i is symbol i)."""
    return pack([LAYOUT.stream(list(range(len(frames))), frames) for frames in rows])


def test_longest_symbol_counts_frames_between_phoneme_ends_within_each_row():
    speech, offsets = _streams([[1, 2], [3] * 7, [4]], [[5] * 3, [6, 7]])
    assert longest_symbol(speech, offsets, LAYOUT) == 7
    # The first phoneme's frames open a row: the previous row's tail is not added to them.
    speech, offsets = _streams([[1] * 4], [[2] * 5, [3]])
    assert longest_symbol(speech, offsets, LAYOUT) == 5
    assert longest_symbol(*_streams([[9] * 12]), LAYOUT) == 12
    assert longest_symbol(np.zeros(0, np.int32), np.zeros(1, np.int64), LAYOUT) == 0


def test_longest_opening_counts_each_rows_first_phoneme_only():
    speech, offsets = _streams([[1, 2], [3] * 7], [[5] * 3, [6, 7]], [[2] * 4])
    assert longest_opening(speech, offsets, LAYOUT) == 4


def test_symbol_frame_cap_leaves_a_margin_above_the_longest():
    assert symbol_frame_cap(55) == 66 and symbol_frame_cap(10, margin=0.0) == 10 and symbol_frame_cap(7) == 9


def test_the_shipped_voice_caps_phonemes_at_its_training_data():
    """The shipped voice.json's caps are the ones its corpus gives as trained on (opening pauses cut), far under
    the 200 frames a phoneme once could hold (2.3 s of silence before the first word)."""
    from ssd_demo.backends.embedded import DEFAULT_PATH, load_synthesizer

    data = DEFAULT_PATH.parent / "teacher_voice" / "dataset.npz"
    if not (DEFAULT_PATH / "voice.json").exists() or not data.exists():
        pytest.skip("embedded voice or its corpus not shipped")
    stored = np.load(data)
    meta = json.loads(str(stored["meta"]))
    layout = VocabLayout.from_dict(meta["layout"])
    voice = json.loads((DEFAULT_PATH / "voice.json").read_text())
    flat, offsets = stored["train_speech"], stored["train_speech_offsets"]
    rows = [trim_leading_run(flat[offsets[i]:offsets[i + 1]].tolist(), layout, voice["budget"]["leading_run"])
            for i in range(len(offsets) - 1)]
    caps = phoneme_caps(*pack(rows), layout)
    assert {k: voice[k] for k in caps} == caps
    assert caps["max_opening_frames"] < caps["max_symbol_frames"] < 100
    # and the voice decodes with them
    backend = load_synthesizer().backend
    schedule = backend.forced_tokens(backend.prompt_ids("Could you pass me the salt?"))
    assert (schedule.max_frames, schedule.first_max_frames) == (caps["max_symbol_frames"], caps["max_opening_frames"])


def test_trim_leading_run_cuts_only_a_long_opening_pause():
    o = LAYOUT.speech_offset
    stream = LAYOUT.stream([0, 1], [[7] * 9 + [3, 3], [7] * 9])
    trimmed = trim_leading_run(stream, LAYOUT, keep=5)
    assert trimmed == LAYOUT.stream([0, 1], [[7] * 5 + [3, 3], [7] * 9])  # the later run of 7 is a phoneme's own
    assert trimmed[:6] == [o + 7] * 5 + [o + 3]
    short = LAYOUT.stream([0], [[7, 7, 3]])
    assert trim_leading_run(short, LAYOUT, keep=5) == short
    assert trim_leading_run(trimmed, LAYOUT, keep=5) == trimmed  # idempotent: a dataset cut twice is cut once
    # A stream that opens with NEXT (a first phoneme of no frames) has no pause to cut.
    empty = LAYOUT.stream([0, 1], [[], [7] * 9])
    assert trim_leading_run(empty, LAYOUT, keep=2) == empty
