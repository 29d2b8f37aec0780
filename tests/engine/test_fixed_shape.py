"""The fixed-shape forward (CUDA graphs on a GPU) computes what transformers computes, with rollback by position.

On the CPU it runs eagerly (the same maths and shapes a graph replays); the CUDA tests skip without a GPU.
"""

import gc
import weakref

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from ssd_demo import DecodingConfig, autoregressive_generate, speculative_generate
from ssd_demo.engine import fixed_shape, kv
from ssd_demo.engine.fixed_shape import FixedShapeLM
from ssd_demo.engine.kv import CachedLM
from ssd_demo.engine.kv import describe_kernels
from ssd_demo.engine.static_cache import StaticCacheLM
from support.tiny_models import check_same_decoding_after, check_same_logits, tiny_llama

STEPS = [(0, 5, False), (5, 6, True), (6, 8, True), ("cut", 4), (4, 9, False), (9, 10, True), ("cut", 7),
         (7, 12, False), ("cut", 9), (9, 30, True)]


def _qwen2(seed: int) -> Qwen2ForCausalLM:
    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=40, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, initializer_range=0.3, max_position_embeddings=256)
    model = Qwen2ForCausalLM(config).eval()
    with torch.no_grad():  # transformers initialises the q/k/v biases to zero: make them matter
        for name, parameter in model.named_parameters():
            if name.endswith("bias"):
                parameter.normal_(0, 0.3)
    return model


@pytest.mark.parametrize("build", [
    lambda: tiny_llama(seed=3, vocab=50, layers=2, width=32, init=0.3),  # one kv head for two query heads
    lambda: tiny_llama(seed=4, vocab=50, layers=2, width=32, init=0.3, heads=8, kv_heads=2),  # groups of four
    lambda: tiny_llama(seed=5, vocab=50, layers=1, width=32, init=0.3, heads=4, kv_heads=4),  # no grouping
    lambda: _qwen2(seed=6),  # biases on q, k, v
])
def test_same_logits_as_transformers_through_prefill_steps_rollback_and_growth(build):
    model = build()
    reference, fixed = CachedLM(model), FixedShapeLM(model, capacity=4, graphs=False)  # capacity grows on demand
    sequence = torch.randint(0, 40, (30,), generator=torch.Generator().manual_seed(0)).tolist()
    peak = check_same_logits(reference, fixed, sequence, STEPS, atol=1e-5)
    assert peak > 0.1 and fixed.capacity >= 30


def test_keeps_the_final_hidden_state_of_its_logits_rows_like_the_lean_forward():
    model = tiny_llama(seed=7, vocab=30, layers=2, width=16, init=0.3)
    lean, fixed = StaticCacheLM(model, 32), FixedShapeLM(model, 32, graphs=False)
    for lm in (lean, fixed):
        lm.forward(list(range(8)))
        lm.truncate(6)
        lm.forward([3, 4, 5])
    assert fixed.hidden_from == lean.hidden_from == 6
    torch.testing.assert_close(fixed.hidden, lean.hidden, atol=1e-5, rtol=1e-5)


def test_an_idle_forward_is_reused_emptied_and_never_handed_to_two_callers():
    model = tiny_llama(seed=8, vocab=30, layers=2, width=16, init=0.3)
    first = FixedShapeLM.lease(model, 32)
    first.forward(list(range(20)))  # leaves keys at positions the next sequence will not overwrite
    second = FixedShapeLM.lease(model, 32)
    assert second is not first  # the first is still in use
    first.close()
    reused = FixedShapeLM.lease(model, 16)
    assert reused is first and reused.length == 0 and reused.calls == 0
    reference = CachedLM(model)
    sequence = [5, 6, 7, 8, 9]
    torch.testing.assert_close(reused.forward(sequence), reference.forward(sequence), atol=1e-5, rtol=1e-5)
    assert FixedShapeLM.lease(model, 64) is not first  # too short: a new one
    reused.close()
    reused.close()  # closing twice is harmless
    assert FixedShapeLM.lease(model, 16) is first and FixedShapeLM.lease(model, 16) is not first


