"""CosyVoice 2's chunking is total: every string gives chunks within twice the token budget, no chunks, or a
`TextError`; never another exception. Budgets are measured with a tiny byte-level BPE built offline."""

from __future__ import annotations

import random
import time

import pytest

from support.cosyvoice2 import bpe_token_count
from ssd_demo.backends.cosyvoice2.text_norm import speakable_chunks
from ssd_demo.errors import InputError, TextError


@pytest.fixture(scope="module")
def count():
    return bpe_token_count()


@pytest.mark.parametrize("text", ["", " ", "   \n\t ", "...", "!?;:", " , - ", "\u3000"])
def test_text_with_nothing_to_say_gives_no_chunks(count, text):
    assert speakable_chunks(text, count) == []


@pytest.mark.parametrize("mode", ["default", "official"])
def test_control_characters_and_invisible_marks_never_reach_a_chunk(count, mode):
    # As a direct caller (e.g. the draft's training data) would pass them; the backend cleans the same way.
    text = "Hello\x00world\x07\x1b[31m red 5, zero\u200bwidth \u202eoverride\ufeff end."
    chunks = speakable_chunks(text, count, mode=mode)
    assert chunks and not any(c in "".join(chunks) for c in "\x00\x07\x1b\u200b\u202e\ufeff")
    assert "zerowidth" in "".join(chunks).replace(" ", "")  # a zero-width space joins, as it did on screen


@pytest.mark.parametrize("text", ["\ud800", "a \udc00 b", "fine \udfff.", None, 5, b"bytes"])
def test_text_no_tokenizer_takes_is_a_text_error(count, text):
    with pytest.raises(TextError):
        speakable_chunks(text, count)


SPACELESS = {
    "digits and dashes": "1-" * 800 + "1",
    "a long URL": "https://example.org/" + "abc/" * 300,
    "one letter repeated": "x" * 2999,
    "words then a run": "word " * 30 + "x" * 900,
    "a run between words": "Hello there " + "q" * 700 + " and goodbye.",
    "punctuation chains": "a " + "! " * 400 + "b " + ",-" * 600,
    "combining marks": "e\u0301" * 800,
}


@pytest.mark.parametrize("name", SPACELESS)
@pytest.mark.parametrize("budget", [80, 20])
def test_no_chunk_is_over_twice_the_budget_even_without_spaces(count, name, budget):
    text = SPACELESS[name]
    chunks = speakable_chunks(text, count, max_tokens=budget)
    assert chunks and max(count(chunk) for chunk in chunks) <= 2 * budget
    assert all(not chunk[:1].isspace() or chunk.strip() for chunk in chunks)
    assert not any("\u0301" == chunk[:1] for chunk in chunks)  # a mark stays on its letter


def test_a_run_cut_inside_is_joined_back_whole(count):
    run = "x" * 2999
    chunks = speakable_chunks(run, count)
    assert len(chunks) > 1 and "".join(chunks) == run + "."  # the full stop the official split adds
    path = "files/" + "abc/" * 300  # a web address is spelt out in words ("slash"); a bare path is not
    pieces = speakable_chunks(path, count)
    assert "".join(pieces).replace(" ", "") == "".join(speakable_chunks(path, count, max_tokens=10 ** 6)).replace(" ", "")
    assert all(piece.endswith(("/", ".")) for piece in pieces)  # cut after a separator, not inside a name
    url = "https://example.org/" + "abc/" * 300
    assert all(" slash " in chunk for chunk in speakable_chunks(url, count))


def test_words_around_a_long_run_are_grouped_not_spoken_one_by_one(count):
    chunks = speakable_chunks("word " * 30 + "x" * 900, count)
    assert chunks[0].strip() == " ".join(["word"] * 30)  # before: thirty one-word chunks


