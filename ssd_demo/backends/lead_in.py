"""A short chunk spoken after a lead-in that is never heard: how the embedded voice says a word alone.

Why: the voice learned from chunks of sentences (26 of its 9,407 training chunks have eight phoneme symbols or fewer),
and a word said alone, with nothing before it, is outside what it learned: Whisper tiny.en misheard 19 of 57 single
words (the teacher: 2). Spoken as the second sentence of one chunk, "Listen. Hi!", the same word comes out as in the
sentences it knows; the codes of the lead-in ("Listen." and the pause after it) are given to the codec as context,
decoded and cut off, so the listener hears "Hi!" alone (docs/lab-notebook.md, 2026-12-07: over three seeds, 28 of
171 words misheard in AR, 24 with exact speculative sampling; mean WER 21.6 % against 60.2 % without it). The voice
decodes the lead-in itself, token by token, as part of the chunk: the lead-in's own codes put in the prompt instead
(the teacher's or the voice's) helped half as much.

The prompt carries the lead-in's phonemes before the chunk's, so both decoders, the drafts and the forced-token
schedule see one ordinary chunk; only the codec's view of the generated ids changes (`LeadInCut`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class LeadIn:
    """What is said before a short chunk and not heard: `text`, for chunks of at most `max_words` words."""

    text: str
    max_words: int

    def __post_init__(self) -> None:
        if not self.text.strip() or self.max_words < 1:
            raise ValueError(f"a lead-in needs a text and a positive word limit; got {self!r}")

    @classmethod
    def from_meta(cls, meta: dict | None) -> "LeadIn | None":
        """voice.json's "lead_in" ({"text", "max_words"}), or None where the voice has none."""
        return cls(str(meta["text"]), int(meta["max_words"])) if meta else None

    def prefix(self, ids: Callable[[str], list[int]], space: int) -> tuple[int, ...]:
        """The lead-in's symbols and the pause after it (`space`, the word gap's symbol), from `ids`, the
        phonemizer's symbol ids: what the phonemizer gives for "Listen. Hi!" before "Hi!" (the lead-in is a
        sentence of its own, read alike before any chunk)."""
        return (*ids(self.text), space)

    def applies(self, text: str) -> bool:
        """Whether chunk `text` is short enough to be spoken after the lead-in (words as written, between spaces)."""
        return len(text.split()) <= self.max_words


#: What a newly trained voice says before its short chunks (voice.json "lead_in"): "Listen." before a word said
#: alone. Not before replies of two to four words: there it cost more than it gave (their first word's onset was
#: sometimes lost with the lead-in: "I'm fine" heard as "time fine"; docs/lab-notebook.md).
DEFAULT_LEAD_IN = LeadIn("Listen.", 1)


class LeadInCut:
    """Generated ids -> codec codes of the chunk alone: the codes of every id up to the NEXT that ends the lead-in's
    last phoneme (the `phonemes`-th NEXT) are kept apart in `context`, the codec's context before the chunk's first
    code (decoded, then cut: the word's onset sounds as after the lead-in, where its codes were sampled); the rest are
    returned. `codes` is the voice's own id -> code mapping, given every id in order. Stateful, so that a stream's
    ids may come in pieces."""

    def __init__(self, codes: Callable[[list[int]], list[int]], next_id: int, phonemes: int) -> None:
        self.codes, self.next_id, self.left = codes, next_id, phonemes
        self.context: list[int] = []

    def __call__(self, token_ids) -> list[int]:
        token_ids = [int(token) for token in token_ids]
        split = 0
        while self.left and split < len(token_ids):
            self.left -= token_ids[split] == self.next_id
            split += 1
        if split:
            self.context.extend(self.codes(token_ids[:split]))
        return self.codes(token_ids[split:]) if split < len(token_ids) else []
