"""Acceptance rules for speculative decoding: one module per rule, one registry of them all.

    base      Block (one verified block) and the AcceptanceRule protocol
    exact     exact speculative sampling (Leviathan et al.; Chen et al.)
    ssd       the SSD tolerance beta (Lin et al. 2025)
    topk      keep a drafted token in the target's top k
    pcg       rejection sampling over acoustic similarity groups (arXiv 2511.13732)
    registry  the one list: names, classes, help text, make_rule (config reads it without loading torch)
"""

# Where each name lives, imported on first use (PEP 562): `rules.registry` (what config reads) loads no torch.
_PUBLIC = {
    "AcceptanceRule": "base", "Block": "base", "ExactRule": "exact",
    "AcousticGroups": "pcg", "GroupRule": "pcg", "build_groups": "pcg", "groups_for": "pcg",
    "RULE_NAMES": "registry", "RULES": "registry", "RuleSpec": "registry", "make_rule": "registry",
    "ToleranceRule": "ssd", "TopKRule": "topk",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name in _PUBLIC:
        import importlib

        value = getattr(importlib.import_module(f".{_PUBLIC[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC])
