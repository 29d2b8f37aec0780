"""Acceptance rules: which drafted tokens the target keeps, and what replaces a rejected one.

A rule sees one verified block and answers three questions:
  accept_probability  P(keep x_i | x_i, p_i, q_i) for each drafted token,
  residual            the distribution the replacement is drawn from after a rejection,
  expected_acceptance E_{x~p_i}[P(keep x)] per position (the "alpha" of the speedup formula).
Rules differ in what they guarantee about the output distribution; each says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .config import DecodingConfig

_TINY = 1e-12


@dataclass
class Block:
    """One verified block. K drafted tokens; the target has K+1 rows (the last one for the bonus)."""

    drafted: torch.Tensor  # [K] long
    draft_probs: torch.Tensor  # [K, V] p_i, the distributions the draft sampled from
    target_probs: torch.Tensor  # [K+1, V] q_i, processed exactly like p_i
    target_scores: torch.Tensor  # [K+1, V] processed target scores (for rank-based rules)
    # Per-block values a rule derives once and reuses across its three questions (e.g. group masses).
    derived: dict = field(default_factory=dict)


class AcceptanceRule:
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
        return torch.clamp(q / p.clamp_min(_TINY), max=1.0)

    def expected_acceptance(self, block: Block) -> torch.Tensor:
        k = block.drafted.shape[0]
        return torch.minimum(block.draft_probs, block.target_probs[:k]).sum(dim=-1)

    def residual(self, block: Block, position: int) -> torch.Tensor:
        q = block.target_probs[position]
        residual = torch.clamp(q - block.draft_probs[position], min=0.0)
        total = residual.sum()
        # All-zero residual happens only when p == q (up to rounding), where a rejection has
        # probability zero; falling back to q keeps the output distribution correct.
        if float(total) <= _TINY:
            return q
        return residual / total


class ToleranceRule(AcceptanceRule):
    """SSD (Lin et al. 2025, arXiv 2505.15380): accept x_i iff r_i < min(1, q/p) + beta.

    Guarantee: approximate. beta = 0 is exact speculative sampling; beta > 0 keeps more
    draft tokens (faster) and shifts the output towards the draft; beta >= 1 keeps every
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


class TopKRule(AcceptanceRule):
    """Keep a drafted token that is among the target's k most likely (a VADUSA-style tolerance).

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


RULES: dict[str, type[AcceptanceRule]] = {
    "exact": AcceptanceRule,
    "ssd": ToleranceRule,
    "topk": TopKRule,
}


def make_rule(config: DecodingConfig, target=None) -> AcceptanceRule:
    """The rule named by config.acceptance. "exact" ignores beta; rules needing the target get it."""
    if config.acceptance == "exact" and config.beta != 0:
        config = config.with_(beta=0.0)
    if config.acceptance == "pcg":
        from .groups import GroupRule  # needs the target's embeddings

        return GroupRule(config, target)
    try:
        return RULES[config.acceptance](config)
    except KeyError:
        raise ValueError(f"unknown acceptance rule {config.acceptance!r}") from None
