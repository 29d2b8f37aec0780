"""What one decoding step costs on this machine: the draft's step and the target's verify of 1..K+1 tokens.

The choice of K depends on hardware more than on the models: a verify of five tokens costs about 1.5
target steps on a CPU with AMX and 5-6 on one with AVX2 only (a 5-row matmul is not much cheaper there
than five 1-row ones); the lean forward's kernel choice per row count (`kernels.kernel_threshold`)
lowers it where oneDNN wins (1.55 -> 1.23 on an AVX-512 EPYC core), and the probe here sees the result. `measure_costs` times short real decoding runs (AR and speculative side by side
for several K) on a random prompt; `calibrated_costs` caches that per model pair and thread count, so
the probe (a few seconds on the embedded voice) runs once per process, and keeps it on this machine
(`machine_cache`, keyed by both models' signatures, the thread count and the forwards that serve them) so that it
runs once per machine. With the
costs, `adaptive.choose_draft_len` picks the K the strict formula prefers each round, K = 0 (plain AR
steps) when no K pays.
"""

from __future__ import annotations

import statistics
import threading
import weakref
from dataclasses import dataclass

import torch

from ..config import SETTINGS, DecodingConfig
from . import fixed_shape, kernels, machine_cache, onnx_forward
from .draft_heads import is_heads
from .results import predicted_speedup
from .generate import autoregressive_generate, speculative_generate
from .kv import describe_kernels
from .static_cache import serves as lean_forward_serves


@dataclass(frozen=True)
class StepCosts:
    """Costs relative to one target step (one token with a warm cache).

    draft:  one draft step, c.
    verify: verify[k] = one target call over k + 1 tokens (k drafted + the pending one); verify[0] = 1.
    """

    draft: float
    verify: tuple[float, ...]
    target_step_seconds: float
    kernels: str = ""  # the target forward's matmul kernels the costs were measured with (`describe_kernels`)
    #: (K, median measured verify cost) for each K that was timed; the others in `verify` are filled in.
    measured_verify: tuple[tuple[int, float], ...] = ()

    def round_cost(self, k: int) -> float:
        """Target steps a round of K = k costs: k draft steps and one verify of k + 1 tokens."""
        verify = self.verify[min(k, len(self.verify) - 1)]
        return k * self.draft + verify

    def verify_origin(self, k: int) -> str:
        """Where verify[k] comes from: "measured" (timed, kept as timed), "raised" (timed lower than a
        shorter block and raised to it: verifying more tokens never costs less, so the difference is
        timing noise) or "filled in" (not timed: interpolated between timed K, or extrapolated past the
        last); "" when the costs carry no record of what was timed."""
        timed = dict(self.measured_verify)
        if not timed:
            return ""
        if k not in timed:
            return "filled in"
        return "measured" if self.verify[k] <= timed[k] + 1e-12 else "raised"

    def describe(self) -> str:
        shown = ", ".join(f"{v:.2f}" for v in self.verify[1:])
        kernels = f" ({self.kernels})" if self.kernels else ""
        timed = ", ".join(f"{k}: {v:.2f}" for k, v in self.measured_verify)
        measured = (f"; timed at K = {timed}, the rest filled in, and each cost raised to at least the one before "
                    "it (verifying more tokens never costs less: a lower timing is noise)") if timed else ""
        return (f"c = {self.draft:.3f}; verify of K = 1.. {len(self.verify) - 1} costs {shown} target steps"
                f"{measured}{kernels}")


#: Block sizes timed; costs in between are interpolated and beyond the last extrapolated linearly.
MEASURED_DRAFT_LENS = (1, 2, 3, 4, 6, 8)
#: Costs are known up to the largest K the app offers (its draft-length control's maximum).
MAX_DRAFT_LEN = int(SETTINGS["draft_len"].control.maximum)


