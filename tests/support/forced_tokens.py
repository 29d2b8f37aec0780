"""The forced-token tests' shared setting: a schedule that mimics the embedded voice's phoneme markers (after 0
insert 4; after two 1s in a row insert 3) and the target's exact joint over the first sampled tokens."""

from __future__ import annotations

import itertools

import torch

from ssd_demo.engine.sampling import allowed_mask, probabilities, processed_scores

VOCAB = 5
FREE = [0, 1, 2]
SAMPLED = 4
PROMPT = torch.tensor([[1, 4, 2]])


class Markers:
    """After 0 insert 4; after the second of two 1s in a row insert 3. State: the previous token."""

    def initial_state(self):
        return None

    def advance(self, state, token):
        if token == 0:
            return token, (4,)
        if token == 1 and state == 1:
            return None, (3,)
        return token, ()


def expand(sampled: list[int]) -> list[int]:
    """Sampled tokens -> the full sequence with the forced tokens in place."""
    schedule, state, out = Markers(), Markers().initial_state(), []
    for token in sampled:
        state, forced = schedule.advance(state, token)
        out += [token, *forced]
    return out


def sampled_only(tokens: list[int]) -> list[int]:
    schedule, state, out, i = Markers(), Markers().initial_state(), [], 0
    while i < len(tokens):
        token = tokens[i]
        out.append(token)
        state, forced = schedule.advance(state, token)
        assert tokens[i + 1 : i + 1 + len(forced)] == list(forced)[: len(tokens) - i - 1], "forced token missing"
        i += 1 + len(forced)
    return out


def exact_joint(model, config) -> dict[tuple[int, ...], float]:
    """P(first SAMPLED sampled tokens) under AR sampling with the schedule's tokens in every prefix."""
    mask = allowed_mask(config, VOCAB, torch.device("cpu"))
    joint = {}
    for sampled in itertools.product(FREE, repeat=SAMPLED):
        full = expand(list(sampled))
        inputs = torch.cat([PROMPT, torch.tensor([full])], dim=1)
        with torch.no_grad():
            logits = model(input_ids=inputs).logits[0]
        probs = probabilities(processed_scores(logits, config, mask), config)
        schedule, state, index, p = Markers(), None, PROMPT.shape[1] - 1, 1.0
        for token in sampled:
            p *= float(probs[index, token])
            state, forced = schedule.advance(state, token)
            index += 1 + len(forced)
        joint[sampled] = p
    return joint
