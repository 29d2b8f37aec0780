"""What a training run of the embedded voice is made of: its stages, the sizes of its models, each stage's schedule
and the data's settings (`Recipe`; `smoke_recipe`: tiny sizes, seconds).

Plain settings, apart from the training code (torch) that runs them (`voice`, `train`, `dataset`), so that
`python -m ssd_demo train --help` shows the defaults without loading torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..engine.heads_config import HeadsConfig
from .teacher import SCALES

STAGES = ("data", "target", "layers", "distilled", "heads", "export")


@dataclass(frozen=True)
class ModelSpec:
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    max_positions: int = 1024


@dataclass(frozen=True)
class StageConfig:
    steps: int
    lr: float = 1e-3
    warmup: int = 100
    batch_tokens: int = 3200  # padded tokens per batch
    weight_decay: float = 0.01
    checkpoint_every: int = 200
    seed: int = 0
    max_minutes: float = 0.0  # stop early (and record it) after this much wall time; 0 = no limit


@dataclass(frozen=True)
class DataConfig:
    corpus_size: int = 5000
    test_size: int = 100
    codebook_size: int = 1024
    seed: int = 1234
    free_share: float = 0.35  # share of free word sequences in the corpus (see corpus.py)
    chunk_symbols: int = 110
    max_symbol_frames: int = 200
    workers: int = 2
    scales: tuple[float, float, float] = SCALES
    # What the codes quantize (`speech.latent_codec`): "prior" codes are a function of the phoneme in context,
    # which a small target learns to say; on "z" codes it learned the voice but not the words.
    latent: str = "prior"
    # Phonemes inserted after the one being spoken (`VocabLayout.lookahead`): its right-hand context.
    lookahead: int = 2
    # The longest opening pause kept, in frames (`trim_leading_run`; None keeps them whole).
    leading_run: int | None = 5
    # Utterances of one to three words added to the training split (`corpus.short_corpus`, `add_utterances`).
    short_utterances: int = 0
    # Codes relative to the phoneme being said: `codebook_size` centroids per phoneme symbol (`VocabLayout.symbol_codes`)
    symbol_codes: bool = False


@dataclass(frozen=True)
class Recipe:
    # Short utterances (--short-utterances) are not added by default: 4,000 of them, in 3,000 more steps of training
    # continued from the shipped voice, changed nothing measurable (docs/benchmarks.md, "Short utterances").
    data: DataConfig = DataConfig(corpus_size=8000, codebook_size=2048)
    # Sized for a 2-core CPU at inference: 12 layers keep the target's decode step >= 10x the one-layer
    # draft's; 1,280 positions hold a chunk of 110 symbols (about 700 tokens) with room to spare.
    target: ModelSpec = ModelSpec(layers=12, hidden=256, intermediate=768, heads=4, kv_heads=2, max_positions=1280)
    distilled: ModelSpec = ModelSpec(layers=1, hidden=256, intermediate=768, heads=4, kv_heads=2, max_positions=1280)
    layers_bottom: int = 1
    layers_top: int = 2
    target_stage: StageConfig = StageConfig(steps=1300, lr=2e-3, warmup=100, batch_tokens=3200, max_minutes=45)
    layers_stage: StageConfig = StageConfig(steps=300, lr=1e-3, warmup=50, batch_tokens=3200, max_minutes=12)
    distilled_stage: StageConfig = StageConfig(steps=300, lr=2e-3, warmup=50, batch_tokens=3200, max_minutes=12)
    # Draft heads on the frozen target: 2 residual blocks of 1,024 (1.6 M parameters), trained to roll its
    # hidden state 8 tokens forward. Why 8 and not K = 4: at decode time the heads first step over the
    # round's pending tokens (the target's new token and its inserted phoneme) and then over each drafted
    # token and its inserted ones, so the K-th proposal sits 5-8 steps from the target's state; heads
    # trained on 4 steps lost 4-11 points of acceptance at steps 5-8 (docs/benchmarks.md).
    heads: HeadsConfig = HeadsConfig(hidden=256, inner=1024, blocks=2)
    heads_unroll: int = 8
    heads_stage: StageConfig = StageConfig(steps=600, lr=2e-3, warmup=50, batch_tokens=3200, max_minutes=25)
    eval_examples: int = 100
    # Longest training sequence in tokens: a chunk of 110 symbols takes about 700.
    max_sequence: int = 1200


def smoke_recipe() -> Recipe:
    tiny = ModelSpec(layers=3, hidden=32, intermediate=64, heads=2, kv_heads=1, max_positions=512)
    stage = StageConfig(steps=4, lr=1e-3, warmup=2, batch_tokens=1200, checkpoint_every=2)
    return Recipe(
        data=DataConfig(corpus_size=24, test_size=4, codebook_size=64, workers=1, short_utterances=3),
        target=tiny,
        distilled=ModelSpec(layers=1, hidden=32, intermediate=64, heads=2, kv_heads=1, max_positions=512),
        layers_bottom=1,
        layers_top=1,
        target_stage=stage,
        layers_stage=stage,
        distilled_stage=stage,
        heads=HeadsConfig(hidden=32, inner=64, blocks=1),
        heads_unroll=2,
        heads_stage=stage,
        eval_examples=4,
    )
