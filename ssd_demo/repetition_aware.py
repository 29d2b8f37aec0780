"""Repetition-aware sampling (RAS, from VALL-E 2, CosyVoice 2's default) as a next-token distribution.

CosyVoice 2 samples a speech token by nucleus sampling (top-p 0.8 within the top 25) and, when the
sampled token already occurs often in the last `win_size` generated tokens (at least win_size x
tau_r times: once, at the defaults), throws it away and samples again from the full distribution;
before `min_len` tokens it also re-draws any stop token. Written as what those steps produce, the
next token's distribution depends only on the tokens generated so far:

    q(x) = nucleus(x) [x not over-repeated] + (nucleus mass of the over-repeated tokens) full(x)
    (before min_len: stop ids get 0 and the rest is renormalised: re-drawing until not a stop)

so speculative sampling stays exact when the draft's proposals and the target's verify rows are
both passed through it, each row with its own prefix (`decoding` hands each row the generated
tokens before it). A strategy handed to the decoders as `prefix_distribution=`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class RepetitionAwareSampling:
    top_p: float = 0.8
    top_k: int = 25
    win_size: int = 10
    tau_r: float = 0.1
    stop_ids: tuple[int, ...] = ()  # never drawn while fewer than `min_len` tokens were generated
    min_len: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.top_p <= 1 or self.top_k < 1 or self.win_size < 1 or not 0 < self.tau_r <= 1:
            raise ValueError(f"invalid repetition-aware sampling settings: {self}")

    def __call__(self, scores: torch.Tensor, prefixes: list[list[int]]) -> torch.Tensor:
        """[N, V] scores (-inf = not allowed) and each row's generated tokens -> [N, V] probabilities."""
        full = torch.softmax(scores.float(), dim=-1)  # [N, V]
        nucleus = _nucleus(full, self.top_p, self.top_k)  # [N, V]
        out = torch.empty_like(full)
        threshold = self.win_size * self.tau_r
        for row, prefix in enumerate(prefixes):
            window = torch.tensor(prefix[-self.win_size:], dtype=torch.long, device=full.device)
            counts = torch.bincount(window, minlength=full.shape[-1])[: full.shape[-1]] if len(window) else None
            q = nucleus[row].clone()  # [V]
            if counts is not None:
                repeated = counts >= threshold  # [V]
                mass = q[repeated].sum()
                q = q.masked_fill(repeated, 0.0) + mass * full[row]
            if len(prefix) < self.min_len and self.stop_ids:
                q[list(self.stop_ids)] = 0.0
                total = q.sum()
                if total > 0:
                    q = q / total
            out[row] = q
        return out


def _nucleus(probs: torch.Tensor, top_p: float, top_k: int) -> torch.Tensor:
    """CosyVoice's nucleus: the most likely tokens, in order, while the mass before each is below top_p
    and fewer than top_k are taken; renormalised. [N, V] -> [N, V]."""
    sorted_probs, order = torch.sort(probs, dim=-1, descending=True, stable=True)
    before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
    rank = torch.arange(probs.shape[-1], device=probs.device)
    keep_sorted = (before < top_p) & (rank < top_k)
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    kept = probs * keep
    return kept / kept.sum(dim=-1, keepdim=True)


__all__ = ["RepetitionAwareSampling"]
