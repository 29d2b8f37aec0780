"""Normalised text -> chunks the voice speaks one at a time, each within a phoneme budget.

Sentences first, then phrases at , ; : and dashes, then balanced word groups, until every chunk fits.
Joining the chunk texts with single spaces gives back the normalised text exactly: nothing is dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .phonemes import phoneme_track


#: Default chunk budget in phoneme tokens (pauses included); see docs/benchmarks.md for how it was chosen.
CHUNK_PHONEMES = 90

#: Most chunks one text may take: 3,000 characters of prose take about 70, but spelled-out digits take
#: several phonemes per character, and the character limit alone would no longer bound the work.
MAX_CHUNKS = 120


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
