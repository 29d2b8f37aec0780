"""English text -> clean text -> chunks -> timed phoneme tokens, for the embedded voice.

1. `clean_text`: Unicode NFC, control characters (NUL included) become spaces, whitespace collapses;
   text with no Latin letter or digit is refused (the voice speaks English only); letters of scripts
   the English voice can only name ("Chinese letter") and emoji are left out, and `left_out` says which.
2. `normalize_text`: money, decimals, clock times, numeric dates and abbreviations with inner dots are spelled
   out, so that a dot inside "12.50" or "Dr." is never read as the end of a sentence.
3. `split_text`: sentences, then phrases at , ; : and dashes, then balanced word groups, until
   every chunk fits a phoneme budget. Joining the chunk texts with single spaces gives back the
   normalised text exactly: nothing is dropped.
4. `phonemes`: eSpeak NG's phoneme events (`ssd_demo.espeak`) mapped onto the fixed inventory
   `SYMBOLS` below: one token per sound (stress marks part of the vowel), and one pause token per
   pause, labelled with the punctuation that caused it. Training uses the same events with their
   start times (`phoneme_track`), so training and inference read phonemes the same way.
"""

from __future__ import annotations

import calendar
import re
import unicodedata
from dataclasses import dataclass

from . import espeak
from .errors import TextError


#: Longest accepted text, in characters (a few paragraphs; it is spoken chunk by chunk).
MAX_TEXT_CHARS = 3000

#: Default chunk budget in phoneme tokens (pauses included); see docs/benchmarks.md for how it was chosen.
CHUNK_PHONEMES = 90

#: Most chunks one text may take: 3,000 characters of prose take about 70, but spelled-out digits take
#: several phonemes per character, and the character limit alone would no longer bound the work.
MAX_CHUNKS = 120

PAUSE = "_"
PAUSE_MARKS = ",.?!;:"
PAUSES = (PAUSE,) + tuple(PAUSE + mark for mark in PAUSE_MARKS)

CONSONANTS = (
    "b", "d", "f", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "x", "z",
    "ç", "ð", "ŋ", "ɡ", "ɬ", "ɹ", "ɾ", "ʃ", "ʒ", "ʔ", "θ", "dʒ", "tʃ",
)
#: Vowels and syllabic consonants: each also appears with primary (ˈ) and secondary (ˌ) stress.
VOWELS = (
    "a", "e", "i", "o", "æ", "ɐ", "ɑ", "ɔ", "ə", "ɚ", "ɛ", "ɜ", "ɪ", "ʊ", "ʌ", "ᵻ",
    "iː", "uː", "ɑː", "ɔː", "ɜː", "aɪ", "aʊ", "eɪ", "oʊ", "ɔɪ", "iə", "ɛɹ", "ɪɹ", "ʊɹ", "ɑːɹ", "ɔːɹ",
    "aɪɚ", "aɪə", "əl", "n̩", "ɑ̃",
)
STRESS = ("", "ˈ", "ˌ")

#: The phoneme inventory, in id order. Fixed in code so that ids never depend on a corpus.
SYMBOLS: tuple[str, ...] = PAUSES + CONSONANTS + tuple(mark + vowel for vowel in VOWELS for mark in STRESS)
SYMBOL_TO_INDEX = {symbol: index for index, symbol in enumerate(SYMBOLS)}

#: Stress-free phoneme classes (what the phoneme recognizer hears and PER counts); pauses excluded.
BASE_PHONEMES: tuple[str, ...] = CONSONANTS + VOWELS
BASE_TO_INDEX = {symbol: index for index, symbol in enumerate(BASE_PHONEMES)}

_CURRENCIES = {"$": "dollar", "£": "pound", "€": "euro"}
_SCALES = {"k": "thousand", "m": "million", "b": "billion", "bn": "billion", "t": "trillion"}


def _money(match: re.Match) -> str:
    """"$1" -> "1 dollar", "€3.50" -> "3 euros 50" (cents as a number, as people say them), "$0.99" ->
    "99 cents", "$2.5" -> "2.5 dollars"."""
    whole, decimals = match.group(2), match.group(3)
    cents = decimals is None or len(decimals) == 2
    if whole == "0" and cents and decimals and decimals != "00":
        one, many = ("penny", "pence") if match.group(1) == "£" else ("cent", "cents")
        return f"{int(decimals)} {one if int(decimals) == 1 else many}"
    unit = _CURRENCIES[match.group(1)] + ("" if whole == "1" and cents else "s")
    if not cents:
        return f"{whole}.{decimals} {unit}"
    return f"{whole} {unit}" + (f" {decimals}" if decimals and decimals != "00" else "")


