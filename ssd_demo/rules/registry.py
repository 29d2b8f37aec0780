"""The one list of acceptance rules: names, guarantees, help text and how to build each.

Config validation, the app's rule menu and its help line, the CLI and the sweep all read this list;
adding a rule is one module plus one entry here (and its name in names.py, which config reads without
loading the rules).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from ..errors import InvalidSettingError
from .base import AcceptanceRule
from .names import RULE_NAMES
from .exact import ExactRule
from .pcg import GroupRule
from .ssd import ToleranceRule
from .topk import TopKRule

if TYPE_CHECKING:
    from ..config import DecodingConfig


@dataclass(frozen=True)
class RuleSpec:
    name: str
    build: Callable[..., AcceptanceRule]
    guarantee: str
    help: str  # one line for the app, next to the rule menu
    needs_embeddings: bool = False  # built from a token embedding table (make_rule's `embeddings`)
    uses_beta: bool = False  # reads the tolerance beta; the other rules ignore it (their own guarantee holds)


RULES: dict[str, RuleSpec] = {spec.name: spec for spec in (
    RuleSpec("exact", ExactRule, ExactRule.guarantee,
             "exact speculative sampling: output distribution identical to the target's (β ignored)"),
    RuleSpec("ssd", ToleranceRule, ToleranceRule.guarantee, "SSD: accept if r < min(1, q/p) + β; β = 0 is exact",
             uses_beta=True),
    RuleSpec("topk", TopKRule, TopKRule.guarantee, "accept a drafted token when it is among the target's top-k tokens"),
    RuleSpec("pcg", GroupRule, GroupRule.guarantee, "accept by groups of acoustically similar tokens (cosine > θ)",
             needs_embeddings=True),
)}
if tuple(RULES) != RULE_NAMES:  # names.py is what config validates against; it must list these, in order
    raise ImportError(f"rules/names.py lists {RULE_NAMES}, the registry has {tuple(RULES)}")


def make_rule(config: DecodingConfig, embeddings: torch.Tensor | None = None) -> AcceptanceRule:
    """The rule named by config.acceptance, built from `config` as it is; "pcg" needs `embeddings` [V, d].

    beta is read by the ssd rule alone (`RuleSpec.uses_beta`): exact, topk and pcg ignore whatever beta the
    config holds, so "exact" stays exact at any beta (the app's β slider may stay where it is)."""
    spec = RULES.get(config.acceptance)
    if spec is None:
        raise InvalidSettingError(f"unknown acceptance rule {config.acceptance!r}; choose from {', '.join(RULE_NAMES)}")
    if spec.needs_embeddings:
        if embeddings is None:
            raise ValueError(f"the {spec.name} rule needs a token embedding table (make_rule(..., embeddings=...))")
        return spec.build(config, embeddings)
    return spec.build(config)
