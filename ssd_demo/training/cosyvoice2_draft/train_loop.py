"""Step 3: the training loop, checkpointed in OUT every N steps and resumed from there by the next run.

A resumed run sees the same batches, learning rates and random numbers as an uninterrupted one, so it ends
with the same draft.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import torch
from tqdm import tqdm

from ..train import lr_at, optimizer_step
from .draft import LOSSES, collate
from .recipe import CHECKPOINT_FILE, DraftRecipe, save_atomic
from ...errors import InputError


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
          out: Path, key: dict, deadline: float, log=print, loss: str = "kl_on_target_generations") -> dict:
    """Train the draft's trained tensors in place with `loss` (`draft.LOSSES`: distil the target on its
    generations, or cross-entropy on provided data); checkpoints OUT/draft_checkpoint.pt and resumes from it.
    Returns the training summary."""
    loss_fn = LOSSES[loss]
    stage = recipe.stage
    path = out / CHECKPOINT_FILE
    trained = dict(draft.named_parameters())
    params = [trained[name] for name in names]
    optimizer = torch.optim.AdamW(params, lr=stage.lr, betas=(0.9, 0.98), weight_decay=stage.weight_decay)
    step, losses, elapsed, resumed_from = 0, [], 0.0, None
    if path.exists():
        state = torch.load(path, map_location="cpu", weights_only=False)
        if state.get("key") != key or sorted(state["trainable"]) != sorted(names):
            raise InputError(f"{path} is a checkpoint of another target, data or draft; use another --out or delete it")
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
        save_atomic({"trainable": {name: trained[name].detach().cpu() for name in names},
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
                value = loss_fn(draft, target_model, batch)
            optimizer_step(value, params, optimizer)
            step += 1
            window.append(value.item())
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
