"""The lean static-cache forward computes what transformers computes, with rollback by position."""

import pytest
import torch

from ssd_demo import DecodingConfig, autoregressive_generate, speculative_generate
from ssd_demo.engine.kv import CachedLM, cached_lm
from ssd_demo.engine.static_cache import StaticCacheLM, supports
from support.tiny_models import check_same_logits, onednn_call_rows, tiny_llama


def test_same_logits_as_transformers_through_prefill_steps_rollback_and_growth():
    model = tiny_llama(seed=3, vocab=50, layers=2, width=32, init=0.3)
    reference, lean = CachedLM(model), StaticCacheLM(model, capacity=4)  # capacity grows on demand
    sequence = torch.randint(0, 50, (30,), generator=torch.Generator().manual_seed(0)).tolist()
    # Multi-token calls with last_only=False are verify calls: every position's logits must match.
    steps = [(0, 5, False), (5, 6, True), (6, 8, True), ("cut", 4), (4, 9, False), (9, 10, True), ("cut", 7),
             (7, 12, False), ("cut", 9), (9, 30, True)]
    check_same_logits(reference, lean, sequence, steps, atol=1e-5)


def test_used_for_llamas_unless_switched_off(monkeypatch):
    model = tiny_llama(seed=4, vocab=40, layers=1, width=16)
    assert supports(model) and isinstance(cached_lm(model, 64), StaticCacheLM)
    assert isinstance(cached_lm(model, 64, static_cache=False), CachedLM)
    monkeypatch.setenv("SSD_DEMO_STATIC_CACHE", "0")
    assert isinstance(cached_lm(model, 64), CachedLM)
    assert isinstance(cached_lm(model, 64, static_cache=True), StaticCacheLM)  # an explicit choice wins
    model.train()
    assert not supports(model)  # dropout and gradients are transformers' business


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_same_tokens_with_either_forward(temperature):
    target = tiny_llama(seed=11, vocab=32, layers=2, width=16, init=0.3)
    draft = tiny_llama(seed=12, vocab=32, layers=1, width=16, init=0.3)
    config = DecodingConfig(draft_len=3, max_new_tokens=40, temperature=temperature, seed=5)
    prompt = torch.tensor([[1, 2, 3]])
    lean = speculative_generate(target, draft, prompt, config, static_cache=True)
    plain = speculative_generate(target, draft, prompt, config, static_cache=False)
    assert lean.tokens == plain.tokens
    assert [s.accepted for s in lean.steps] == [s.accepted for s in plain.steps]
    ar = autoregressive_generate(target, prompt, config, static_cache=True)
    assert ar.tokens == autoregressive_generate(target, prompt, config, static_cache=False).tokens


def _llama_with_biases(seed: int):
    model = tiny_llama(seed, vocab=40, layers=2, width=32, init=0.3, heads=4, kv_heads=2, max_positions=2048,
                       intermediate_size=48, attention_bias=True, mlp_bias=True, tie_word_embeddings=True)
    with torch.no_grad():  # transformers initialises biases to zero: make them matter
        for name, parameter in model.named_parameters():
            if name.endswith("bias"):
                parameter.normal_(0, 0.3)
    return model


@pytest.mark.parametrize("pack", [True, False])
def test_packed_and_module_paths_match_transformers_with_biases_and_tied_head(pack):
    model = _llama_with_biases(seed=6)
    reference, lean = CachedLM(model), StaticCacheLM(model, capacity=16, pack=pack)
    assert (lean._packed is not None) == pack
    sequence = list(range(3, 23))
    for begin, end, last in [(0, 7, False), (7, 12, False), (12, 13, True)]:
        assert torch.allclose(reference.forward(sequence[begin:end], last), lean.forward(sequence[begin:end], last),
                              atol=1e-5)


def test_packed_weights_follow_in_place_updates():
    model = tiny_llama(seed=8, vocab=30, layers=1, width=16, init=0.3)
    prompt = [1, 2, 3, 4]
    before = StaticCacheLM(model, 16).forward(prompt)
    with torch.no_grad():
        model.model.layers[0].mlp.down_proj.weight.mul_(3.0)  # e.g. an optimiser step
    after = StaticCacheLM(model, 16).forward(prompt)
    assert not torch.allclose(before, after)
    assert torch.allclose(after, CachedLM(model).forward(prompt), atol=1e-5)


