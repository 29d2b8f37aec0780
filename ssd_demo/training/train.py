"""Train the embedded voice: the target LM, draft A ("layers") and draft B ("distilled").

- Target: a LlamaForCausalLM over the sequences of `backends.vocab` (prompt, then speech tokens
  with NEXT markers and the phonemes the decoder inserts), cross-entropy on what the model samples
  at inference: speech tokens and NEXT (the text and the inserted tokens are given, not predicted).
- Draft A, the SSD paper's construction: the target's bottom layer(s) and top layers stacked into a
  shallow model of the same width, initialised from the target; only the bottom layer(s), the final
  norm and the head are trained (cross-entropy), the rest stays frozen.
- Draft B: a small standalone Llama trained with KL(target || draft) on the target's temperature-1
  distributions at the speech positions.

Every stage checkpoints (model, optimiser, step, losses) and resumes after an interruption.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

from ..backends.vocab import VocabLayout
from .precision import autocast
from .recipe import ModelSpec, StageConfig  # noqa: F401 - defined with the recipes, used here and imported from here
from ..errors import InputError

IGNORE = -100


def make_llama(layout: VocabLayout, spec: ModelSpec) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=layout.vocab_size,
        hidden_size=spec.hidden,
        intermediate_size=spec.intermediate,
        num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads,
        num_key_value_heads=spec.kv_heads,
        max_position_embeddings=spec.max_positions,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=layout.bos_id,
        eos_token_id=layout.end_of_speech_id,
        pad_token_id=layout.pad_id,
    )
    return LlamaForCausalLM(config)


def layer_subset_draft(target: LlamaForCausalLM, bottom: int, top: int) -> tuple[LlamaForCausalLM, list[str]]:
    """Draft A: target layers [0, bottom) + [L - top, L), same width, weights copied.

    Returns the draft and the names of the parameters to train (bottom layers, final norm, head).
    """
    n = target.config.num_hidden_layers
    if bottom < 1 or top < 0 or bottom + top > n:
        raise InputError(f"cannot take bottom {bottom} + top {top} layers from a {n}-layer target")
    config = LlamaConfig.from_dict(target.config.to_dict())
    config.num_hidden_layers = bottom + top
    if getattr(config, "layer_types", None):
        config.layer_types = config.layer_types[: bottom + top]
    draft = LlamaForCausalLM(config)
    source = list(range(bottom)) + list(range(n - top, n))
    state = target.state_dict()
    new_state = {}
    for name in draft.state_dict():
        if name.startswith("model.layers."):
            parts = name.split(".")
            parts[2] = str(source[int(parts[2])])
            new_state[name] = state[".".join(parts)].clone()
        else:
            new_state[name] = state[name].clone()
    draft.load_state_dict(new_state)
    trainable = [name for name, _ in draft.named_parameters()
                 if name.startswith("lm_head") or name == "model.norm.weight"
                 or any(name.startswith(f"model.layers.{i}.") for i in range(bottom))]
    return draft, trainable


def make_batches(examples: list[dict], batch_tokens: int, rng: random.Random) -> list[list[dict]]:
    """Length-bucketed batches of at most `batch_tokens` padded tokens, in random order."""
    order = sorted(examples, key=lambda e: len(e["prompt"]) + len(e["speech"]) + rng.random())
    batches, current, longest = [], [], 0
    for example in order:
        length = len(example["prompt"]) + len(example["speech"])
        if current and max(longest, length) * (len(current) + 1) > batch_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(example)
        longest = max(longest, length)
    if current:
        batches.append(current)
    rng.shuffle(batches)
    return batches


def collate(batch: list[dict], layout: VocabLayout) -> dict[str, torch.Tensor]:
    """input_ids / attention_mask / labels. Labels cover what the model samples at inference (speech
    tokens and NEXT): the prompt, the padding and the tokens the decoder inserts are ignored."""
    sequences = [e["prompt"] + e["speech"] for e in batch]
    width = max(len(s) for s in sequences)
    input_ids = torch.full((len(batch), width), layout.pad_id, dtype=torch.long)
    labels = torch.full((len(batch), width), IGNORE, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for row, (example, seq) in enumerate(zip(batch, sequences)):
        input_ids[row, : len(seq)] = torch.tensor(seq)
        mask[row, : len(seq)] = 1
        start = len(example["prompt"])
        stream = torch.tensor(seq[start:])
        sampled = (stream >= layout.speech_offset) | (stream == layout.next_phoneme_id)  # the rest is inserted
        labels[row, start : len(seq)] = stream.masked_fill(~sampled, IGNORE)
    return {"input_ids": input_ids, "attention_mask": mask, "labels": labels}


def model_device(model) -> torch.device:
    return next(model.parameters()).device


def to_device(tensors: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """A collated batch on the model's device (a no-op on the CPU)."""
    return {name: tensor.to(device, non_blocking=True) for name, tensor in tensors.items()}


