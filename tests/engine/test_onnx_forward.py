"""The ONNX Runtime forward computes what transformers computes, and serves only where it is chosen."""

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from ssd_demo import DecodingConfig, speculative_generate
from ssd_demo.engine import kernels, kv, onnx_forward, onnx_heads
from ssd_demo.engine.draft_heads import DraftHeads, HeadsConfig, fast_step
from ssd_demo.engine.kv import CachedLM
from ssd_demo.engine.onnx_forward import OnnxForward, serves_from
from ssd_demo.engine.static_cache import StaticCacheLM
from support.tiny_models import check_same_decoding_after, check_same_logits, tiny_llama

STEPS = [(0, 5, False), (5, 6, True), (6, 8, True), ("cut", 4), (4, 9, False), (9, 10, True), ("cut", 7),
         (7, 12, False), ("cut", 9), (9, 30, True), (30, 31, False)]


def _with_random_biases(model):
    with torch.no_grad():  # transformers initialises biases to zero: make them matter
        for name, parameter in model.named_parameters():
            if name.endswith("bias"):
                parameter.normal_(0, 0.3)
    return model


def _qwen2(seed: int):
    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=40, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    return _with_random_biases(Qwen2ForCausalLM(config).eval())


MODELS = {
    "grouped-query": lambda: tiny_llama(seed=3, vocab=50, layers=2, width=32, init=0.3, heads=4, kv_heads=2),
    "multi-query": lambda: tiny_llama(seed=4, vocab=50, layers=2, width=32, init=0.3, heads=4, kv_heads=1),
    "multi-head": lambda: tiny_llama(seed=5, vocab=50, layers=1, width=32, init=0.3, heads=2, kv_heads=2),
    "biases, tied head": lambda: _with_random_biases(tiny_llama(
        seed=6, vocab=40, layers=2, width=32, init=0.3, heads=4, kv_heads=2, intermediate_size=48,
        attention_bias=True, mlp_bias=True, tie_word_embeddings=True)),
    "llama3 rope": lambda: tiny_llama(seed=7, vocab=40, layers=2, width=32, init=0.3, heads=4, kv_heads=2,
                                      max_positions=2048, rope_parameters={
                                          "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                          "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                          "original_max_position_embeddings": 64}),
    "qwen2": lambda: _qwen2(seed=8),
}


@pytest.mark.parametrize("name", MODELS)
def test_same_logits_as_transformers_through_prefill_steps_verify_rollback_and_growth(name):
    model = MODELS[name]()
    sequence = torch.randint(0, 40, (31,), generator=torch.Generator().manual_seed(0)).tolist()
    reference, onnx = CachedLM(model), OnnxForward(model, capacity=4)  # capacity grows on demand
    peak = check_same_logits(reference, onnx, sequence, STEPS, atol=2e-5)
    assert peak > 0.1  # not a comparison between near-zeros


def test_keeps_the_hidden_state_the_lean_forward_keeps():
    model = MODELS["grouped-query"]()
    lean, onnx = StaticCacheLM(model, 16), OnnxForward(model, 16)
    for ids, last_only in (([1, 2, 3, 4], False), ([5], True), ([6, 7, 8], False), ([9, 10], True)):
        lean.forward(ids, last_only=last_only), onnx.forward(ids, last_only=last_only)
        assert onnx.hidden_from == lean.hidden_from and onnx.hidden.shape == lean.hidden.shape
        torch.testing.assert_close(onnx.hidden, lean.hidden, atol=1e-5, rtol=1e-5)
    assert onnx.calls == 4 and onnx.length == 10


def test_served_where_the_setting_says_and_supported(monkeypatch):
    model = MODELS["grouped-query"]()
    monkeypatch.setenv("SSD_DEMO_MATMUL", "onnxruntime")
    assert isinstance(kv.cached_lm(model, 16), OnnxForward)
    assert kv.describe_kernels(model).startswith("ONNX Runtime's graph of the whole forward")
    assert "set by SSD_DEMO_MATMUL" in kv.describe_kernels(model)
    assert isinstance(kv.cached_lm(model, 16, static_cache=False), CachedLM)  # transformers' forward asked for
    monkeypatch.setenv("SSD_DEMO_MATMUL", "blas")
    assert isinstance(kv.cached_lm(model, 16), StaticCacheLM)
    monkeypatch.setenv("SSD_DEMO_MATMUL", "")  # auto: toy models are not timed, the lean forward serves
    assert isinstance(kv.cached_lm(model, 16), StaticCacheLM)
    assert onnx_forward.choice(model).why == "too small a model to time the forwards"
    assert kv.describe_kernels(model) == "BLAS matmuls (too small a model to time the kernels)"


