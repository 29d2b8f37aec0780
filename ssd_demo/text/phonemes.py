"""eSpeak NG's phoneme events -> the fixed symbol inventory the voices are trained on.

One token per sound (stress marks are part of the vowel) and one pause token per pause, labelled with the
punctuation that caused it. Training reads the same events with their start times (`events_to_track`,
`phoneme_track`), so that training and inference read phonemes the same way.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from ..errors import TextError
from . import espeak
from .normalize import check_text


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
