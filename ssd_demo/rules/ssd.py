"""The SSD tolerance rule (the paper this project implements)."""

from __future__ import annotations

import torch

from .base import Block
from .exact import ExactRule


class ToleranceRule(ExactRule):
    """SSD (Lin et al. 2025, arXiv 2505.15380): accept x_i iff r_i < min(1, q/p) + beta.

    Guarantee: approximate. beta = 0 is exact speculative sampling; beta > 0 keeps more
    draft tokens (faster) and shifts the output towards the draft; beta = 1 (the largest) keeps every
    drafted token. The residual is unchanged by beta. Under greedy decoding beta does not
    apply (greedy is deterministic): a token is kept iff it is the target's argmax.
    """

    name = "ssd"
    guarantee = "approximate for beta > 0; exact at beta = 0"

    def accept_probability(self, block: Block) -> torch.Tensor:
        exact = super().accept_probability(block)
        if self.config.greedy:
            return exact
        return torch.clamp(exact + self.config.beta, max=1.0)

    def expected_acceptance(self, block: Block) -> torch.Tensor:
        if self.config.greedy:
            return super().expected_acceptance(block)
        k = block.drafted.shape[0]
        p, q = block.draft_probs, block.target_probs[:k]
        # sum_x p(x) min(1, q(x)/p(x) + beta) = sum_x min(p(x), q(x) + beta p(x))
        return torch.minimum(p, q + self.config.beta * p).sum(dim=-1)