def test_unsupported_models_say_why(monkeypatch):
    float32 = "ONNX Runtime serves float32 (every weight) on a CPU"
    half = MODELS["grouped-query"]().to(torch.bfloat16)
    assert onnx_forward.supports(half) == f"torch.bfloat16 weights on cpu: {float32}"
    mixed = MODELS["grouped-query"]()
    mixed.model.to(torch.bfloat16)  # the output layer stays float32: still refused
    assert onnx_forward.supports(mixed) == f"torch.float32 weights on cpu: {float32}"
    gelu = tiny_llama(seed=9, vocab=20, layers=1, width=16, hidden_act="gelu")
    assert onnx_forward.supports(gelu) == "an activation other than SiLU"
    dynamic = tiny_llama(seed=9, vocab=20, layers=1, width=16,
                         rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0})
    assert onnx_forward.supports(dynamic) == "a rotary scaling other than default, linear, llama3"
    assert onnx_forward.supports(MODELS["grouped-query"]().train()) == "a model in training mode"
    window = Qwen2ForCausalLM(Qwen2Config(vocab_size=20, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                          num_attention_heads=2, num_key_value_heads=1, use_sliding_window=True,
                                          sliding_window=8)).eval()
    assert onnx_forward.supports(window) == "sliding-window attention"
    # Asked for and refused: the report says so, and why, beside what serves instead.
    monkeypatch.setenv("SSD_DEMO_MATMUL", "onnxruntime")
    described = kv.describe_kernels(gelu)
    assert described.startswith("BLAS matmuls") and described.endswith(
        "SSD_DEMO_MATMUL=onnxruntime, but ONNX Runtime cannot serve it: an activation other than SiLU")
    assert isinstance(kv.cached_lm(gelu, 8), StaticCacheLM)


def test_bad_ids_are_refused_not_wrapped_around():
    forward = OnnxForward(MODELS["grouped-query"](), 8)
    with pytest.raises(IndexError, match=r"token id -1 is outside the model's vocabulary \(0-49\)"):
        forward.forward([1, -1])
    with pytest.raises(IndexError, match="token id 50 is outside"):
        forward.forward(torch.tensor([50]))
    with pytest.raises(ValueError, match="expected a non-empty list of token ids"):
        forward.forward([1.7, 2.2])
    with pytest.raises(ValueError, match="expected a non-empty list of token ids"):
        forward.forward([])
    assert forward.length == 0 and forward.calls == 0  # nothing was fed


def test_the_probe_decides_on_one_row_and_on_the_total():
    assert serves_from({1: (5.0, 3.0), 5: (9.0, 4.5)})  # faster everywhere
    assert not serves_from({1: (3.0, 3.1), 5: (9.0, 4.5)})  # the AR baseline's one-row call would lose
    assert not serves_from({1: (5.0, 4.9), 5: (9.0, 9.0)})  # 1 % faster in total: within a busy machine's noise
    assert serves_from({1: (5.0, 4.9), 5: (9.0, 8.0)})
    # one row clearly faster decides alone: the AR baseline's call must get the faster path
    assert serves_from({1: (5.0, 4.0), 5: (9.0, 9.5)})
    assert not serves_from({1: (5.0, 4.9), 5: (9.0, 9.5)})


def test_the_probe_runs_once_per_model_and_thread_count_and_needs_two_agreeing_probes(monkeypatch):
    model = MODELS["grouped-query"]()
    answers = iter([{1: (5.0, 3.0)}, {1: (5.0, 3.0)}, {1: (5.0, 3.0)}, {1: (3.0, 5.0)}])
    timed = []
    monkeypatch.setattr(onnx_forward, "PROBE_MIN_PARAMETERS", 0)
    monkeypatch.setattr(onnx_forward, "time_forwards",
                        lambda model, threads=None, against_one_thread=False: timed.append(model) or next(answers))
    monkeypatch.setattr(onnx_forward, "_probe_threads", lambda model: (1, ""))
    kernels.packed_weights(model)  # the lean forward's copy, which the probe's lean forward builds
    assert onnx_forward.choice(model).serves and len(timed) == 2
    assert model not in kernels._PACKED  # ONNX Runtime serves: the copy is let go
    assert onnx_forward.choice(model).serves and len(timed) == 2  # decided once
    torch.set_num_threads(2)  # another thread count: timed again; this time the second probe disagrees
    choice = onnx_forward.choice(model)
    assert not choice.serves and choice.why == "two probes disagreed (a busy machine?): the lean forward"