@pytest.mark.parametrize("rope", [
    {"rope_type": "linear", "factor": 2.0},
    {"rope_type": "dynamic", "factor": 2.0},  # tables change with the length: computed per call
    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 8},
])
def test_scaled_rotary_embeddings_match_transformers(rope):
    # A short max_position_embeddings makes the scalings act within a 30-token sequence.
    model = tiny_llama(5, vocab=40, layers=2, width=32, init=0.3, heads=4, kv_heads=2, max_positions=12,
                       intermediate_size=48, rope_parameters={**rope, "rope_theta": 10000.0})
    sequence = torch.randint(0, 40, (30,), generator=torch.Generator().manual_seed(1)).tolist()
    reference, lean = CachedLM(model), StaticCacheLM(model, capacity=8)
    for begin, end, last in [(0, 6, False), (6, 7, True), (7, 20, False), (20, 30, False)]:
        expected = reference.forward(sequence[begin:end], last_only=last)
        assert torch.allclose(expected, lean.forward(sequence[begin:end], last_only=last), atol=1e-5), (rope, begin)


needs_onednn = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN")


@needs_onednn
def test_onednn_kernel_computes_what_transformers_computes(monkeypatch):
    model = _llama_with_biases(seed=9)
    sequence = list(range(2, 32))
    steps = [(0, 7, False), (7, 8, True), ("cut", 5), (5, 13, False), (13, 30, True)]
    onednn_rows = onednn_call_rows(monkeypatch)
    for onednn_from in (1, 4):  # every call, or only the multi-row ones
        onednn_rows.clear()
        check_same_logits(CachedLM(model), StaticCacheLM(model, capacity=8, onednn_from=onednn_from), sequence,
                          steps, atol=1e-5)
        assert onednn_rows and min(onednn_rows) >= onednn_from  # it did run, and only from that row count
        assert (1 in onednn_rows) == (onednn_from == 1)


def test_kernel_threshold_is_the_switch_point_that_costs_least():
    from ssd_demo.engine.kernels import NEVER, threshold_from

    assert threshold_from({1: (1.0, 1.2), 2: (1.1, 1.15), 4: (1.5, 1.2), 8: (2.0, 1.3)}) == 4
    # one noisy size above the switch does not push it up, one below it does not pull it down
    assert threshold_from({1: (1.0, 1.2), 4: (1.5, 1.2), 8: (2.0, 2.01), 16: (3.0, 2.0)}) == 4
    assert threshold_from({1: (1.0, 1.2), 2: (1.1, 1.0), 3: (1.2, 1.3), 4: (1.5, 1.2)}) == 4
    assert threshold_from({1: (1.0, 0.9), 4: (1.2, 1.1)}) == 1  # faster everywhere: AR steps use it too
    assert threshold_from({1: (1.0, 1.1), 4: (1.2, 1.3)}) == NEVER
    assert threshold_from({1: (1.0, 1.0), 4: (1.2, 1.2)}) == NEVER  # a tie keeps BLAS
    # A gain smaller than the margin is noise on a busy machine: BLAS (4% here; 6% switches).
    assert threshold_from({1: (1.0, 0.96), 4: (1.0, 0.96)}) == NEVER
    assert threshold_from({1: (1.0, 0.94), 4: (1.0, 0.94)}) == 1
    assert threshold_from({1: (1.0, 0.96), 4: (1.0, 0.96)}, margin=0.0) == 1


def test_a_switch_to_onednn_must_survive_a_second_probe(monkeypatch):
    from ssd_demo.engine import kernels
    from ssd_demo.engine.kernels import NEVER

    def probes(*results):
        answers = iter(results)
        monkeypatch.setattr(kernels, "measure_kernel_threshold", lambda model, repeats: next(answers))

    probes(NEVER)  # BLAS at once: no second probe (the iterator would be exhausted otherwise)
    assert kernels._probe(None, repeats=3).onednn_from == NEVER
    probes(1, NEVER)
    choice = kernels._probe(None, repeats=3)
    assert choice.onednn_from == NEVER and "disagreed" in choice.why
    probes(1, 4)
    assert kernels._probe(None, repeats=3) == kernels.KernelChoice(4, "the faster per row count, timed here twice")


def _onednn_copies_of(model) -> list:
    from ssd_demo.engine.kernels import packed_linears, packed_weights

    return [linear.onednn for linear in packed_linears(packed_weights(model))]


