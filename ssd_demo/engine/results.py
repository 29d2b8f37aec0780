"""What a generation run returns: the tokens, one record per round, and statistics.

Plain dataclasses with no torch inside, so charts, the UI and JSON export can use
them without knowing how decoding works.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace


@dataclass
class RoundRecord:
    """One decoding round.

    For speculative decoding a round is: the draft proposes `drafted`, the target
    verifies them in one call, `accepted` of them are kept, then `next_token` is
    appended ("replacement" after a rejection, "bonus" when the whole block was
    kept). For autoregressive decoding a round is one target call and `drafted`
    is empty. `next_kind` is "none" when generation stopped inside the block
    (end token accepted or length limit reached).
    """

    drafted: list[int]
    accepted: int
    next_token: int | None
    next_kind: str  # "replacement" | "bonus" | "none" (speculative); "sampled" (AR)
    draft_seconds: float
    verify_seconds: float
    end_seconds: float  # time since the start of generation when this round finished
    # Expected acceptance of each verified position under the active rule, i.e.
    # E_{x~p}[P(accept x)] (sum_x min(p, q) for exact sampling). Averaging these gives
    # an unbiased estimate of alpha, unlike accepted/drafted, which is truncated by
    # the first rejection.
    expected_acceptance: list[float] = field(default_factory=list)
    draft_calls: int = 0
    target_cache_len: int = 0
    draft_cache_len: int = 0
    # Everything appended this round in order, including the tokens a `ForcedTokens` schedule
    # inserted (e.g. the embedded voice's phonemes); forced_counts[i] of them follow emitted[i].
    committed: list[int] = field(default_factory=list)
    forced_counts: list[int] = field(default_factory=list)

    @property
    def forced(self) -> list[int]:
        """The tokens the decoder inserted itself this round."""
        out, index = [], 0
        for count in self.forced_counts:
            out += self.committed[index + 1 : index + 1 + count]
            index += 1 + count
        return out

    @property
    def emitted(self) -> list[int]:
        tokens = list(self.drafted[: self.accepted])
        if self.next_token is not None:
            tokens.append(self.next_token)
        return tokens


@dataclass
class GenerationStats:
    mode: str  # "ar" | "speculative"
    new_tokens: int
    rounds: int
    target_calls: int  # forward calls of the target, prefill included
    draft_calls: int  # forward calls of the draft, prefill included
    drafted_tokens: int
    accepted_tokens: int
    acceptance_rate: float  # accepted / drafted (0 for AR)
    alpha: float  # mean expected per-token acceptance (see RoundRecord.expected_acceptance)
    mean_tokens_per_call: float  # sampled tokens per target call in the decoding loop
    mean_accepted_length: float  # accepted drafted tokens per round
    prefill_seconds: float
    draft_seconds: float
    verify_seconds: float
    wall_seconds: float
    tokens_per_second: float
    mean_draft_step_seconds: float  # one draft forward call
    mean_target_call_seconds: float  # one target call in the loop (AR step or verify)
    finish_reason: str  # "eos" | "length"
    draft_len: int
    seed: int  # the seed actually used (drawn at random when the config says None)
    forced_tokens: int = 0  # of new_tokens, those inserted by a forced-token schedule (never sampled)

    @property
    def sampled_tokens(self) -> int:
        return self.new_tokens - self.forced_tokens

    @property
    def decode_seconds_per_token(self) -> float:
        """Wall seconds per sampled token after the prefill (what speedups compare).

        Forced tokens are left out: they cost no decoding step of their own, and counting them would
        reward a run for the schedule's insertions rather than for its speed.
        """
        return (self.wall_seconds - self.prefill_seconds) / max(self.sampled_tokens, 1)


@dataclass
class GenerationResult:
    tokens: list[int]
    steps: list[RoundRecord]
    stats: GenerationStats

    def to_dict(self) -> dict:
        data = asdict(self)
        for step, record in zip(data["steps"], self.steps):
            step["emitted"] = record.emitted
        return data


def combine(results: list[GenerationResult]) -> GenerationResult:
    """One record for several runs made one after another (the chunks of a long text).

    Tokens and rounds are concatenated (round times shifted onto one clock); counts and seconds add
    up; rates and means are recomputed from the sums, so the totals mean what they mean for one run.
    """
    if not results:
        raise ValueError("nothing to combine")
    if len(results) == 1:
        return results[0]
    stats = [r.stats for r in results]
    steps: list[RoundRecord] = []
    offset = 0.0
    for result in results:
        steps += [replace(step, end_seconds=step.end_seconds + offset) for step in result.steps]
        offset += result.stats.wall_seconds
    total = {name: sum(getattr(s, name) for s in stats) for name in (
        "new_tokens", "rounds", "target_calls", "draft_calls", "drafted_tokens", "accepted_tokens",
        "prefill_seconds", "draft_seconds", "verify_seconds", "wall_seconds", "forced_tokens")}
    expected = [e for step in steps for e in step.expected_acceptance]
    loop_draft_calls = sum(step.draft_calls for step in steps)
    sampled = total["new_tokens"] - total["forced_tokens"]
    speculative = stats[0].mode == "speculative"
    combined = GenerationStats(
        mode=stats[0].mode,
        **total,
        acceptance_rate=total["accepted_tokens"] / total["drafted_tokens"] if total["drafted_tokens"] else 0.0,
        alpha=sum(expected) / len(expected) if expected else 0.0,
        mean_tokens_per_call=sampled / total["rounds"] if total["rounds"] else 0.0,
        mean_accepted_length=total["accepted_tokens"] / total["rounds"] if total["rounds"] and speculative else 0.0,
        tokens_per_second=sampled / total["wall_seconds"] if total["wall_seconds"] > 0 else 0.0,
        mean_draft_step_seconds=total["draft_seconds"] / loop_draft_calls if loop_draft_calls else 0.0,
        mean_target_call_seconds=total["verify_seconds"] / total["rounds"] if total["rounds"] else 0.0,
        finish_reason="length" if any(s.finish_reason == "length" for s in stats) else stats[-1].finish_reason,
        draft_len=stats[0].draft_len,
        seed=stats[0].seed,
    )
    return GenerationResult(tokens=[t for r in results for t in r.tokens], steps=steps, stats=combined)


def expected_tokens_per_round(alpha: float, draft_len: int) -> float:
    """Tokens one speculative round yields on average when each drafted token is accepted with
    probability `alpha`, independently: 1 + alpha + ... + alpha^K = (1 - alpha^(K+1)) / (1 - alpha),
    and K + 1 at alpha >= 1 (every block accepted, plus the bonus token)."""
    if alpha >= 1.0:
        return draft_len + 1.0
    return (1 - alpha ** (draft_len + 1)) / (1 - alpha)


def predicted_speedup(alpha: float, draft_len: int, cost_ratio: float, verify_ratio: float = 1.0) -> float:
    """Leviathan et al. (2023) / Chen et al. (2023) wall-time speedup over AR.

    (1 - alpha^(K+1)) / ((1 - alpha) (K c + v)): expected tokens per round divided by
    the round's cost in target-step units. The classic formula takes v = 1 (verifying
    K+1 tokens costs one step); passing the measured verify/step ratio as v gives the
    stricter prediction that holds when verification is not free (small models, CPU).
    """
    if draft_len < 0 or cost_ratio < 0 or verify_ratio <= 0:
        raise ValueError("draft_len and cost_ratio must be >= 0 and verify_ratio > 0")
    alpha = min(max(alpha, 0.0), 1.0)
    return expected_tokens_per_round(alpha, draft_len) / (draft_len * cost_ratio + verify_ratio)


@dataclass
class SpeedupReport:
    """Measured speedup of a speculative run over an AR run, next to its prediction."""

    measured: float  # AR decode seconds per token / speculative decode seconds per token
    alpha: float
    draft_len: int
    cost_ratio: float  # c: one draft step / one AR target step
    verify_ratio: float  # v: one verify call / one AR target step
    predicted: float  # classic formula (v = 1)
    predicted_strict: float  # with the measured v

    @property
    def fraction_of_prediction(self) -> float:
        return self.measured / self.predicted_strict if self.predicted_strict > 0 else 0.0


def compare_runs(ar: GenerationResult, spec: GenerationResult) -> SpeedupReport:
    """Speedup of `spec` over `ar`, per generated token, excluding prefill (same prompt in both)."""
    ar_stats, sp_stats = ar.stats, spec.stats
    ar_step = ar_stats.mean_target_call_seconds
    ar_per_token = ar_stats.decode_seconds_per_token
    sp_per_token = sp_stats.decode_seconds_per_token
    measured = ar_per_token / sp_per_token if sp_per_token > 0 else 0.0
    c = sp_stats.mean_draft_step_seconds / ar_step if ar_step > 0 else 0.0
    v = sp_stats.mean_target_call_seconds / ar_step if ar_step > 0 else 1.0
    k = sp_stats.draft_len
    return SpeedupReport(
        measured=measured,
        alpha=sp_stats.alpha,
        draft_len=k,
        cost_ratio=c,
        verify_ratio=v,
        predicted=predicted_speedup(sp_stats.alpha, k, c, 1.0),
        predicted_strict=predicted_speedup(sp_stats.alpha, k, c, max(v, 1e-9)),
    )