def _scaled_money(match: re.Match) -> str:
    """"$5M" / "$5 million" -> "5 million dollars", "€1.5bn" -> "1.5 billion euros"."""
    scale = match.group(3)
    scale = _SCALES.get(scale.lower(), scale.lower())
    return f"{match.group(2)} {scale} {_CURRENCIES[match.group(1)]}s"


_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")


def _ordinal(day: int) -> str:
    suffix = "th" if 10 <= day % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return f"{day}{suffix}"


def _year(year: str) -> str:
    """As people say a year: "1999" -> "19 99" (eSpeak would say "nineteen hundred ninety nine"), "1905" ->
    "19 oh 5"; 2000-2099 and two-digit years are left to eSpeak ("two thousand twenty five")."""
    if len(year) == 4 and year[:2] != "20" and year[2:] != "00" and year[0] != "0":
        return f"{year[:2]} {year[2:]}" if year[2] != "0" else f"{year[:2]} oh {year[3]}"
    return year


def _date(month: str, day: str, year: str, fallback: str) -> str:
    """A real calendar date in words, or `fallback` (the text as written) for "2/30/2025" or "13/13/2025"."""
    m, d = int(month), int(day)
    full_year = int(year) if len(year) == 4 else 2000 + int(year)
    if not (1 <= m <= 12 and 1 <= d <= calendar.monthrange(full_year, m)[1]):
        return fallback
    return f"{_MONTHS[m - 1]} {_ordinal(d)}, {_year(year)}"


def _slash_date(match: re.Match) -> str:
    """"3/14/2025" -> "March 14th, 2025". Month first, as in the US, unless only day-first makes a date
    ("14/3/2025"); "4/5/2025" is read as April 5th (the order cannot be told from the digits)."""
    first, second, year = match.groups()
    if int(first) > 12 >= int(second):
        first, second = second, first
    return _date(first, second, year, match.group(0))


def _dotted_date(match: re.Match) -> str:
    """"14.03.2025" -> "March 14th, 2025": day first, as where dots are written, unless only month-first fits."""
    first, second, year = match.groups()
    if int(second) > 12 >= int(first):
        first, second = second, first
    return _date(second, first, year, match.group(0))


def _iso_date(match: re.Match) -> str:
    """"2025-03-14" -> "March 14th, 2025"."""
    year, month, day = match.groups()
    return _date(month, day, year, match.group(0))


def _clock(hours: str, minutes: str) -> str:
    """"9:05" -> "9 oh 5", "10:00" -> "10", "7:45" -> "7 45"."""
    if minutes == "00":
        return hours
    return f"{hours} oh {minutes[1]}" if minutes[0] == "0" else f"{hours} {minutes}"


def _clock_with_seconds(match: re.Match) -> str:
    """"10:00:30" -> "10 and 30 seconds" (not "10" followed by ":30")."""
    hours, minutes, seconds = match.groups()
    spoken = _clock(hours, minutes)
    if seconds == "00":
        return spoken
    return f"{spoken} and {int(seconds)} second{'' if int(seconds) == 1 else 's'}"


_DENOMINATORS = {2: ("half", "halves"), 3: ("third", "thirds"), 4: ("quarter", "quarters"), 5: ("fifth", "fifths"),
                 6: ("sixth", "sixths"), 8: ("eighth", "eighths"), 10: ("tenth", "tenths")}


def _fraction(match: re.Match) -> str:
    """"1/2" -> "1 half", "3/4" -> "3 quarters"; other pairs as two numbers ("24/7" -> "24 7", "50/50")."""
    top, bottom = int(match.group(1)), int(match.group(2))
    if bottom in _DENOMINATORS and 0 < top < bottom:
        return f"{top} {_DENOMINATORS[bottom][top > 1]}"
    return f"{match.group(1)} {match.group(2)}"


def _phone_number(match: re.Match) -> str:
    """"555-123-4567" / "(555) 123-4567" -> "5 5 5, 1 2 3, 4 5 6 7": digit by digit, a pause per group."""
    groups = [group for group in match.groups() if group]
    return ", ".join(" ".join(group) for group in groups)


def _digit_by_digit(match: re.Match) -> str:
    return " ".join(match.group(0))


