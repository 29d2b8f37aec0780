"""The text front end: phonemes for ordinary English, clear errors for text that cannot be spoken."""

import pytest

from ssd_demo import TextError
from ssd_demo import text


def test_sentence_becomes_phoneme_ids():
    ids = text.text_to_ids("Hello, world!")
    symbols = "".join(text.SYMBOLS[i] for i in ids)
    assert "h" in symbols and "w" in symbols
    assert "," in symbols and symbols.endswith("!")
    assert all(0 <= i < len(text.SYMBOLS) for i in ids)


def test_numbers_are_spoken_as_words():
    digits = text.phonemize("I have 42 apples.")
    words = text.phonemize("I have forty-two apples.")
    assert "4" not in digits
    assert digits.replace(" ", "").replace("-", "") == words.replace(" ", "").replace("-", "")


def test_question_keeps_its_mark_and_differs_from_statement():
    assert text.text_to_ids("Is it raining?")[-1] == text.SYMBOL_TO_INDEX["?"]
    assert text.text_to_ids("It is raining.")[-1] == text.SYMBOL_TO_INDEX["."]


def test_unknown_words_are_pronounced():
    ids = text.text_to_ids("The zorblaxian wibbleflonk.")
    assert len(ids) > 10


def test_whitespace_is_normalised():
    assert text.text_to_ids("  Good   morning \n") == text.text_to_ids("Good morning")


@pytest.mark.parametrize("bad", ["", "   ", "\n\t", "!!! ???", "...", "x" * (text.MAX_TEXT_CHARS + 1)])
def test_bad_text_raises_text_error(bad):
    with pytest.raises(TextError):
        text.text_to_ids(bad)


def test_text_error_is_a_value_error_with_a_message():
    with pytest.raises(ValueError, match="at most"):
        text.check_text("word " * 100)


def test_non_string_is_refused():
    with pytest.raises(TextError):
        text.check_text(None)  # type: ignore[arg-type]


def test_batched_phonemes_stay_aligned_with_their_texts():
    # A batched phonemizer call once shifted lines against inputs around "1.5" and ":";
    # the corpus would then pair each text with another sentence's audio.
    texts = ["It takes 1.5 hours to reach the garden.", "Chapter 2: the wooden mouse.", "Why?", "Hello, world!"]
    assert text.phonemize_many(texts) == [text.phonemize(t) for t in texts]


@pytest.mark.parametrize(
    "raw, spoken",
    [
        ("It takes 1.25 hours.", "It takes 1 point 2 5 hours."),
        ("It costs $12.50.", "It costs 12 dollars 50."),
        ("We have 2,000 paintings.", "We have 2000 paintings."),
        ("Meet at 9:05 or 10:00.", "Meet at 9 oh 5 or 10."),
        ("Dr. Patel left at 6 p.m. today.", "Doctor Patel left at 6 p m today."),
    ],
)
def test_numbers_with_inner_punctuation_are_spelled_out(raw, spoken):
    # Otherwise the phonemizer's punctuation split reads "1.25" as "one. twenty-five",
    # unlike the audio eSpeak renders for the same text.
    assert text.normalize_text(raw) == spoken
    assert "." not in text.phonemize(raw)[:-1]
