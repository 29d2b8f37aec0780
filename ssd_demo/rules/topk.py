"""A rank-based tolerance: keep a drafted token the target ranks among its top k."""

from __future__ import annotations

import torch

from .base import Block
from .exact import ExactRule


class TopKRule(ExactRule):
    """Keep a drafted token that is among the target's k most likely (a VADUSA-style tolerance), ranked in the
    processed distribution (with `untempered_token_ids`, those ids' temperature-1 probability counts).

    Otherwise fall back to the exact ratio test. Guarantee: approximate (tokens the target
    ranks in its top-k are over-represented); k = 1 under greedy decoding is exact greedy.
    """

    name = "topk"
    guarantee = "approximate; k = 1 with greedy decoding equals exact greedy"

    def _in_top_k(self, block: Block) -> torch.Tensor:
        k = block.drafted.shape[0]
        scores = block.target_scores[:k]
        drafted_score = scores.gather(1, block.drafted[:, None])
        # Rank = number of tokens scored strictly higher; in top-k iff rank < k and the token is allowed.
        rank = (scores > drafted_score).sum(dim=-1)
        return (rank < self.config.topk_tolerance) & torch.isfinite(drafted_score[:, 0])

    def accept_probability(self, block: Block) -> torch.Tensor:
        exact = super().accept_probability(block)
        return torch.where(self._in_top_k(block), torch.ones_like(exact), exact)

    def expected_acceptance(self, block: Block) -> torch.Tensor:
        k = block.drafted.shape[0]
        p, q = block.draft_probs, block.target_probs[:k]
        scores = block.target_scores[:k]
        kth = torch.topk(scores, min(self.config.topk_tolerance, scores.shape[-1]), dim=-1).values[:, -1:]
        in_top = (scores >= kth) & torch.isfinite(scores)
        per_token = torch.where(in_top, p, torch.minimum(p, q))
        return per_token.sum(dim=-1)
