"""Autoregressive and speculative decoding for transformers causal LMs.

Both decoders share one invariant, which makes rollback a matter of cutting caches:
every committed token except the last is in the target's KV cache; the last one is
"pending" and is the first input of the next target call. The draft keeps its own
cache and is fed whatever committed tokens it has not seen yet (one after a rejection,
two after a fully accepted block: the last drafted token and the bonus).

A speculative round:
  1. draft K tokens autoregressively, keeping each p_i (the processed distribution);
  2. run the target once over [pending, x_1..x_K] -> q_1..q_{K+1};
  3. keep the longest accepted prefix (the acceptance rule decides), then append a
     replacement drawn from the rule's residual, or a bonus token from q_{K+1};
  4. cut both caches back to the committed length.

Two kinds of drafter propose the block (`speculative_generate`'s `draft`): an AR draft model with its
own KV cache (`_ModelDrafter`), or draft heads that roll the target's own hidden state forward
(`draft_heads.DraftHeads`, `_HeadsDrafter`): no draft model, one target call per round. Both are
verified the same way.

Forced tokens: a caller may hand in a `ForcedTokens` schedule, a deterministic function of the
tokens sampled so far that says which tokens the decoder must insert itself after each sampled
one (the embedded voice marks phoneme boundaries this way, so that it can never skip a word).
Forced tokens are fed to both models but never sampled, drafted or verified: the draft inserts
them while drafting, the target sees them inside the verify call, and acceptance runs over the
sampled tokens only. Both decoders apply the same schedule, so at beta = 0 the speculative output
still has the target's distribution (a forced token has probability one under both processes).
"""

# One module, longer than most: the engine reads top to bottom (the shared run state, the two
# decoders, the speculative round and its helpers), and splitting it would scatter one algorithm.

from __future__ import annotations

import inspect
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Hashable, Protocol

import torch
from transformers import DynamicCache, PreTrainedModel

from ..cancellation import StopCheck
from ..cancellation import check as check_stop
from .draft_heads import DraftHeads, OutputInputCapture, check_fits, fast_step, is_heads
from ..rules import RULES, AcceptanceRule, Block, make_rule
from ..config import DecodingConfig
from ..results import GenerationResult, GenerationStats, RoundRecord
from .sampling import allowed_mask, probabilities, processed_scores, sample
from .static_cache import StaticCacheLM, serves as lean_forward_serves

#: A next-token distribution that depends on the generated tokens (repetition-aware sampling):
#: ([N, V] scores after the mask, each row's generated tokens) -> [N, V] probabilities. It must be a
#: function of the prefix alone; both decoders apply it to every row, drafts and verifies alike.
PrefixDistribution = Callable[[torch.Tensor, list[list[int]]], torch.Tensor]

#: on_round(tokens generated so far, target calls so far): called after every round (AR: every token),
#: from the decoding thread, so that a page can count live; it must not touch the decoding state.
RoundCallback = Callable[[int, int], None]


#: With adaptive K, after this many rounds of K = 0 (plain AR steps) one round drafts a token again;
#: each probe after which K stays 0 doubles the wait, up to PROBE_MAX_EVERY (a draft that does not pay
#: on this machine should cost next to nothing), and a K > 0 chosen on the evidence resets it.
PROBE_EVERY = 16
PROBE_MAX_EVERY = 256

#: With measured costs, drafting must promise this many times AR's tokens per target step to be
#: chosen over a plain AR step: the costs are timed to within about +-10 % on a shared machine, and a K
#: that only seems to pay by less made calibrated decoding 0.85-0.90x of AR on an AMD EPYC (AVX2) core.
PAY_MARGIN = 1.1

#: Most tokens a schedule may insert after one sampled token (sizes the static KV caches).
MAX_FORCED_PER_TOKEN = 3


class ForcedTokens(Protocol):
    """Tokens the decoder inserts itself, as a pure function of the sampled tokens before them.

    The state is an immutable value (a tuple, an int), so a speculative round can advance it along
    drafted tokens and simply drop it when they are rejected.
    """

    def initial_state(self) -> Hashable:
        """The state before the first generated token."""

    def advance(self, state: Hashable, token: int) -> tuple[Hashable, tuple[int, ...]]:
        """After sampled `token`: the next state and the tokens to insert right after it."""


