"""The decoding engine: autoregressive and speculative generation over transformers causal LMs.

Knows nothing of audio or Gradio. Read `generate` first (both decoders and one speculative round);
the rest are the parts a round is built from.
"""

from .generate import (MAX_FORCED_PER_TOKEN, PAY_MARGIN, PROBE_EVERY, PROBE_MAX_EVERY, AcceptanceHistory,
                       CachedForward, CachedLM, Drafter, ForcedTokens, PrefixDistribution, RoundCallback,
                       autoregressive_generate, cached_lm, choose_draft_len, speculative_generate)

__all__ = [
    "MAX_FORCED_PER_TOKEN", "PAY_MARGIN", "PROBE_EVERY", "PROBE_MAX_EVERY", "AcceptanceHistory", "CachedForward",
    "CachedLM", "Drafter", "ForcedTokens", "PrefixDistribution", "RoundCallback", "autoregressive_generate",
    "cached_lm", "choose_draft_len", "speculative_generate",
]
