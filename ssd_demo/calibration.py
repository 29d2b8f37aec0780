"""What one decoding step costs on this machine: the draft's step and the target's verify of 1..K+1 tokens.

The choice of K depends on hardware more than on the models: a verify of five tokens costs about 1.5
target steps on a CPU with AMX and 5-6 on one with AVX2 only (a 5-row matmul is not much cheaper there
than five 1-row ones). `measure_costs` times short real decoding runs (AR, and speculative with each K)
on a random prompt; `calibrated_costs` caches that per model pair, device and thread count, so the
probe (about a second on the embedded voice) runs once per process. With the
costs, `decoding.choose_draft_len` picks the K the strict formula prefers each round, K = 0 (plain AR
steps) when no K pays.
"""

from __future__ import annotations

import statistics
import threading
from dataclasses import dataclass

import torch

from .config import DecodingConfig
from .decoding import autoregressive_generate, speculative_generate


@dataclass(frozen=True)
class StepCosts:
    """Costs relative to one target step (one token with a warm cache).

    draft:  one draft step, c.
    verify: verify[k] = one target call over k + 1 tokens (k drafted + the pending one); verify[0] = 1.
    """

    draft: float
    verify: tuple[float, ...]
    target_step_seconds: float

    def round_cost(self, k: int) -> float:
        """Target steps a round of K = k costs: k draft steps and one verify of k + 1 tokens."""
        verify = self.verify[min(k, len(self.verify) - 1)]
        return k * self.draft + verify

    def describe(self) -> str:
        shown = ", ".join(f"{v:.2f}" for v in self.verify[1:])
        return f"c = {self.draft:.3f}; verify of K = 1.. {len(self.verify) - 1} costs {shown} target steps"


@torch.inference_mode()
def measure_costs(target, draft, max_len: int = 8, context: int = 32, tokens: int = 24, repeats: int = 2,
                  vocab: int | None = None) -> StepCosts:
    """Time real decoding: AR for `tokens` tokens, then speculative decoding with K = 1..max_len, after a
    `context`-token random prompt (costs do not depend on which tokens). The decoders' own per-call
    timings include sampling and acceptance, which a bare forward would leave out (and underrate the
    verify by a tenth or more on a small model). No end token, so every block is full; each cost is the
    fastest of `repeats` runs (a busy machine only ever adds time)."""
    vocab = vocab or int(target.get_input_embeddings().weight.shape[0])
    generator = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, vocab, (1, context), generator=generator).to(target.device)
    config = DecodingConfig(max_new_tokens=tokens, temperature=1.0, seed=0, eos_token_id=None, beta=0.0)
    autoregressive_generate(target, prompt, config.with_(max_new_tokens=4))  # first-call costs
    step = min(autoregressive_generate(target, prompt, config).stats.mean_target_call_seconds
               for _ in range(repeats))
    verify, draft_steps = [1.0], []
    for k in range(1, max_len + 1):
        runs = [speculative_generate(target, draft, prompt, config.with_(draft_len=k)).stats for _ in range(repeats)]
        verify.append(min(r.mean_target_call_seconds for r in runs) / step)
        draft_steps.append(min(r.mean_draft_step_seconds for r in runs) / step)
    return StepCosts(draft=statistics.median(draft_steps), verify=tuple(verify), target_step_seconds=step)


_CACHE: dict[tuple, StepCosts] = {}
_LOCK = threading.Lock()


def calibrated_costs(target, draft, max_len: int = 8, refresh: bool = False) -> StepCosts:
    """`measure_costs` once per (target, draft, device, threads, max_len) in this process."""
    key = (id(target), id(draft), str(target.device), torch.get_num_threads(), max_len)
    with _LOCK:
        if refresh or key not in _CACHE:
            _CACHE[key] = measure_costs(target, draft, max_len=max_len)
        return _CACHE[key]


def best_draft_len(alpha: float, costs: StepCosts, max_len: int) -> tuple[int, float]:
    """(K, predicted LM speedup) that the strict formula prefers at acceptance `alpha` with these costs;
    K = 0 (plain AR, 1.0x) when no K pays."""
    best = (0, 1.0 / costs.verify[0])
    for k in range(1, min(max_len, len(costs.verify) - 1) + 1):
        tokens = float(k + 1) if alpha >= 1 else (1 - alpha ** (k + 1)) / (1 - alpha)
        speedup = tokens / costs.round_cost(k)
        if speedup > best[1]:
            best = (k, speedup)
    return best