def _split_long_word(match: re.Match) -> str:
    word = match.group(0)
    return " ".join(word[i : i + LONG_WORD] for i in range(0, len(word), LONG_WORD))


_ENDS_SENTENCE = re.compile(r"[\"')\]]*(?:$|\s+[\"'(\[]?[A-Z])")


def _with_sentence_end(spoken: str):
    """A rewrite for an abbreviation whose final dot may also end the sentence ("at 7 p.m. She left", "in the
    U.S."): the dot is kept when the text ends there or the next word starts with a capital, so that the
    chunker still sees a sentence end; otherwise it goes ("7 p.m. today", "U.S. troops")."""
    def rewrite(match: re.Match) -> str:
        words = spoken(match) if callable(spoken) else spoken
        ends = match.group(0).endswith(".") and _ENDS_SENTENCE.match(match.string, match.end())
        return words + ("." if ends else "")
    return rewrite


def _acronym(match: re.Match) -> str:
    """"U.S." -> "US", "n.y.c." -> "NYC": eSpeak spells capitals it cannot read as a word, letter by letter."""
    return match.group(0).replace(".", "").upper()


#: Digit runs longer than LONG_NUMBER are read digit by digit, as people read codes (eSpeak NG would name
#: them in sextillions, and from about 35 digits on it silently drops the rest); words longer than
#: LONG_WORD letters are read in pieces (eSpeak drops the end of words over about 100 letters).
LONG_NUMBER = 15
LONG_WORD = 40

_MONTH_ABBREVIATIONS = {month[:3]: month for month in _MONTHS} | {"Sept": "September"}

# A dot inside these is not a sentence end; spelling them out first keeps the chunker honest and
# gives eSpeak plain words to read. Order matters: each rule sees the text the earlier ones left.
_REWRITES: tuple[tuple[re.Pattern, object], ...] = (
    (re.compile(r"\*+([^*\s][^*]*?)\*+"), r"\1"),  # *emphasis* as typed in chat: eSpeak would say "asterisk"
    # years as people say them ("1999" -> "19 99", "1999-2005" -> "19 99 to 2005"), before thousands
    # separators go ("1,999" stays a quantity)
    (re.compile(r"(?<![\d.,:/$£€-])(1[1-9]\d\d|20\d\d)[-–](1[1-9]\d\d|20\d\d)(?![\d-])"),
     lambda m: f"{_year(m.group(1))} to {_year(m.group(2))}"),
    (re.compile(r"(?<![\d.,:/$£€-])(1[1-9]\d\d)(s?)(?![\d.,:/-]?\d)"), lambda m: _year(m.group(1)) + m.group(2)),
    (re.compile(r"(?<=\d),(?=\d{3}\b)"), ""),  # thousands separators: "$1,200.50" is one amount
    (re.compile(r"(?<![\w$£€.])(\d+(?:\.\d+)?) ?([$£€])(?![\w$£€])"), r"\2\1"),  # "20$" -> "$20"
    (re.compile(r"([$£€])(\d+(?:\.\d+)?) ?(thousand|million|billion|trillion|[kKmMbBtT]|bn)\b"), _scaled_money),
    (re.compile(r"([$£€])(\d+)(?:\.(\d+))?(?![\w.,]*[A-Za-z])"), _money),
    (re.compile(r"(?<![\d-])(?:\((\d{3})\) ?|(\d{3})[-.])(\d{3})[-.](\d{4})(?![\d-]|\.\d)"), _phone_number),
    (re.compile(rf"\d{{{LONG_NUMBER + 1},}}"), _digit_by_digit),
    (re.compile(r"(?<![\d/.-])(\d{1,2})/(\d{1,2})/(\d{4}|\d{2})(?![\d/])"), _slash_date),
    (re.compile(r"(?<![\d/.-])(\d{4})-(\d{2})-(\d{2})(?![\d-])"), _iso_date),
    (re.compile(r"(?<![\d.])(\d{1,2})\.(\d{1,2})\.(\d{4})(?!\d|\.\d)"), _dotted_date),
    (re.compile(r"(?<![\d/.])(\d{1,3})/(\d{1,3})(?![\d/])"), _fraction),
    (re.compile(r"(\d+)\.(\d+)"), lambda m: f"{m.group(1)} point {' '.join(m.group(2))}"),
    (re.compile(r"\b(\d{1,2}):(\d\d):(\d\d)\b"), _clock_with_seconds),
    (re.compile(r"\b(\d{1,2}):(\d\d)\b(?!:\d)"), lambda m: _clock(m.group(1), m.group(2))),
    # eSpeak says "AM" as letters
    (re.compile(r"\b([aApP])\.[mM]\.?(?![A-Za-z])"), _with_sentence_end(lambda m: f"{m.group(1).upper()}M")),
    (re.compile(r"\bMrs\."), "Missus"),
    (re.compile(r"\bMr\."), "Mister"),
    (re.compile(r"\bMs\."), "Miz"),
    (re.compile(r"\bDr\."), "Doctor"),
    # "on Elm St." is a street (a name before it, mid-sentence); "St. Louis" a saint
    (re.compile(r"(?<=[a-z0-9,] )([A-Z][a-z]*) (St|Ave|Rd)\."),
     _with_sentence_end(lambda m: f"{m.group(1)} {dict(St='Street', Ave='Avenue', Rd='Road')[m.group(2)]}")),
    (re.compile(r"\bSt\.(?= [A-Z])"), "Saint"),
    (re.compile(r"\b(" + "|".join(_MONTH_ABBREVIATIONS) + r")\.(?= \d)"), lambda m: _MONTH_ABBREVIATIONS[m.group(1)]),
    (re.compile(r"\b[Ee]\.g\.", ), "for example"),
    (re.compile(r"\b[Ii]\.e\.", ), "that is"),
    (re.compile(r"\betc\."), _with_sentence_end("et cetera")),
    (re.compile(r"\bvs\."), "versus"),
    (re.compile(r"\bNo\.(?= ?\d)"), "number"),
    (re.compile(r"(?<![\w.])(?:[A-Za-z]\.){2,}(?![A-Za-z])"), _with_sentence_end(_acronym)),  # U.S., N.Y.C.
    (re.compile(rf"[^\W_]{{{LONG_WORD + 1},}}"), _split_long_word),
)