def _probe_with(monkeypatch, pool: list[dict], torch_threads: int = 2):
    """choice() under `torch_threads` where ONNX Runtime beats the lean forward and `pool` answers the probes of
    2 intra-op threads against 1; returns the choice and the thread counts the lean-vs-ONNX probes timed."""
    model = MODELS["grouped-query"]()
    pool, against_lean = iter(pool), []

    def timed(model, threads=None, against_one_thread=False):
        if against_one_thread:
            assert threads == 2
            return next(pool)
        against_lean.append(threads)
        return {1: (5e-3, 3e-3), 5: (9e-3, 4e-3)}

    monkeypatch.setattr(onnx_forward, "PROBE_MIN_PARAMETERS", 0)
    monkeypatch.setattr(onnx_forward, "time_forwards", timed)
    torch.set_num_threads(torch_threads)
    return onnx_forward.choice(model), against_lean


def test_more_intra_op_threads_only_where_two_probes_find_them_faster(monkeypatch):
    faster, slower = {1: (1.6e-3, 1.2e-3), 5: (2.4e-3, 1.8e-3)}, {1: (1.2e-3, 1.6e-3), 5: (2.0e-3, 2.2e-3)}
    choice, against_lean = _probe_with(monkeypatch, [slower])
    assert choice.serves and choice.threads == 1 and against_lean == [1, 1]  # the lean forward met the one thread
    assert choice.why.startswith("2 intra-op threads not faster than 1 by the probe's rule: 1 row 1.60 vs 1.20 ms")
    choice, against_lean = _probe_with(monkeypatch, [faster, faster])
    assert choice.threads == 2 and against_lean == [2, 2]
    assert choice.why.startswith("2 intra-op threads timed faster than 1 twice: 1 row 1.20 vs 1.60 ms")
    choice, _ = _probe_with(monkeypatch, [faster, slower])  # the probes disagree: one thread
    assert choice.threads == 1
    choice, _ = _probe_with(monkeypatch, [{1: (1.6e-3, 1.55e-3), 5: (2.4e-3, 2.35e-3)}])  # 2 % faster: noise
    assert choice.threads == 1


def test_one_torch_thread_times_no_pool(monkeypatch):
    choice, against_lean = _probe_with(monkeypatch, [], torch_threads=1)  # a pool probe would find no answer
    assert choice.serves and choice.threads == 1 and against_lean == [1, 1]
    assert choice.why.startswith("timed here twice: 1 row 3.00 vs 5.00 ms")
def test_the_probe_times_both_forwards_on_a_real_model():
    model = tiny_llama(seed=10, vocab=64, layers=2, width=64, heads=4, kv_heads=2)
    seconds = onnx_forward.time_forwards(model, context=8, repeats=2, rows=(1, 3))
    assert set(seconds) == {1, 3} and all(lean > 0 and onnx > 0 for lean, onnx in seconds.values())
    seconds = onnx_forward.time_forwards(model, context=8, repeats=2, rows=(1, 3), threads=2, against_one_thread=True)
    assert set(seconds) == {1, 3} and all(one > 0 and two > 0 for one, two in seconds.values())


