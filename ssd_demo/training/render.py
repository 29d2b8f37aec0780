"""Render sentences to speech with eSpeak NG's library (16 kHz mono float32, timed phonemes).

Uses the library bundled in the `espeakng-loader` wheel (`ssd_demo.text.espeak`), the same one the
text front end reads phonemes from, so no system package is needed and training audio, training
phonemes and inference phonemes all come from one eSpeak NG.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from ..text import espeak

SAMPLE_RATE = espeak.SAMPLE_RATE
VOICE = espeak.DEFAULT_VOICE


def render(text: str, voice: str = VOICE, speed_wpm: int = 175) -> np.ndarray:
    """One text -> float32 mono audio at 16 kHz."""
    return espeak.synthesize(text, voice=voice, rate_wpm=speed_wpm).audio


def render_many(texts: list[str], workers: int = 2) -> Iterator[espeak.Rendering]:
    """Renderings (audio + phoneme events) in input order. The library is not re-entrant, so
    parallel rendering uses processes, each with its own copy of it."""
    if workers <= 1 or len(texts) < 64:
        for text in texts:
            yield espeak.synthesize(text)
        return
    with ProcessPoolExecutor(max_workers=workers) as pool:
        yield from pool.map(espeak.synthesize, texts, chunksize=32)
