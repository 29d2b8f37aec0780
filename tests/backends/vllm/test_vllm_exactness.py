"""Speculative decoding through vLLM (its draft-model method, in its own environment) on the CPU, one engine
for every beta (each request carries its own):

- beta = 0 reproduces the target's distribution, with vLLM's own rejection rule (a batch of beta-0 requests
  only) and with the plugin's rule (beta-0 requests in a batch that also holds beta-0.3 ones);
- in that mixed batch each request is accepted as often as our engine's `ssd` rule at its own beta.

The target's joint distribution of the first four new tokens is enumerated exactly with transformers (8^4
continuations in one batched forward); thousands of requests, seeded one by one, go to vLLM in one batch.
An engine start costs about a minute on the CPU: one for the module.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from ssd_demo import DecodingConfig, speculative_generate
from ssd_demo.backends.vllm.worker import VllmWorker, WorkerSpec
from support.stats import chi_square_p, marginal, sample_count
from support.vllm_support import BOS, VOCAB, needs_vllm, save_small_pair

pytestmark = [pytest.mark.vllm, needs_vllm]

NEW = 4
K = 3
PROMPT = [BOS, 3, 5]
TEMPERATURE = 1.0
BETA = 0.3


def exact_joint(model) -> dict[tuple[int, ...], float]:
    """P(first NEW tokens after PROMPT) under plain sampling at TEMPERATURE."""
    sequences = torch.tensor(list(itertools.product(range(VOCAB), repeat=NEW)))
    prompt = torch.tensor([PROMPT]).expand(len(sequences), -1)
    with torch.no_grad():
        logits = model(input_ids=torch.cat([prompt, sequences], dim=1)).logits[:, len(PROMPT) - 1:-1]
    probs = torch.softmax(logits.double() / TEMPERATURE, dim=-1)
    joint = probs.gather(-1, sequences[..., None])[..., 0].prod(dim=-1)
    return {tuple(s): float(p) for s, p in zip(sequences.tolist(), joint)}


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return save_small_pair(tmp_path_factory.mktemp("vllm-pair"))


@pytest.fixture(scope="module")
def engine(pair):
    target, draft, _, _ = pair
    spec = WorkerSpec(target=str(target), draft=str(draft), draft_len=K, max_model_len=256, max_num_seqs=256)
    with VllmWorker.start(spec) as worker:
        yield worker


def _alternating(n: int) -> list[float]:
    """beta 0 and BETA in turn, so that every verify step holds requests of both."""
    return [0.0 if index % 2 == 0 else BETA for index in range(n)]


def _samples(worker: VllmWorker, n: int, betas: list[float] | None = None) -> list[tuple[int, ...]]:
    """n requests' first NEW tokens; with `betas`, one request per beta and only the beta-0 ones returned."""
    betas = betas or [0.0] * n
    batch = worker.generate([PROMPT] * len(betas), NEW, temperature=TEMPERATURE, seed=1000, ignore_eos=True,
                            beta=betas)
    assert all(len(tokens) == NEW for tokens in batch.tokens)
    assert batch.draft_tokens > 0  # the draft did propose: the verify step was exercised
    return [tuple(tokens) for tokens, beta in zip(batch.tokens, betas) if beta == 0.0]


def _check_exact(samples, pair) -> None:
    _, _, target, draft = pair
    expected, draft_joint = exact_joint(target), exact_joint(draft)
    for positions in (slice(0, 2), slice(2, 4)):  # later positions catch bonus-token and rollback bugs
        part = [s[positions] for s in samples]
        p_value = chi_square_p(part, marginal(expected, positions))
        assert p_value > 1e-3, f"tokens {positions}: vLLM's output does not fit the target (p = {p_value:.2e})"
        power = chi_square_p(part, marginal(draft_joint, positions))
        assert power < 1e-6, f"the test cannot tell the draft from the target (p = {power:.2e})"


@pytest.mark.stats
def test_vllm_speculative_sampling_at_beta_zero_matches_the_target(engine, pair):
    _check_exact(_samples(engine, sample_count(4000, minimum=2000)), pair)


@pytest.mark.stats
def test_beta_zero_requests_batched_with_ssd_ones_still_match_the_target(engine, pair):
    # Steps that hold a beta > 0 request run the plugin's sampler for every row: its beta-0 rows must be exact.
    n = sample_count(4000, minimum=2000)
    _check_exact(_samples(engine, 2 * n, betas=_alternating(2 * n)), pair)


def _our_acceptance(pair, prompts, beta: float, length: int) -> tuple[int, int]:
    _, _, target, draft = pair
    accepted = drafted = 0
    for index, prompt in enumerate(prompts):
        config = DecodingConfig(draft_len=K, beta=beta, acceptance="ssd", temperature=TEMPERATURE, top_k=0,
                                top_p=1.0, max_new_tokens=length, seed=index)
        stats = speculative_generate(target, draft, torch.tensor([prompt]), config).stats
        accepted, drafted = accepted + stats.accepted_tokens, drafted + stats.drafted_tokens
    return accepted, drafted


