"""`python -m ssd_demo train-draft`: train the SSD paper's layer draft for CosyVoice 2 on the target's own speech.

    python -m ssd_demo train-draft --preset cosyvoice2 --checkpoint CosyVoice2-0.5B --out runs/cosyvoice2-draft
    python -m ssd_demo train-draft --smoke --out /tmp/draft-smoke       # tiny random target, seconds (CI)

The paper's draft is the target's bottom 2 and top 6 layers; untrained, it accepts less than it could,
because the 16 layers it skips change what the top layers see. Training it needs no speech data: the
target itself says every sentence of a text list (on-policy data), and the draft learns to predict the
target's next-token distribution on those sequences.

1. Generations: each text becomes CosyVoice 2's prompt without a voice clip ([sos, text, task], the
   official cross-lingual input, which puts no prompt speech into the LM), and the target speaks it
   with repetition-aware sampling and the official length bounds (2 to 20 speech tokens per text
   token). They are cached in OUT/generations.pt, saved as they come, so an interrupted run continues
   with the next text; each text has its own seed, so the cache is the same however often it stopped.
2. Distillation: the draft shares the target's tensors except the ones it trains, the bottom 2 layers
   and the output layer (weight and bias), as the paper does; the top layers, the final norm and the
   embedding table stay the target's. The loss is KL(target || draft) at temperature 1 at every
   generated position, the target's scores computed on the same sequences without gradients; AdamW,
   linear warmup then cosine decay (`train.lr_at`), bfloat16 autocast when asked for.
3. Checkpoints (trained tensors, optimiser, step, RNG) go to OUT/draft_checkpoint.pt every N steps and
   at the end; a new run with the same OUT resumes from it.
4. Export: OUT/draft.safetensors holds the whole draft in the unified layout
   (`loading.load_cosyvoice2(..., draft_state=load_draft_state(path))`), OUT/draft.json the recipe, the
   losses and the expected acceptance on held-out generations before and after training:
   E[sum_x min(p_target(x), p_draft(x))] per position, the probability that exact speculative sampling
   accepts a drafted token, under RAS (the distributions the decoders verify) and at temperature 1.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm

from ...backends.cosyvoice2.backend import MAX_TOKEN_TEXT_RATIO, MIN_TOKEN_TEXT_RATIO
from ...backends.cosyvoice2.llm import (SpeechVocabLayout, build_speech_lm, layer_draft, layout_of, materialise,
    speech_lm_config)
from ...backends.cosyvoice2.loading import PAPER_DRAFT_LAYERS
from ...config import DecodingConfig
from ...engine.generate import autoregressive_generate
from ...engine.draft_heads import target_fingerprint
from ...engine.repetition_aware import RepetitionAwareSampling
from .corpus import CorpusConfig, build_corpus
from .train import StageConfig, lr_at, optimizer_step

PRESETS = ("cosyvoice2",)
GENERATIONS_FILE = "generations.pt"
CHECKPOINT_FILE = "draft_checkpoint.pt"
DRAFT_FILE = "draft.safetensors"
SUMMARY_FILE = "draft.json"
SAVE_GENERATIONS_EVERY_S = 30.0  # how much generation an interruption can cost at most


@dataclass(frozen=True)
class DraftRecipe:
    """What `main` runs: the optimiser schedule (`StageConfig`; its batch_tokens is unused here) and the data.
    The defaults are a starting point for the released 0.5 B model, not settings tuned on it."""

    stage: StageConfig = StageConfig(steps=2000, lr=2e-4, warmup=100, weight_decay=0.01, checkpoint_every=200)
    batch_size: int = 16  # generated sequences per step
    texts: int = 1000  # built-in texts, when no --texts file is given
    held_out: int = 32  # the last texts' generations: never trained on, they measure acceptance
    max_new_tokens: int = 0  # a cap under the official 20 per text token; 0 = the official bound only
    bottom: int = PAPER_DRAFT_LAYERS[0]
    top: int = PAPER_DRAFT_LAYERS[1]


def smoke_recipe() -> DraftRecipe:
    # Enough data and steps that the tiny draft reliably closes most of its gap to the smoke target.
    return DraftRecipe(stage=StageConfig(steps=60, lr=3e-3, warmup=4, weight_decay=0.0, checkpoint_every=20),
                       batch_size=8, texts=48, held_out=8, max_new_tokens=24)


@dataclass
class Target:
    """The frozen target, its vocabulary layout, its text tokenizer and what identifies it."""

    model: object
    layout: SpeechVocabLayout
    tokenize: Callable[[str], list[int]]
    source: dict = field(default_factory=dict)


# -- the targets ----------------------------------------------------------------------------------

SMOKE_LAYOUT = SpeechVocabLayout(text_rows=64, speech_tokens=61)  # 64 outputs: 61 speech tokens, 3 stop ids


def smoke_target(seed: int = 0) -> Target:
    """A tiny random 10-layer CosyVoice 2 speech LM with a word-hash text tokenizer. The two layers the
    paper's draft skips (2 and 3 of 10) get no attention output and a strong MLP: they act token by token,
    a gap that the draft's trained bottom layers can learn to close, so a few seconds of training show."""
    from transformers import Qwen2Config

    backbone = Qwen2Config(vocab_size=SMOKE_LAYOUT.text_rows, hidden_size=32, intermediate_size=64,
                           num_hidden_layers=10, num_attention_heads=2, num_key_value_heads=1,
                           max_position_embeddings=256, initializer_range=0.1, tie_word_embeddings=True)
    torch.manual_seed(seed)
    model = build_speech_lm(speech_lm_config(backbone, SMOKE_LAYOUT))
    with torch.no_grad():
        model.lm_head.bias.normal_(0, 0.3)
        model.lm_head.bias[SMOKE_LAYOUT.speech_tokens:] = -4.0  # stop ids unlikely: the tiny model speaks a while
        for skipped in model.model.layers[2:4]:
            skipped.self_attn.o_proj.weight.zero_()
            skipped.mlp.down_proj.weight.mul_(5.0)

    def tokenize(text: str) -> list[int]:
        return [zlib.crc32(word.encode()) % SMOKE_LAYOUT.text_rows for word in text.split()]

    return Target(model, SMOKE_LAYOUT, tokenize, {"target": "smoke", "target_seed": seed})


