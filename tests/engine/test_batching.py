"""Continuous batching (`engine.batching`, `engine.batched_forward`): many requests in one running batch decode as
each would alone: the lean forward's logits, rows that never depend on each other (bit for bit), the target's
distribution with forced tokens, `autoregressive_generate`'s tokens for a seed, requests joining and leaving."""

from __future__ import annotations

import threading

import pytest
import torch

from ssd_demo import DecodingConfig, autoregressive_generate
from ssd_demo.engine.batched_forward import BatchedLM
from ssd_demo.engine.batching import BatchingEngine
from ssd_demo.engine.cancellation import Cancelled
from ssd_demo.engine.onnx_batched import SLOTS, OnnxBatchedLM
from ssd_demo.engine.static_cache import StaticCacheLM
from support.forced_tokens import FREE, PROMPT, SAMPLED, VOCAB, Markers, exact_joint, sampled_only
from support.stats import chi_square_p, marginal, sample_count
from support.tiny_models import tiny_llama


@pytest.fixture(scope="module")
def voice_target():
    from ssd_demo.backends.embedded import load_synthesizer

    return load_synthesizer().target


def _prompts(count: int, vocab: int, seed: int = 0, longest: int = 40) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (int(torch.randint(2, longest, (1,), generator=generator)),),
                          generator=generator).tolist() for _ in range(count)]


#: The two batched steps: torch's and ONNX Runtime's (the engine's default where it runs the target).
FORWARDS = {"torch": BatchedLM, "onnxruntime": OnnxBatchedLM}


@pytest.mark.parametrize("forward", list(FORWARDS))
@pytest.mark.parametrize("bias", [False, True])
def test_batched_rows_give_the_lean_forwards_logits(bias, forward):
    model = tiny_llama(0, vocab=50, layers=2, width=32, heads=4, kv_heads=2, init=0.2, attention_bias=bias)
    prompts = _prompts(5, 50)
    batched = FORWARDS[forward](model, rows=2, capacity=16)  # too small: rows and positions grow as asked
    batched.reserve(len(prompts), 96)
    alone = [StaticCacheLM(model, 96, pack=False) for _ in prompts]
    for row, (prompt, lm) in enumerate(zip(prompts, alone)):
        batched.prefill(row, prompt[:-1])
        lm.forward(prompt[:-1])
    ids = [prompt[-1] for prompt in prompts]
    for step in range(6):
        if step == 3:  # new buffers mid-way (more rows, more positions): the rows' caches move with them
            batched.reserve(len(prompts) + 3, 128)
        got = batched.step([[token] for token in ids])
        expected = torch.cat([lm.forward([token], last_only=True) for lm, token in zip(alone, ids)])
        torch.testing.assert_close(got, expected, atol=2e-5, rtol=1e-5)
        assert batched.lengths[: len(prompts)] == [lm.length for lm in alone]
        ids = got.argmax(dim=-1).tolist()


@pytest.mark.parametrize("forward", list(FORWARDS))
def test_a_rows_several_new_tokens_in_one_step_give_the_lean_forwards_logits(forward):
    """A sampled token and the tokens a schedule forces after it go in together, each row its own count."""
    model = tiny_llama(0, vocab=50, layers=2, width=32, heads=4, kv_heads=2, init=0.2)
    prompts = _prompts(3, 50, seed=3)
    batched = FORWARDS[forward](model, rows=3, capacity=96)
    alone = [StaticCacheLM(model, 96, pack=False) for _ in prompts]
    for row, (prompt, lm) in enumerate(zip(prompts, alone)):
        batched.prefill(row, prompt[:-1])
        lm.forward(prompt[:-1])
    news = [[prompts[0][-1], 7, 8], [prompts[1][-1]], [prompts[2][-1], 9]]
    for _ in range(3):
        got = batched.step(news)
        expected = torch.cat([lm.forward(new, last_only=True) for lm, new in zip(alone, news)])
        torch.testing.assert_close(got, expected, atol=2e-5, rtol=1e-5)
        news = [[token] + [5] * (row % 3) for row, token in enumerate(got.argmax(dim=-1).tolist())]
    with pytest.raises(ValueError, match="at least one new token"):
        batched.step([[1], []])


