"""The toy voice that speaks a text in sentence chunks, as the embedded voice does (tests of chunked and
streamed synthesis and of the race)."""

from __future__ import annotations

from ssd_demo.speech.synthesis import TextChunk
from support.toy_backend import ToyBackend

TEXT = "First sentence here. Second one, a bit longer. Third!"
PAUSE_MS = 100


class ChunkingToy(ToyBackend):
    """The toy voice, splitting at sentence ends like the embedded voice does."""

    def split_text(self, text: str) -> list[TextChunk]:
        pieces = [p.strip() for p in text.replace("!", "!|").replace(". ", ".|").split("|") if p.strip()]
        return [TextChunk(p, PAUSE_MS) for p in pieces]
