"""The exactness tests' shared setting: a 4-token vocabulary, six new tokens after a fixed prompt, the target's
exact joint distribution over them (every continuation in one batched forward) and the drafts the tests use."""

from __future__ import annotations

import itertools

import torch

from ssd_demo import DecodingConfig
from ssd_demo.engine.sampling import allowed_mask, probabilities, processed_scores
from support.tiny_models import related_draft, tiny_llama

VOCAB = 4
NEW = 6
PROMPT = torch.tensor([[1, 2, 0]])


def exact_joint(model, config: DecodingConfig) -> dict[tuple[int, ...], float]:
    """P(first NEW tokens) under plain AR sampling of `model` with `config`'s processing."""
    sequences = torch.tensor(list(itertools.product(range(VOCAB), repeat=NEW)))
    inputs = torch.cat([PROMPT.expand(len(sequences), -1), sequences], dim=1)
    with torch.no_grad():
        logits = model(input_ids=inputs).logits[:, PROMPT.shape[1] - 1 : -1]  # predicts each new token
    mask = allowed_mask(config, VOCAB, torch.device("cpu"))
    probs = probabilities(processed_scores(logits.reshape(-1, VOCAB), config, mask), config).reshape(logits.shape)
    token_probs = probs.gather(-1, sequences[..., None])[..., 0].double()
    joint = token_probs.prod(dim=-1)
    return {tuple(s): float(p) for s, p in zip(sequences.tolist(), joint)}


def make_draft(kind: str):
    if kind == "unrelated":
        return tiny_llama(seed=2, vocab=VOCAB, init=0.2)
    return related_draft(VOCAB)
