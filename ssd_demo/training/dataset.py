"""Corpus -> eSpeak audio and timed phonemes -> codec codes aligned to phonemes -> training examples.

Each example is a prompt ([BOS] phonemes [SPEECH_START] first phoneme) and a stream: the codec
codes of each phoneme's frames, NEXT, the next phoneme, ..., NEXT, END (`VocabLayout.stream`).
Phoneme boundaries come from eSpeak NG's own timing of the audio it rendered, so they are exact.
A held-out test split is kept apart from training (and from the codec fit, when one is fitted).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from .. import text as text_frontend
from ..models.assets import asset_path
from ..backends.vocab import MAX_PHONEME_FRAMES, VocabLayout
from ..speech.codec import Codec, CodecConfig, fit_codec
from .corpus import CorpusConfig, build_corpus, split_corpus
from .render import render_many

DATASET_NAME = "dataset.pt"
#: The codec the shipped voice uses; the recipe reuses it so that the recognizer's codec round trips
#: and the voice speak through the same tokenizer.
SHIPPED_CODEC = asset_path("embedded") / "codec"


@dataclass(frozen=True)
class DataConfig:
    corpus_size: int = 5000
    test_size: int = 100
    codebook_size: int = 1024
    seed: int = 1234
    codec: str = ""  # a codec folder to reuse; "" fits a new codebook on the training audio
    free_share: float = 0.6  # share of free word sequences in the corpus (see corpus.py)


@dataclass
class Example:
    text: str
    prompt: list[int]  # [BOS] + phonemes + [SPEECH_START] + first phoneme
    speech: list[int]  # the stream: speech ids, NEXT, phoneme ids, ..., NEXT, END


def align(track: list[text_frontend.TimedPhoneme], codes: np.ndarray, hop_ms: float) -> list[list[int]]:
    """Codes per phoneme: frame k (centred at k * hop_ms) belongs to the phoneme sounding then."""
    starts = np.array([p.start_ms for p in track])
    owners = np.searchsorted(starts, np.arange(len(codes)) * hop_ms, side="right") - 1
    owners = np.clip(owners, 0, len(track) - 1)
    frames: list[list[int]] = [[] for _ in track]
    for code, owner in zip(codes.tolist(), owners.tolist()):
        frames[owner].append(code)
    return frames


def make_example(sentence: str, rendering, codec: Codec, layout: VocabLayout) -> Example | None:
    """One training example, or None when eSpeak reported nothing pronounceable."""
    spoken = text_frontend.normalize_text(sentence)
    track = text_frontend.events_to_track(spoken, rendering.events, rendering.duration_ms)
    if not track:
        return None
    frames = align(track, codec.encode(rendering.audio), 1000 / codec.config.frames_per_second)
    frames = [f[: MAX_PHONEME_FRAMES - 1] for f in frames]  # the decoder ends longer phonemes itself
    symbols = [p.symbol for p in track]
    return Example(sentence, layout.prompt(symbols), layout.stream(symbols, frames))


def build_dataset(out_dir: Path, config: DataConfig, log=print) -> dict:
    """Build (or load, if already built with the same config) the dataset under out_dir."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / DATASET_NAME
    if path.exists():
        data = torch.load(path, weights_only=False)
        if data["config"] == asdict(config):
            log(f"dataset: reusing {path}")
            return data
    start = time.perf_counter()
    sentences = build_corpus(CorpusConfig(size=config.corpus_size, seed=config.seed, free_share=config.free_share))
    train_text, test_text = split_corpus(sentences, config.test_size, seed=config.seed)
    spoken = {s: text_frontend.normalize_text(s) for s in sentences}
    if config.codec:
        codec = Codec.load(config.codec)
    else:
        # The codebook sees training audio only, so the test split stays unseen end to end.
        fit_sentences = train_text[:2000]
        codec = fit_codec([r.audio for r in render_many([spoken[s] for s in fit_sentences])],
                          CodecConfig(codebook_size=config.codebook_size), seed=config.seed)
    layout = VocabLayout(n_phonemes=len(text_frontend.SYMBOLS), n_speech=codec.config.codebook_size)
    log(f"dataset: {len(sentences)} sentences; rendering with eSpeak NG and encoding")
    examples: dict[str, Example] = {}
    seconds = 0.0
    renderings = render_many([spoken[s] for s in sentences])
    for sentence, rendering in tqdm(zip(sentences, renderings), total=len(sentences), desc="dataset", mininterval=10):
        seconds += len(rendering.audio) / codec.sample_rate
        example = make_example(sentence, rendering, codec, layout)
        if example is not None:
            examples[sentence] = example
    data = {
        "config": asdict(config),
        "layout": layout.to_dict(),
        "train": [asdict(examples[s]) for s in train_text if s in examples],
        "test": [asdict(examples[s]) for s in test_text if s in examples],
        "codec_config": asdict(codec.config),
        "codebook": codec.codebook,
        "build_seconds": time.perf_counter() - start,
        "audio_hours": seconds / 3600,
    }
    torch.save(data, path)
    codec.save(out_dir / "codec")
    (out_dir / "split.json").write_text(json.dumps({"train": train_text, "test": test_text}, indent=1) + "\n")
    n_tokens = sum(len(e["prompt"]) + len(e["speech"]) for e in data["train"])
    log(f"dataset: {len(data['train'])} train / {len(data['test'])} test, {seconds / 3600:.2f} h of audio, "
        f"{n_tokens} train tokens, {time.perf_counter() - start:.0f} s")
    return data


def load_codec(data: dict) -> Codec:
    return Codec(CodecConfig(**data["codec_config"]), np.asarray(data["codebook"]))
