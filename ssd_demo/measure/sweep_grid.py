"""The speed-fidelity sweep's grid: which decoding systems the map compares, and where each sits on it.

"ssd" over beta; "pcg" over theta, chosen so that the mean group size takes given values (theta itself means
little across embedding tables); "topk" over k; exact speculative sampling at fixed K against adaptive K.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import InputError
from ..speech.system import DecodingSystem


@dataclass(frozen=True)
class SweepSetting:
    """One setting of the grid: a speculative decoding system, its rule family (one line of the map) and the
    value swept along that line (its name for the table: "beta", "group size", "k", "K", "K max")."""

    system: DecodingSystem
    rule: str  # "ssd" | "pcg" | "topk" | "exact-K" | "exact-adaptive"
    parameter: str
    value: float

    @property
    def label(self) -> str:
        return self.system.label


def grid_setting(label: str, rule: str, parameter: str, value: float, **overrides) -> SweepSetting:
    """A setting of the grid: the speculative system `label` with `overrides`, on the `rule` line at `value`."""
    return SweepSetting(DecodingSystem.speculative(label, **overrides), rule, parameter, value)


def theta_for_group_size(embeddings: torch.Tensor, mean_size: float, sample: int = 2048, seed: int = 0) -> float:
    """Cosine threshold whose groups have about `mean_size` members on average.

    Mean group size = 1 + (n - 1) P(cos > theta), so theta is the matching quantile of the
    off-diagonal cosine similarities (estimated on a random sample of tokens).
    """
    n = embeddings.shape[0]
    generator = torch.Generator().manual_seed(seed)
    rows = torch.randperm(n, generator=generator)[: min(sample, n)]
    normed = torch.nn.functional.normalize(embeddings.float(), dim=-1)
    sims = normed[rows] @ normed.T
    sims[torch.arange(len(rows)), rows] = float("-inf")  # drop self-similarity
    share = min(max((mean_size - 1) / (n - 1), 0.0), 1.0)
    values = sims[torch.isfinite(sims)].flatten()
    if values.numel() > 4_000_000:
        values = values[torch.randperm(values.numel(), generator=generator)[:4_000_000]]
    return float(torch.quantile(values, 1 - share))


def default_settings(synth, quick: bool = False) -> list[SweepSetting]:
    """The grid: SSD betas, PCG group sizes, top-k tolerances, fixed vs adaptive K."""
    base_k = synth.config().draft_len
    speech = [t for t in synth.backend.allowed_token_ids() if t != synth.backend.eos_token_id]
    embeddings = synth.grouping_embeddings()[speech]
    betas = (0.0, 0.3) if quick else (0.0, 0.1, 0.2, 0.3, 0.5)
    sizes = (4.0, 16.0) if quick else (2.0, 4.0, 6.0, 8.0, 12.0, 16.0, 32.0)
    ks = (3,) if quick else (2, 3, 5)
    settings = [grid_setting(f"ssd beta={b:g}", "ssd", "beta", b, acceptance="ssd", beta=b) for b in betas]
    for size in sizes:
        theta = theta_for_group_size(embeddings, size)
        settings.append(grid_setting(f"pcg groups~{size:g} (theta={theta:.3f})", "pcg", "group size", size,
                                     acceptance="pcg", pcg_theta=theta, beta=0.0))
    settings += [grid_setting(f"topk k={k}", "topk", "k", k, acceptance="topk", topk_tolerance=k, beta=0.0)
                 for k in ks]
    fixed = (2, base_k) if quick else sorted({2, 3, base_k, 6, 8})
    settings += [grid_setting(f"exact fixed K={k}", "exact-K", "K", k, acceptance="exact", draft_len=k) for k in fixed]
    settings.append(grid_setting("exact adaptive K<=8", "exact-adaptive", "K max", 8,
                                 acceptance="exact", draft_len=8, adaptive_draft_len=True))
    return settings


def chosen_rules(settings: list[SweepSetting], rules: list[str] | None) -> list[SweepSetting]:
    """The grid's settings of `rules` (None: all); InputError naming a rule the grid does not have."""
    if not rules:
        return settings
    unknown = set(rules) - {s.rule for s in settings}
    if unknown:
        raise InputError(f"unknown rule(s) {sorted(unknown)}; the grid has {sorted({s.rule for s in settings})}")
    return [s for s in settings if s.rule in set(rules)]
