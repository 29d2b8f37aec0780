"""Acceptance rules for speculative decoding: one module per rule, one registry of them all.

    base      Block (one verified block) and the AcceptanceRule protocol
    exact     exact speculative sampling (Leviathan et al.; Chen et al.)
    ssd       the SSD tolerance beta (Lin et al. 2025)
    topk      keep a drafted token in the target's top k
    pcg       rejection sampling over acoustic similarity groups (arXiv 2511.13732)
    registry  names, guarantees, help text, make_rule
"""

from .base import AcceptanceRule, Block
from .exact import ExactRule
from .pcg import AcousticGroups, GroupRule, build_groups, groups_for
from .registry import RULE_NAMES, RULES, RuleSpec, make_rule
from .ssd import ToleranceRule
from .topk import TopKRule

__all__ = [
    "RULES", "RULE_NAMES", "AcceptanceRule", "AcousticGroups", "Block", "ExactRule", "GroupRule", "RuleSpec",
    "ToleranceRule", "TopKRule", "build_groups", "groups_for", "make_rule",
]