def cross_entropy(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), batch["labels"][:, 1:].flatten(), ignore_index=IGNORE)


def with_noisy_speech_inputs(batch: dict[str, torch.Tensor], layout: VocabLayout, rate: float,
                             generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
    """The batch with each speech token of the model's input replaced by a random speech token with probability
    `rate`; labels unchanged. Why: a target that can predict the next frame from the frames before it learns to
    ignore the text (teacher-forced it speaks well, free-running it babbles); with its own history unreliable, it
    must read the phoneme it is told it is speaking (as Tacotron's always-on pre-net dropout does)."""
    ids = batch["input_ids"]
    speech = ids >= layout.speech_offset
    hit = speech & (torch.rand(ids.shape, generator=generator) < rate).to(ids.device)  # drawn on the CPU
    noise = torch.randint(layout.speech_offset, layout.vocab_size, ids.shape, generator=generator).to(ids.device)
    return {**batch, "input_ids": torch.where(hit, noise, ids)}


def codebook_neighbours(codebook, count: int) -> torch.Tensor:
    """[codes, count] the `count` nearest other centroids of each centroid (Euclidean), nearest first."""
    centroids = torch.as_tensor(codebook, dtype=torch.float32)
    distances = torch.cdist(centroids, centroids)
    distances.fill_diagonal_(float("inf"))
    return distances.topk(count, dim=1, largest=False).indices


def with_neighbour_runs(batch: dict[str, torch.Tensor], layout: VocabLayout, rate: float, neighbours: torch.Tensor,
                        generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
    """The batch with each run of one repeated speech token in the model's input replaced, with probability
    `rate`, by one of that code's nearest centroids (`neighbours`, [codes, k]) for the whole run; labels unchanged.

    Why: free-running, a target's mistake is a nearby code held for a whole run (a phoneme's frames share one
    prior-latent code), and what it predicts next then rests on that mistake. Measured: 800 steps at rate 0.5
    did not make a target without phoneme lookahead intelligible (docs/benchmarks.md); kept as an option."""
    ids = batch["input_ids"]
    speech = ids >= layout.speech_offset
    previous = torch.cat([torch.full_like(ids[:, :1], -1), ids[:, :-1]], dim=1)
    starts = speech & (ids != previous)
    run = torch.cumsum(starts.flatten().long(), 0).view(ids.shape)  # one number per run (per batch)
    runs = int(run.max()) + 1
    hit = (torch.rand(runs, generator=generator) < rate).to(ids.device)[run] & speech
    pick = torch.randint(0, neighbours.shape[1], (runs,), generator=generator).to(ids.device)[run]
    codes = (ids - layout.speech_offset).clamp(min=0)
    swapped = neighbours.to(ids.device)[codes, pick] + layout.speech_offset
    return {**batch, "input_ids": torch.where(hit, swapped, ids)}


def distillation_kl(draft, target, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mean over speech positions of KL(target || draft), both at temperature 1."""
    with torch.no_grad():
        teacher = target(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1].float()
    student = draft(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1].float()
    keep = batch["labels"][:, 1:] != IGNORE
    teacher_logp = F.log_softmax(teacher[keep], dim=-1)
    student_logp = F.log_softmax(student[keep], dim=-1)
    return F.kl_div(student_logp, teacher_logp, log_target=True, reduction="batchmean")


@torch.no_grad()
def evaluate_ce(model, examples: list[dict], layout: VocabLayout, batch_tokens: int) -> float:
    """Teacher-forced cross-entropy (nats per speech token) on `examples`."""
    model.eval()
    device = model_device(model)
    total, count = 0.0, 0
    for batch in make_batches(examples, batch_tokens, random.Random(0)):
        tensors = to_device(collate(batch, layout), device)
        n = int((tensors["labels"][:, 1:] != IGNORE).sum())
        with autocast(device):
            total += float(cross_entropy(model, tensors)) * n
        count += n
    model.train()
    return total / max(count, 1)


def optimizer_step(loss: torch.Tensor, params, optimizer, max_norm: float = 1.0) -> None:
    """One update from `loss`: gradients of `params`, clipped to `max_norm`, applied by `optimizer`."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, max_norm)
    optimizer.step()


def lr_at(step: int, config: StageConfig) -> float:
    if step < config.warmup:
        return config.lr * (step + 1) / config.warmup
    progress = (step - config.warmup) / max(1, config.steps - config.warmup)
    return config.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))


def _select_trainable(model: torch.nn.Module, trainable: list[str] | None) -> list[torch.nn.Parameter]:
    """Freeze every parameter not named in `trainable` (None: train all); return those that train."""
    names = set(trainable) if trainable is not None else None
    params = []
    for pname, param in model.named_parameters():
        param.requires_grad_(names is None or pname in names)
        if param.requires_grad:
            params.append(param)
    return params


@dataclass
class _Progress:
    step: int = 0
    losses: list = field(default_factory=list)  # (step, mean loss over the last 25 steps)
    elapsed: float = 0.0


def _resume(path: Path, model, optimizer, progress: _Progress) -> bool:
    if not path.exists():
        return False
    state = torch.load(path, weights_only=False, map_location=model_device(model))
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    progress.step, progress.losses, progress.elapsed = state["step"], state["losses"], state["elapsed"]
    return True


def _save_checkpoint(path: Path, model, optimizer, progress: _Progress) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": progress.step,
                "losses": progress.losses, "elapsed": progress.elapsed}, tmp)
    tmp.replace(path)  # atomic: an interruption never leaves a torn checkpoint