@needs_onednn
def test_kernel_choice_follows_the_environment_and_skips_small_models(monkeypatch):
    from ssd_demo.engine import kernels
    from ssd_demo.engine.kernels import NEVER, kernel_choice, kernel_threshold

    small = tiny_llama(seed=4, vocab=40, layers=1, width=16)
    assert kernel_choice(small) == kernels.KernelChoice(NEVER, "too small a model to time the kernels")
    assert all(copy is None for copy in _onednn_copies_of(small))  # no third copy of weights nobody uses
    monkeypatch.setattr(kernels, "measure_kernel_threshold", lambda model, repeats: 5)
    monkeypatch.setattr(kernels, "PROBE_MIN_PARAMETERS", 0)
    assert kernel_threshold(small) == 5 and StaticCacheLM(small, 8)._onednn_from == 5
    assert all(copy is not None for copy in _onednn_copies_of(small))
    monkeypatch.setenv("SSD_DEMO_MATMUL", "blas")
    assert kernel_choice(small) == kernels.KernelChoice(NEVER, "set by SSD_DEMO_MATMUL")
    assert all(copy is None for copy in _onednn_copies_of(small))  # dropped once nothing uses them
    monkeypatch.setenv("SSD_DEMO_MATMUL", "onednn")
    assert kernel_threshold(small) == 1
    assert StaticCacheLM(small, 8, pack=False)._onednn_from == NEVER  # nothing packed, nothing to choose
    monkeypatch.setenv("SSD_DEMO_MATMUL", "fast")
    with pytest.raises(ValueError, match="SSD_DEMO_MATMUL must be auto, blas, onednn or onnxruntime; got 'fast'"):
        kernel_threshold(small)


@needs_onednn
def test_kernel_choice_says_when_onednn_cannot_serve(monkeypatch):
    from ssd_demo.engine import kernels, static_cache
    from ssd_demo.engine.kernels import NEVER, kernel_choice

    monkeypatch.setenv("SSD_DEMO_MATMUL", "onednn")
    model = tiny_llama(seed=4, vocab=40, layers=1, width=16)
    monkeypatch.setattr(torch.backends.mkldnn, "enabled", False)
    assert kernel_choice(model).onednn_from == NEVER and "disabled" in kernel_choice(model).why
    monkeypatch.setattr(torch.backends.mkldnn, "enabled", True)

    def cannot_pack(self):
        raise RuntimeError("unsupported layout")

    monkeypatch.setattr(kernels.PackedLinear, "pack_onednn", cannot_pack)
    assert kernel_choice(model) == kernels.KernelChoice(NEVER, "oneDNN could not pack the weights here")
    assert "BLAS matmuls (oneDNN could not pack" in static_cache.describe_kernels(model)
    half = tiny_llama(seed=4, vocab=40, layers=1, width=16).to(torch.bfloat16)
    assert "float32 only" in kernel_choice(half).why


@needs_onednn
def test_kernel_probe_runs_on_a_real_model_once_and_leaves_the_random_state_alone(monkeypatch):
    from ssd_demo.engine import kernels
    from ssd_demo.engine.kernels import NEVER, PROBE_ROWS, kernel_choice, measure_kernel_threshold

    model = tiny_llama(seed=4, vocab=40, layers=2, width=32)
    assert measure_kernel_threshold(model, context=8, repeats=1) in (*PROBE_ROWS, NEVER)
    probes = []
    monkeypatch.setattr(kernels, "PROBE_MIN_PARAMETERS", 0)
    monkeypatch.setattr(kernels, "measure_kernel_threshold",
                        lambda model, repeats: probes.append(model) or measure_kernel_threshold(model, 8, 1))
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    first = kernel_choice(model)
    assert torch.equal(torch.rand(3), expected)  # the probe's random tokens come from its own generator
    with torch.no_grad():
        model.lm_head.weight.mul_(1.0)  # weights updated in place: the timing stands
    timed = len(probes)  # once, or twice when the first probe chose oneDNN (`_probe` confirms a switch)
    assert timed == (1 if first.onednn_from == NEVER else 2) and set(map(id, probes)) == {id(model)}
    assert kernel_choice(model) == first and len(probes) == timed
    torch.set_num_threads(2)
    kernel_choice(model)
    assert len(probes) > timed  # another thread count: timed again


