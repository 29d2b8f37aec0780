"""The text front end: hygiene, refusals, phonemes from eSpeak NG's events, and the chunker."""

import pytest

from ssd_demo import TextError
from ssd_demo.text import espeak
from ssd_demo import text


def symbols(ids: list[int]) -> list[str]:
    return [text.SYMBOLS[i] for i in ids]


def test_sentence_becomes_phoneme_symbols_with_stress_and_pauses():
    spoken = symbols(text.phonemes("Hello, world!"))
    assert spoken[:4] == ["h", "ə", "l", "ˈoʊ"]
    assert "_," in spoken and spoken[-1] == "_!"
    assert {"w", "ˈɜː", "l", "d"} <= set(spoken)


def test_numbers_are_spoken_as_words():
    assert text.phonemes("I have 42 apples.") == text.phonemes("I have forty-two apples.")


def test_question_and_statement_end_with_their_pause():
    assert symbols(text.phonemes("Is it raining?"))[-1] == "_?"
    assert symbols(text.phonemes("It is raining."))[-1] == "_."


def test_unknown_words_are_pronounced():
    assert len(text.phonemes("The zorblaxian wibbleflonk.")) > 15


def test_whitespace_and_control_characters_are_cleaned():
    assert text.clean_text("  Good \t morning \n") == "Good morning"
    assert text.clean_text("Hello\x00 world") == "Hello world"  # NUL no longer cuts the text
    assert text.clean_text("a\u200bb") == "a b"  # format characters too
    assert text.phonemes("Hello\x00 world") == text.phonemes("Hello world")
    # Text pasted from a terminal: colour codes and a title sequence go whole, not as "[31m" read aloud.
    assert text.clean_text("\x1b[31mRed\x1b[0m alert\x1b]0;title\x07 now") == "Red alert now"
    with pytest.raises(text.TextError, match="empty"):
        text.clean_text("\x00\x07\x1b[31m\x08\x0c")


@pytest.mark.parametrize("bad, reason", [
    ("", "empty"), ("   ", "empty"), ("\n\t\x00", "empty"),
    ("你好，世界", "Latin"), ("😀🎉", "Latin"), ("!!! ???", "Latin"),
    ("x" * (text.MAX_TEXT_CHARS + 1), "at most"),
])
def test_bad_text_raises_a_specific_text_error(bad, reason):
    with pytest.raises(TextError, match=reason):
        text.phonemes(bad)


def test_text_with_some_latin_letters_is_read():
    assert len(text.phonemes("Tokyo 東京 is big.")) > 5


def test_letters_of_scripts_the_voice_would_only_name_are_left_out_and_reported():
    # eSpeak's English voice says "Chinese letter" for 你, "Hebrew shin" for ש: such letters are not spoken
    assert text.clean_text("Hello 你好 world, שלום and こんにちは!") == "Hello world, and !"
    assert text.left_out("Hello 你好 world, 你 שלום, 你好") == "你好 你 שלום"  # each word once, as written
    # A Greek letter alone is named ("alpha", "pi", "mu" of "µm"); a Greek word or Cyrillic would be spelled
    # letter by letter (with Russian letter names): left out, and said so
    assert text.clean_text("alpha α, π r², 5 µm, ΔT") == "alpha α, π r², 5 µm, ΔT"
    assert text.clean_text("Moscow Москва, Greece Ελλάδα, é ά!") == "Moscow , Greece , é ά!"
    assert text.left_out("Moscow Москва and Ελλάδα, not α") == "Москва Ελλάδα"
    assert text.left_out("Say привет and пока to Anna, молоко") == "привет пока молоко"  # no letters merged or lost
    assert text.left_out("plain English") == ""
    # emoji too (eSpeak reads them by name: "grinning face"), with their variation selectors and skin tones
    assert text.clean_text("I love pizza 🍕 and ☀️ days 👍🏽 😀!") == "I love pizza and days !"
    assert text.left_out("pizza 🍕 and ☀️ 👍🏽") == "🍕 ☀️ 👍🏽"
    assert text.clean_text("5° C, © 2024, ½ cup") == "5° C, © 2024, ½ cup"  # symbols eSpeak reads well stay
    # vowel signs and points go with their letters; look-alikes of Latin or Greek letters stay
    assert text.clean_text("नमस्ते and שָׁלוֹם, hi") == "and , hi"
    assert text.clean_text("10 µg in Hawaiʻi, 𝐛𝐨𝐥𝐝") == "10 µg in Hawaiʻi, 𝐛𝐨𝐥𝐝" and text.left_out("10 µg, ℓ") == ""
    # a sentence left without letters joins its neighbour instead of being refused as a chunk of its own
    long = "This sentence is long enough to fill a whole chunk of the voice on its own, more or less. 你好! Then more."
    chunks = [c.text for c in text.split_text(text.check_text(long))]
    assert all(any(ch.isalnum() for ch in c) for c in chunks) and " ".join(chunks) == text.check_text(long)
    assert len(text.phonemes(long)) > 10