def _batches_up_to(step: int, train_examples: list[dict], config: StageConfig, rng: random.Random) -> list[list[dict]]:
    """Whole epochs of batches covering `step`: replaying the order, a resumed run sees the same data stream."""
    batches: list[list[dict]] = []
    while len(batches) <= step:
        batches.extend(make_batches(train_examples, config.batch_tokens, rng))
    return batches


def train_stage(
    name: str,
    model: LlamaForCausalLM,
    loss_fn: Callable[[dict[str, torch.Tensor]], torch.Tensor],
    trainable: list[str] | None,
    train_examples: list[dict],
    layout: VocabLayout,
    config: StageConfig,
    out_dir: Path,
    log=print,
) -> dict:
    """Train `model` in place; checkpoints to out_dir/<name>/checkpoint.pt and resumes from it."""
    stage_dir = out_dir / name
    stage_dir.mkdir(parents=True, exist_ok=True)
    checkpoint_path = stage_dir / "checkpoint.pt"
    params = _select_trainable(model, trainable)
    optimizer = torch.optim.AdamW(params, lr=config.lr, betas=(0.9, 0.98), weight_decay=config.weight_decay)
    progress = _Progress()
    if _resume(checkpoint_path, model, optimizer, progress):
        log(f"{name}: resumed at step {progress.step}")
    model.train()
    device = model_device(model)
    epoch_rng = random.Random(config.seed)
    batches = _batches_up_to(progress.step, train_examples, config, epoch_rng)
    start = time.perf_counter() - progress.elapsed
    stopped_early = False
    window: list[float] = []
    while progress.step < config.steps:
        if config.max_minutes and (time.perf_counter() - start) / 60 > config.max_minutes:
            stopped_early = True
            log(f"{name}: time budget of {config.max_minutes} min reached at step {progress.step}")
            break
        while progress.step >= len(batches):
            batches.extend(make_batches(train_examples, config.batch_tokens, epoch_rng))
        tensors = to_device(collate(batches[progress.step], layout), device)
        for group in optimizer.param_groups:
            group["lr"] = lr_at(progress.step, config)
        with autocast(device):
            loss = loss_fn(tensors)
        optimizer_step(loss, params, optimizer)
        progress.step += 1
        window.append(loss.item())
        step = progress.step
        if step % 25 == 0 or step == config.steps:
            progress.losses.append((step, sum(window) / len(window)))
            progress.elapsed = time.perf_counter() - start
            log(f"{name}: step {step}/{config.steps} loss {progress.losses[-1][1]:.4f} lr {lr_at(step, config):.2e} "
                f"{progress.elapsed:.0f} s")
            window = []
        if step % config.checkpoint_every == 0:
            progress.elapsed = time.perf_counter() - start
            _save_checkpoint(checkpoint_path, model, optimizer, progress)
    progress.elapsed = time.perf_counter() - start
    _save_checkpoint(checkpoint_path, model, optimizer, progress)
    for param in model.parameters():
        param.requires_grad_(True)
    losses = progress.losses
    summary = {"steps": progress.step, "planned_steps": config.steps, "stopped_early": stopped_early,
               "wall_seconds": round(progress.elapsed, 1), "final_loss": losses[-1][1] if losses else None,
               "losses": losses, "config": asdict(config)}
    (stage_dir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


@torch.no_grad()
def warm_start(model: LlamaForCausalLM, source: LlamaForCausalLM, source_layout: dict, layout: VocabLayout) -> list[str]:
    """Copy a trained voice's weights into `model` where they mean the same thing; returns what was copied.

    Transformer layers and the final norm are copied when their shapes match. When both voices have the
    same vocabulary layout (a continued run) the embedding and output tables are copied whole; across
    layouts the rows of the shared specials are copied by id, the speech tokens' only when both voices' codes
    are of one codebook (the same codec; codes relative to the phoneme mean another sound per code), and the
    phoneme rows only when both have as many symbols (the phonemizer's one table); otherwise they stay freshly
    initialised: a new inventory or codebook has no row-by-row match in an old one.
    """
    copied = []
    target_state = model.state_dict()
    same_layout = VocabLayout.from_dict(source_layout).to_dict() == layout.to_dict()
    for name, tensor in source.state_dict().items():
        if name not in target_state or (name in ("model.embed_tokens.weight", "lm_head.weight") and not same_layout):
            continue
        if target_state[name].shape == tensor.shape:
            target_state[name].copy_(tensor)
            copied.append(name)
    if same_layout:
        model.load_state_dict(target_state)
        return copied
    n_speech = min(layout.n_speech, int(source_layout["n_speech"]))
    old_speech = int(source_layout["speech_offset"])
    same_codes = not layout.symbol_codes and not source_layout.get("symbol_codes", False)
    same_symbols = layout.n_phonemes == int(source_layout["n_phonemes"])
    specials = ["pad_id", "bos_id", "speech_start_id", "end_of_speech_id"] + (["next_phoneme_id"] if same_symbols else [])
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        new, old = target_state[name], source.state_dict()[name]
        if new.shape[1] != old.shape[1]:
            continue
        rows = []
        if same_codes:
            new[layout.speech_offset : layout.speech_offset + n_speech] = old[old_speech : old_speech + n_speech]
            rows.append("speech")
        if same_symbols:
            old_phonemes = int(source_layout["phoneme_offset"])
            new[layout.phoneme_offset : layout.speech_offset] = old[old_phonemes : old_phonemes + layout.n_phonemes]
            rows.append("phoneme")
        for special in specials:
            new[getattr(layout, special)] = old[int(source_layout[special])]
        copied.append(f"{name} ({', '.join([*rows, 'special'])} rows)")
    model.load_state_dict(target_state)
    return copied
