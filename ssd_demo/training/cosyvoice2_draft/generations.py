"""Step 1: the texts, and the target's own generations of them, cached in OUT so that a run can stop and go on.

Each text is prompted as the app speaks it (the official front end's chunks; the backend's own prompt: most
zero-shot with a voice, the rest cross-lingual, `prompts`), and generated with repetition-aware sampling and
the official length bounds; each has its own seed, so the cache is the same however often a run stopped.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import torch
from tqdm import tqdm

from ...backends.cosyvoice2.backend import MAX_TOKEN_TEXT_RATIO, MIN_TOKEN_TEXT_RATIO
from ...backends.cosyvoice2.llm import SpeechVocabLayout
from ...config import DecodingConfig
from ...engine.draft_heads import target_fingerprint
from ...engine.generate import autoregressive_generate
from ...engine.repetition_aware import RepetitionAwareSampling
from ..corpus import CorpusConfig, build_corpus
from ...backends.cosyvoice2.frontend import VoiceFeatures
from .prompts import CROSS_LINGUAL, backend_prompt, choose_voice, prompt_mix
from .recipe import GENERATIONS_FILE, Target, save_atomic
from ...errors import InputError


SAVE_GENERATIONS_EVERY_S = 30.0  # how much generation an interruption can cost at most


# -- texts ----------------------------------------------------------------------------------------

def default_texts(count: int, seed: int = 0) -> list[str]:
    """`count` distinct English texts from the corpus's hand-written and template sentences (no free word
    sequences: the target should say real sentences), about a third joined two to four at a time, so that
    lengths range from a few words to a short paragraph, as visitors' texts do."""
    sentences = build_corpus(CorpusConfig(size=4 * count + 50, seed=1234 + seed, free_share=0.0))
    rng = random.Random(seed)
    texts: list[str] = []
    position = 0
    while len(texts) < count and position < len(sentences):
        take = 1 if rng.random() < 0.65 else rng.randint(2, 4)
        texts.append(" ".join(sentences[position: position + take]))
        position += take
    if len(texts) < count:
        raise InputError(f"the built-in corpus gives {len(texts)} texts, fewer than the {count} asked for")
    return texts


def read_texts(path: Path) -> list[str]:
    """One text per line; blank lines and repeats are dropped, whitespace is normalised."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such text file")
    texts = [" ".join(line.split()) for line in path.read_text(encoding="utf-8").splitlines()]
    return list(dict.fromkeys(t for t in texts if t))


def spoken_chunks(texts: list[str], tokenize, log=print) -> list[str]:
    """The texts as the backend speaks them: numbers spelt out, split into the official front end's chunks
    (so the target is prompted here as in the app); texts with token markup are left out, as the app
    refuses them."""
    from ...backends.cosyvoice2.backend import speakable_chunks

    chunks, skipped = [], 0
    for text in texts:
        if "<|" in text and "|>" in text:
            skipped += 1
            continue
        chunks.extend(speakable_chunks(text, lambda piece: len(tokenize(piece))))
    if skipped:
        log(f"train-draft: {skipped} text(s) with token markup like '<|...|>' left out")
    return list(dict.fromkeys(chunks))


# -- the target's own generations ------------------------------------------------------------------

def official_sampling(layout: SpeechVocabLayout, text_count: int) -> RepetitionAwareSampling:
    """RAS with the official settings, the end of speech masked until 2 tokens per text token."""
    return RepetitionAwareSampling(masked_until_min_len=(layout.end_of_speech,), min_len=MIN_TOKEN_TEXT_RATIO * text_count)


def generation_config(layout: SpeechVocabLayout, text_count: int, seed: int, cap: int = 0) -> DecodingConfig:
    """At most 20 tokens per text token (as the backend and the official loop), or `cap` if lower; RAS does
    the truncation."""
    limit = MAX_TOKEN_TEXT_RATIO * text_count  # the official loop's range(max_len), the stop id included
    return DecodingConfig(temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=min(limit, cap) if cap else limit,
                          eos_token_id=list(layout.stop_ids), seed=seed)


def generate(target: Target, text: str, seed: int, cap: int = 0, voice: VoiceFeatures = CROSS_LINGUAL) -> dict:
    """The target says `text` in `voice` from the backend's prompt (zero-shot when the voice has a transcript,
    else cross-lingual): {"prompt", "generated", "text_count", "text_ids" (the text's own tokens)}."""
    prompt, count = backend_prompt(target, text, voice)
    start = 1 + len(voice.transcript_tokens)
    ids = torch.tensor([prompt], device=target.model.device)
    result = autoregressive_generate(target.model, ids, generation_config(target.layout, count, seed, cap),
                                     prefix_distribution=official_sampling(target.layout, count))
    return {"prompt": prompt, "generated": list(result.tokens), "text_count": count,
            "text_ids": [t - target.layout.text_offset for t in prompt[start: start + count]]}


def ensure_generations(target: Target, texts: list[str], out: Path, seed: int, cap: int, deadline: float,
                       log=print, zero_shot_fraction: float = 0.0, default_voice: VoiceFeatures | None = None,
                       default_voice_share: float = 0.0) -> list[dict] | None:
    """All texts' generations, from OUT/generations.pt as far as it goes and from the target after that;
    each text's voice as `prompts.choose_voice` draws it. None when the deadline came first (what was
    generated is saved; the next run continues)."""
    path = out / GENERATIONS_FILE
    voice_key = None if default_voice is None else [list(default_voice.transcript_tokens), list(default_voice.speech_tokens)]
    prompts = {"builder": "CosyVoice2Backend.prompt_ids", "zero_shot_fraction": zero_shot_fraction,
               "default_voice_share": default_voice_share if default_voice is not None else 0.0, "default_voice": voice_key}
    key = {"texts": texts, "seed": seed, "max_new_tokens": cap, "target": target_fingerprint(target.model),
           "layout": target.layout.to_dict(), "prompts": prompts}
    cache = {"key": key, "items": []}
    if path.exists():
        cache = torch.load(path, map_location="cpu", weights_only=False)
        if cache.get("key") != key:
            raise InputError(f"{path} holds generations of other texts, settings or target; "
                             "use another --out or delete that file")
    items = cache["items"]
    if len(items) == len(texts):
        return items
    if items:
        log(f"generations: continuing after {len(items)} of {len(texts)} texts")
    saved = time.perf_counter()
    bar = tqdm(total=len(texts), initial=len(items), desc="generations", unit="text", mininterval=2)
    try:
        while len(items) < len(texts):
            if time.perf_counter() > deadline:
                save_atomic(cache, path)
                log(f"generations: time budget reached after {len(items)} of {len(texts)} texts; run again to continue")
                return None
            index = len(items)
            voice, record = choose_voice(items, index, seed, zero_shot_fraction, default_voice, default_voice_share,
                                         target.layout)
            items.append(generate(target, texts[index], seed + index, cap, voice) | {"voice": record})
            bar.update(1)
            if time.perf_counter() - saved > SAVE_GENERATIONS_EVERY_S:
                save_atomic(cache, path)
                saved = time.perf_counter()
    finally:
        bar.close()
    save_atomic(cache, path)
    lengths = [len(item["generated"]) for item in items]
    ended = sum(item["generated"][-1] in target.layout.stop_ids for item in items)
    log(f"generations: {len(items)} texts, {sum(lengths)} speech tokens (mean {sum(lengths) / len(lengths):.0f}), "
        f"{ended} ended with a stop id; prompts {prompt_mix(items)}")
    return items
