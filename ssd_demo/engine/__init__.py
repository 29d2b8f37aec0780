"""The decoding engine: autoregressive and speculative generation over transformers causal LMs.

Knows nothing of audio or Gradio. Read `generate` first (both decoders and one speculative round);
the rest are the parts a round is built from: `run_state` (the run's committed tokens and forced-token
schedule), `drafters` (what proposes a block), `kv` (cached forwards cut back on rejection, with the lean
`static_cache` forward and its matmul `kernels`), `adaptive` (K per round) and `sampling`.
"""

from .adaptive import PAY_MARGIN, PROBE_EVERY, PROBE_MAX_EVERY, AcceptanceHistory, choose_draft_len
from .drafters import Drafter
from .generate import RoundCallback, autoregressive_generate, speculative_generate
from .kv import CachedForward, CachedLM, cached_lm
from .run_state import MAX_FORCED_PER_TOKEN, ForcedTokens, PrefixDistribution

__all__ = [
    "MAX_FORCED_PER_TOKEN", "PAY_MARGIN", "PROBE_EVERY", "PROBE_MAX_EVERY", "AcceptanceHistory", "CachedForward",
    "CachedLM", "Drafter", "ForcedTokens", "PrefixDistribution", "RoundCallback", "autoregressive_generate",
    "cached_lm", "choose_draft_len", "speculative_generate",
]