def test_long_numbers_and_words_are_spoken_whole():
    # eSpeak drops what follows the first ~30 digits or ~100 letters of one token: nothing typed may go unspoken
    code = "1234567890" * 3
    assert text.normalize_text(f"Code {code}.") == "Code " + " ".join(code) + "."
    assert text.normalize_text("Call 555123456789.") == "Call 555123456789."  # up to 15 digits: a number
    word = "supercalifragilistic" * 25
    spoken = text.normalize_text(word)
    assert spoken.replace(" ", "") == word and max(len(w) for w in spoken.split()) <= text.LONG_WORD
    assert len(text.phonemes("7" * 60)) >= 60 * 5  # all sixty "seven"s (eSpeak alone stops at about 147 phonemes)


def test_non_string_is_refused():
    with pytest.raises(TextError):
        text.clean_text(None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "raw, spoken",
    [
        ("It takes 1.25 hours.", "It takes 1 point 2 5 hours."),
        ("It costs $12.50.", "It costs 12 dollars 50."),
        ("We have 2,000 paintings.", "We have 2000 paintings."),
        ("Meet at 9:05 or 10:00.", "Meet at 9 oh 5 or 10."),
        ("Dr. Patel left at 6 p.m. today.", "Doctor Patel left at 6 PM today."),
        # amounts as people say them: thousands separators, cents, one dollar, euros with cents
        ("It cost $1,200 in total.", "It cost 1200 dollars in total."),
        ("It cost $1,000.50, or £1,250.75.", "It cost 1000 dollars 50, or 1250 pounds 75."),
        ("Coffee is €3.50 and tea $1.", "Coffee is 3 euros 50 and tea 1 dollar."),
        ("A $1.50 fee, $2.5 per unit, €12.00.", "A 1 dollar 50 fee, 2 point 5 dollars per unit, 12 euros."),
        ("J.P.Morgan met A.Mitchell.", "J.P.Morgan met A.Mitchell."),  # not an acronym, not AM
        ("Worth $5M, $5 million, €1.5bn.", "Worth 5 million dollars, 5 million dollars, 1 point 5 billion euros."),
        ("It is $0.99, £0.50 or $0.01; pay 20$ now.", "It is 99 cents, 50 pence or 1 cent; pay 20 dollars now."),
        # clock times with seconds, and a.m./p.m./etc. that also end the sentence keep its full stop
        ("It ends at 10:00:30, lap 1:23:45.", "It ends at 10 and 30 seconds, lap 1 23 and 45 seconds."),
        ("We met at 7:30 p.m. She left.", "We met at 7 30 PM. She left."),
        ("Pears, plums, etc. They rot.", "Pears, plums, et cetera. They rot."),
        # dotted acronyms and month names are read as such, and end a sentence only where one ends
        ("The U.S. team met the U.N. in N.Y.C. on Jan. 5, 2025.",
         "The U-S team met the U-N in N-Y-C on January 5th, 2025."),
        ("He grew up in the U.S. Then he left.", "He grew up in the U-S. Then he left."),
        ("She lives on Elm St. near St. Paul, on Oak Ave., and Mill Rd.",
         "She lives on Elm Street near Saint Paul, on Oak Avenue, and Mill Road."),
        # phone numbers digit by digit, years as people say them, fractions, *emphasis*
        ("Call 555-123-4567 or (555) 123-4567.", "Call 5 5 5, 1 2 3, 4 5 6 7 or 5 5 5, 1 2 3, 4 5 6 7."),
        ("In 1999, the 1990s, 1999-2005; not 1,999 or 1500.",
         "In 19 99, the 19 90s, 19 99 to 2005; not 1999 or 1500."),
        ("Add 1/2 cup, 3/4 of it, 50/50, 24/7.", "Add 1 half cup, 3 quarters of it, 50 50, 24 7."),
        ("This is *really* good.", "This is really good."),
        # numeric dates as people say them (month first unless only day first makes a date)
        ("Due 3/14/2025.", "Due March 14th, 2025."),
        ("On 03/04/2025 at noon.", "On March 4th, 2025 at noon."),
        ("Born 21/11/1987 in Leeds", "Born November 21st, 19 87 in Leeds"),
        ("Released 2024-02-29, patched 1905-12-02.", "Released February 29th, 2024, patched December 2nd, 19 oh 5."),
        ("Not dates: 13/13/2025, 2025-13-40, 1/2/3, v1.2/3/2025.",
         "Not dates: 13/13/2025, 2025-13-40, 1/2/3, v1 point 2/3/2025."),
        ("On 14.03.2025, not 2/30/2025 or 2/29/2023, but 2/29/2024.",
         "On March 14th, 2025, not 2/30/2025 or 2/29/2023, but February 29th, 2024."),
        # a year only where a year is meant; "1800" is "18 hundred"
        ("1250 people paid 1999 euros in 1999, the 1800s, between 1850 and 1900 (1215).",
         "1250 people paid 1999 euros in 19 99, the 18 hundreds, between 18 50 and 19 hundred (12 15)."),
        ("The 1960s-1970s, since 1850, born 1987.", "The 19 60s to 19 70s, since 18 50, born 19 87."),
        # products, bullets and headings are not "asterisk" or "hash"; "#1" is a number
        ("2*3*4 is 24, 2 * 3 is 6; *bold* stays.", "2 times 3 times 4 is 24, 2 times 3 is 6; bold stays."),
        ("# Shopping * milk * eggs #1", "Shopping milk eggs number 1"),
        # phone layouts digit by digit; a hyphen between numbers is "to"
        ("Call 1-800-555-1234, 555-0199 or +44 20 7946 0958.",
         "Call 1, 800, 5 5 5, 1 2 3 4, 5 5 5, 0 1 9 9 or plus 4 4, 2 0, 7 9 4 6, 0 9 5 8."),
        ("Won 52-48, 3-4 times, pp. 12-15, $10-20, 100-2000.",
         "Won 52 to 48, 3 to 4 times, pages 12 to 15, 10 to 20 dollars, 100 to 2000."),
        # streets after a name, titles before one, initials, acronyms that would form words
        ("On Mulholland Dr. near Dr. Lee, 221B Baker St. London.",
         "On Mulholland Drive near Doctor Lee, 221B Baker Street London."),
        ("Prof. John D. Rockefeller Jr. of the W.H.O., a.k.a. Acme Inc. today.",
         "Professor John D Rockefeller Junior of the W-H-O, A-K-A Acme Inc today."),
        # versions, addresses, timestamps, clock times with leading zeros or a dot, am/pm run in
        ("Python 3.11.4 at 192.168.1.1 on 2025-03-14T10:30:00Z.",
         "Python 3 point 11 point 4 at 192 dot 168 dot 1 dot 1 on March 14th, 2025 at 10 30 U-T-C."),
        ("At 6.30 pm, 7:30pm, 09:05:30, 06:45 or 00:00; I am here.",
         "At 6 30 PM, 7 30 PM, 9 oh 5 and 30 seconds, 6 45 or midnight; I am here."),
        # two-digit years, a date after "on", days of the month as ordinals
        ("Due 3/14/25, on 3/4, Jan. 5, 5 January, Tue. 5 March.",
         "Due March 14th, 2025, on March 4th, January 5th, 5th January, Tuesday 5th March."),
        # a day before its month and year: the year's first half is not taken for a day; month abbreviations without a dot
        # a percentage or a number run into a unit is a quantity, whatever comes before it
        ("Growth of 1500%, by 1200 %, the 1500m race.", "Growth of 1500%, by 1200 %, the 1500m race."),
        ("On 5 November 1999, 4 July 1776 and 1 May 1905; Dec 25, Jan 15, 2024, Sept 2024.",
         "On 5th November 19 99, 4th July 17 76 and 1st May 19 oh 5; December 25th, January 15th, 2024, September 2024."),
        # an ordinal suffix after a month abbreviation: still a month
        ("By Mar 3rd, Dec. 25th or Sept 1st.", "By March 3rd, December 25th or September 1st."),
        # mixed numbers, cents with a leading zero, money written loosely, scales and units
        ("Add 1 1/2 cups; $1.05, $.99, $ 5, ¥500; 1.5B parameters; 5km, 2 tsp, 1 lb, 3 GB.",
         "Add 1 and a half cups; 1 dollar and 5 cents, 99 cents, 5 dollars, 500 yen; 1 point 5 billion parameters; "
         "5 kilometers, 2 teaspoons, 1 pound, 3 gigabytes."),
    ],
)
def test_amounts_times_dates_and_abbreviations_are_spelled_out(raw, spoken):
    # A dot inside a number or an abbreviation must not end a chunk; dates are read as words, not slashes.
    assert text.normalize_text(raw) == spoken


