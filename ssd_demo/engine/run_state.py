"""The state one decoding run carries: settings, RNG, mask, committed tokens, round records.

Shared by both decoders and the drafters: `Run` holds what was committed and commits more (each sampled
token followed by the tokens a `ForcedTokens` schedule inserts), and turns logits into the distributions
every row is sampled and verified from. Around it: the input checks, the prompt's prefill, the clock and
the statistics a finished run reports.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Callable, Hashable, Protocol

import torch

from ..config import DecodingConfig
from .results import GenerationResult, GenerationStats, RoundRecord
from .sampling import allowed_mask, probabilities, processed_scores

#: A next-token distribution that depends on the generated tokens (repetition-aware sampling):
#: ([N, V] scores after the mask, each row's generated tokens) -> [N, V] probabilities. It must be a
#: function of the prefix alone; both decoders apply it to every row, drafts and verifies alike.
PrefixDistribution = Callable[[torch.Tensor, list[list[int]]], torch.Tensor]

#: Most tokens a schedule may insert after one sampled token (sizes the static KV caches): the embedded
#: voice's NEXT after an overlong phoneme, the next phoneme and its two of lookahead (`backends.vocab`).
MAX_FORCED_PER_TOKEN = 4


class ForcedTokens(Protocol):
    """Tokens the decoder inserts itself, as a pure function of the sampled tokens before them.

    The state is an immutable value (a tuple, an int), so a speculative round can advance it along
    drafted tokens and simply drop it when they are rejected.
    """

    def initial_state(self) -> Hashable:
        """The state before the first generated token."""

    def advance(self, state: Hashable, token: int) -> tuple[Hashable, tuple[int, ...]]:
        """After sampled `token`: the next state and the tokens to insert right after it."""


class Clock:
    """perf_counter that waits for queued GPU work first, so timings are real on CUDA."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.start = self.now(raw=True)

    def now(self, raw: bool = False) -> float:
        if self.cuda:
            torch.cuda.synchronize()
        return time.perf_counter() if raw else time.perf_counter() - self.start


@dataclass
class Run:
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


def check_inputs(input_ids: torch.Tensor, *models) -> tuple[torch.device, int]:
    """The models' device and shared vocabulary size, after checking the prompt and that the models agree."""
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


def resolve_seed(config: DecodingConfig) -> int:
    """The config's seed, or a fresh random one (reported in the stats, so the run can be repeated)."""
    return config.seed if config.seed is not None else int.from_bytes(os.urandom(7), "little")


def prefill(lms: list, prompt: list[int]) -> None:
    """Cache all prompt tokens but the last, which stays pending for the first decoding call."""
    if len(prompt) > 1:
        for lm in lms:
            lm.forward(prompt[:-1], last_only=True)


def run_result(
    run: Run, mode: str, prefill_seconds: float, wall_seconds: float, target_calls: int, draft_calls: int
) -> GenerationResult:
    """The finished run's tokens, rounds and statistics."""
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