def checkpoint_target(folder: Path, device: str) -> Target:
    """The official checkpoint folder's speech LM (float32 weights; autocast lowers the precision) and tokenizer."""
    from ...backends.cosyvoice2.frontend import load_text_tokenizer, text_tokens
    from ...backends.cosyvoice2.llm import load_speech_lm

    model = load_speech_lm(folder, dtype=torch.float32, device=device)
    tokenizer = load_text_tokenizer(folder)
    return Target(model, layout_of(model), lambda text: text_tokens(tokenizer, text), {"target": Path(folder).name})


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
        raise ValueError(f"the built-in corpus gives {len(texts)} texts, fewer than the {count} asked for")
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


# -- step 1: the target's own generations --------------------------------------------------------

def official_sampling(layout: SpeechVocabLayout, text_count: int) -> RepetitionAwareSampling:
    """RAS with the official settings, the end of speech masked until 2 tokens per text token."""
    return RepetitionAwareSampling(masked_until_min_len=(layout.end_of_speech,), min_len=MIN_TOKEN_TEXT_RATIO * text_count)


def generation_config(layout: SpeechVocabLayout, text_count: int, seed: int, cap: int = 0) -> DecodingConfig:
    """At most 20 tokens per text token (as the backend and the official loop), or `cap` if lower; RAS does
    the truncation."""
    limit = MAX_TOKEN_TEXT_RATIO * text_count  # the official loop's range(max_len), the stop id included
    return DecodingConfig(temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=min(limit, cap) if cap else limit,
                          eos_token_id=list(layout.stop_ids), seed=seed)


def generate(target: Target, text: str, seed: int, cap: int = 0) -> dict:
    """The target says `text` from the cross-lingual prompt: {"prompt", "generated", "text_count"}."""
    tokens = target.tokenize(text)
    if not tokens:
        raise ValueError(f"the text {text!r} has no text tokens")
    prompt = target.layout.prompt_ids(tokens)
    ids = torch.tensor([prompt], device=target.model.device)
    result = autoregressive_generate(target.model, ids, generation_config(target.layout, len(tokens), seed, cap),
                                     prefix_distribution=official_sampling(target.layout, len(tokens)))
    return {"prompt": prompt, "generated": list(result.tokens), "text_count": len(tokens)}


def _save(obj, path: Path) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(obj, tmp)
    tmp.replace(path)  # atomic: an interruption never leaves a torn file