#: Terminal escape sequences (colours, cursor moves) pasted from a console: removed whole, so that
#: "[31m" is not read aloud once the ESC itself has gone with the other control characters.
_TERMINAL_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")


def clean_text(text: str) -> str:
    """NFC, terminal escapes dropped, control characters to spaces, whitespace collapsed; TextError for
    unusable text."""
    if not isinstance(text, str):
        raise TextError(f"The text must be a string, got {type(text).__name__}.")
    if len(text) > MAX_TEXT_CHARS:  # counted as typed (the count a visitor can check), before any cleaning
        raise TextError(f"The text is {len(text)} characters long; the embedded voice reads at most {MAX_TEXT_CHARS} "
                        "characters at a time.")
    text = unicodedata.normalize("NFC", text)
    text = _TERMINAL_ESCAPE.sub(" ", text)
    text = "".join(" " if unicodedata.category(ch).startswith("C") else ch for ch in text)
    text = " ".join(text.split())
    if not text:
        raise TextError("The text is empty: type a sentence to synthesise.")
    if not any(ch.isdigit() or ("LATIN" in unicodedata.name(ch, "") and ch.isalpha()) for ch in text):
        raise TextError("The embedded voice speaks English: the text has no Latin letters or digits to read.")
    return " ".join("".join(" " if dropped else ch for ch, dropped in _marked(text)).split())


def _marked(text: str):
    """(character, left out?) pairs: a letter of another script or an emoji, and the marks on it (vowel signs,
    accents, emoji variation selectors)."""
    dropping = False
    for ch in text:
        if unicodedata.category(ch).startswith("M"):
            yield ch, dropping  # a combining mark goes with the letter it sits on
            continue
        dropping = _unreadable(ch)
        yield ch, dropping


#: Scripts whose letters eSpeak NG's English voice reads by name, or spells, well enough to keep.
READABLE_SCRIPTS = ("LATIN", "GREEK", "CYRILLIC")


#: Pictograph blocks (emoji, their skin tones and flags, dingbats, miscellaneous symbols).
EMOJI_BLOCKS = ((0x2600, 0x27BF), (0x2B00, 0x2BFF), (0x1F000, 0x1FAFF))


