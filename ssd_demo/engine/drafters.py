"""What proposes a speculative round's block: an AR draft model, or draft heads on the target.

A drafter samples up to K tokens, keeping each one's processed distribution (the acceptance rule
compares it with the target's), and inserts the forced tokens that follow each drafted one, so that
the block the target verifies is exactly what would be committed. `draft_block` is that loop; the two
drafters differ only in where the next logits come from.
"""

from __future__ import annotations

from typing import Callable, Protocol

import torch

from . import onnx_heads
from .draft_heads import DraftHeads, fast_step
from .kv import CachedForward
from .run_state import Run
from .sampling import sample

#: (drafted tokens, their processed distributions, the block to verify with forced tokens inserted,
#: each drafted token's index in that block)
Proposal = tuple[list[int], list[torch.Tensor], list[int], list[int]]


class Drafter(Protocol):
    """What proposes a round's block (`ModelDrafter`, `HeadsDrafter`)."""

    calls: int  # proposal steps taken (for the stats)
    lms: list  # cached forwards to prefill with the prompt

    @property
    def cache_len(self) -> int:
        """Tokens in the drafter's own cache (heads: the target's, which they read)."""

    def propose(self, run: Run, draft_len: int) -> Proposal:
        """Up to `draft_len` drafted tokens, their processed distributions, the block to verify (forced
        tokens inserted) and each drafted token's index in that block."""

    def sync(self, valid: int) -> None:
        """After the target's cache was cut to its first `valid` tokens (the committed prefix)."""

    def close(self) -> None:
        """Release hooks and caches."""


class ModelDrafter:
    """An AR draft model with its own KV cache, fed the committed tokens it has not seen yet."""

    def __init__(self, lm: CachedForward):
        self.lm = lm
        self.lms = [lm]

    @property
    def calls(self) -> int:
        return self.lm.calls

    @property
    def cache_len(self) -> int:
        return self.lm.length

    def propose(self, run: Run, draft_len: int) -> Proposal:
        # catch up on what the draft has not seen, then one call per drafted token
        return draft_block(lambda feed: self.lm.forward(feed, last_only=True), run, draft_len,
                           run.committed[self.lm.length :])

    def sync(self, valid: int) -> None:
        self.lm.truncate(min(self.lm.length, valid))

    def close(self) -> None:
        self.lm.close()


class HeadsDrafter:
    """Draft heads on the target's hidden state: the state at the last token in the target's cache,
    rolled forward over the pending tokens and then over each drafted token (and its forced ones)."""

    def __init__(self, heads: DraftHeads, target, target_lm: CachedForward):
        self.heads = heads
        self.target_lm = target_lm
        self.lms: list = []
        self.calls = 0
        self._embed = target.get_input_embeddings().weight  # [V, d]
        self._step = fast_step(heads, self._embed.detach())
        # where the target runs on ONNX Runtime (faster on this CPU), a heads step and its logits in one call
        self._onnx_step = onnx_heads.heads_step(heads, target, target_lm)
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

    def propose(self, run: Run, draft_len: int) -> Proposal:
        state = self._anchor if self._anchor is not None else self._embed.new_zeros(self._embed.shape[1])

        def next_logits(feed: list[int]) -> torch.Tensor:  # [1, V] after the tokens fed since the last call
            nonlocal state
            self.calls += 1
            if self._onnx_step is not None and feed:
                for token in feed:
                    state, logits = self._onnx_step(state, token)
                return logits
            state = self._state_after(state, feed)
            return torch.nn.functional.linear(state[None], self._out_weight, self._out_bias)

        # the pending tokens the target has not seen come first
        return draft_block(next_logits, run, draft_len, run.committed[self.target_lm.length :])

    def close(self) -> None:
        self._anchor = None


def draft_block(next_logits: Callable[[list[int]], torch.Tensor], run: Run, draft_len: int,
                feed: list[int]) -> Proposal:
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