@torch.inference_mode()
def measure_costs(target, draft, context: int = 32, tokens: int = 32, repeats: int = 3,
                  vocab: int | None = None, measured_draft_lens: tuple[int, ...] = MEASURED_DRAFT_LENS,
                  max_draft_len: int = MAX_DRAFT_LEN) -> StepCosts:
    """Time real decoding on a `context`-token random prompt (costs do not depend on which tokens): for
    each K in `measured_draft_lens`, an AR run and a speculative run side by side, `repeats` times; each cost is the
    median of the paired ratios, so a machine that slows down for a while slows both sides of a pair.
    The decoders' own per-call timings include sampling and acceptance, which a bare forward leaves out.
    No end token, so every block is full. Verifying more tokens never costs less than fewer (the costs
    are made non-decreasing, from 1 for one token), and K up to `max_draft_len` is filled in."""
    vocab = vocab or int(target.get_input_embeddings().weight.shape[0])
    generator = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, vocab, (1, context), generator=generator).to(target.device)
    config = DecodingConfig(max_new_tokens=tokens, temperature=1.0, seed=0, eos_token_id=None, beta=0.0)
    autoregressive_generate(target, prompt, config.with_(max_new_tokens=4))  # first-call costs
    speculative_generate(target, draft, prompt, config.with_(max_new_tokens=4, draft_len=2))
    steps, verify_at, draft_ratios = [], {}, []
    for k in measured_draft_lens:
        pairs = []
        for _ in range(repeats):
            step = autoregressive_generate(target, prompt, config.with_(max_new_tokens=tokens // 2)).stats
            spec = speculative_generate(target, draft, prompt, config.with_(draft_len=k)).stats
            pairs.append((spec.mean_target_call_seconds / step.mean_target_call_seconds,
                          spec.mean_draft_step_seconds / step.mean_target_call_seconds))
            steps.append(step.mean_target_call_seconds)
        verify_at[k] = statistics.median(v for v, _ in pairs)
        draft_ratios += [c for _, c in pairs]
    verify = [1.0]
    known = sorted(verify_at)
    for k in range(1, max_draft_len + 1):
        if k in verify_at:
            value = verify_at[k]
        elif k < known[-1]:  # between two measured sizes
            low = max(m for m in known if m < k)
            high = min(m for m in known if m > k)
            value = verify_at[low] + (verify_at[high] - verify_at[low]) * (k - low) / (high - low)
        else:  # past the last: the last measured slope
            a, b = known[-2], known[-1]
            value = verify_at[b] + (verify_at[b] - verify_at[a]) / (b - a) * (k - b)
        verify.append(max(value, verify[-1]))
    return StepCosts(draft=max(statistics.median(draft_ratios), 1e-3), verify=tuple(verify),
                     target_step_seconds=statistics.median(steps), kernels=describe_kernels(target),
                     measured_verify=tuple(sorted(verify_at.items())))


_CACHE: "weakref.WeakKeyDictionary[object, dict]" = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def _key(draft) -> tuple:
    return (id(draft), torch.get_num_threads())


def is_calibrated(target, draft) -> bool:
    return _key(draft) in _CACHE.get(target, {})


def calibrated_costs(target, draft, refresh: bool = False) -> StepCosts:
    """`measure_costs` once per target, draft and thread count in this process (K up to `MAX_DRAFT_LEN`), and once per
    machine where the costs measured in an earlier run were kept (`refresh`: measured again all the same)."""
    with _LOCK:
        per_target = _CACHE.setdefault(target, {})
        if refresh or _key(draft) not in per_target:
            key = _machine_key(target, draft)
            costs = None if refresh else _kept(key)
            if costs is None:
                costs = measure_costs(target, draft)
                machine_cache.put(CACHE_KIND, *key, _as_json(costs))
            per_target[_key(draft)] = costs
        return per_target[_key(draft)]


#: The machine cache's name for the measured costs.
CACHE_KIND = "costs"


def _served_by(model) -> str:
    """Which forward serves the model's calls here, on how many threads or with which kernels: costs measured with
    one hold for it alone."""
    if is_heads(model):
        return "heads"  # its step runs where the target's forward runs, which the target's part of the key says
    if fixed_shape.serves(model):
        return "cuda-graphs"
    if onnx_forward.serves(model):
        return f"onnxruntime/{onnx_forward.choice(model).threads}"
    if lean_forward_serves(model):
        return f"lean/{kernels.kernel_threshold(model)}"
    return "transformers"


def _machine_key(target, draft) -> tuple:
    device = next(target.parameters()).device
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    return (machine_cache.signature(target), machine_cache.signature(draft), where, torch.get_num_threads(),
            _served_by(target), _served_by(draft), MAX_DRAFT_LEN)


def _as_json(costs: StepCosts) -> dict:
    return {"draft": costs.draft, "verify": list(costs.verify), "target_step_seconds": costs.target_step_seconds,
            "kernels": costs.kernels, "measured_verify": [list(pair) for pair in costs.measured_verify]}


def _kept(key: tuple) -> StepCosts | None:
    """The costs measured in an earlier run on this machine for this key, if they were kept and are whole."""
    value = machine_cache.get(CACHE_KIND, *key)
    try:
        verify = tuple(float(v) for v in value["verify"])
        if len(verify) != MAX_DRAFT_LEN + 1:
            return None
        return StepCosts(draft=float(value["draft"]), verify=verify,
                         target_step_seconds=float(value["target_step_seconds"]), kernels=str(value["kernels"]),
                         measured_verify=tuple((int(k), float(v)) for k, v in value["measured_verify"]))
    except (TypeError, KeyError, ValueError):
        return None


def predicted_with(alpha: float, costs: StepCosts, k: int) -> float:
    """The strict prediction of the LM speedup at acceptance `alpha` and K = `k` with these costs: the
    one formula of `results.predicted_speedup`, with this machine's c and verify cost of K."""
    return predicted_speedup(alpha, k, costs.draft, costs.verify[min(k, len(costs.verify) - 1)])


def best_draft_len(alpha: float, costs: StepCosts, max_len: int) -> tuple[int, float]:
    """(K, predicted LM speedup) that the strict formula prefers at acceptance `alpha` with these costs;
    K = 0 (plain AR, 1.0x) when no K pays."""
    best = (0, predicted_with(alpha, costs, 0))
    for k in range(1, min(max_len, len(costs.verify) - 1) + 1):
        if predicted_with(alpha, costs, k) > best[1]:
            best = (k, predicted_with(alpha, costs, k))
    return best