def _unreadable(ch: str) -> bool:
    """A letter of another script (CJK, kana, Arabic, Hebrew, Thai, ...): eSpeak's English voice would say
    "Chinese letter" or "Hebrew shin" for it, or switch language mid-sentence, so it is left out. Judged on
    its compatibility form, so that "µ" (Greek mu), "ℓ" or bold maths letters count as what they look like;
    modifier letters ("ʻ" in Hawaiʻi, "ʼ") are punctuation-like and stay. Emoji go too: eSpeak reads 😀
    as "grinning face" and 🍕 as "pizza", in the middle of the sentence."""
    if unicodedata.category(ch) in ("So", "Sk") and any(low <= ord(ch) <= high for low, high in EMOJI_BLOCKS):
        return True
    if not ch.isalpha() or unicodedata.category(ch) == "Lm":
        return False
    return not unicodedata.name(unicodedata.normalize("NFKC", ch)[0], "").startswith(READABLE_SCRIPTS)


def left_out(text: str) -> str:
    """The distinct letters and emoji (with their marks) `clean_text` leaves out of `text`, in order ("" when none)."""
    return "".join(dict.fromkeys(ch for ch, dropped in _marked(unicodedata.normalize("NFC", text)) if dropped))


def normalize_text(text: str) -> str:
    """Collapse whitespace and spell out money, decimals, times, dates and abbreviations with inner dots."""
    text = " ".join(text.split())
    for pattern, replacement in _REWRITES:
        text = pattern.sub(replacement, text)
    return text


def check_text(text: str) -> str:
    """`clean_text` then `normalize_text`: what the voice will actually read."""
    return normalize_text(clean_text(text))


# ---------------------------------------------------------------- phonemes


@dataclass(frozen=True)
class TimedPhoneme:
    symbol: int  # index into SYMBOLS
    start_ms: int
    end_ms: int


def _symbol_for(ipa: str) -> int | None:
    """An eSpeak IPA event -> inventory index; unknown stressed vowels fall back to their base."""
    if ipa in SYMBOL_TO_INDEX:
        return SYMBOL_TO_INDEX[ipa]
    bare = ipa.lstrip("ˈˌ")
    if bare in SYMBOL_TO_INDEX:
        return SYMBOL_TO_INDEX[bare]
    bare = "".join(ch for ch in unicodedata.normalize("NFD", bare) if not unicodedata.combining(ch))
    return SYMBOL_TO_INDEX.get(bare)  # None: a sound outside English (rare in foreign names): skipped


def _pause_symbol(text: str, text_position: int) -> int:
    """Label a pause with the punctuation just before it (eSpeak reports 1-based positions)."""
    index = text_position - 2
    for offset in range(3):
        i = index - offset
        if 0 <= i < len(text) and text[i] in PAUSE_MARKS:
            return SYMBOL_TO_INDEX[PAUSE + text[i]]
        if 0 <= i < len(text) and text[i].isalnum():
            break
    return SYMBOL_TO_INDEX[PAUSE]


def events_to_track(text: str, events: list[espeak.PhonemeEvent], duration_ms: int) -> list[TimedPhoneme]:
    """eSpeak events -> inventory symbols with [start, end) times; consecutive pauses merge into one."""
    track: list[list[int]] = []  # [symbol, start]
    for event in events:
        if event.ipa == "":
            symbol = _pause_symbol(text, event.text_position)
            if track and SYMBOLS[track[-1][0]].startswith(PAUSE):
                if track[-1][0] == SYMBOL_TO_INDEX[PAUSE]:
                    track[-1][0] = symbol  # keep the more specific label
                continue
        else:
            symbol = _symbol_for(event.ipa)
            if symbol is None:
                continue
        track.append([symbol, event.start_ms])
    ends = [start for _, start in track[1:]] + [max(duration_ms, track[-1][1] if track else 0)]
    return [TimedPhoneme(symbol, start, max(start, end)) for (symbol, start), end in zip(track, ends)]


def phoneme_track(text: str) -> list[TimedPhoneme]:
    """Timed phonemes of already normalised text, as eSpeak NG (en-us, 175 wpm) plans them."""
    rendering_events = espeak.phoneme_events(text)
    last = rendering_events[-1].start_ms if rendering_events else 0
    return events_to_track(text, rendering_events, last)


def phonemes(text: str) -> list[int]:
    """Inventory indices for `text` (cleaned and normalised here); TextError if nothing is pronounceable."""
    text = check_text(text)
    symbols = [p.symbol for p in phoneme_track(text)]
    if not any(not SYMBOLS[s].startswith(PAUSE) for s in symbols):
        raise TextError("Nothing pronounceable in the text: it needs at least one word.")
    return symbols


