"""The tolerance rule on a verified batch, in plain torch (any device): accept x_i when
u_i < min(1, q_i(x_i) / p_i(x_i)) + beta, else draw the replacement from norm(max(0, q_i - p_i)).

The same rule as the ssd_demo engine's `ssd` acceptance (ssd_demo/rules/ssd.py, exact.py): p is the draft's
distribution, q the target's, both after temperature (vLLM drafts with temperature only, so top-k/top-p must be
off for the two to match); an all-zero residual falls back to q; beta = 0 is exact speculative sampling.
Random requests only; greedy ones keep vLLM's argmax rule (beta does not apply to greedy, as in ssd_demo).
"""

from __future__ import annotations

import torch

#: Below this a probability mass counts as zero (as ssd_demo.rules.base.TINY).
TINY = 1e-12
PLACEHOLDER = -1  # vLLM's PLACEHOLDER_TOKEN_ID: an unused output slot


def accept_probability(drafted: torch.Tensor, draft_probs: torch.Tensor | None, target_probs: torch.Tensor,
                       beta: float | torch.Tensor) -> torch.Tensor:
    """[N] min(1, min(1, q/p) + beta) per drafted token (beta: one number, or [N] one per drafted token, its
    request's); 0 for padding (-1), for p(x) = 0 and for q(x) = 0.

    q(x) = 0: a token the target cannot emit (outside its allowed-token mask, or cut by its top-k/top-p). In
    ssd_demo the draft is processed like the target, so it never proposes one; vLLM's draft applies only the
    temperature, and beta must not let such a token through (a Llasa target would emit a text token)."""
    safe = drafted.clamp_min(0)[:, None]
    q = target_probs.gather(1, safe)[:, 0]
    p = torch.ones_like(q) if draft_probs is None else draft_probs.gather(1, safe)[:, 0].float()
    ratio = torch.clamp(q / p.clamp_min(TINY), max=1.0).double()
    keep = torch.clamp(ratio + beta, max=1.0)
    return torch.where((drafted >= 0) & (p > 0) & (q > 0), keep, torch.zeros_like(keep))


def residuals(drafted: torch.Tensor, draft_probs: torch.Tensor | None, target_probs: torch.Tensor) -> torch.Tensor:
    """[N, V] max(0, q - p), or q where that is all zero (a rejection there has probability zero).
    Without draft probabilities the draft is a point mass on x, so the residual is q with x removed."""
    if draft_probs is None:
        draft_probs = torch.zeros_like(target_probs).scatter_(1, drafted.clamp_min(0)[:, None], 1.0)
    residual = torch.clamp(target_probs - draft_probs.float(), min=0.0)
    empty = residual.sum(dim=-1, keepdim=True) <= TINY
    return torch.where(empty, target_probs, residual)


def recovered_tokens(residual: torch.Tensor, num_draft_tokens: list[int], generators: dict) -> torch.Tensor:
    """[N] one draw per row from the (unnormalised) residual: argmax of residual / Exp(1) noise (the exponential
    race, exact). A seeded request draws its rows' noise from its own generator."""
    noise = torch.empty_like(residual).exponential_()
    start = 0
    for index, count in enumerate(num_draft_tokens):
        generator = generators.get(index)
        if generator is not None and count > 0:
            noise[start:start + count].exponential_(generator=generator)
        start += count
    return (residual / noise).argmax(dim=-1)


def place(accepted: torch.Tensor, drafted: torch.Tensor, recovered: torch.Tensor, bonus: torch.Tensor,
          num_draft_tokens: list[int], max_spec_len: int) -> torch.Tensor:
    """[B, max_spec_len + 1] int32 rows as vLLM's sampler returns them: the accepted prefix, then the
    replacement at the first rejection or the bonus token when every drafted token passed, then -1."""
    device = drafted.device
    batch = len(num_draft_tokens)
    counts = torch.tensor(num_draft_tokens, dtype=torch.long, device=device)
    output = torch.full((batch, max_spec_len + 1), PLACEHOLDER, dtype=torch.int32, device=device)
    rows = torch.arange(batch, device=device)
    if drafted.numel() == 0:
        output[:, 0] = bonus.reshape(batch).to(torch.int32)
        return output
    starts = torch.cumsum(counts, 0) - counts
    positions = torch.arange(max_spec_len, device=device)
    in_range = positions[None, :] < counts[:, None]
    index = torch.where(in_range, starts[:, None] + positions[None, :], torch.zeros_like(in_range, dtype=torch.long))
    passed = accepted[index] & in_range
    kept = passed.long().cumprod(dim=1).sum(dim=1)  # leading accepted tokens per request
    prefix = positions[None, :] < kept[:, None]
    output[:, :max_spec_len] = torch.where(prefix, drafted[index].to(torch.int32), output[:, :max_spec_len])
    rejected = kept < counts
    at = (starts + kept).clamp(max=drafted.numel() - 1)
    last = torch.where(rejected, recovered[at].long(), bonus.reshape(batch).long())
    output[rows, kept] = last.to(torch.int32)
    return output


def tolerance_sample(drafted: torch.Tensor, num_draft_tokens: list[int], max_spec_len: int,
                     draft_probs: torch.Tensor | None, target_logits: torch.Tensor, bonus: torch.Tensor,
                     generators: dict, beta: float | torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """The whole verify step for random requests (every row is treated as random); `beta` as in
    `accept_probability`."""
    drafted = drafted.long()
    target_probs = target_logits.softmax(dim=-1, dtype=torch.float32)
    accepted = uniforms < accept_probability(drafted, draft_probs, target_probs, beta)
    recovered = recovered_tokens(residuals(drafted, draft_probs, target_probs), num_draft_tokens, generators)
    return place(accepted, drafted, recovered, bonus, num_draft_tokens, max_spec_len)