def test_onnx_runtimes_step_takes_several_tokens_for_a_few_rows_and_the_others_wait_their_turn():
    """Rows with several new tokens beyond the step's slots keep their length and take theirs at a later step, each
    with the lean forward's logits then; rows with one token always take it."""
    model = tiny_llama(0, vocab=50, layers=2, width=32, heads=4, kv_heads=2, init=0.2)
    prompts = _prompts(5, 50, seed=4)
    batched = OnnxBatchedLM(model, rows=5, capacity=96)
    alone = [StaticCacheLM(model, 96, pack=False) for _ in prompts]
    for row, (prompt, lm) in enumerate(zip(prompts, alone)):
        batched.prefill(row, prompt[:-1])
        lm.forward(prompt[:-1])
    news = [[prompt[-1], 7, 8] for prompt in prompts[:4]] + [[prompts[4][-1]]]  # four rows with several
    took = [0] * 5
    while min(took) < 2:
        before = list(batched.lengths)
        logits = batched.step(news)
        advanced = [row for row in range(5) if batched.lengths[row] != before[row]]
        assert 4 in advanced and len(advanced) == min(SLOTS, sum(len(n) > 1 for n in news)) + (len(news[4]) == 1)
        for row in advanced:
            expected = alone[row].forward(news[row], last_only=True)
            torch.testing.assert_close(logits[row:row + 1], expected, atol=2e-5, rtol=1e-5)
            took[row] += 1
            news[row] = [int(expected.argmax())] + [9] * (row < 4)


def _row_alone_and_among(model, rows: int, place: int, steps: int = 4,
                         kind=BatchedLM) -> tuple[torch.Tensor, torch.Tensor]:
    """One request's logits over `steps` steps alone, and in row `place` of `rows` rows of other requests."""
    vocab = model.config.vocab_size
    # The others' prompts are longer than mine by up to 150 positions: attention then spans more positions among them
    mine, others = _prompts(1, vocab, seed=99)[0], _prompts(rows, vocab, seed=rows, longest=190)
    alone, crowd = kind(model, 1, 256), kind(model, rows, 256)
    alone.prefill(0, mine[:-1])
    for row in range(rows):
        crowd.prefill(row, (mine if row == place else others[row])[:-1])
    news = [[prompt[-1]] for prompt in others]
    news[place] = [mine[-1]]
    seen_alone, seen_among, step = [], [], 0
    while len(seen_among) < steps:
        before = list(crowd.lengths[:rows])
        logits = crowd.step(news)
        for row, token in enumerate(logits.argmax(dim=-1).tolist()):
            if crowd.lengths[row] == before[row]:
                continue  # the step left it waiting: it offers the same tokens again
            if row == place:
                seen_alone.append(alone.step([news[place]]))
                seen_among.append(logits[place:place + 1])
            # some steps bring forced tokens after the sampled one, a different count in each row
            news[row] = [token] + [5] * ((row + step) % 4)
        step += 1
    return torch.cat(seen_alone), torch.cat(seen_among)


