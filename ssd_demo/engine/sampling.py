"""Logits -> the processed distribution that is both sampled from and used in acceptance.

Speculative sampling is exact only if the probabilities in the acceptance ratio are
the very distributions the tokens were drawn from. Upstream implementations have
broken exactness by sampling from a temperature/top-p-processed distribution but
computing the ratio from raw logits. Here one function produces the distribution
and every caller (draft sampling, target verification, AR decoding) goes through it.
"""

from __future__ import annotations

import torch

from ..config import DecodingConfig
from ..errors import InvalidSettingError


def allowed_mask(config: DecodingConfig, vocab_size: int, device: torch.device) -> torch.Tensor | None:
    """Boolean [V] mask of the ids sampling may produce, or None when everything is allowed."""
    if config.allowed_token_ids is None:
        return None
    ids = torch.tensor(config.allowed_token_ids, dtype=torch.long)
    if int(ids.max()) >= vocab_size:
        raise InvalidSettingError(f"allowed_token_ids contains id {int(ids.max())}, but the model's vocabulary has {vocab_size} ids")
    mask = torch.zeros(vocab_size, dtype=torch.bool)
    mask[ids] = True
    return mask.to(device)


def processed_scores(logits: torch.Tensor, config: DecodingConfig, mask: torch.Tensor | None) -> torch.Tensor:
    """[N, V] float32 scores after the allowed-token mask, temperature, top-k and top-p (-inf = excluded).

    Under greedy decoding (temperature 0) only the mask is applied: the scores rank tokens. With
    `untempered_token_ids` the scores are log-probabilities (`_with_untempered`).
    """
    scores = logits.float()
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    if config.greedy:
        return scores
    if config.untempered_token_ids:
        return _with_untempered(scores, config)
    return _tempered(scores, config)


def _with_untempered(scores: torch.Tensor, config: DecodingConfig) -> torch.Tensor:
    """[N, V] log-probabilities: the untempered ids keep their temperature-1 probability, the other ids share the
    rest in proportion to their tempered (top-k, top-p) probabilities.

    Why: a voice that ends each phoneme with one marker token (the embedded voice's NEXT) spreads a frame's speech
    probability over many codes; a low temperature sharpens the whole row, so the single marker wins far more often
    than the model says and phonemes end early (speech 14 % short at temperature 0.3, docs/benchmarks.md). Both
    decoders' draft and target rows go through here, so speculative decoding stays exact for this distribution.
    """
    vocab = scores.shape[-1]
    if max(config.untempered_token_ids) >= vocab:
        raise InvalidSettingError(f"untempered_token_ids contains id {max(config.untempered_token_ids)}, but the "
                                  f"model's vocabulary has {vocab} ids")
    ids = torch.tensor(config.untempered_token_ids, dtype=torch.long, device=scores.device)
    logp = torch.log_softmax(scores, dim=-1)  # temperature 1
    kept = logp.index_select(-1, ids)  # [N, u]
    rest = torch.logsumexp(logp.index_fill(-1, ids, float("-inf")), dim=-1, keepdim=True)  # the others' share
    others = _tempered(scores.index_fill(-1, ids, float("-inf")), config)
    has_others = torch.isfinite(others).any(dim=-1, keepdim=True)
    others = torch.where(has_others, torch.log_softmax(others, dim=-1), float("-inf"))
    return (others + rest).index_copy(-1, ids, kept)


def _tempered(scores: torch.Tensor, config: DecodingConfig) -> torch.Tensor:
    """Masked scores -> temperature, then top-k and top-p."""
    scores = scores / config.temperature
    vocab = scores.shape[-1]
    if 0 < config.top_k < vocab:
        kth = torch.topk(scores, config.top_k, dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if config.top_p < 1.0:
        sorted_scores, order = torch.sort(scores, dim=-1, descending=True)
        sorted_probs = torch.softmax(sorted_scores, dim=-1)
        # Drop a token when the mass strictly before it already reaches top_p; the most
        # likely token is therefore always kept.
        drop_sorted = (torch.cumsum(sorted_probs, dim=-1) - sorted_probs) >= config.top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        scores = scores.masked_fill(drop, float("-inf"))
    return scores


def probabilities(scores: torch.Tensor, config: DecodingConfig) -> torch.Tensor:
    """Processed scores -> probabilities; one-hot on the argmax under greedy decoding."""
    if config.greedy:
        return torch.nn.functional.one_hot(scores.argmax(dim=-1), scores.shape[-1]).float()
    return torch.softmax(scores, dim=-1)


def sample(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Draw one id per row of `probs` [N, V] -> [N].

    The exponential race argmax(p / E), E ~ Exp(1), samples exactly from p without
    normalising and without a host sync (the trick vLLM uses); zero-probability ids
    can never win unless the whole row is zero, and a one-hot row is deterministic.
    """
    noise = torch.empty_like(probs).exponential_(generator=generator)
    return (probs / noise).argmax(dim=-1)