def _prompts(n: int) -> list[list[int]]:
    rng = np.random.default_rng(7)
    return [[BOS] + rng.integers(2, VOCAB, size=int(rng.integers(2, 6))).tolist() for _ in range(n)]


def _interval(a1: int, n1: int, a2: int, n2: int) -> tuple[float, float]:
    """Difference of two acceptance rates and its half-width: 5 standard errors (binomial, pooled rate) plus
    0.02 for the ends of the runs, where the two engines may draft a different number of tokens."""
    pooled = (a1 + a2) / (n1 + n2)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    return a1 / n1 - a2 / n2, 5 * se + 0.02


@pytest.mark.stats
def test_in_one_batch_each_request_is_accepted_by_its_own_beta(engine, pair):
    prompts, length = _prompts(sample_count(300, minimum=150)), 48
    both = [prompt for prompt in prompts for _ in range(2)]  # each prompt once at beta 0, once at BETA, in turn
    betas = _alternating(len(both))
    batch = engine.generate(both, length, temperature=TEMPERATURE, seed=0, ignore_eos=True, beta=betas)
    rates = {}
    for beta in (0.0, BETA):
        mine = [counts for counts, b in zip(batch.requests, betas) if b == beta]
        accepted, drafted = sum(c.accepted_tokens for c in mine), sum(c.draft_tokens for c in mine)
        ours = _our_acceptance(pair, prompts, beta, length)
        difference, half_width = _interval(accepted, drafted, *ours)
        assert abs(difference) <= half_width, (
            f"beta {beta}: vLLM accepts {accepted / drafted:.3f} of drafted tokens, our ssd rule "
            f"{ours[0] / ours[1]:.3f} (allowed difference {half_width:.3f})")
        rates[beta] = (accepted, drafted)
    assert sum(c.draft_tokens for c in batch.requests) == batch.draft_tokens  # per request adds up to the engine's
    # ... and beta really acts inside vLLM: far more acceptance than at beta = 0
    gain, half_width = _interval(*rates[BETA], *rates[0.0])
    assert gain > half_width + 0.05, f"beta {BETA} barely changes vLLM's acceptance (+{gain:.3f})"


CPU_EXPAND_PROBE = """
import json, torch
from vllm.platforms import current_platform
current_platform.register_triton_kernel_overrides()  # what vLLM does on a CPU without Triton
from vllm.v1.sample import rejection_sampler as module
from ssd_vllm_plugin.patch import fix_cpu_expand
x, cu = torch.tensor([0.5, 0.0, 2.0]), torch.tensor([2, 3, 6], dtype=torch.int32)
before = module.expand_batch_to_tokens(x, cu, 6, replace_from=0, replace_to=1).tolist()
fix_cpu_expand()
after = module.expand_batch_to_tokens(x, cu, 6, replace_from=0, replace_to=1).tolist()
print(json.dumps({"before": before, "after": after}))
"""


def test_the_plugin_mends_vllms_cpu_expansion_of_per_token_temperatures():
    import json
    import subprocess

    from ssd_demo.backends.vllm.worker import vllm_python

    run = subprocess.run([str(vllm_python()), "-c", CPU_EXPAND_PROBE], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    values = json.loads(run.stdout.strip().splitlines()[-1])
    expected = [0.5, 0.5, 1.0, 2.0, 2.0, 2.0]  # one temperature per drafted token; greedy's 0 read as 1
    assert values["after"] == expected
    # vLLM 0.32's own CPU path leaves the result unfilled; when a release fixes it, fix_cpu_expand can go
    assert values["before"] != expected, "vLLM's CPU expansion is right: the plugin's fix_cpu_expand is not needed"


def test_a_seeded_speculative_request_gives_the_same_tokens_every_time(engine):
    # vLLM 0.32's draft ignores seeds, so after other requests had run the same seed gave other tokens; the plugin
    # draws a seeded request's draft noise from its own generator (what `X-Seed` promises a server's client)
    prompts = _prompts(4)
    for beta in (0.0, BETA):
        runs = [engine.generate(prompts, 32, temperature=TEMPERATURE, seed=77, ignore_eos=True, beta=beta).tokens
                for _ in range(3)]
        assert runs[0] == runs[1] == runs[2], f"beta {beta}: the same seeds gave different tokens"
    alone = [engine.generate(prompts[:1], 32, temperature=TEMPERATURE, seed=78, ignore_eos=True).tokens
             for _ in range(2)]
    assert alone[0] == alone[1]