class CachedForward(Protocol):
    """A model's forward over its own KV cache: what both decoders call (`CachedLM`, `StaticCacheLM`)."""

    calls: int
    # With keep_hidden: the input of the output layer (the final hidden state) of the last forward's
    # logits rows, [rows, d], and the cache position of its first row.
    hidden: torch.Tensor | None
    hidden_from: int

    @property
    def length(self) -> int:
        """Tokens in the cache."""

    def forward(self, ids: list[int] | torch.Tensor, last_only: bool = False) -> torch.Tensor:
        """Feed `ids` after the cached ones; logits [n, V] (or [1, V] with last_only)."""

    def truncate(self, length: int) -> None:
        """Cut the cache back to its first `length` tokens."""

    def close(self) -> None:
        """Release what the forward attached to its model (hooks)."""


class CachedLM:
    """A causal LM and its KV cache, which can be cut back to any shorter length."""

    def __init__(self, model, keep_hidden: bool = False):
        self.model = model
        self.cache = DynamicCache(config=model.config)
        self.calls = 0
        self.hidden, self.hidden_from = None, 0
        self._capture = OutputInputCapture(model) if keep_hidden else None
        # transformers 5.x renamed `past_key_values` to `cache`; accept models of either vintage.
        params = inspect.signature(model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"

    @property
    def length(self) -> int:
        return self.cache.get_seq_length()

    def forward(self, ids: list[int] | torch.Tensor, last_only: bool = False) -> torch.Tensor:
        """Feed `ids` after the cached ones; return logits [n, V] (or [1, V] with last_only)."""
        device = self.model.device
        if not torch.is_tensor(ids):
            ids = torch.tensor(ids, dtype=torch.long, device=device)
        out = self.model(
            input_ids=ids.view(1, -1),
            use_cache=True,
            logits_to_keep=1 if last_only else 0,
            **{self._cache_arg: self.cache},
        )
        self.calls += 1
        if self._capture is not None:
            self.hidden = self._capture.hidden[0]
            self.hidden_from = self.length - self.hidden.shape[0]
        return out.logits[0]

    def truncate(self, length: int) -> None:
        extra = self.length - length
        if extra > 0:
            self.cache.crop(-extra)  # transformers 5.x: a negative count drops tokens from the end

    def close(self) -> None:
        """Remove the hidden-state hook from the model (it outlives this run otherwise)."""
        if self._capture is not None:
            self._capture.close()


class _Clock:
    """perf_counter that waits for queued GPU work first, so timings are real on CUDA."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.start = self.now(raw=True)

    def now(self, raw: bool = False) -> float:
        if self.cuda:
            torch.cuda.synchronize()
        return time.perf_counter() if raw else time.perf_counter() - self.start


@dataclass
class _Run:
    """State shared by both decoders: configuration, RNG, mask, committed tokens and records."""

    config: DecodingConfig
    device: torch.device
    vocab_size: int
    prompt: list[int]
    seed: int = 0
    generator: torch.Generator = field(init=False)
    mask: torch.Tensor | None = field(init=False)
    committed: list[int] = field(init=False)
    new_tokens: list[int] = field(default_factory=list)
    steps: list[RoundRecord] = field(default_factory=list)
    finish_reason: str = "length"
    forced: ForcedTokens | None = None
    forced_state: Hashable = None  # the schedule's state after the committed tokens
    forced_count: int = 0
    prefix_distribution: "PrefixDistribution | None" = None

    def __post_init__(self) -> None:
        # A private generator: same seed -> same output, and the caller's global RNG is untouched.
        self.generator = torch.Generator(device=self.device).manual_seed(self.seed)
        self.mask = allowed_mask(self.config, self.vocab_size, self.device)
        self.committed = list(self.prompt)
        if self.forced is not None:
            self.forced_state = self.forced.initial_state()
        config = self.config
        if self.prefix_distribution is not None and (config.temperature not in (0.0, 1.0) or config.top_k
                                                     or config.top_p < 1.0):
            raise ValueError("a prefix distribution (e.g. repetition-aware sampling) does its own truncation: "
                             "leave temperature at 1 (or 0: greedy on the distribution) and top_k / top_p off "
                             "in the decoding config")

    def advance(self, state: Hashable, token: int) -> tuple[Hashable, tuple[int, ...]]:
        """The forced-token schedule's step (no schedule: nothing is ever inserted)."""
        if self.forced is None:
            return state, ()
        state, inserted = self.forced.advance(state, token)
        if len(inserted) > MAX_FORCED_PER_TOKEN:
            raise ValueError(f"a forced-token schedule inserted {len(inserted)} tokens after one token; "
                             f"at most {MAX_FORCED_PER_TOKEN} are allowed")
        return state, inserted

    def distributions(self, logits: torch.Tensor, extras: list[list[int]] | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor]:
        """[N, V] logits -> (scores, probabilities). `extras[i]`: the tokens between the committed ones and
        row i (drafted ones), which a prefix distribution needs; the rows of one call otherwise share a prefix."""
        scores = processed_scores(logits, self.config, self.mask)
        if self.prefix_distribution is None:
            return scores, probabilities(scores, self.config)
        extras = extras if extras is not None else [[] for _ in range(scores.shape[0])]
        probs = self.prefix_distribution(scores, [self.new_tokens + extra for extra in extras])
        if self.config.greedy:  # its argmax, one-hot, as plain greedy decoding
            probs = torch.nn.functional.one_hot(probs.argmax(dim=-1), probs.shape[-1]).to(probs.dtype)
        return probs.log(), probs

    @property
    def remaining(self) -> int:
        return self.config.max_new_tokens - len(self.new_tokens)

    def commit(self, sampled: list[int]) -> tuple[bool, list[int]]:
        """Append sampled tokens, each followed by its forced tokens; stop right after an end token.

        Returns (generation is over, how many forced tokens follow each sampled token appended).
        """
        eos = self.config.eos_ids
        counts: list[int] = []
        for token in sampled:
            self.forced_state, forced = self.advance(self.forced_state, token)
            counts.append(0)
            for position, item in enumerate((token, *forced)):
                self.new_tokens.append(item)
                self.committed.append(item)
                if position:
                    counts[-1] += 1
                    self.forced_count += 1
                if item in eos:
                    self.finish_reason = "eos"
                    return True, counts
            if self.remaining <= 0:  # stop at the same token in both decoders, forced ones included
                return True, counts
        return False, counts


def _check_inputs(input_ids: torch.Tensor, *models) -> tuple[torch.device, int]:
    if not torch.is_tensor(input_ids) or input_ids.dim() != 2 or input_ids.shape[0] != 1:
        shape = tuple(input_ids.shape) if torch.is_tensor(input_ids) else type(input_ids).__name__
        raise ValueError(f"input_ids must be a LongTensor of shape [1, T]; got {shape}")
    if input_ids.shape[1] < 1:
        raise ValueError("input_ids is empty: the prompt needs at least one token")
    vocab_sizes = [m.get_output_embeddings().weight.shape[0] for m in models]
    if len(set(vocab_sizes)) != 1:
        raise ValueError(
            f"draft and target do not share a vocabulary: output layers have {vocab_sizes[1]} and {vocab_sizes[0]} ids"
        )
    devices = {m.device for m in models}
    if len(devices) != 1:
        raise ValueError(f"target and draft must be on the same device; got {sorted(map(str, devices))}")
    vocab = vocab_sizes[0]
    # Prompt ids may lie past the output vocabulary where the input table is longer (CosyVoice 2's
    # text ids); generated ids come from the output layer, whose ids are the table's first rows.
    rows = min(m.get_input_embeddings().weight.shape[0] for m in models)
    if int(input_ids.max()) >= rows or int(input_ids.min()) < 0:
        raise ValueError(f"input_ids contains ids outside the vocabulary [0, {rows})")
    return models[0].device, vocab


def _resolve_seed(config: DecodingConfig) -> int:
    return config.seed if config.seed is not None else int.from_bytes(os.urandom(7), "little")


def _prefill(lms: list, prompt: list[int]) -> None:
    """Cache all prompt tokens but the last, which stays pending for the first decoding call."""
    if len(prompt) > 1:
        for lm in lms:
            lm.forward(prompt[:-1], last_only=True)


@torch.inference_mode()
def autoregressive_generate(
    target: PreTrainedModel,
    input_ids: torch.Tensor,  # [1, T] prompt ids
    config: DecodingConfig,
    *,
    static_cache: bool | None = None,
    forced: ForcedTokens | None = None,
    should_stop: StopCheck | None = None,
    on_round: RoundCallback | None = None,
    prefix_distribution: PrefixDistribution | None = None,
) -> GenerationResult:
    """Plain decoding: one target call per sampled token, with the same sampling and forward as the
    speculative path (forced tokens ride along with the next call's input). `should_stop` is asked
    before every step; when it says so, `Cancelled` is raised. `on_round` hears the counts after each."""
    device, vocab = _check_inputs(input_ids, target)
    run = _Run(config, device, vocab, input_ids[0].tolist(), seed=_resolve_seed(config), forced=forced,
               prefix_distribution=prefix_distribution)
    lm = cached_lm(target, len(run.prompt) + config.max_new_tokens + 2, static_cache)
    clock = _Clock(device)
    _prefill([lm], run.prompt)
    prefill_seconds = clock.now()
    done = False
    while not done:
        check_stop(should_stop)
        started = clock.now()
        logits = lm.forward(run.committed[lm.length :], last_only=True)
        _, probs = run.distributions(logits)
        token = int(sample(probs, run.generator)[0])
        before = len(run.committed)
        done, forced_counts = run.commit([token])
        finished = clock.now()
        run.steps.append(
            RoundRecord(
                drafted=[],
                accepted=0,
                next_token=token,
                next_kind="sampled",
                draft_seconds=0.0,
                verify_seconds=finished - started,
                end_seconds=finished,
                target_cache_len=lm.length,
                forced_counts=forced_counts,
                committed=run.committed[before:],
            )
        )
        if on_round is not None:
            on_round(len(run.new_tokens), lm.calls)
    return _result(run, "ar", prefill_seconds, clock.now(), target_calls=lm.calls, draft_calls=0)


@torch.inference_mode()
def speculative_generate(
    target: PreTrainedModel,
    draft: "PreTrainedModel | DraftHeads",  # a draft LM (same vocabulary and device) or the target's heads
    input_ids: torch.Tensor,  # [1, T] prompt ids
    config: DecodingConfig,
    *,
    static_cache: bool | None = None,
    forced: ForcedTokens | None = None,
    rule: AcceptanceRule | None = None,
    should_stop: StopCheck | None = None,
    on_round: RoundCallback | None = None,
    prefix_distribution: PrefixDistribution | None = None,
) -> GenerationResult:
    """Speculative decoding with the acceptance rule named in `config` (exact at beta = 0).

    `draft` proposes the blocks: a causal LM over the same vocabulary (its own KV cache), or
    `DraftHeads` made for this target, which propose from the target's own hidden state.

    `static_cache` picks the forward implementation for both models (see `cached_lm`); it changes
    speed, never the algorithm. `forced` is an optional schedule of tokens the decoder inserts itself.
    `rule` is the acceptance strategy (its name must match `config.acceptance`); by default
    `make_rule(config)`, with the target's input embeddings for a rule that groups tokens by an
    embedding table (pcg). A voice whose backend has its own table (the embedded voice groups by
    codec centroids) builds it with `Synthesizer.rule(config)`. `should_stop` is asked before every
    round; when it says so, `Cancelled` is raised (the caller stopped the run). `on_round` hears the
    token and target-call counts after every round. `prefix_distribution` replaces the sampling
    distribution by one that depends on the generated tokens (CosyVoice 2's repetition-aware
    sampling, `ssd_demo.engine.repetition_aware`), applied to draft and target rows alike: still exact.
    """
    heads = is_heads(draft)
    device, vocab = _check_inputs(input_ids, *((target,) if heads else (target, draft)))
    if heads:
        check_fits(draft, target)
        if draft.device != device:
            raise ValueError(f"target and draft heads must be on the same device; got {device} and {draft.device}")
    run = _Run(config, device, vocab, input_ids[0].tolist(), seed=_resolve_seed(config), forced=forced,
               prefix_distribution=prefix_distribution)
    if rule is None:
        rule = make_rule(config, embeddings=target.get_input_embeddings().weight.detach()
                         if RULES[config.acceptance].needs_embeddings else None)
    elif rule.name != config.acceptance:  # the result reports `config`: they must agree
        raise ValueError(f"the rule handed in is {rule.name!r} but config.acceptance is {config.acceptance!r}")
    # Forced tokens may follow each sampled token; a generous bound keeps the static caches in range.
    capacity = len(run.prompt) + config.max_new_tokens + (MAX_FORCED_PER_TOKEN + 1) * (config.draft_len + 2)
    target_lm = cached_lm(target, capacity, static_cache, keep_hidden=heads)
    drafter: Drafter = (_HeadsDrafter(draft, target, target_lm) if heads
                        else _ModelDrafter(cached_lm(draft, capacity, static_cache)))
    try:
        clock = _Clock(device)
        _prefill([target_lm, *drafter.lms], run.prompt)
        drafter.sync(target_lm.length)
        prefill_seconds = clock.now()
        history = AcceptanceHistory()
        idle = 0  # rounds in a row the adaptive choice drafted nothing
        probe_every, probed = PROBE_EVERY, False
        done = False
        while not done:
            check_stop(should_stop)
            if config.adaptive_draft_len:
                draft_len = choose_draft_len(history, config.draft_len, config.cost_ratio,
                                             verify_costs=config.verify_costs)
                # K = 0 records no acceptance, so the estimate would never change: probe with K = 1 now
                # and then, less often while probes change nothing (a function of the past rounds only,
                # so exactness is kept).
                if draft_len > 0:
                    probe_every, probed = PROBE_EVERY, False
                elif probed:
                    probe_every, probed = min(2 * probe_every, PROBE_MAX_EVERY), False
                idle = idle + 1 if draft_len == 0 else 0
                if idle >= probe_every:
                    draft_len, idle, probed = 1, 0, True
            else:
                draft_len = config.draft_len
            draft_len = max(min(draft_len, run.remaining - 1), 0)  # leave room for the replacement/bonus token
            record, done = _speculative_round(run, rule, target_lm, drafter, draft_len, clock)
            history.record(record.expected_acceptance)
            run.steps.append(record)
            if on_round is not None:
                on_round(len(run.new_tokens), target_lm.calls)
    finally:
        target_lm.close()
        drafter.close()
    return _result(
        run, "speculative", prefill_seconds, clock.now(), target_calls=target_lm.calls, draft_calls=drafter.calls
    )


def _speculative_round(run: _Run, rule: AcceptanceRule, target_lm: "CachedForward", drafter: "Drafter",
                       draft_len: int, clock: _Clock) -> tuple[RoundRecord, bool]:
    """One round: draft, verify in one target call, accept a prefix, add one token, roll back.

    Returns the round's record and whether generation is over.
    """
    config, device = run.config, run.device
    committed_len = len(run.committed)

    # 1. Draft (forced tokens inserted after the drafted ones they follow).
    started = clock.now()
    drafted, draft_rows, block_tokens, drafted_at_index = drafter.propose(run, draft_len)
    drafted_at = clock.now()

    # 2. Verify: the pending tokens plus the block, in one target call. The logits that predict
    # drafted token i sit just before it; the last row predicts the token after the block.
    pending = run.committed[target_lm.length :]
    logits = target_lm.forward(pending + block_tokens)  # [len(pending) + len(block), V]
    rows = [len(pending) + index - 1 for index in drafted_at_index] + [logits.shape[0] - 1]
    if len(rows) != logits.shape[0]:
        logits = logits[rows]  # [K + 1, V]
    # For a prefix distribution: row i follows the block's tokens before drafted token i, the last row
    # the whole block (built only then: this is the decode loop).
    extras = ([block_tokens[:index] for index in drafted_at_index] + [block_tokens]
              if run.prefix_distribution is not None else None)
    target_scores, target_probs = run.distributions(logits, extras)
    block = Block(
        drafted=torch.tensor(drafted, dtype=torch.long, device=device),
        draft_probs=torch.stack(draft_rows) if draft_rows else target_probs[:0],
        target_probs=target_probs,
        target_scores=target_scores,
    )

    # 3. Accept the longest prefix that passes, then a replacement or a bonus token.
    accepted, expected = _accepted_prefix(rule, block, run.generator)
    if accepted < len(drafted):
        next_token = int(sample(rule.residual(block, accepted)[None], run.generator)[0])
        kind = "replacement"
    else:
        next_token = int(sample(target_probs[-1:], run.generator)[0])
        kind = "bonus"
    kept = drafted[:accepted]
    kept_block = block_tokens[: drafted_at_index[accepted]] if accepted < len(drafted) else block_tokens
    if any(token in config.eos_ids for token in kept_block):
        next_token, kind = None, "none"  # the end token was accepted: nothing follows it
    done, forced_counts = run.commit(kept + ([next_token] if next_token is not None else []))

    # 4. Roll both caches back to the committed prefix (the new token and its forced ones stay pending).
    valid = committed_len + len(kept_block)
    target_lm.truncate(valid)
    drafter.sync(valid)
    finished = clock.now()
    record = RoundRecord(
        drafted=drafted,
        accepted=accepted,
        next_token=next_token,
        next_kind=kind,
        draft_seconds=drafted_at - started,
        verify_seconds=finished - drafted_at,
        end_seconds=finished,
        expected_acceptance=expected,
        draft_calls=len(draft_rows),
        target_cache_len=target_lm.length,
        draft_cache_len=drafter.cache_len,
        forced_counts=forced_counts,
        committed=run.committed[committed_len:],
    )
    return record, done


def cached_lm(model, capacity: int, static_cache: bool | None = None, keep_hidden: bool = False) -> "CachedForward":
    """A model's cached forward: the lean static-cache step for plain Llamas, else transformers'.

    `static_cache=None` follows the SSD_DEMO_STATIC_CACHE environment variable ("0" turns the
    lean step off everywhere, e.g. to compare against transformers' own forward). `keep_hidden`:
    the forward keeps the final hidden state of its logits rows (draft heads read it); the lean
    step always does, at no cost.
    """
    if lean_forward_serves(model, static_cache):
        return StaticCacheLM(model, capacity)
    return CachedLM(model, keep_hidden=keep_hidden)


class Drafter(Protocol):
    """What proposes a round's block (`_ModelDrafter`, `_HeadsDrafter`)."""

    calls: int  # proposal steps taken (for the stats)
    lms: list  # cached forwards to prefill with the prompt

    @property
    def cache_len(self) -> int:
        """Tokens in the drafter's own cache (heads: the target's, which they read)."""

    def propose(self, run: "_Run", draft_len: int) -> tuple[list[int], list[torch.Tensor], list[int], list[int]]:
        """Up to `draft_len` drafted tokens, their processed distributions, the block to verify (forced
        tokens inserted) and each drafted token's index in that block."""

    def sync(self, valid: int) -> None:
        """After the target's cache was cut to its first `valid` tokens (the committed prefix)."""

    def close(self) -> None:
        """Release hooks and caches."""


class _ModelDrafter:
    """An AR draft model with its own KV cache, fed the committed tokens it has not seen yet."""

    def __init__(self, lm: "CachedForward"):
        self.lm = lm
        self.lms = [lm]

    @property
    def calls(self) -> int:
        return self.lm.calls

    @property
    def cache_len(self) -> int:
        return self.lm.length

    def propose(self, run: "_Run", draft_len: int):
        # catch up on what the draft has not seen, then one call per drafted token
        return _draft_block(lambda feed: self.lm.forward(feed, last_only=True), run, draft_len,
                            run.committed[self.lm.length :])

    def sync(self, valid: int) -> None:
        self.lm.truncate(min(self.lm.length, valid))

    def close(self) -> None:
        self.lm.close()


class _HeadsDrafter:
    """Draft heads on the target's hidden state: the state at the last token in the target's cache,
    rolled forward over the pending tokens and then over each drafted token (and its forced ones)."""

    def __init__(self, heads: DraftHeads, target, target_lm: "CachedForward"):
        self.heads = heads
        self.target_lm = target_lm
        self.lms: list = []
        self.calls = 0
        self._embed = target.get_input_embeddings().weight  # [V, d]
        self._step = fast_step(heads, self._embed.detach())
        output = target.get_output_embeddings()
        self._out_weight, self._out_bias = output.weight, getattr(output, "bias", None)
        self._anchor: torch.Tensor | None = None  # [d]: the target's hidden state at position cache_len - 1

    @property
    def cache_len(self) -> int:
        return self.target_lm.length

    def sync(self, valid: int) -> None:
        hidden = self.target_lm.hidden
        row = valid - 1 - self.target_lm.hidden_from
        if hidden is None or not 0 <= row < hidden.shape[0]:
            self._anchor = None  # nothing cached yet (a one-token prompt): the heads start from zeros
        else:
            self._anchor = hidden[row]

    def _state_after(self, state: torch.Tensor, tokens: list[int]) -> torch.Tensor:
        for token in tokens:
            state = self._step(state, token)
        return state

    def propose(self, run: "_Run", draft_len: int):
        state = self._anchor if self._anchor is not None else self._embed.new_zeros(self._embed.shape[1])

        def next_logits(feed: list[int]) -> torch.Tensor:  # [1, V] after the tokens fed since the last call
            nonlocal state
            state = self._state_after(state, feed)
            self.calls += 1
            return torch.nn.functional.linear(state[None], self._out_weight, self._out_bias)

        # the pending tokens the target has not seen come first
        return _draft_block(next_logits, run, draft_len, run.committed[self.target_lm.length :])

    def close(self) -> None:
        self._anchor = None


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


def _draft_block(next_logits: Callable[[list[int]], torch.Tensor], run: _Run, draft_len: int,
                 feed: list[int]) -> tuple[list[int], list[torch.Tensor], list[int], list[int]]:
    """Sample up to `draft_len` tokens from a drafter; stop early at an end token or low confidence.

    `next_logits(tokens)` takes the tokens that follow what the drafter saw last (first `feed`, then each
    drafted token with its forced ones) and returns its logits [1, V] for the token after them.
    Returns the drafted tokens, their processed distributions, the block to verify (drafted tokens
    with their forced tokens inserted) and the index of each drafted token in that block.
    """
    drafted: list[int] = []
    rows: list[torch.Tensor] = []
    block: list[int] = []
    drafted_at: list[int] = []
    state = run.forced_state
    threshold = run.config.adaptive_threshold
    eos = run.config.eos_ids
    for _ in range(draft_len):
        _, probs = run.distributions(next_logits(feed), [block])
        if threshold > 0 and drafted and float(probs.max()) < threshold:
            break  # the drafter is unsure: verifying now wastes fewer draft steps
        token = int(sample(probs, run.generator)[0])
        drafted.append(token)
        rows.append(probs[0])
        drafted_at.append(len(block))
        state, forced = run.advance(state, token)
        feed = [token, *forced]
        block.extend(feed)
        if any(item in eos for item in feed):
            break  # nothing after an end token can be emitted
    return drafted, rows, block, drafted_at


def _accepted_prefix(rule: AcceptanceRule, block: Block, generator: torch.Generator) -> tuple[int, list[float]]:
    """Number of leading drafted tokens that pass, and the expected acceptance of each tested position."""
    k = block.drafted.shape[0]
    if k == 0:
        return 0, []
    uniforms = torch.rand(k, generator=generator, device=block.drafted.device)
    passed = (uniforms < rule.accept_probability(block)).tolist()
    accepted = passed.index(False) if False in passed else k
    tested = min(accepted + 1, k)  # positions after the first rejection were never really tested
    expected = rule.expected_acceptance(block)[:tested].tolist()
    return accepted, expected


def _result(
    run: _Run, mode: str, prefill_seconds: float, wall_seconds: float, target_calls: int, draft_calls: int
) -> GenerationResult:
    steps = run.steps
    drafted = sum(len(s.drafted) for s in steps)
    accepted = sum(s.accepted for s in steps)
    expected = [e for s in steps for e in s.expected_acceptance]
    draft_seconds = sum(s.draft_seconds for s in steps)
    verify_seconds = sum(s.verify_seconds for s in steps)
    loop_draft_calls = sum(s.draft_calls for s in steps)
    n = len(run.new_tokens)
    sampled = n - run.forced_count
    stats = GenerationStats(
        mode=mode,
        new_tokens=n,
        rounds=len(steps),
        target_calls=target_calls,
        draft_calls=draft_calls,
        drafted_tokens=drafted,
        accepted_tokens=accepted,
        acceptance_rate=accepted / drafted if drafted else 0.0,
        alpha=sum(expected) / len(expected) if expected else 0.0,
        mean_tokens_per_call=sampled / len(steps) if steps else 0.0,
        mean_accepted_length=accepted / len(steps) if steps and mode == "speculative" else 0.0,
        prefill_seconds=prefill_seconds,
        draft_seconds=draft_seconds,
        verify_seconds=verify_seconds,
        wall_seconds=wall_seconds,
        tokens_per_second=sampled / wall_seconds if wall_seconds > 0 else 0.0,
        mean_draft_step_seconds=draft_seconds / loop_draft_calls if loop_draft_calls else 0.0,
        mean_target_call_seconds=verify_seconds / len(steps) if steps else 0.0,
        finish_reason=run.finish_reason,
        draft_len=run.config.draft_len if mode == "speculative" else 0,
        seed=run.seed,
        forced_tokens=run.forced_count,
    )
    return GenerationResult(tokens=list(run.new_tokens), steps=steps, stats=stats)
