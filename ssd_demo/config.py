"""Decoding settings shared by autoregressive and speculative generation.

One frozen dataclass, validated on construction, so that a bad setting fails
loudly where it is made (CLI flag, UI slider, API call) instead of deep inside
the decoding loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from .errors import InvalidSettingError
from .rules.registry import RULE_NAMES

#: Acceptance rules that `speculative_generate` knows (`ssd_demo.rules.registry` is the one list).
ACCEPTANCE_RULES = RULE_NAMES

#: Most tokens one generation may ask for: far beyond any supported model's context (the embedded voice
#: 1,024 positions, Llasa 2,048), yet small enough that the key/value cache sized from it can be allocated.
MAX_NEW_TOKENS = 100_000


@dataclass(frozen=True)
class DecodingConfig:
    """How to decode.

    draft_len:        K, tokens the draft proposes per round (speculative only).
    beta:             SSD tolerance added to the acceptance ratio; 0 = exact speculative sampling.
    temperature:      0 = greedy (argmax); otherwise logits are divided by it.
    top_k:            keep the k most likely tokens; 0 = off.
    top_p:            nucleus mass to keep; 1.0 = off.
    max_new_tokens:   hard cap on generated tokens (the end token counts).
    eos_token_id:     end token id(s); generation stops right after one is emitted.
    allowed_token_ids: restrict sampling to these ids (e.g. speech tokens + end of speech).
    seed:             seeds a private torch.Generator; None draws a fresh random seed.
    acceptance:       acceptance rule name, one of ACCEPTANCE_RULES.
    topk_tolerance:   k for the "topk" rule (accept a drafted token in the target's top-k).
    pcg_theta:        cosine threshold for the "pcg" rule's acoustic groups.
    adaptive_threshold: stop drafting early when the draft's top probability falls below this (0 = off).
    adaptive_draft_len: choose K each round (1..draft_len) to maximise the predicted speedup from the
                      running acceptance estimate and `cost_ratio`.
    cost_ratio:       c, one draft step / one target step, for the adaptive choice (measure it with
                      `python -m ssd_demo bench`); a fixed number keeps runs reproducible.
    verify_costs:     v_k, one target call over k + 1 tokens / one target step, for k = 0, 1, ... (measured by
                      `ssd_demo.engine.calibration`); None counts every verify as one step. Given, the adaptive
                      choice may also pick K = 0 (plain AR steps) when no K pays on this machine.
    """

    draft_len: int = 4
    beta: float = 0.0
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    max_new_tokens: int = 256
    eos_token_id: int | Sequence[int] | None = None
    allowed_token_ids: Sequence[int] | None = field(default=None, repr=False)
    seed: int | None = 0
    acceptance: str = "ssd"
    topk_tolerance: int = 1
    pcg_theta: float = 0.9
    adaptive_threshold: float = 0.0
    adaptive_draft_len: bool = False
    cost_ratio: float = 0.1
    verify_costs: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        def fail(message: str) -> None:
            raise InvalidSettingError(message)

        if not isinstance(self.draft_len, int) or self.draft_len < 1:
            fail(f"draft_len must be an integer >= 1, got {self.draft_len!r}")
        if self.draft_len > 64:
            fail(f"draft_len must be at most 64, got {self.draft_len}")
        if not 0 <= self.beta <= 1:  # also rejects NaN; 1 already keeps every drafted token
            fail(f"beta must be between 0 and 1 (1 keeps every drafted token), got {self.beta!r}")
        if not self.temperature >= 0 or self.temperature == float("inf"):
            fail(f"temperature must be a finite number >= 0, got {self.temperature!r}")
        if not isinstance(self.top_k, int) or self.top_k < 0:
            fail(f"top_k must be an integer >= 0 (0 = off), got {self.top_k!r}")
        if not 0 < self.top_p <= 1:
            fail(f"top_p must be in (0, 1] (1 = off), got {self.top_p!r}")
        if not isinstance(self.max_new_tokens, int) or not 1 <= self.max_new_tokens <= MAX_NEW_TOKENS:
            fail(f"max_new_tokens must be an integer from 1 to {MAX_NEW_TOKENS:,}, got {self.max_new_tokens!r}")
        if self.seed is not None and (not isinstance(self.seed, int) or not 0 <= self.seed < 2**63):
            fail(f"seed must be a non-negative integer or None, got {self.seed!r}")
        if self.acceptance not in ACCEPTANCE_RULES:
            fail(f"acceptance must be one of {', '.join(ACCEPTANCE_RULES)}; got {self.acceptance!r}")
        if not isinstance(self.topk_tolerance, int) or self.topk_tolerance < 1:
            fail(f"topk_tolerance must be an integer >= 1, got {self.topk_tolerance!r}")
        if not 0 <= self.adaptive_threshold < 1:
            fail(f"adaptive_threshold must be in [0, 1), got {self.adaptive_threshold!r}")
        if not 0 <= self.cost_ratio < 10:
            fail(f"cost_ratio must be in [0, 10), got {self.cost_ratio!r}")
        if self.verify_costs is not None:
            costs = tuple(float(v) for v in self.verify_costs)
            if not costs or not all(0 < v < 1000 for v in costs):
                fail(f"verify_costs must be positive numbers (target steps per verify call), got {self.verify_costs!r}")
            object.__setattr__(self, "verify_costs", costs)
        if not -1 <= self.pcg_theta:
            fail(f"pcg_theta must be >= -1, got {self.pcg_theta!r}")
        for token in self.eos_ids:
            if not isinstance(token, int) or token < 0:
                fail(f"eos_token_id must hold non-negative integers, got {token!r}")
        if self.allowed_token_ids is not None:
            if len(self.allowed_token_ids) == 0:
                fail("allowed_token_ids is empty: nothing could ever be sampled")
            # Store as a tuple so the frozen config stays hashable and immutable.
            object.__setattr__(self, "allowed_token_ids", tuple(int(t) for t in self.allowed_token_ids))
            # An end token outside allowed_token_ids is fine: a forced-token schedule may insert it
            # (the embedded voice does, so that it never ends before the last word), and
            # max_new_tokens always stops generation.

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def eos_ids(self) -> tuple[int, ...]:
        if self.eos_token_id is None:
            return ()
        if isinstance(self.eos_token_id, int):
            return (self.eos_token_id,)
        return tuple(self.eos_token_id)

    def with_(self, **changes) -> "DecodingConfig":
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)