def base_phonemes(symbols: list[int]) -> list[int]:
    """Inventory indices -> stress-free phoneme classes, pauses dropped (the units PER counts)."""
    out = []
    for s in symbols:
        symbol = SYMBOLS[s]
        if not symbol.startswith(PAUSE):
            out.append(BASE_TO_INDEX[symbol.lstrip("ˈˌ")])
    return out


# ---------------------------------------------------------------- chunking


@dataclass(frozen=True)
class Chunk:
    text: str
    pause_after_ms: int  # silence to insert after this chunk when joining audio


#: Silence after a chunk, by how it ends: sentence end, phrase break, or a split inside a phrase.
SENTENCE_PAUSE_MS = 350
PHRASE_PAUSE_MS = 150
WORD_PAUSE_MS = 30

# After . ! ? and any closing quotes or brackets (kept with the sentence they close): fixed-width lookbehinds.
_SENTENCE_END = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"')\]])|(?<=[.!?][\"')\]]{2}))\s+")
_PHRASE_END = re.compile(r"(?<=[,;:])\s+|\s+(?=[-–—]+\s)")


def _pause_for(piece: str, is_last: bool) -> int:
    stripped = piece.rstrip("\"')] ")
    if is_last or stripped.endswith((".", "!", "?")):
        return SENTENCE_PAUSE_MS
    if stripped.endswith((",", ";", ":", "-", "–", "—")):
        return PHRASE_PAUSE_MS
    return WORD_PAUSE_MS


def split_text(text: str, budget: int = CHUNK_PHONEMES, count=None) -> list[Chunk]:
    """Chunks of normalised `text` of at most `budget` phoneme tokens each (single words may exceed it).

    `count(piece) -> int` measures a piece (default: its eSpeak phoneme tokens). Joining the chunk
    texts with single spaces gives `text` back unchanged.
    """
    count = count or (lambda piece: len(phoneme_track(piece)))
    words_pieces: list[str] = []
    for sentence in _split(text, _SENTENCE_END):
        if count(sentence) <= budget:
            words_pieces.append(sentence)
            continue
        for phrase in _pack(_split(sentence, _PHRASE_END), budget, count):
            if count(phrase) <= budget:
                words_pieces.append(phrase)
            else:
                words_pieces.extend(_split_words(phrase, budget, count))
    words_pieces = _merge_wordless(words_pieces)
    return [Chunk(piece, _pause_for(piece, i == len(words_pieces) - 1)) for i, piece in enumerate(words_pieces)]


def _merge_wordless(pieces: list[str]) -> list[str]:
    """A piece with nothing to read ("!" left after its sentence's letters were dropped) joins its neighbour:
    on its own it would be refused as text without letters."""
    out: list[str] = []
    for piece in pieces:
        if out and not (_has_words(out[-1]) and _has_words(piece)):
            out[-1] = out[-1] + " " + piece
        else:
            out.append(piece)
    return out


def _has_words(piece: str) -> bool:
    return any(ch.isalnum() for ch in piece)


def _split(text: str, pattern: re.Pattern) -> list[str]:
    return [piece for piece in pattern.split(text) if piece]


def _pack(pieces: list[str], budget: int, count) -> list[str]:
    """Greedily join neighbouring pieces while they fit the budget (fewer, longer chunks sound better)."""
    out: list[str] = []
    for piece in pieces:
        if out and count(out[-1] + " " + piece) <= budget:
            out[-1] = out[-1] + " " + piece
        else:
            out.append(piece)
    return out


def _split_words(phrase: str, budget: int, count) -> list[str]:
    """Split a phrase into the fewest word groups that fit, their sizes differing by one word at most."""
    words = phrase.split(" ")
    for parts in range(2, len(words) + 1):
        size, extra = divmod(len(words), parts)
        bounds = [i * size + min(i, extra) for i in range(parts + 1)]
        groups = [" ".join(words[a:b]) for a, b in zip(bounds, bounds[1:])]
        if all(count(g) <= budget for g in groups):
            return groups
    return words


__all__ = [
    "BASE_PHONEMES", "CHUNK_PHONEMES", "Chunk", "MAX_TEXT_CHARS", "SYMBOLS", "TextError", "TimedPhoneme",
    "base_phonemes", "check_text", "clean_text", "events_to_track", "normalize_text", "phoneme_track",
    "phonemes", "split_text",
]