def test_as_many_idle_forwards_are_kept_as_were_ever_in_use_at_once():
    """A server's concurrency comes back: its forwards (and their graphs) are kept for it, not rebuilt."""
    model = tiny_llama(seed=18, vocab=30, layers=1, width=16)
    busy = [FixedShapeLM.lease(model, 16) for _ in range(5)]
    for lm in busy:
        lm.close()
    assert len(FixedShapeLM._kept[model].idle) == 5
    again = [FixedShapeLM.lease(model, 16) for _ in range(5)]
    assert {id(lm) for lm in again} == {id(lm) for lm in busy}
    quiet = tiny_llama(seed=19, vocab=30, layers=1, width=16)
    for _ in range(4):  # one at a time: the default number is kept
        FixedShapeLM(quiet, 16).close()
    assert len(FixedShapeLM._kept[quiet].idle) == fixed_shape.KEEP_IDLE


def test_an_idle_forward_is_not_reused_once_the_weights_have_moved():
    """Its graphs would read the old addresses: after `model.to(...)` a new forward is built."""
    model = tiny_llama(seed=17, vocab=30, layers=1, width=16, init=0.3)
    first = FixedShapeLM.lease(model, 16)
    first.close()
    model.to(torch.float64)
    again = FixedShapeLM.lease(model, 16)
    assert again is not first and not FixedShapeLM._kept[model].idle
    torch.testing.assert_close(again.forward([1, 2, 3]), CachedLM(model).forward([1, 2, 3]))


def test_idle_forwards_do_not_keep_their_model_alive():
    model = tiny_llama(seed=9, vocab=30, layers=1, width=16)
    FixedShapeLM.lease(model, 16).close()
    assert len(FixedShapeLM._kept[model].idle) == 1
    alive = weakref.ref(model)
    del model
    gc.collect()
    assert alive() is None


def test_not_used_off_a_gpu():
    model = tiny_llama(seed=10, vocab=30, layers=1, width=16)
    assert not fixed_shape.serves(model)  # on the CPU the lean forward serves
    assert isinstance(kv.cached_lm(model, 32), StaticCacheLM)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_the_decoders_give_the_same_tokens_through_it(monkeypatch, temperature):
    """Both decoders on the fixed-shape forward (eager here) give the lean forward's tokens, and hand it back."""
    target, draft = check_same_decoding_after(lambda: monkeypatch.setattr(
        fixed_shape, "serves", lambda model, static_cache=None: static_cache is not False), temperature)
    # Each run handed its forwards back, and AR reused the speculative run's target forward.
    assert len(FixedShapeLM._kept[target].idle) == len(FixedShapeLM._kept[draft].idle) == 1


class _EmulatedGraph:
    """What a CUDA graph does, on the CPU: replay reads its fixed input buffers and overwrites its fixed outputs."""

    def __init__(self, lm: FixedShapeLM, ids: torch.Tensor, positions: torch.Tensor, last_only: bool):
        self.lm, self.ids, self.positions, self.last_only = lm, ids, positions, last_only
        self.replays = 0

    def replay(self) -> None:
        logits, hidden = self.lm._step(self.ids, self.positions, self.last_only)
        self.outputs[0].copy_(logits)
        self.outputs[1].copy_(hidden)
        self.replays += 1


def _emulate_capture(self, ids, positions, last_only):
    ids, positions = ids.clone(), positions.clone()
    graph = _EmulatedGraph(self, ids, positions, last_only)
    logits, hidden = self._step(ids, positions, last_only)
    graph.outputs = (logits, hidden)
    captured = self._graphs[(ids.shape[0], last_only)] = fixed_shape._Graph(graph, ids, positions, logits, hidden)
    return captured


