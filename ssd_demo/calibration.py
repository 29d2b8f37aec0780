"""What one decoding step costs on this machine: the draft's step and the target's verify of 1..K+1 tokens.

The choice of K depends on hardware more than on the models: a verify of five tokens costs about 1.5
target steps on a CPU with AMX and 5-6 on one with AVX2 only (a 5-row matmul is not much cheaper there
than five 1-row ones). `measure_costs` times both models with their real caches after a prefill, a few
times each, and keeps the medians; `calibrated_costs` caches that per model pair, device and thread
count, so the probe (a fraction of a second on the embedded voice) runs once per process. With the
costs, `decoding.choose_draft_len` picks the K the strict formula prefers each round, K = 0 (plain AR
steps) when no K pays.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass

import torch

from .decoding import cached_lm


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


def _median_seconds(run, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


@torch.inference_mode()
def measure_costs(target, draft, max_len: int = 8, context: int = 64, repeats: int = 7,
                  vocab: int | None = None) -> StepCosts:
    """Time the draft's step and the target's calls over 1..max_len + 1 tokens after a `context`-token
    prefill (random ids: costs do not depend on which tokens), medians of `repeats` runs each."""
    vocab = vocab or int(target.get_input_embeddings().weight.shape[0])
    device = target.device
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (context + max_len + 2,), generator=generator).to(device)
    capacity = context + max_len + 4

    def timed(model, block: int) -> float:
        lm = cached_lm(model, capacity)
        lm.forward(ids[:context], last_only=True)
        lm.forward(ids[context : context + block], last_only=False)  # warm this shape

        def step() -> None:
            lm.forward(ids[context : context + block], last_only=False)
            lm.truncate(context)

        lm.truncate(context)
        return _median_seconds(step, repeats)

    one = timed(target, 1)
    verify = (1.0,) + tuple(timed(target, k + 1) / one for k in range(1, max_len + 1))
    return StepCosts(draft=timed(draft, 1) / one, verify=verify, target_step_seconds=one)


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