def test_reports_name_the_kernels(monkeypatch):
    from ssd_demo.engine import kernels
    from ssd_demo.engine.kernels import KernelChoice
    from ssd_demo.engine.static_cache import describe_kernels

    model = tiny_llama(seed=4, vocab=40, layers=1, width=16)
    assert describe_kernels(model) == "BLAS matmuls (too small a model to time the kernels)"
    assert KernelChoice(3, "the faster per row count, timed here").describe() == (
        "BLAS matmuls below 3 rows, oneDNN from 3 (the faster per row count, timed here)")
    assert KernelChoice(1, "set by SSD_DEMO_MATMUL").describe() == "oneDNN matmuls (set by SSD_DEMO_MATMUL)"
    monkeypatch.setenv("SSD_DEMO_MATMUL", "BLAS")  # any case
    assert describe_kernels(model) == "BLAS matmuls (set by SSD_DEMO_MATMUL)"
    monkeypatch.setenv("SSD_DEMO_MATMUL", "")  # set but empty: the default
    assert kernels.kernel_setting() == "auto"
    assert describe_kernels(model, static_cache=False) == "transformers' own forward"
    monkeypatch.setenv("SSD_DEMO_STATIC_CACHE", "0")
    assert describe_kernels(model) == "transformers' own forward"
    monkeypatch.delenv("SSD_DEMO_STATIC_CACHE")
    model.train()
    assert describe_kernels(model) == "transformers' own forward"
    model.eval()
    monkeypatch.setattr(kernels, "PACK_MAX_PARAMETERS", 10)
    assert describe_kernels(model).startswith("the model's own matmuls (no packed copy")


def test_a_mistyped_kernel_setting_stops_the_app_at_start(monkeypatch):
    from ssd_demo.app.page import build_demo

    monkeypatch.setenv("SSD_DEMO_MATMUL", "one-dnn")
    with pytest.raises(ValueError, match="SSD_DEMO_MATMUL must be auto, blas, onednn or onnxruntime; got 'one-dnn'"):
        build_demo(load_default=False)


def test_the_probe_runs_before_the_timed_call(monkeypatch):
    from ssd_demo.engine import kernels
    from ssd_demo.engine.draft_heads import DraftHeads, HeadsConfig
    from ssd_demo.engine.kv import prepare_kernels

    probed = []
    monkeypatch.setattr(kernels, "PROBE_MIN_PARAMETERS", 0)
    monkeypatch.setattr(kernels, "measure_kernel_threshold", lambda model, repeats: probed.append(model) or 2)
    model = tiny_llama(seed=4, vocab=40, layers=1, width=16)
    prepare_kernels(model, DraftHeads(HeadsConfig(hidden=16, inner=8)), object())  # heads: not a model it serves
    assert probed == [model, model]  # a switch to oneDNN (from 2 rows) is timed twice
    prepare_kernels(model)
    assert probed == [model, model]  # measured once
    other = tiny_llama(seed=5, vocab=40, layers=1, width=16)
    prepare_kernels(other, static_cache=False)
    assert probed == [model, model]  # transformers' forward serves it: nothing to time


def test_a_failing_onednn_falls_back_to_blas(monkeypatch):
    from ssd_demo.engine import kernels, static_cache
    from ssd_demo.engine.kernels import NEVER, kernel_threshold

    def broken(model, repeats):
        raise RuntimeError("could not create a primitive")

    monkeypatch.setattr(kernels, "PROBE_MIN_PARAMETERS", 0)
    monkeypatch.setattr(kernels, "measure_kernel_threshold", broken)
    model = tiny_llama(seed=7, vocab=40, layers=1, width=16)
    assert kernel_threshold(model) == NEVER
    assert static_cache.describe_kernels(model) == "BLAS matmuls (oneDNN failed here)"
    lm = StaticCacheLM(model, 8)
    assert torch.allclose(lm.forward([1, 2, 3]), CachedLM(model).forward([1, 2, 3]), atol=1e-5)


@pytest.mark.parametrize("pack", [True, False])
def test_half_precision_keeps_the_norm_modules_and_matches_transformers(pack):
    """bfloat16 weights take the plain residual stream and the norm modules' own casts (the [h, -h] stream
    and its layer norm are float32's); the logits still follow transformers' within bfloat16 rounding."""
    model = _llama_with_biases(seed=7).to(torch.bfloat16)
    lean = StaticCacheLM(model, capacity=8, pack=pack)
    assert not lean._mirrored
    sequence = list(range(2, 22))
    check_same_logits(CachedLM(model), lean, sequence, [(0, 6, False), (6, 7, True), ("cut", 4), (4, 20, False)],
                      atol=0.03, rtol=0.01)