def test_events_map_onto_the_inventory_and_pauses_merge():
    spoken = "Yes, no."
    rendering = espeak.synthesize(spoken)
    track = text.events_to_track(spoken, rendering.events, rendering.duration_ms)
    assert [text.SYMBOLS[p.symbol] for p in track] == ["j", "ˈɛ", "s", "_,", "n", "ˈoʊ", "_."]
    assert all(p.end_ms >= p.start_ms for p in track)
    assert track[-1].end_ms == rendering.duration_ms
    assert all(a.end_ms == b.start_ms for a, b in zip(track, track[1:]))


PARAGRAPH = (
    "When the orchestra finished the final movement, the audience stood up and applauded for several "
    "minutes. Please call Stella and ask her to bring these things from the store: six spoons of fresh "
    "snow peas, five thick slabs of blue cheese, and maybe a snack for her brother Bob! Did she remember "
    "the 12.50 dollars - or was it Dr. Brown who paid? Thanks."
)


def test_chunks_fit_the_budget_and_lose_no_text():
    normalised = text.check_text(PARAGRAPH)
    chunks = text.split_text(normalised, budget=40)
    assert " ".join(c.text for c in chunks) == normalised
    assert len(chunks) >= 6
    assert all(len(text.phoneme_track(c.text)) <= 40 for c in chunks)


