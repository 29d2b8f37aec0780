"""Adaptive K: how many tokens each speculative round drafts, chosen from the run's own past rounds.

The choice depends only on rounds already finished, never on the token being decided, so the output
for a given seed is reproducible and exactness at beta = 0 is kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..config import DecodingConfig

#: With adaptive K, after this many rounds of K = 0 (plain AR steps) one round drafts a token again;
#: each probe after which K stays 0 doubles the wait, up to PROBE_MAX_EVERY (a draft that does not pay
#: on this machine should cost next to nothing), and a K > 0 chosen on the evidence resets it.
PROBE_EVERY = 16
PROBE_MAX_EVERY = 256

#: With measured costs, drafting must promise this many times AR's tokens per target step to be
#: chosen over a plain AR step: the costs are timed to within about +-10 % on a shared machine, and a K
#: that only seems to pay by less made calibrated decoding 0.85-0.90x of AR on an AMD EPYC (AVX2) core.
PAY_MARGIN = 1.1


@dataclass
class AcceptanceHistory:
    """Running sums and counts of the expected acceptance at each block position (adaptive K).

    Position i is only tested when positions 1..i-1 were accepted, so sums[i] / counts[i] estimates
    P(accept i | accepted so far): drafts drift, and acceptance decays along the block.
    """

    sums: list[float] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)

    def record(self, expected: list[float]) -> None:
        for position, value in enumerate(expected):
            if position == len(self.sums):
                self.sums.append(0.0)
                self.counts.append(0)
            self.sums[position] += value
            self.counts[position] += 1


def choose_draft_len(history: AcceptanceHistory, max_len: int, cost_ratio: float, prior_alpha: float = 0.6,
                     prior_weight: float = 4.0, verify_costs: tuple[float, ...] | None = None) -> int:
    """K in 1..max_len (0..max_len with `verify_costs`) that maximises the expected tokens per unit of
    round cost.

    Each block position i gets its own acceptance estimate alpha_i (the running mean of the
    expected acceptance there, shrunk towards the estimate of the position before while few rounds
    reached it, the first towards a prior; an untested position borrows the estimate of the one before). Expected tokens per round are
    1 + sum_k prod_{i<=k} alpha_i and a round costs K c + v_K target steps (c = `cost_ratio`; v_K, the
    verify of K + 1 tokens, from `verify_costs`, else 1). With measured verify costs K = 0 competes
    too: one token per verify of one, i.e. a plain AR step, chosen unless some K promises PAY_MARGIN
    times as many tokens per step (measured costs are only good to about that on a shared machine). A
    single alpha for all positions (the textbook formula) overrates long blocks, because the draft
    drifts away from the target as it goes. The estimates depend only on the run's own past rounds,
    so the choice (and the output for a given seed) is reproducible, and it never looks at the
    token being decided, so exactness at beta = 0 is kept.
    """
    def verify(k: int) -> float:
        return 1.0 if verify_costs is None else verify_costs[min(k, len(verify_costs) - 1)]

    best_k, best_value = (0, PAY_MARGIN / verify(0)) if verify_costs is not None else (1, -1.0)
    survive, tokens, previous = 1.0, 1.0, prior_alpha
    for k in range(1, max_len + 1):
        i = k - 1
        if i < len(history.sums):
            # Shrunk towards the position before (the prior for the first): a position that few rounds
            # reached keeps the estimate of the one before it, so a K that was rarely tried is not stuck
            # at the prior (that locked the choice at K = 2 on a pair whose K = 4 paid, AMD EPYC).
            anchor = prior_alpha if i == 0 else previous
            alpha = (history.sums[i] + anchor * prior_weight) / (history.counts[i] + prior_weight)
        else:
            alpha = previous
        previous = alpha
        survive *= alpha
        tokens += survive
        value = tokens / (k * cost_ratio + verify(k))
        if value > best_value:
            best_k, best_value = k, value
    return best_k


class DraftLengths:
    """The K of each round: `config.draft_len`, or with adaptive K the choice from the rounds so far.

    K = 0 records no acceptance, so the estimate would never change: then a round probes with K = 1 now
    and then, less often while probes change nothing (a function of the past rounds only).
    """

    def __init__(self, config: DecodingConfig):
        self.config = config
        self.history = AcceptanceHistory()
        self._idle = 0  # rounds in a row the adaptive choice drafted nothing
        self._probe_every, self._probed = PROBE_EVERY, False

    def next(self) -> int:
        """K for the coming round (before the run's room for tokens caps it)."""
        config = self.config
        if not config.adaptive_draft_len:
            return config.draft_len
        draft_len = choose_draft_len(self.history, config.draft_len, config.cost_ratio,
                                     verify_costs=config.verify_costs)
        if draft_len > 0:
            self._probe_every, self._probed = PROBE_EVERY, False
        elif self._probed:  # the last probe changed nothing: wait twice as long for the next
            self._probe_every, self._probed = min(2 * self._probe_every, PROBE_MAX_EVERY), False
        self._idle = self._idle + 1 if draft_len == 0 else 0
        if self._idle >= self._probe_every:
            draft_len, self._idle, self._probed = 1, 0, True
        return draft_len

    def record(self, expected_acceptance: list[float]) -> None:
        """After a round: the expected acceptance at each position it tested."""
        self.history.record(expected_acceptance)
