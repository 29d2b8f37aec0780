"""The acceptance rules' names, in the registry's order: what `config` validates against without loading the
rules (and torch). `registry.RULES` holds one entry per name here, in this order (it checks)."""

RULE_NAMES: tuple[str, ...] = ("exact", "ssd", "topk", "pcg")