def test_chunks_split_at_sentences_before_phrases_and_pause_by_punctuation():
    normalised = text.check_text(PARAGRAPH)
    chunks = text.split_text(normalised, budget=200)
    assert [c.text[-1] for c in chunks] == [".", "!", "?", "."]  # whole sentences when they fit
    assert all(c.pause_after_ms == text.SENTENCE_PAUSE_MS for c in chunks)
    phrases = text.split_text("One two three, four five six; seven eight nine.", budget=12)
    assert [c.text for c in phrases] == ["One two three,", "four five six;", "seven eight nine."]
    assert [c.pause_after_ms for c in phrases] == [text.PHRASE_PAUSE_MS, text.PHRASE_PAUSE_MS, text.SENTENCE_PAUSE_MS]


def test_long_phrase_without_punctuation_splits_into_balanced_word_groups():
    sentence = " ".join(["banana"] * 30) + "."
    chunks = text.split_text(sentence, budget=50)
    assert " ".join(c.text for c in chunks) == sentence
    sizes = [len(c.text.split()) for c in chunks]
    assert max(sizes) - min(sizes) <= 1
    assert all(c.pause_after_ms == text.WORD_PAUSE_MS for c in chunks[:-1])


def test_decimals_and_abbreviations_do_not_end_a_chunk():
    chunks = text.split_text(text.check_text("Dr. Brown paid $3.50 at 9:30 a.m. yesterday. Then he left."), budget=200)
    assert len(chunks) == 2


def test_closing_quotes_and_brackets_stay_with_their_sentence():
    normalised = text.check_text('(Yes; really.) Next one. "Stop!" He did.')
    chunks = text.split_text(normalised, budget=6)
    assert " ".join(c.text for c in chunks) == normalised
    assert "really.)" in [c.text for c in chunks] and '"Stop!"' in [c.text for c in chunks]


def test_an_abbreviation_before_a_name_does_not_end_the_sentence():
    # "the U.S. Army" and "9 a.m. Tuesday" are one sentence; "5 lbs. See" and "the U.S. Then" are two
    chunks = text.split_text(text.check_text(
        "The U.S. Army woke at 9 a.m. Tuesday with 5 lbs. See the U.S. Then leave."), budget=200)
    assert [c.text for c in chunks] == [
        "The U-S Army woke at 9 AM Tuesday with 5 pounds.", "See the U-S.", "Then leave."]


def test_abbreviations_that_end_a_sentence_still_end_a_chunk():
    chunks = text.split_text(text.check_text("We met at 7:30 p.m. She had left the U.S. Then she came back."),
                             budget=200)
    assert [c.text for c in chunks] == ["We met at 7 30 PM.", "She had left the U-S.", "Then she came back."]
