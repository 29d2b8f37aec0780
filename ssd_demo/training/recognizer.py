"""`python -m ssd_demo train-recognizer`: the phoneme recognizer that scores intelligibility (PER).

    python -m ssd_demo train-recognizer --out runs/recognizer --export assets/recognizer
    python -m ssd_demo train-recognizer --smoke --out /tmp/recognizer-smoke   # seconds (CI)

Data: sentences from the training corpus generator (templates and free word sequences, its own
seed), each rendered by eSpeak NG with a random voice variant, rate and pitch; the labels are the
phonemes eSpeak reports for that very rendering (stress dropped). Half of the clips go through the
embedded voice's codec (k-means tokens -> Griffin-Lim) so that the recognizer has heard what codec
audio sounds like. It never hears the voice's own output: it stays an independent listener.

Accuracy is measured on held-out sentences rendered with the default voice, clean and through the
codec, and written to recognizer.json (and docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import math
import platform
import random
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from ..text import espeak
from .. import text as text_frontend
from ..models.assets import asset_path
from ..speech.codec import Codec
from ..measure.recognizer import (FeatureExtractor, PhonemeRecognizer, Recognizer, RecognizerConfig, greedy_decode,
                                  phoneme_error_rate)
from .corpus import CorpusConfig, build_corpus
from .precision import autocast

VOICES = (
    "en-us", "en-us", "en-us", "en-us+f1", "en-us+f2", "en-us+f3", "en-us+f4", "en-us+m1", "en-us+m2",
    "en-us+m3", "en-us+m4", "en-us+m5", "en-us+m6", "en-us+m7", "en-us+klatt", "en-us+Andy", "en-us+croak",
)
DEFAULT_CODEC = asset_path("embedded") / "codec"


@dataclass(frozen=True)
class RecognizerRecipe:
    utterances: int = 9000
    test_utterances: int = 150
    round_trip_share: float = 0.5
    model: RecognizerConfig = RecognizerConfig()
    steps: int = 900
    batch_frames: int = 8000
    lr: float = 1e-3
    warmup: int = 150
    max_minutes: float = 75.0
    seed: int = 7


def smoke_recipe() -> RecognizerRecipe:
    return RecognizerRecipe(utterances=24, test_utterances=4, model=RecognizerConfig(width=32, layers=1, heads=2, ffn=64),
                            steps=3, batch_frames=2000, warmup=1, max_minutes=1.0)


def _render(sentence: str, rng: random.Random, voice: str | None = None) -> tuple[np.ndarray, list[int]]:
    voice = voice or rng.choice(VOICES)
    rate = 175 if voice == "en-us" and rng.random() < 0.3 else rng.randint(130, 230)
    pitch = 50 if voice == "en-us" and rng.random() < 0.3 else rng.randint(25, 75)
    rendering = espeak.synthesize(sentence, voice=voice, rate_wpm=rate, pitch=pitch)
    track = text_frontend.events_to_track(sentence, rendering.events, rendering.duration_ms)
    return rendering.audio, text_frontend.base_phonemes([p.symbol for p in track])


def build_data(out: Path, recipe: RecognizerRecipe, codec: Codec, log=print) -> dict:
    """Features and labels for training and the two test sets; cached in out/recognizer_data.pt."""
    path = out / "recognizer_data.pt"
    key = {"utterances": recipe.utterances, "test": recipe.test_utterances, "share": recipe.round_trip_share,
           "seed": recipe.seed}
    if path.exists():
        data = torch.load(path, weights_only=False)
        if data["key"] == key:
            log(f"recognizer data: reusing {path}")
            return data
    start = time.perf_counter()
    rng = random.Random(recipe.seed)
    sentences = build_corpus(CorpusConfig(size=recipe.utterances + recipe.test_utterances, seed=recipe.seed + 1000))
    rng.shuffle(sentences)
    test_sentences, train_sentences = sentences[: recipe.test_utterances], sentences[recipe.test_utterances :]
    extract = FeatureExtractor()
    train = []
    for sentence in tqdm(train_sentences, desc="recognizer data", mininterval=10):
        audio, labels = _render(text_frontend.normalize_text(sentence), rng)
        if rng.random() < recipe.round_trip_share:
            audio = codec.decode(codec.encode(audio))
        if rng.random() < 0.3:  # a little noise: generated speech is never as clean as eSpeak
            audio = audio + np.random.default_rng(rng.randrange(2**32)).normal(0, 10 ** rng.uniform(-3.5, -2.5), len(audio))
        train.append((extract(audio.astype(np.float32)).half(), labels))
    clean, round_trip = [], []
    for sentence in test_sentences:
        audio, labels = _render(text_frontend.normalize_text(sentence), rng, voice="en-us")
        clean.append((extract(audio).half(), labels))
        round_trip.append((extract(codec.decode(codec.encode(audio))).half(), labels))
    data = {"key": key, "train": train, "test_clean": clean, "test_round_trip": round_trip,
            "build_seconds": time.perf_counter() - start}
    torch.save(data, path)
    log(f"recognizer data: {len(train)} train clips, {2 * len(clean)} test clips, {data['build_seconds']:.0f} s")
    return data


def _batches(examples: list, batch_frames: int, rng: random.Random) -> list[list]:
    order = sorted(range(len(examples)), key=lambda i: examples[i][0].shape[0] + rng.random())
    batches, current, longest = [], [], 0
    for i in order:
        length = examples[i][0].shape[0]
        if current and max(longest, length) * (len(current) + 1) > batch_frames:
            batches.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, length)
    if current:
        batches.append(current)
    rng.shuffle(batches)
    return batches


def _collate(examples: list, indices: list[int]) -> tuple[torch.Tensor, ...]:
    feats = [examples[i][0].float() for i in indices]
    labels = [torch.tensor(examples[i][1], dtype=torch.long) + 1 for i in indices]  # 0 is the blank
    lengths = torch.tensor([f.shape[0] for f in feats])
    padded = torch.nn.utils.rnn.pad_sequence(feats, batch_first=True)
    return padded, lengths, torch.cat(labels), torch.tensor([len(lab) for lab in labels])


@torch.no_grad()
def evaluate(model: PhonemeRecognizer, examples: list) -> float:
    """Corpus-level PER: total edit distance / total reference phonemes."""
    model.eval()
    errors = total = 0
    for feats, labels in examples:
        feats = feats.float()[None]
        hypothesis = greedy_decode(model(feats, torch.tensor([feats.shape[1]]))[0], feats.shape[1])
        errors += phoneme_error_rate(hypothesis, labels) * len(labels)
        total += len(labels)
    model.train()
    return errors / max(total, 1)


def train(out: Path, recipe: RecognizerRecipe, data: dict, log=print) -> tuple[PhonemeRecognizer, dict]:
    """Train with CTC; checkpoints to out/recognizer_checkpoint.pt and resumes from it."""
    torch.manual_seed(recipe.seed)
    model = PhonemeRecognizer(recipe.model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.lr, betas=(0.9, 0.98), weight_decay=0.01)
    checkpoint = out / "recognizer_checkpoint.pt"
    step, elapsed, losses = 0, 0.0, []
    if checkpoint.exists():
        state = torch.load(checkpoint, weights_only=False)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step, elapsed, losses = state["step"], state["elapsed"], state["losses"]
        log(f"recognizer: resumed at step {step}")
    rng = random.Random(recipe.seed)
    batches: list = []
    while len(batches) <= step:
        batches.extend(_batches(data["train"], recipe.batch_frames, rng))
    start = time.perf_counter() - elapsed
    model.train()
    window: list[float] = []
    stopped_early = False
    while step < recipe.steps:
        if recipe.max_minutes and (time.perf_counter() - start) / 60 > recipe.max_minutes:
            stopped_early = True
            log(f"recognizer: time budget of {recipe.max_minutes} min reached at step {step}")
            break
        while step >= len(batches):
            batches.extend(_batches(data["train"], recipe.batch_frames, rng))
        feats, lengths, targets, target_lengths = _collate(data["train"], batches[step])
        lr = recipe.lr * min(1.0, (step + 1) / recipe.warmup)
        lr *= 0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(1.0, step / recipe.steps)))
        for group in optimizer.param_groups:
            group["lr"] = lr
        with autocast():
            log_probs = model(feats, lengths)
        loss = F.ctc_loss(log_probs.float().transpose(0, 1), targets, lengths, target_lengths, zero_infinity=True)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        step += 1
        window.append(loss.item())
        if step % 50 == 0 or step == recipe.steps:
            losses.append((step, sum(window) / len(window)))
            window = []
            log(f"recognizer: step {step}/{recipe.steps} ctc {losses[-1][1]:.3f} lr {lr:.2e} "
                f"{time.perf_counter() - start:.0f} s")
        if step % 500 == 0:
            elapsed = time.perf_counter() - start
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
                        "elapsed": elapsed, "losses": losses}, checkpoint)
    elapsed = time.perf_counter() - start
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
                "elapsed": elapsed, "losses": losses}, checkpoint)
    summary = {"steps": step, "planned_steps": recipe.steps, "stopped_early": stopped_early,
               "wall_seconds": round(elapsed, 1), "losses": losses}
    return model, summary


def run(args: argparse.Namespace) -> int:
    recipe = smoke_recipe() if args.smoke else RecognizerRecipe()
    if args.steps is not None:
        recipe = replace(recipe, steps=args.steps)
    if args.utterances is not None:
        recipe = replace(recipe, utterances=args.utterances)
    if args.max_minutes is not None:
        recipe = replace(recipe, max_minutes=args.max_minutes)
    torch.set_num_threads(args.threads)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)

    def log(message: str) -> None:
        print(message, flush=True)

    codec = Codec.load(args.codec)
    data = build_data(out, recipe, codec, log)
    model, summary = train(out, recipe, data, log)
    model.eval()
    accuracy = {"per_clean": round(evaluate(model, data["test_clean"]), 4),
                "per_round_trip": round(evaluate(model, data["test_round_trip"]), 4)}
    log(f"recognizer: held-out PER clean {accuracy['per_clean']:.3f}, codec round trip {accuracy['per_round_trip']:.3f}")
    dest = args.export or out / "export"
    meta = {
        "recipe": {k: v for k, v in asdict(recipe).items() if k != "model"},
        "training": {k: v for k, v in summary.items() if k != "losses"},
        "data_build_seconds": round(data["build_seconds"], 1),
        "accuracy": accuracy,
        "test_sentences": len(data["test_clean"]),
        "parameters": sum(p.numel() for p in model.parameters()),
        "machine": f"{platform.machine()}, torch {torch.__version__}, {torch.get_num_threads()} threads",
        "exported": time.strftime("%Y-%m-%d", time.gmtime()),
    }
    Recognizer(model, meta).save(dest)
    log(f"recognizer: written to {dest}")
    return 0
