"""Train draft heads on a frozen target (`draft_heads.DraftHeads`).

From every position t of a training sequence the heads start at the target's hidden state h_t and roll
forward over the next `unroll` tokens of the sequence; after j tokens their state should be the
target's h_{t+j} and their next-token distribution the target's. The loss is, for each j,
KL(target || heads) at temperature 1 over the positions whose next token the model samples (speech
tokens and NEXT, as in `train.collate`), plus a smooth-L1 pull of the state towards h_{t+j} (EAGLE's
feature loss: it keeps the rolled-forward state where the target's output layer reads it). Only the
heads learn; the target's embedding and output layer are shared, frozen.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..engine.draft_heads import DraftHeads, OutputInputCapture
from .train import optimizer_step
from ..errors import InputError

IGNORE = -100
FEATURE_WEIGHT = 0.1


def target_outputs(target, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The frozen target's logits [B, T, V] and the final hidden states its output layer read [B, T, d]."""
    capture = OutputInputCapture(target)
    try:
        with torch.no_grad():
            logits = target(input_ids=input_ids, attention_mask=attention_mask).logits
        return logits.float(), capture.hidden.float()
    finally:
        capture.close()


def heads_loss(heads: DraftHeads, target, batch: dict[str, torch.Tensor], unroll: int = 4,
               report: dict | None = None) -> torch.Tensor:
    """Mean over unroll steps of KL(target || heads) + FEATURE_WEIGHT * smooth-L1(state, target state).

    batch: input_ids, attention_mask, labels [B, T] (labels[p] != IGNORE where token p is sampled).
    `report`, when given, receives per-step expected acceptance sum_v min(p, q) (temperature 1).
    """
    ids, labels = batch["input_ids"], batch["labels"]
    logits, hidden = target_outputs(target, ids, batch["attention_mask"])
    embed = target.get_input_embeddings().weight.detach().float()
    output = target.get_output_embeddings()
    weight = output.weight.detach().float()
    bias = output.bias.detach().float() if getattr(output, "bias", None) is not None else None
    n = ids.shape[1] - unroll - 1  # start positions t = 0..n-1 with t + unroll + 1 inside the sequence
    if n < 1:
        raise InputError(f"sequences of {ids.shape[1]} tokens are too short to unroll {unroll} steps")
    state = hidden[:, :n]
    total = logits.new_zeros(())
    for j in range(1, unroll + 1):
        state = heads.step(state, embed[ids[:, j : j + n]])  # now at position t + j
        keep = labels[:, j + 1 : j + 1 + n] != IGNORE  # the token after t + j is sampled
        if not bool(keep.any()):
            continue
        teacher = F.log_softmax(logits[:, j : j + n][keep], dim=-1)
        student = F.log_softmax(F.linear(state[keep], weight, bias), dim=-1)
        kl = F.kl_div(student, teacher, log_target=True, reduction="batchmean")
        feature = F.smooth_l1_loss(state[keep], hidden[:, j : j + n][keep])
        total = total + kl + FEATURE_WEIGHT * feature
        if report is not None:
            with torch.no_grad():
                overlap = torch.minimum(student.exp(), teacher.exp()).sum(-1).mean()
            report.setdefault("acceptance", []).append(float(overlap))
    return total / unroll


@torch.no_grad()
def evaluate_heads(heads: DraftHeads, target, batches: list[dict[str, torch.Tensor]], unroll: int = 4) -> dict:
    """Held-out loss and the expected acceptance (temperature 1) after 1..unroll steps."""
    was_training = heads.training
    heads.eval()
    losses, acceptance = [], []
    for batch in batches:
        report: dict = {}
        losses.append(float(heads_loss(heads, target, batch, unroll, report)))
        acceptance.append(report.get("acceptance", []))
    heads.train(was_training)
    steps = max((len(a) for a in acceptance), default=0)
    per_step = [sum(a[j] for a in acceptance if len(a) > j) / max(1, sum(len(a) > j for a in acceptance))
                for j in range(steps)]
    return {"loss": sum(losses) / max(len(losses), 1), "expected_acceptance": [round(x, 4) for x in per_step]}


def train_heads_on_sequences(heads: DraftHeads, target, sequences: list[list[int]], steps: int, lr: float = 3e-3,
                             unroll: int = 4, batch_size: int = 16, seed: int = 0) -> list[float]:
    """A plain loop for small cases (tests, a quick look): sequences of ids, every next token counted.

    The embedded voice's recipe goes through `train.train_stage` (checkpoints, resume, schedules) instead.
    """
    generator = torch.Generator().manual_seed(seed)
    params = list(heads.parameters())
    optimizer = torch.optim.AdamW(params, lr=lr)
    width = max(len(s) for s in sequences)
    ids = torch.zeros(len(sequences), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = torch.tensor(seq)
        mask[row, : len(seq)] = 1
    labels = ids.masked_fill(mask == 0, IGNORE)
    labels[:, 0] = IGNORE
    heads.train()
    losses = []
    for _ in range(steps):
        rows = torch.randint(len(sequences), (min(batch_size, len(sequences)),), generator=generator)
        batch = {"input_ids": ids[rows], "attention_mask": mask[rows], "labels": labels[rows]}
        loss = heads_loss(heads, target, batch, unroll)
        optimizer_step(loss, params, optimizer, max_norm=float("inf"))  # unclipped: small, well-scaled cases
        losses.append(float(loss.detach()))
    heads.eval()
    return losses
