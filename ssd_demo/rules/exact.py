"""Exact speculative sampling: the rule every other rule starts from."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from .base import TINY, Block

if TYPE_CHECKING:
    from ..config import DecodingConfig


class ExactRule:
    """Exact speculative sampling (Leviathan et al. 2023; Chen et al. 2023).

    Guarantee: the output has exactly the target's (processed) distribution.
    Under greedy decoding a drafted token is kept iff it is the target's argmax, so the
    output equals greedy AR decoding token for token.
    """

    name = "exact"
    guarantee = "exact: output distribution equals the target's"

    def __init__(self, config: DecodingConfig):
        self.config = config

    def _drafted_probs(self, block: Block) -> tuple[torch.Tensor, torch.Tensor]:
        k = block.drafted.shape[0]
        index = block.drafted[:, None]
        p = block.draft_probs.gather(1, index)[:, 0]
        q = block.target_probs[:k].gather(1, index)[:, 0]
        return p, q

    def accept_probability(self, block: Block) -> torch.Tensor:
        p, q = self._drafted_probs(block)
        # p(x) > 0 for any sampled x; the clamp only guards against a 0/0 in degenerate input.
        return torch.clamp(q / p.clamp_min(TINY), max=1.0)

    def expected_acceptance(self, block: Block) -> torch.Tensor:
        k = block.drafted.shape[0]
        return torch.minimum(block.draft_probs, block.target_probs[:k]).sum(dim=-1)

    def residual(self, block: Block, position: int) -> torch.Tensor:
        q = block.target_probs[position]
        residual = torch.clamp(q - block.draft_probs[position], min=0.0)
        total = residual.sum()
        # All-zero residual happens only when p == q (up to rounding), where a rejection has
        # probability zero; falling back to q keeps the output distribution correct.
        if float(total) <= TINY:
            return q
        return residual / total
