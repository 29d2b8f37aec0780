"""The one list of acceptance rules: names, guarantees, help text and how to build each.

Config validation, the app's rule menu and its help line, the command line's flags, the sweep and the vLLM
engine all read this list; adding a rule is one module and one entry here (and its test). The list names each
rule's class by module, imported when the rule is first built, so that config reads the names without loading
the rules (and torch).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from typing import TYPE_CHECKING

from ..errors import InvalidSettingError

if TYPE_CHECKING:
    import torch

    from ..config import DecodingConfig
    from .base import AcceptanceRule


@dataclass(frozen=True)
class RuleSpec:
    name: str
    rule: str  # "module:Class", the module in this package: the class is built from a DecodingConfig
    help: str  # one line for the app, next to the rule menu
    needs_embeddings: bool = False  # built from a token embedding table (make_rule's `embeddings`)
    uses_beta: bool = False  # reads the tolerance beta; the other rules ignore it (their own guarantee holds)

    @property
    def build(self) -> Callable[..., AcceptanceRule]:
        """The rule's class (imported now: it loads torch)."""
        module, _, name = self.rule.partition(":")
        return getattr(import_module(f".{module}", __package__), name)

    @property
    def guarantee(self) -> str:
        return self.build.guarantee


RULES: dict[str, RuleSpec] = {spec.name: spec for spec in (
    RuleSpec("exact", "exact:ExactRule",
             "exact speculative sampling: output distribution identical to the target's (β ignored)"),
    RuleSpec("ssd", "ssd:ToleranceRule", "SSD: accept if r < min(1, q/p) + β; β = 0 is exact", uses_beta=True),
    RuleSpec("topk", "topk:TopKRule", "accept a drafted token when it is among the target's top-k tokens"),
    RuleSpec("pcg", "pcg:GroupRule", "accept by groups of acoustically similar tokens (cosine > θ)",
             needs_embeddings=True),
)}
#: The rules' names in the menu's order: what config validates `acceptance` against.
RULE_NAMES: tuple[str, ...] = tuple(RULES)


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