def ensure_generations(target: Target, texts: list[str], out: Path, seed: int, cap: int, deadline: float,
                       log=print) -> list[dict] | None:
    """All texts' generations, from OUT/generations.pt as far as it goes and from the target after that.
    None when the deadline came first (what was generated is saved; the next run continues)."""
    path = out / GENERATIONS_FILE
    key = {"texts": texts, "seed": seed, "max_new_tokens": cap, "target": target_fingerprint(target.model),
           "layout": target.layout.to_dict()}
    cache = {"key": key, "items": []}
    if path.exists():
        cache = torch.load(path, map_location="cpu", weights_only=False)
        if cache.get("key") != key:
            raise ValueError(f"{path} holds generations of other texts, settings or target; "
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
                _save(cache, path)
                log(f"generations: time budget reached after {len(items)} of {len(texts)} texts; run again to continue")
                return None
            index = len(items)
            items.append(generate(target, texts[index], seed + index, cap))
            bar.update(1)
            if time.perf_counter() - saved > SAVE_GENERATIONS_EVERY_S:
                _save(cache, path)
                saved = time.perf_counter()
    finally:
        bar.close()
    _save(cache, path)
    lengths = [len(item["generated"]) for item in items]
    ended = sum(item["generated"][-1] in target.layout.stop_ids for item in items)
    log(f"generations: {len(items)} texts, {sum(lengths)} speech tokens (mean {sum(lengths) / len(lengths):.0f}), "
        f"{ended} ended with a stop id")
    return items


# -- step 2: the draft and its loss ------------------------------------------------------------------

def trainable_names(draft, bottom: int) -> list[str]:
    """The paper's trained tensors: the bottom `bottom` layers and the output layer (weight and bias)."""
    prefixes = ("lm_head.", *(f"model.layers.{i}." for i in range(bottom)))
    return [name for name, _ in draft.named_parameters() if name.startswith(prefixes)]


def trainable_draft(target_model, bottom: int, top: int):
    """`layer_draft(target, bottom, top)` with its own copies of the tensors it trains (the rest stay the
    target's, frozen): (draft, names of the trained tensors)."""
    shared = layer_draft(target_model, bottom, top)
    names = trainable_names(shared, bottom)
    state = shared.state_dict()
    for name in names:
        state[name] = state[name].clone()
    draft = materialise(build_speech_lm(shared.config, device="meta"), state, target_model.device)
    for name, parameter in draft.named_parameters():
        parameter.requires_grad_(name in names)
    return draft, names


def collate(examples: list[dict], device) -> dict[str, torch.Tensor]:
    """input_ids / attention_mask, right-padded, and `predicts`: the positions whose output is a generated token."""
    sequences = [e["prompt"] + e["generated"] for e in examples]
    width = max(len(s) for s in sequences)
    input_ids = torch.zeros((len(examples), width), dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    predicts = torch.zeros((len(examples), width), dtype=torch.bool)
    for row, (example, sequence) in enumerate(zip(examples, sequences)):
        input_ids[row, : len(sequence)] = torch.tensor(sequence)
        mask[row, : len(sequence)] = 1
        start = len(example["prompt"])
        predicts[row, start - 1: len(sequence) - 1] = True
    return {"input_ids": input_ids.to(device), "attention_mask": mask.to(device), "predicts": predicts.to(device)}


def _logits(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits


def distillation_kl(draft, target_model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mean over generated positions of KL(target || draft), both at temperature 1."""
    with torch.no_grad():
        teacher = F.log_softmax(_logits(target_model, batch)[batch["predicts"]].float(), dim=-1)
    student = F.log_softmax(_logits(draft, batch)[batch["predicts"]].float(), dim=-1)
    return F.kl_div(student, teacher, log_target=True, reduction="batchmean")


@torch.no_grad()
def expected_acceptance(draft, target_model, layout: SpeechVocabLayout, examples: list[dict], batch_size: int) -> dict:
    """Per generated position, the mean of sum_x min(p_target(x), p_draft(x)) (exact speculative sampling's
    acceptance probability) under RAS with its prefix ("ras") and at temperature 1 ("softmax"), and the
    mean KL(target || draft) at temperature 1; in the models' own precision (no autocast)."""
    totals = {"ras": 0.0, "softmax": 0.0, "kl": 0.0}
    positions = 0
    for start in range(0, len(examples), batch_size):
        chunk = examples[start: start + batch_size]
        batch = collate(chunk, target_model.device)
        target_logits, draft_logits = _logits(target_model, batch).float(), _logits(draft, batch).float()
        for row, example in enumerate(chunk):
            first, n = len(example["prompt"]) - 1, len(example["generated"])
            t, d = target_logits[row, first: first + n], draft_logits[row, first: first + n]
            pt, pd = torch.softmax(t, dim=-1), torch.softmax(d, dim=-1)
            totals["softmax"] += float(torch.minimum(pt, pd).sum())
            totals["kl"] += float(F.kl_div(F.log_softmax(d, -1), F.log_softmax(t, -1), log_target=True,
                                           reduction="sum"))
            ras = official_sampling(layout, example["text_count"])
            prefixes = [example["generated"][:i] for i in range(n)]
            totals["ras"] += float(torch.minimum(ras(t, prefixes), ras(d, prefixes)).sum())
            positions += n
    return {name: round(value / max(positions, 1), 4) for name, value in totals.items()} | {"positions": positions}


# -- step 3: training, checkpointed --------------------------------------------------------------

def batch_at(step: int, count: int, batch_size: int, seed: int) -> list[int]:
    """The example indices of batch `step`: epochs of a seeded shuffle, so a resumed run sees the same stream."""
    per_epoch = max(1, count // batch_size)
    epoch, index = divmod(step, per_epoch)
    order = list(range(count))
    random.Random(seed * 100_003 + epoch).shuffle(order)
    return order[index * batch_size: (index + 1) * batch_size]


def _autocast(device: torch.device, dtype: torch.dtype) -> torch.autocast:
    return torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32)


def train(draft, names: list[str], target_model, examples: list[dict], recipe: DraftRecipe, dtype: torch.dtype,
          out: Path, key: dict, deadline: float, log=print) -> dict:
    """Distil the target into the draft's trained tensors, in place; checkpoints OUT/draft_checkpoint.pt
    and resumes from it. Returns the training summary."""
    stage = recipe.stage
    path = out / CHECKPOINT_FILE
    trained = dict(draft.named_parameters())
    params = [trained[name] for name in names]
    optimizer = torch.optim.AdamW(params, lr=stage.lr, betas=(0.9, 0.98), weight_decay=stage.weight_decay)
    step, losses, elapsed, resumed_from = 0, [], 0.0, None
    if path.exists():
        state = torch.load(path, map_location="cpu", weights_only=False)
        if state.get("key") != key or sorted(state["trainable"]) != sorted(names):
            raise ValueError(f"{path} is a checkpoint of another target, data or draft; use another --out or delete it")
        with torch.no_grad():
            for name in names:
                trained[name].copy_(state["trainable"][name])
        optimizer.load_state_dict(state["optimizer"])
        step, losses, elapsed = state["step"], state["losses"], state["elapsed"]
        torch.set_rng_state(state["rng"]["torch"])
        if state["rng"].get("cuda") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["rng"]["cuda"])
        resumed_from = step
        log(f"train-draft: resumed at step {step}")

    def save_checkpoint() -> None:
        cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
        _save({"trainable": {name: trained[name].detach().cpu() for name in names},
               "optimizer": optimizer.state_dict(), "step": step, "losses": losses, "elapsed": elapsed,
               "rng": {"torch": torch.get_rng_state(), "cuda": cuda}, "key": key}, path)

    device = target_model.device
    start = time.perf_counter() - elapsed
    stopped_early = False
    window: list[float] = []
    log_every = max(1, min(25, stage.steps // 4))
    draft.train()
    bar = tqdm(total=stage.steps, initial=min(step, stage.steps), desc="train-draft", unit="step", mininterval=2)
    try:
        while step < stage.steps:
            if time.perf_counter() > deadline:
                stopped_early = True
                log(f"train-draft: time budget reached at step {step}")
                break
            batch = collate([examples[i] for i in batch_at(step, len(examples), recipe.batch_size, stage.seed)], device)
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step, stage)
            with _autocast(device, dtype):
                loss = distillation_kl(draft, target_model, batch)
            optimizer_step(loss, params, optimizer)
            step += 1
            window.append(loss.item())
            bar.update(1)
            bar.set_postfix(loss=f"{window[-1]:.4f}", lr=f"{lr_at(step, stage):.1e}", refresh=False)
            if step % log_every == 0 or step == stage.steps:
                losses.append((step, sum(window) / len(window)))
                window = []
            if step % stage.checkpoint_every == 0:
                elapsed = time.perf_counter() - start
                save_checkpoint()
    finally:
        bar.close()
    if window:
        losses.append((step, sum(window) / len(window)))
    elapsed = time.perf_counter() - start
    save_checkpoint()
    draft.eval()
    return {"steps": step, "planned_steps": stage.steps, "resumed_from_step": resumed_from,
            "stopped_early": stopped_early, "wall_seconds": round(elapsed, 1),
            "final_loss": round(losses[-1][1], 5) if losses else None, "losses": losses}


# -- step 4: export ------------------------------------------------------------------------------

def export_draft(draft, trained: list[str], path: Path) -> None:
    """The trained tensors only (bottom layers and head: about 150 MB for the real draft instead of 1 GB),
    float32 safetensors in the unified layout; the loader takes every other tensor from the target."""
    from safetensors.torch import save_file

    state = {name: tensor.detach().to("cpu", torch.float32).contiguous()
             for name, tensor in draft.state_dict().items() if name in trained}
    tmp = path.with_suffix(".tmp")
    save_file(state, str(tmp), metadata={"format": "pt", "draft": "cosyvoice2 layer draft"})
    tmp.replace(path)


def load_draft_state(path: str | Path) -> dict[str, torch.Tensor]:
    """An exported draft's trained tensors, for `load_cosyvoice2(..., draft_state=...)`."""
    from safetensors.torch import load_file

    return load_file(str(path))


# -- command line --------------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    recipe = DraftRecipe()
    parser.add_argument("--preset", default="cosyvoice2", help=f"whose draft to train: {', '.join(PRESETS)}")
    parser.add_argument("--checkpoint", type=Path, default=None,
                        help="the CosyVoice 2 checkpoint folder (llm.pt and CosyVoice-BlankEN/)")
    parser.add_argument("--out", type=Path, default=None,
                        help="work directory: generations, checkpoint, the exported draft (default: "
                             "runs/cosyvoice2-draft, or runs/cosyvoice2-draft-smoke with --smoke)")
    parser.add_argument("--smoke", action="store_true",
                        help="a tiny random target built in memory, a few steps (seconds)")
    parser.add_argument("--steps", type=int, default=None, help=f"training steps (default {recipe.stage.steps})")
    parser.add_argument("--lr", type=float, default=None, help=f"peak learning rate (default {recipe.stage.lr})")
    parser.add_argument("--warmup", type=int, default=None, help=f"warmup steps (default {recipe.stage.warmup})")
    parser.add_argument("--batch-size", type=int, default=None,
                        help=f"generated sequences per step (default {recipe.batch_size})")
    parser.add_argument("--checkpoint-every", type=int, default=None,
                        help=f"steps between checkpoints (default {recipe.stage.checkpoint_every})")
    parser.add_argument("--max-new-tokens", type=int, default=None,
                        help="cap on generated tokens per text, under the official 20 per text token (default: none)")
    parser.add_argument("--texts", type=Path, default=None,
                        help="a text file, one text per line (default: built-in texts)")
    parser.add_argument("--num-texts", type=int, default=None,
                        help=f"how many built-in texts, without --texts (default {recipe.texts})")
    parser.add_argument("--held-out", type=int, default=None,
                        help=f"texts kept out of training to measure acceptance (default {recipe.held_out})")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default=None,
                        help="training precision: bfloat16 autocast over float32 weights (default: bfloat16 on CUDA)")
    parser.add_argument("--device", default=None, help="cuda, cpu, ... (default: cuda when there is one)")
    parser.add_argument("--max-minutes", type=float, default=None,
                        help="wall-time cap for this run (generation and training); the next run continues")
    parser.add_argument("--seed", type=int, default=None,
                        help="seeds the generations and the batch order (default 0)")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")


def recipe_from(args: argparse.Namespace) -> DraftRecipe:
    recipe = smoke_recipe() if args.smoke else DraftRecipe()
    stage = recipe.stage
    for option in ("steps", "lr", "warmup", "checkpoint_every", "max_minutes", "seed"):
        if getattr(args, option) is not None:
            stage = replace(stage, **{option: getattr(args, option)})
    recipe = replace(recipe, stage=stage)
    for option in ("batch_size", "max_new_tokens", "held_out"):
        if getattr(args, option) is not None:
            recipe = replace(recipe, **{option: getattr(args, option)})
    if args.num_texts is not None:
        recipe = replace(recipe, texts=args.num_texts)
    checks = (("--steps", stage.steps, 1), ("--batch-size", recipe.batch_size, 1), ("--warmup", stage.warmup, 0),
              ("--checkpoint-every", stage.checkpoint_every, 1), ("--held-out", recipe.held_out, 1),
              ("--max-new-tokens", recipe.max_new_tokens, 0), ("--num-texts", recipe.texts, 2))
    for flag, value, least in checks:
        if value < least:
            raise ValueError(f"{flag} must be at least {least}, got {value}")
    if not stage.lr > 0:
        raise ValueError(f"--lr must be positive, got {stage.lr}")
    return recipe


def main(args: argparse.Namespace) -> int:
    if args.preset not in PRESETS:
        raise ValueError(f"train-draft knows the preset(s) {', '.join(PRESETS)}, not {args.preset!r}")
    if args.smoke == (args.checkpoint is not None):
        raise ValueError("give --checkpoint (a CosyVoice 2 folder) or --smoke (a tiny random target), "
                         "not both or neither")
    recipe = recipe_from(args)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = getattr(torch, args.dtype or ("bfloat16" if device.type == "cuda" else "float32"))
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    deadline = started + recipe.stage.max_minutes * 60 if recipe.stage.max_minutes else math.inf
    out: Path = args.out or Path("runs/cosyvoice2-draft-smoke" if args.smoke else "runs/cosyvoice2-draft")
    out.mkdir(parents=True, exist_ok=True)

    def log(message: str) -> None:
        tqdm.write(message)

    texts = read_texts(args.texts) if args.texts is not None else default_texts(recipe.texts, recipe.stage.seed)
    if len(texts) <= recipe.held_out:
        raise ValueError(f"{len(texts)} texts leave none to train on after holding out {recipe.held_out}")
    target = smoke_target() if args.smoke else checkpoint_target(args.checkpoint, str(device))
    target.model.to(device).eval().requires_grad_(False)
    texts = spoken_chunks(texts, target.tokenize, log)
    if len(texts) <= recipe.held_out:
        raise ValueError(f"{len(texts)} speakable texts leave none to train on after holding out {recipe.held_out}")
    log(f"train-draft: {target.source['target']} target ({target.model.config.num_hidden_layers} layers) on {device}, "
        f"{len(texts)} texts ({recipe.held_out} held out), {str(dtype).removeprefix('torch.')} training")

    items = ensure_generations(target, texts, out, recipe.stage.seed, recipe.max_new_tokens, deadline, log)
    if items is None:
        return 0
    train_items, held_out = items[: -recipe.held_out], items[-recipe.held_out:]

    draft, names = trainable_draft(target.model, recipe.bottom, recipe.top)
    before = expected_acceptance(draft, target.model, target.layout, held_out, recipe.batch_size)
    log(f"train-draft: held-out acceptance before training {before['ras']:.3f} (RAS), "
        f"{before['softmax']:.3f} (softmax)")
    key = {"target": target_fingerprint(target.model), "texts": zlib.crc32("\n".join(texts).encode()),
           "max_new_tokens": recipe.max_new_tokens, "held_out": recipe.held_out,
           "seed": recipe.stage.seed, "bottom": recipe.bottom, "top": recipe.top}
    summary = train(draft, names, target.model, train_items, recipe, dtype, out, key, deadline, log)
    after = expected_acceptance(draft, target.model, target.layout, held_out, recipe.batch_size)
    log(f"train-draft: held-out acceptance after {summary['steps']} steps {after['ras']:.3f} (RAS), "
        f"{after['softmax']:.3f} (softmax); final loss {summary['final_loss']}")

    export_draft(draft, names, out / DRAFT_FILE)
    stage_settings = {k: v for k, v in asdict(recipe.stage).items() if k != "batch_tokens"}  # batches count sequences
    report = {
        "preset": args.preset, **target.source,
        "draft": {"bottom": recipe.bottom, "top": recipe.top, "trained": names,
                  "trained_parameters": sum(p.numel() for n, p in draft.named_parameters() if n in names)},
        "recipe": {**asdict(recipe), "stage": stage_settings, "dtype": str(dtype).removeprefix("torch."), "device": device.type,
                   "loss": "KL(target || draft) at temperature 1 over generated positions",
                   "data": "the target's own generations (RAS, official length bounds) from cross-lingual prompts"},
        "texts": len(texts), "train_generations": len(train_items), "held_out_generations": len(held_out),
        "train_speech_tokens": sum(len(i["generated"]) for i in train_items),
        "training": summary,
        "acceptance": {"before": before, "after": after},
        "run_seconds": round(time.perf_counter() - started, 1),
    }
    (out / SUMMARY_FILE).write_text(json.dumps(report, indent=1) + "\n")
    log(f"train-draft: draft written to {out / DRAFT_FILE}")
    return 0


__all__ = ["DraftRecipe", "add_arguments", "default_texts", "expected_acceptance", "load_draft_state", "main",
           "smoke_target", "trainable_draft"]
