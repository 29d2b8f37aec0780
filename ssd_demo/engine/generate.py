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
own KV cache (`drafters.ModelDrafter`), or draft heads that roll the target's own hidden state forward
(`draft_heads.DraftHeads`, `drafters.HeadsDrafter`): no draft model, one target call per round. Both are
verified the same way.

Forced tokens: a caller may hand in a `ForcedTokens` schedule, a deterministic function of the
tokens sampled so far that says which tokens the decoder must insert itself after each sampled
one (the embedded voice marks phoneme boundaries this way, so that it can never skip a word).
Forced tokens are fed to both models but never sampled, drafted or verified: the draft inserts
them while drafting, the target sees them inside the verify call, and acceptance runs over the
sampled tokens only. Both decoders apply the same schedule, so at beta = 0 the speculative output
still has the target's distribution (a forced token has probability one under both processes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import torch

from .cancellation import StopCheck
from .cancellation import check as check_stop
from ..config import DecodingConfig
from .results import GenerationResult, RoundRecord
from ..rules import RULES, AcceptanceRule, Block, make_rule
from .adaptive import DraftLengths
from .draft_heads import DraftHeads, check_fits, is_heads
from .drafters import Drafter, HeadsDrafter, ModelDrafter
from .kv import CachedForward, cached_lm
from .run_state import (MAX_FORCED_PER_TOKEN, Clock, ForcedTokens, PrefixDistribution, Run, check_inputs, prefill,
                        resolve_seed, run_result)
from .sampling import sample

if TYPE_CHECKING:
    from transformers import PreTrainedModel