def test_a_changed_weight_rebuilds_the_session():
    model = MODELS["grouped-query"]()
    before = OnnxForward(model, 16).forward([1, 2, 3])
    with torch.no_grad():
        model.lm_head.weight.mul_(2)
    after = OnnxForward(model, 16).forward([1, 2, 3])
    torch.testing.assert_close(after, 2 * before, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_same_tokens_as_the_lean_forward_in_both_decoders(monkeypatch, temperature):
    served = []
    real = OnnxForward.forward
    monkeypatch.setattr(OnnxForward, "forward", lambda self, *a, **k: served.append(self) or real(self, *a, **k))
    check_same_decoding_after(lambda: monkeypatch.setenv("SSD_DEMO_MATMUL", "onnxruntime"), temperature)
    assert served  # the second pass ran on ONNX Runtime


def _heads_for(target) -> DraftHeads:
    torch.manual_seed(13)
    heads = DraftHeads(HeadsConfig(hidden=target.config.hidden_size, inner=24)).eval()
    with torch.no_grad():
        for parameter in heads.parameters():
            parameter.normal_(0, 0.3)
    return heads


def test_the_heads_step_on_onnx_runtime_is_the_torch_step_and_its_logits(monkeypatch):
    target = with_bias(MODELS["grouped-query"]())
    heads = _heads_for(target)
    torch_step = fast_step(heads, target.get_input_embeddings().weight.detach())
    assert onnx_heads.heads_step(heads, target, StaticCacheLM(target, 8)) is None  # the target's forward decides
    step = onnx_heads.heads_step(heads, target, OnnxForward(target, 8))
    state = torch.randn(32)
    for token in (3, 0, 49):
        expected = torch_step(state, token)
        got, logits = step(state, token)
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(logits, target.lm_head(expected[None]).detach(), atol=1e-5, rtol=1e-5)
        state = got


def with_bias(model):
    """The output layer with a bias (CosyVoice 2's speech LM has one), so the heads' graph must add it."""
    head = torch.nn.Linear(model.lm_head.in_features, model.lm_head.out_features, bias=True)
    with torch.no_grad():
        head.weight.copy_(model.lm_head.weight)
        head.bias.normal_(0, 0.5)
    model.lm_head = head
    return model


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_heads_draft_the_same_tokens_on_either_runtime(monkeypatch, temperature):
    target = tiny_llama(seed=14, vocab=32, layers=2, width=16, init=0.3)
    heads = _heads_for(target)
    config = DecodingConfig(draft_len=3, max_new_tokens=40, temperature=temperature, seed=5)
    prompt = torch.tensor([[1, 2, 3]])
    lean = speculative_generate(target, heads, prompt, config)
    monkeypatch.setenv("SSD_DEMO_MATMUL", "onnxruntime")
    steps = []
    real = onnx_heads.OnnxHeadsStep.__call__
    monkeypatch.setattr(onnx_heads.OnnxHeadsStep, "__call__", lambda self, *a: steps.append(a) or real(self, *a))
    onnx = speculative_generate(target, heads, prompt, config)
    assert steps  # the heads ran on ONNX Runtime
    assert onnx.tokens == lean.tokens and [s.accepted for s in onnx.steps] == [s.accepted for s in lean.steps]


def test_sessions_follow_the_thread_count(monkeypatch):
    model = MODELS["grouped-query"]()
    monkeypatch.setenv("SSD_DEMO_MATMUL", "onnxruntime")  # set, not timed: ONNX Runtime takes torch's count
    one = onnx_forward.session(model)
    assert onnx_forward.session(model) is one and onnx_forward.session(model, 1) is one
    torch.set_num_threads(2)
    two = onnx_forward.session(model)
    assert two is not one and onnx_forward.session(model, 2) is two and onnx_forward.session(model, 1) is one
    assert OnnxForward(model, 8).threads == 2
    assert "2 intra-op threads (set by SSD_DEMO_MATMUL)" in kv.describe_kernels(model)
    assert kernels.weights_fingerprint(model) == kernels.weights_fingerprint(model)


def test_the_heads_session_takes_the_target_forwards_thread_count(monkeypatch):
    target = tiny_llama(seed=14, vocab=32, layers=2, width=16, init=0.3)
    heads = _heads_for(target)
    monkeypatch.setenv("SSD_DEMO_MATMUL", "onnxruntime")
    torch.set_num_threads(2)
    assert onnx_heads.heads_step(heads, target, OnnxForward(target, 8, threads=1)) is not None
    assert set(onnx_heads._SESSIONS[heads]) == {1}  # one thread, as the target's forward, not torch's two
    onnx_heads.heads_step(heads, target, OnnxForward(target, 8))
    assert set(onnx_heads._SESSIONS[heads]) == {1, 2}


def test_the_setting_times_the_thread_count_of_a_model_worth_timing(monkeypatch):
    model = MODELS["grouped-query"]()
    monkeypatch.setenv("SSD_DEMO_MATMUL", "onnxruntime")
    monkeypatch.setattr(onnx_forward, "PROBE_MIN_PARAMETERS", 0)
    slower = {1: (1.2e-3, 1.6e-3), 5: (2.0e-3, 2.2e-3)}
    monkeypatch.setattr(onnx_forward, "time_forwards",
                        lambda model, threads=None, against_one_thread=False: slower if against_one_thread else None)
    torch.set_num_threads(2)
    choice = onnx_forward.choice(model)
    assert choice.serves and choice.threads == 1 and choice.why.endswith("set by SSD_DEMO_MATMUL")
    monkeypatch.setenv("SSD_DEMO_MATMUL", "blas")  # another setting: not the cached choice
    assert not onnx_forward.choice(model).serves


def test_a_refusal_is_named_in_the_report(monkeypatch):
    model = MODELS["grouped-query"]()
    monkeypatch.setattr(onnx_forward, "PROBE_MIN_PARAMETERS", 0)
    monkeypatch.setattr(onnx_forward, "time_forwards",
                        lambda model, threads=None, against_one_thread=False: {1: (3e-3, 5e-3), 5: (9e-3, 9e-3)})
    assert onnx_forward.probed(model) is None  # nothing timed yet, and peeking times nothing
    assert isinstance(kv.cached_lm(model, 16), StaticCacheLM)
    assert onnx_forward.probed(model) is not None
    assert "; ONNX Runtime's forward not chosen (timed here: 1 row 5.00 vs 3.00 ms" in kv.describe_kernels(model)
