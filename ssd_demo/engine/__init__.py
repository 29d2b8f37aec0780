"""The decoding engine: autoregressive and speculative generation over transformers causal LMs.

Knows nothing of audio or Gradio. Read `generate` first (both decoders and one speculative round);
the rest are the parts a round is built from: `run_state` (the run's committed tokens and forced-token
schedule), `drafters` (what proposes a block), `kv` (cached forwards cut back on rejection, with the lean
`static_cache` forward and its matmul `kernels`), `adaptive` (K per round) and `sampling`.

The names below are imported on first use (PEP 562): importing one light module of the engine (`cancellation`,
`machine_cache`) does not load torch and transformers, so that a command's `--help` stays quick.
"""

__all__ = [
    "MAX_FORCED_PER_TOKEN", "PAY_MARGIN", "PROBE_EVERY", "PROBE_MAX_EVERY", "AcceptanceHistory", "CachedForward",
    "CachedLM", "Drafter", "ForcedTokens", "PrefixDistribution", "RoundCallback", "autoregressive_generate",
    "cached_lm", "choose_draft_len", "speculative_generate",
]

# Where each name lives.
_NAMES = {
    "PAY_MARGIN": "adaptive", "PROBE_EVERY": "adaptive", "PROBE_MAX_EVERY": "adaptive",
    "AcceptanceHistory": "adaptive", "choose_draft_len": "adaptive",
    "Drafter": "drafters",
    "RoundCallback": "generate", "autoregressive_generate": "generate", "speculative_generate": "generate",
    "CachedForward": "kv", "CachedLM": "kv", "cached_lm": "kv",
    "MAX_FORCED_PER_TOKEN": "run_state", "ForcedTokens": "run_state", "PrefixDistribution": "run_state",
}


def __getattr__(name: str):
    if name in _NAMES:
        import importlib

        value = getattr(importlib.import_module(f".{_NAMES[name]}", __name__), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'ssd_demo.engine' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_NAMES])