#: on_round(tokens generated so far, target calls so far): called after every round (AR: every token),
#: from the decoding thread, so that a page can count live; it must not touch the decoding state.
RoundCallback = Callable[[int, int], None]
#: on_commit(record): called after every round with its `RoundRecord` (the tokens it committed, what was drafted and
#: accepted), from the decoding thread: what a stream feeds its codec from as tokens come. It must not touch the
#: decoding state (the record is the round's own).
CommitCallback = Callable[[RoundRecord], None]


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
    on_commit: CommitCallback | None = None,
    prefix_distribution: PrefixDistribution | None = None,
) -> GenerationResult:
    """Plain decoding: one target call per sampled token, with the same sampling and forward as the
    speculative path (forced tokens ride along with the next call's input). `should_stop` is asked
    before every step; when it says so, `Cancelled` is raised. `on_round` hears the counts after each, `on_commit`
    the step's record."""
    device, vocab = check_inputs(input_ids, target)
    run = Run(config, device, vocab, input_ids[0].tolist(), seed=resolve_seed(config), forced=forced,
              prefix_distribution=prefix_distribution)
    lm = cached_lm(target, len(run.prompt) + config.max_new_tokens + 2, static_cache)
    try:
        clock = Clock(device)
        prefill([lm], run.prompt)
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
            _tell(run.steps[-1], len(run.new_tokens), lm.calls, on_round, on_commit)
        return run_result(run, "ar", prefill_seconds, clock.now(), target_calls=lm.calls, draft_calls=0)
    finally:
        lm.close()  # a CUDA-graphed forward goes back to its model's idle list


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
    on_commit: CommitCallback | None = None,
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
    token and target-call counts after every round, `on_commit` its record. `prefix_distribution` replaces the sampling
    distribution by one that depends on the generated tokens (CosyVoice 2's repetition-aware
    sampling, `ssd_demo.engine.repetition_aware`), applied to draft and target rows alike: still exact.
    """
    heads = is_heads(draft)
    device, vocab = check_inputs(input_ids, *((target,) if heads else (target, draft)))
    if heads:
        check_fits(draft, target)
        if draft.device != device:
            raise ValueError(f"target and draft heads must be on the same device; got {device} and {draft.device}")
    run = Run(config, device, vocab, input_ids[0].tolist(), seed=resolve_seed(config), forced=forced,
              prefix_distribution=prefix_distribution)
    if rule is None:
        rule = make_rule(config, embeddings=target.get_input_embeddings().weight.detach()
                         if RULES[config.acceptance].needs_embeddings else None)
    elif rule.name != config.acceptance:  # the result reports `config`: they must agree
        raise ValueError(f"the rule handed in is {rule.name!r} but config.acceptance is {config.acceptance!r}")
    # Forced tokens may follow each sampled token; a generous bound keeps the static caches in range.
    capacity = len(run.prompt) + config.max_new_tokens + (MAX_FORCED_PER_TOKEN + 1) * (config.draft_len + 2)
    target_lm = cached_lm(target, capacity, static_cache, keep_hidden=heads)
    drafter: Drafter = (HeadsDrafter(draft, target, target_lm) if heads
                        else ModelDrafter(cached_lm(draft, capacity, static_cache)))
    try:
        clock = Clock(device)
        prefill([target_lm, *drafter.lms], run.prompt)
        drafter.sync(target_lm.length)
        prefill_seconds = clock.now()
        draft_lengths = DraftLengths(config)
        done = False
        while not done:
            check_stop(should_stop)
            draft_len = max(min(draft_lengths.next(), run.remaining - 1), 0)  # room for the replacement/bonus
            record, done = _speculative_round(run, rule, target_lm, drafter, draft_len, clock)
            draft_lengths.record(record.expected_acceptance)
            run.steps.append(record)
            _tell(record, len(run.new_tokens), target_lm.calls, on_round, on_commit)
        # (before closing: a closed CUDA-graphed forward may be leased, and its counts reset, by another thread)
        return run_result(
            run, "speculative", prefill_seconds, clock.now(), target_calls=target_lm.calls, draft_calls=drafter.calls
        )
    finally:
        target_lm.close()
        drafter.close()


def _tell(record: RoundRecord, tokens: int, calls: int, on_round: RoundCallback | None,
          on_commit: CommitCallback | None) -> None:
    """A round is committed: its record to `on_commit` (a stream's codec), then the counts to `on_round`."""
    if on_commit is not None:
        on_commit(record)
    if on_round is not None:
        on_round(tokens, calls)


def _speculative_round(run: Run, rule: AcceptanceRule, target_lm: CachedForward, drafter: Drafter,
                       draft_len: int, clock: Clock) -> tuple[RoundRecord, bool]:
    """One round: draft, verify in one target call, accept a prefix, add one token, roll back.

    Returns the round's record and whether generation is over.
    """
    committed_len = len(run.committed)

    # 1. Draft (forced tokens inserted after the drafted ones they follow).
    started = clock.now()
    drafted, draft_rows, block_tokens, drafted_at_index = drafter.propose(run, draft_len)
    drafted_at = clock.now()

    # 2. Verify: the pending tokens plus the block, in one target call.
    block = _verify(run, target_lm, drafted, draft_rows, block_tokens, drafted_at_index)

    # 3. Accept the longest prefix that passes, then a replacement or a bonus token.
    accepted, expected = _accepted_prefix(rule, block, run.generator)
    if accepted < len(drafted):
        next_token = int(sample(rule.residual(block, accepted)[None], run.generator)[0])
        kind = "replacement"
    else:
        next_token = int(sample(block.target_probs[-1:], run.generator)[0])
        kind = "bonus"
    kept = drafted[:accepted]
    kept_block = block_tokens[: drafted_at_index[accepted]] if accepted < len(drafted) else block_tokens
    if any(token in run.config.eos_ids for token in kept_block):
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


def _verify(run: Run, target_lm: CachedForward, drafted: list[int], draft_rows: list[torch.Tensor],
            block_tokens: list[int], drafted_at_index: list[int]) -> Block:
    """The target's distributions for the drafted tokens and the one after them, from one call over the
    pending tokens and the block; with the draft's, what the acceptance rule compares."""
    pending = run.committed[target_lm.length :]
    logits = target_lm.forward(pending + block_tokens)  # [len(pending) + len(block), V]
    # The logits that predict drafted token i sit just before it; the last row predicts the token after
    # the block. Rows of forced tokens are not verified: they are inserted, never sampled.
    rows = [len(pending) + index - 1 for index in drafted_at_index] + [logits.shape[0] - 1]
    if len(rows) != logits.shape[0]:
        logits = logits[rows]  # [K + 1, V]
    # For a prefix distribution: row i follows the block's tokens before drafted token i, the last row
    # the whole block (built only then: this is the decode loop).
    extras = ([block_tokens[:index] for index in drafted_at_index] + [block_tokens]
              if run.prefix_distribution is not None else None)
    target_scores, target_probs = run.distributions(logits, extras)
    return Block(
        drafted=torch.tensor(drafted, dtype=torch.long, device=run.device),
        draft_probs=torch.stack(draft_rows) if draft_rows else target_probs[:0],
        target_probs=target_probs,
        target_scores=target_scores,
    )


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