# Chunks of ordinary paragraphs as the code gave them before spaceless runs were cut (budget 80, then 20):
# cutting inside runs must not move a single boundary of text that has none.
ORDINARY = {
    'The meeting starts at 10:30 on March 3rd. Bring 2 copies of the report, a pen, and your badge! Questions? Ask Dr. Smith before 5 pm.': [
        [
            'The meeting starts at ten thirty on March third. Bring two copies of the report, a pen, and your badge! Questions?',
            ' Ask Doctor Smith before five PM.',
        ],
        [
            'The meeting starts at ten',
            'thirty on March third.',
            'Bring two copies',
            'of the report,',
            'a pen, and your badge!',
            ' Questions? Ask Doctor Smith before five PM.',
        ],
    ],
    'It was a quiet morning in the village; the baker had opened at six, the church bell rang twice, and children ran along the river with their dogs, laughing, shouting, and splashing water at each other while their parents watched from the old stone bridge that had stood there for three hundred years.': [
        [
            'It was a quiet morning in the village; the baker had opened at six, the church bell rang twice,',
            'and children ran along the river with their dogs, laughing, shouting,',
            'and splashing water at each other while their parents watched from the',
            'old stone bridge that had stood there for three hundred years.',
        ],
        [
            'It was a quiet',
            'morning in the village;',
            'the baker had',
            'opened at six,',
            'the church bell',
            'rang twice,',
            'and children ran along the',
            'river with their dogs,',
            'laughing, shouting,',
            'and splashing water at',
            'each other while their',
            'parents watched from the',
            'old stone bridge that',
            'had stood there for',
            'three hundred years.',
        ],
    ],
    'She said "go." Then he left. The price rose by 12% to $4.75 in 1999, and the shop sold 1,250 units.': [
        [
            'She said "go." Then he left. The price rose by twelve percent to four dollars seventy-five in nineteen ninety-nine, and the shop sold one thousand, two hundred and fifty units.',
        ],
        [
            'She said "go."',
            'Then he left.',
            'The price rose by',
            'twelve percent to',
            'four dollars seventy-five',
            'in nineteen ninety-nine,',
            'and the shop sold one thousand,',
            'two hundred and',
            'fifty units.',
        ],
    ],
    'Line one.\nLine two follows here, with a comma; and a semicolon: then a colon. Line one.\nLine two follows here, with a comma; and a semicolon: then a colon. Line one.\nLine two follows here, with a comma; and a semicolon: then a colon. ': [
        [
            'Line one.\nLine two follows here, with a comma; and a semicolon: then a colon. Line one.\nLine two follows here, with a comma;',
            ' and a semicolon: then a colon. Line one.\nLine two follows here, with a comma; and a semicolon: then a colon.',
        ],
        [
            'Line one.',
            'Line two follows here,',
            'with a comma;',
            'and a semicolon: then a colon.',
            'Line one.',
            'Line two follows here,',
            'with a comma;',
            ' and a semicolon: then a colon.',
            'Line one.',
            'Line two follows here,',
            'with a comma;',
            'and a semicolon: then a colon.',
        ],
    ],
}


def test_ordinary_paragraphs_chunk_exactly_as_before(count):
    for text, expected in ORDINARY.items():
        assert [speakable_chunks(text, count, max_tokens=budget) for budget in (80, 20)] == expected


def _random_string(rng: random.Random) -> str:
    pools = [
        "abcdefghijklmnopqrstuvwxyz ABCXYZ",
        "0123456789", " \t\n\r\x0b\x0c", ".,;:!?-—–'\"()[]/\\@#$%&*+=<>|~^_`{}",
        "".join(map(chr, range(0, 32))) + "\x7f\x85\u2028\u2029\u200b\ufeff",
        "\ud800\udbff\udc00\udfff",  # lone surrogates
        "你好世界今天是年月日", "مرحبا بالعالم٠١٢٣٤٥", "Привет мир", "नमस्ते१२३", "こんにちはカタカナ",
        "😀🎉👍🏽\u200d", "é\u0301\u0308ñ", "½¼¾⅓⅔°²³¢€£¥", "١٢٣٤٥٦٧٨٩٠۱۲۳",
    ]
    kind = rng.random()
    if kind < 0.05:
        return ""
    if kind < 0.1:
        return "".join(rng.choice(" \t\n\u3000\xa0") for _ in range(rng.randint(1, 20)))
    parts = []
    for _ in range(rng.randint(1, 8)):
        shape = rng.random()
        if shape < 0.15:  # a long digit run, plain or with separators
            sep = rng.choice(["", "-", ",", ".", " ", ":", "/"])
            parts.append(sep.join(str(rng.randint(0, 999)) for _ in range(rng.randint(5, 80))))
        elif shape < 0.3:  # a long spaceless run
            parts.append(rng.choice(pools[0].replace(" ", "") + "/.-_") * rng.randint(50, 300))
        else:
            pool = rng.choice(pools)
            parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 60))))
    return rng.choice(["", " "]).join(parts)[:600]  # the long cases are SPACELESS above


#: Strings fuzzed in each normaliser mode: the official mode runs wetext's English grammar on every string,
#: the default only on those with a digit, so it gets fewer.
FUZZ_STRINGS = {"default": 10_000, "official": 2_000}


@pytest.mark.slow  # the default mode about 100 s of CPU (half of it in the Chinese grammar), the official 45 s
@pytest.mark.parametrize("mode", FUZZ_STRINGS)
def test_random_strings_give_chunks_within_the_cap_or_a_typed_error(count, mode):
    rng = random.Random(20250807)
    started, refused, strings = time.process_time(), 0, FUZZ_STRINGS[mode]  # this process's time only
    for _ in range(strings):
        text = _random_string(rng)
        budget = 80  # the backend's; 20 is in the tests above
        try:
            chunks = speakable_chunks(text, count, max_tokens=budget, mode=mode)
        except (TextError, InputError):
            refused += 1
            continue
        except Exception as error:  # noqa: BLE001 -- the point of the test
            pytest.fail(f"{type(error).__name__} on {text!r}: {error}")
        over = [chunk for chunk in chunks if count(chunk) > 2 * budget]
        assert not over, f"{text!r}: chunks over {2 * budget} tokens: {over!r}"
        assert all(chunk.strip() for chunk in chunks)
    assert 0 < refused < strings  # surrogates are refused, the rest is chunked
    assert time.process_time() - started < 180
