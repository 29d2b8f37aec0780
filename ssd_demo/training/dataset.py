"""Corpus -> eSpeak audio -> codec fit -> (prompt ids, speech ids) examples, with a held-out test split."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from .. import text as text_frontend
from ..backends.vocab import VocabLayout
from ..codec import Codec, CodecConfig, fit_codec
from .corpus import CorpusConfig, build_corpus, split_corpus
from .render import render_many

DATASET_NAME = "dataset.pt"


@dataclass(frozen=True)
class DataConfig:
    corpus_size: int = 5000
    test_size: int = 100
    codebook_size: int = 1024
    seed: int = 1234


@dataclass
class Example:
    text: str
    prompt: list[int]  # [BOS] + phonemes + [SPEECH_START]
    speech: list[int]  # speech token ids (vocabulary ids, not codec indices), no end token


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
    sentences = build_corpus(CorpusConfig(size=config.corpus_size, seed=config.seed))
    train_text, test_text = split_corpus(sentences, config.test_size, seed=config.seed)
    phonemes = text_frontend.phonemize_many(sentences)
    log(f"dataset: {len(sentences)} sentences; rendering with eSpeak NG")
    # eSpeak reads the same normalised text that the phonemes come from.
    audios = dict(zip(sentences, render_many([text_frontend.normalize_text(s) for s in sentences])))
    log(f"dataset: rendered {sum(len(a) for a in audios.values()) / 16000 / 3600:.2f} h in "
        f"{time.perf_counter() - start:.0f} s; fitting the codec")
    # The codebook sees training audio only, so the test split stays unseen end to end.
    codec = fit_codec([audios[s] for s in train_text], CodecConfig(codebook_size=config.codebook_size), seed=config.seed)
    layout = VocabLayout(n_phonemes=len(text_frontend.SYMBOLS), n_speech=config.codebook_size)
    examples = {}
    for sentence, ipa in zip(sentences, phonemes):
        codes = codec.encode(audios[sentence])
        examples[sentence] = Example(sentence, layout.prompt(text_frontend.symbols_to_ids(ipa)), layout.speech_ids(codes))
    data = {
        "config": asdict(config),
        "layout": layout.to_dict(),
        "train": [asdict(examples[s]) for s in train_text],
        "test": [asdict(examples[s]) for s in test_text],
        "codec_config": asdict(codec.config),
        "codebook": codec.codebook,
        "build_seconds": time.perf_counter() - start,
    }
    torch.save(data, path)
    codec.save(out_dir / "codec")
    (out_dir / "split.json").write_text(json.dumps({"train": train_text, "test": test_text}, indent=1) + "\n")
    n_tokens = sum(len(e["prompt"]) + len(e["speech"]) + 1 for e in data["train"])
    log(f"dataset: {len(train_text)} train / {len(test_text)} test, {n_tokens} train tokens, "
        f"{time.perf_counter() - start:.0f} s")
    return data


def load_codec(data: dict) -> Codec:
    return Codec(CodecConfig(**data["codec_config"]), np.asarray(data["codebook"]))
