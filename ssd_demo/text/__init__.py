"""English text -> clean text -> chunks -> timed phoneme tokens, for the embedded voice.

1. `clean_text` (`normalize`): Unicode NFC, control characters (NUL included) become spaces, whitespace
   collapses; text with no Latin letter or digit is refused (the voice speaks English only); letters of
   scripts the English voice can only name ("Chinese letter") or spell (Cyrillic, Greek words), and emoji, are
   left out, and `left_out` says which; a Greek letter alone stays (read by its name: "alpha", "pi").
2. `normalize_text` (`normalize`, with `numbers`): money, decimals, clock times, dates, years, phone numbers,
   ranges, units and abbreviations are spelled out as people say them, so that eSpeak reads words (not "dash"
   or "asterisk") and a dot inside "12.50" or "Dr." is never read as the end of a sentence.
3. `split_text` (`chunks`): sentences, then phrases at , ; : and dashes, then balanced word groups, until
   every chunk fits a phoneme budget. Joining the chunk texts with single spaces gives back the
   normalised text exactly: nothing is dropped.
4. `phonemes` (`phonemes`): eSpeak NG's phoneme events (`espeak`) mapped onto the fixed inventory
   `SYMBOLS`: one token per sound (stress marks part of the vowel), and one pause token per
   pause, labelled with the punctuation that caused it. Training uses the same events with their
   start times (`phoneme_track`), so training and inference read phonemes the same way.

Callers import these names from `ssd_demo.text` (and eSpeak itself from `ssd_demo.text.espeak`).
"""

from __future__ import annotations

from ..errors import TextError
from .chunks import (
    CHUNK_PHONEMES,
    MAX_CHUNKS,
    PHRASE_PAUSE_MS,
    SENTENCE_PAUSE_MS,
    WORD_PAUSE_MS,
    Chunk,
    split_text,
)
from .normalize import (
    EMOJI_BLOCKS,
    LONG_NUMBER,
    LONG_WORD,
    MAX_TEXT_CHARS,
    READABLE_SCRIPTS,
    check_text,
    clean_text,
    left_out,
    normalize_text,
)
from .phonemes import (
    CONSONANTS,
    PAUSE,
    PAUSE_MARKS,
    PAUSES,
    STRESS,
    SYMBOL_TO_INDEX,
    SYMBOLS,
    VOWELS,
    TimedPhoneme,
    events_to_track,
    phoneme_track,
    phonemes,
)

__all__ = [
    "CHUNK_PHONEMES", "CONSONANTS", "Chunk", "EMOJI_BLOCKS", "LONG_NUMBER",
    "LONG_WORD", "MAX_CHUNKS", "MAX_TEXT_CHARS", "PAUSE", "PAUSES", "PAUSE_MARKS", "PHRASE_PAUSE_MS",
    "READABLE_SCRIPTS", "SENTENCE_PAUSE_MS", "STRESS", "SYMBOLS", "SYMBOL_TO_INDEX", "TextError", "TimedPhoneme",
    "VOWELS", "WORD_PAUSE_MS", "check_text", "clean_text", "events_to_track", "left_out",
    "normalize_text", "phoneme_track", "phonemes", "split_text",
]
