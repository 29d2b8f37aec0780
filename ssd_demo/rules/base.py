"""What every acceptance rule sees (one verified block) and the three questions it answers.

  accept_probability  P(keep x_i | x_i, p_i, q_i) for each drafted token,
  residual            the distribution the replacement is drawn from after a rejection,
  expected_acceptance E_{x~p_i}[P(keep x)] per position (the "alpha" of the speedup formula).
Rules differ in what they guarantee about the output distribution; each says so in `guarantee`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import torch

#: Below this a probability mass counts as zero (guards 0/0 in degenerate input).
TINY = 1e-12


@dataclass
class Block:
    """One verified block. K drafted tokens; the target has K+1 rows (the last one for the bonus)."""

    drafted: torch.Tensor  # [K] long
    draft_probs: torch.Tensor  # [K, V] p_i, the distributions the draft sampled from
    target_probs: torch.Tensor  # [K+1, V] q_i, processed exactly like p_i
    target_scores: torch.Tensor  # [K+1, V] processed target scores (for rank-based rules)
    # Per-block values a rule derives once and reuses across its three questions (e.g. group masses).
    derived: dict = field(default_factory=dict)


@runtime_checkable
class AcceptanceRule(Protocol):
    """The strategy `speculative_generate` is handed: which drafted tokens the target keeps."""

    name: str
    guarantee: str

    def accept_probability(self, block: Block) -> torch.Tensor:  # [K]
        ...

    def expected_acceptance(self, block: Block) -> torch.Tensor:  # [K]
        ...

    def residual(self, block: Block, position: int) -> torch.Tensor:  # [V]
        ...