@pytest.mark.parametrize("forward", list(FORWARDS))
@pytest.mark.parametrize("threads", [1, 2])
def test_a_rows_logits_do_not_depend_on_the_other_rows(voice_target, threads, forward):
    """Bit for bit, on the shipped voice's shapes and a tiny model's, at 1 and 2 threads: what makes a seeded
    request decode the same tokens alone or in a batch."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        tiny = tiny_llama(0, vocab=60, layers=2, width=64, heads=4, kv_heads=2, init=0.2)
        for model in (voice_target, tiny):
            for rows, place in ((2, 1), (3, 2), (5, 0), (5, 4), (8, 3), (16, 15)):
                alone, among = _row_alone_and_among(model, rows, place, kind=FORWARDS[forward])
                assert torch.equal(alone, among), (rows, place, float((alone - among).abs().max()))
    finally:
        torch.set_num_threads(before)


CONFIGS = {
    "greedy": DecodingConfig(max_new_tokens=50, temperature=0.0),
    "sampled": DecodingConfig(max_new_tokens=50, temperature=1.0),
    "tempered-top-k": DecodingConfig(max_new_tokens=50, temperature=0.7, top_k=5),
}


@pytest.mark.parametrize("forward", list(FORWARDS))
@pytest.mark.parametrize("name", list(CONFIGS))
def test_the_engine_decodes_what_autoregressive_generate_decodes(name, forward):
    """Seeded requests decoded together, with a forced-token schedule and an end token: each gets the tokens and
    counts `autoregressive_generate` gives it alone (the tiny model's logits agree to float rounding)."""
    model = tiny_llama(1, vocab=40, layers=2, width=32, heads=4, kv_heads=2, init=0.3)
    config = CONFIGS[name].with_(eos_token_id=39)
    engine = BatchingEngine(model, max_rows=8, forward=forward)  # 12 requests: 4 wait for a row
    try:
        prompts = _prompts(12, 39, seed=5)
        tickets = [engine.submit(prompt, config.with_(seed=seed), forced=Markers())
                   for seed, prompt in enumerate(prompts)]
        for seed, (prompt, ticket) in enumerate(zip(prompts, tickets)):
            got = ticket.result(timeout=60)
            expected = autoregressive_generate(model, torch.tensor([prompt]), config.with_(seed=seed),
                                               forced=Markers())
            assert got.tokens == expected.tokens
            assert (got.stats.finish_reason, got.stats.forced_tokens, got.stats.seed) == (
                expected.stats.finish_reason, expected.stats.forced_tokens, seed)
            assert [record.committed for record in got.steps] == [record.committed for record in expected.steps]
            assert got.stats.target_calls == expected.stats.target_calls  # forced tokens ride with their step
        assert engine.stats.most_rows == 8 and engine.stats.requests == 12
    finally:
        engine.close()


class _TwoAfterEach:
    """After every sampled token, two forced ones: every row has several tokens every step."""

    def initial_state(self):
        return 0

    def advance(self, state, token):
        return state, (5, 6)


def test_rows_that_wait_for_a_slot_decode_what_autoregressive_generate_decodes():
    """Eight rows that all have forced tokens every step: most wait a step for one of ONNX Runtime's slots, and each
    still gets `autoregressive_generate`'s tokens, records and target calls (a step it waited is not its call)."""
    model = tiny_llama(1, vocab=40, layers=2, width=32, heads=4, kv_heads=2, init=0.3)
    config = CONFIGS["sampled"].with_(max_new_tokens=30)
    engine = BatchingEngine(model, max_rows=8, forward="onnxruntime")
    try:
        prompts = _prompts(10, 39, seed=6)
        tickets = [engine.submit(prompt, config.with_(seed=seed), forced=_TwoAfterEach())
                   for seed, prompt in enumerate(prompts)]
        calls = 0
        for seed, (prompt, ticket) in enumerate(zip(prompts, tickets)):
            got = ticket.result(timeout=60)
            expected = autoregressive_generate(model, torch.tensor([prompt]), config.with_(seed=seed),
                                               forced=_TwoAfterEach())
            assert got.tokens == expected.tokens
            assert [record.committed for record in got.steps] == [record.committed for record in expected.steps]
            assert got.stats.target_calls == expected.stats.target_calls
            calls += got.stats.target_calls - (len(prompt) > 1)  # (its prefill is a call of its own)
        assert engine.stats.rows_stepped - calls > 50  # the rows' steps spent waiting
    finally:
        engine.close()


@pytest.mark.stats
@pytest.mark.parametrize("forward", list(FORWARDS))
def test_batched_rows_sample_the_targets_distribution(forward):
    """The joint of the first sampled tokens (forced tokens in every prefix) against the exact one: a batch of
    requests with seeds 0..N-1 samples the target's distribution."""
    target = tiny_llama(seed=1, vocab=VOCAB, init=0.2, width=16)  # heads of 8: both forwards run it
    config = DecodingConfig(max_new_tokens=2 * SAMPLED, temperature=1.0, allowed_token_ids=FREE)
    expected = marginal(exact_joint(target, config), slice(0, 3))
    engine = BatchingEngine(target, max_rows=32, forward=forward)
    try:
        tickets = [engine.submit(PROMPT[0].tolist(), config.with_(seed=seed), forced=Markers())
                   for seed in range(sample_count(1000))]
        samples = [tuple(sampled_only(ticket.result(timeout=120).tokens)[:3]) for ticket in tickets]
    finally:
        engine.close()
    assert chi_square_p(samples, expected) > 1e-3


@pytest.mark.parametrize("forward", list(FORWARDS))
def test_a_seeded_voice_request_decodes_the_same_alone_and_among_sixteen(forward):
    """The shipped voice's own chunks (prompts, forced phoneme schedules, settings): one request alone, then the
    same among fifteen others that join while it decodes."""
    from ssd_demo.backends.embedded import load_synthesizer

    synthesizer = load_synthesizer()
    texts = ["The score was 3 to 8 at half time.", "Hi!", "Wait, what was that?", "Where is the small compass?"]
    plans = []
    for index in range(16):
        prompt = synthesizer.script(texts[index % len(texts)]).prompts[0]
        config, _ = synthesizer.backend.plan_generation(prompt, synthesizer.config(seed=index), None)
        plans.append((prompt, config))
    engine = BatchingEngine(synthesizer.target, max_rows=16, forward=forward)
    try:
        def submit(index: int, **hooks):
            prompt, config = plans[index]
            return engine.submit(prompt, config, forced=synthesizer.backend.forced_tokens(prompt), **hooks)

        alone = [submit(index).result(timeout=120) for index in (0, 5)]
        joined = threading.Event()

        def join_the_rest(tokens: int, calls: int) -> None:
            if tokens == 20 and not joined.is_set():  # the others join while the first decodes
                joined.set()
                tickets.extend(submit(index) for index in range(1, 16))

        tickets = []
        tickets.append(submit(0, on_round=join_the_rest))
        first = tickets[0].result(timeout=300)
        assert joined.is_set() and len(tickets) == 16
        results = [first] + [ticket.result(timeout=300) for ticket in tickets[1:]]
        assert results[0].tokens == alone[0].tokens and results[5].tokens == alone[1].tokens
        assert engine.stats.most_rows == 16
    finally:
        engine.close()


def test_the_engine_steps_on_torch_where_onnx_runtime_cannot(monkeypatch):
    """Heads of 4 dimensions (GroupQueryAttention wants multiples of 8), or weights past one graph's size."""
    from ssd_demo.engine import onnx_batched

    assert BatchingEngine(tiny_llama(0, vocab=30, width=8, heads=2)).forward == "torch"
    model = tiny_llama(0, vocab=30, layers=1, width=16, heads=2)
    assert BatchingEngine(model).forward == "onnxruntime"
    monkeypatch.setattr(onnx_batched, "MAX_PARAMETERS", 100)
    assert BatchingEngine(model).forward == "torch"
    with pytest.raises(ValueError, match="forward must be one of"):
        BatchingEngine(model, forward="gpu")


def test_where_onnx_runtimes_step_cannot_be_built_auto_decodes_on_torch(monkeypatch):
    from ssd_demo.engine import batching

    def broken(*args, **kwargs):
        raise RuntimeError("no GroupQueryAttention in this build")

    monkeypatch.setattr(batching, "OnnxBatchedLM", broken)
    model = tiny_llama(0, vocab=30, layers=1, width=16, heads=2)
    config = DecodingConfig(max_new_tokens=5, temperature=0.0)
    for forward, fails in (("auto", False), ("onnxruntime", True)):
        engine = BatchingEngine(model, max_rows=2, forward=forward)
        try:
            if fails:
                with pytest.raises(RuntimeError, match="GroupQueryAttention"):
                    engine.generate([1, 2, 3], config)
            else:
                assert engine.generate([1, 2, 3], config).tokens == autoregressive_generate(
                    model, torch.tensor([[1, 2, 3]]), config).tokens
                assert engine.forward == "torch"
        finally:
            engine.close()


def test_a_stopped_request_leaves_and_the_others_go_on():
    model = tiny_llama(2, vocab=30, layers=1, width=16, init=0.3)
    config = DecodingConfig(max_new_tokens=40, temperature=1.0)
    engine = BatchingEngine(model, max_rows=4)
    try:
        expected = [engine.generate([1, 2, 3 + seed], config.with_(seed=seed)).tokens for seed in range(3)]
        heard: list[int] = []
        tickets = [engine.submit([1, 2, 3 + seed], config.with_(seed=seed),
                                 should_stop=(lambda: len(heard) >= 10) if seed == 1 else None,
                                 on_round=(lambda tokens, calls: heard.append(tokens)) if seed == 1 else None)
                   for seed in range(3)]
        with pytest.raises(Cancelled):
            tickets[1].result(timeout=60)
        assert len(heard) == 10
        assert [tickets[seed].result(timeout=60).tokens for seed in (0, 2)] == [expected[0], expected[2]]
    finally:
        engine.close()


def test_a_failing_callback_ends_its_request_alone():
    model = tiny_llama(2, vocab=30, layers=1, width=16, init=0.3)
    config = DecodingConfig(max_new_tokens=20, temperature=1.0, seed=3)
    engine = BatchingEngine(model, max_rows=4)

    def broken(record) -> None:
        raise RuntimeError("the listener hung up")

    try:
        bad, good = engine.submit([1, 2], config, on_commit=broken), engine.submit([1, 2], config)
        with pytest.raises(RuntimeError, match="hung up"):
            bad.result(timeout=60)
        assert len(good.result(timeout=60).tokens) == 20
        with pytest.raises(ValueError, match="outside the vocabulary"):
            engine.submit([1, 99], config)
    finally:
        engine.close()
    with pytest.raises(RuntimeError, match="closed"):
        engine.submit([1, 2], config)