def test_the_graph_bookkeeping_replays_each_call_on_its_own_inputs(monkeypatch):
    """The replay path with an emulated graph (fixed buffers, outputs overwritten by the next replay): every call,
    through rollbacks and growth, gives the eager logits, and both decoders give the same tokens, so inputs are
    refreshed before each replay and a decoder never holds an output a later replay overwrites."""
    monkeypatch.setattr(FixedShapeLM, "_capture", _emulate_capture)
    model = tiny_llama(seed=20, vocab=50, layers=2, width=32, init=0.3, heads=4, kv_heads=2)
    eager, graphed = FixedShapeLM(model, 8, graphs=False), FixedShapeLM(model, 8, graphs=True)
    sequence = torch.randint(0, 50, (40,), generator=torch.Generator().manual_seed(0)).tolist()
    steps = [(0, 5, False), (5, 6, True), (6, 7, True), (7, 8, True), ("cut", 6), (6, 11, False), (11, 12, True),
             ("cut", 9), (9, 14, False), (14, 15, True), (15, 40, False), ("cut", 20), (20, 25, False), (25, 26, True),
             (26, 27, True)]  # the 25-token call grows the cache past 8 and 16: graphs made again after it
    check_same_logits(eager, graphed, sequence, steps, atol=1e-6, rtol=1e-6)
    assert graphed._graphs and all(graph.graph.replays for graph in graphed._graphs.values())
    first = graphed.forward([3], last_only=True)  # a caller may keep what a call returned
    kept = first.clone()
    graphed.forward([4], last_only=True)  # the same graph, replayed on other input
    assert torch.equal(first, kept)

    target = tiny_llama(seed=21, vocab=32, layers=2, width=16, init=0.3)
    draft = tiny_llama(seed=22, vocab=32, layers=1, width=16, init=0.3)
    config = DecodingConfig(draft_len=3, max_new_tokens=40, temperature=1.0, seed=5)
    prompt = torch.tensor([[1, 2, 3]])
    lean = speculative_generate(target, draft, prompt, config)
    lean_ar = autoregressive_generate(target, prompt, config)

    monkeypatch.setattr(fixed_shape, "serves", lambda model, static_cache=None: static_cache is not False)
    monkeypatch.setattr(FixedShapeLM, "lease", staticmethod(lambda model, capacity: FixedShapeLM(model, capacity,
                                                                                                   graphs=True)))
    assert speculative_generate(target, draft, prompt, config).tokens == lean.tokens
    assert autoregressive_generate(target, prompt, config).tokens == lean_ar.tokens


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_graphs_replay_what_the_eager_step_computes(dtype):
    model = tiny_llama(seed=13, vocab=50, layers=2, width=64, init=0.3, heads=8, kv_heads=2).to("cuda", dtype)
    eager, graphed = FixedShapeLM(model, 8, graphs=False), FixedShapeLM(model, 8, graphs=True)
    sequence = torch.randint(0, 50, (40,), generator=torch.Generator().manual_seed(0)).tolist()
    steps = [*STEPS[:-1], (9, 25, False), (25, 26, True), (26, 27, True), ("cut", 20), (20, 24, False),
             (24, 25, True), (25, 26, True)]
    # The same kernels replayed (cuBLAS could pick another algorithm for a stream with another workspace: a hair
    # of tolerance; stale positions or buffers would be off by whole units)
    tolerance = 1e-5 if dtype == torch.float32 else 1e-2
    check_same_logits(eager, graphed, sequence, steps, atol=tolerance, rtol=tolerance)
    assert graphed._graphs and graphed._graphs_on  # the short calls went through graphs
    reference = CachedLM(model)
    check_same_logits(reference, FixedShapeLM(model, 64, graphs=True), sequence, steps,
                      atol=1e-4 if dtype == torch.float32 else 5e-2, rtol=1e-3 if dtype == torch.float32 else 5e-2)


@needs_cuda
def test_on_a_gpu_speculative_greedy_output_is_the_targets_token_for_token():
    target = tiny_llama(seed=14, vocab=64, layers=2, width=64, init=0.3).to("cuda")
    draft = tiny_llama(seed=15, vocab=64, layers=1, width=32, init=0.3).to("cuda")
    prompt = torch.tensor([[1, 2, 3]], device="cuda")
    config = DecodingConfig(draft_len=4, max_new_tokens=60, temperature=0.0)
    assert isinstance(kv.cached_lm(target, 64), FixedShapeLM)
    assert describe_kernels(target).startswith("CUDA graphs")
    ar = autoregressive_generate(target, prompt, config)
    for _ in range(2):  # the second run reuses the idle forwards and their graphs
        assert speculative_generate(target, draft, prompt, config).tokens == ar.tokens
    assert autoregressive_generate(target, prompt, config, static_cache=False).tokens == ar.tokens


@needs_cuda
def test_on_a_gpu_graphs_can_be_switched_off(monkeypatch):
    model = tiny_llama(seed=16, vocab=64, layers=1, width=32).to("cuda")
    monkeypatch.setenv("SSD_DEMO_CUDA_GRAPHS", "0")
    assert isinstance(kv.cached_lm(model, 64), StaticCacheLM)
    assert describe_kernels(model).startswith("the model's own matmuls")
