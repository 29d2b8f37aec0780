"""How one chunk's tokens are generated: the `ChunkGenerator` a `Synthesizer` is handed (ours unless told).

The Synthesizer does all the rest: the backend's chunks and prompts, each chunk's plan (the backend's length
bounds and sampling, the cut to the model's context, its forced tokens), seeds, the codec and streaming. For
each chunk it asks its chunk generator for the tokens. `OurEngine` runs the engine's decoders in this process, one
request at a time; `BatchingEngines` decodes the autoregressive chunks of every request at once in one running
batch (`engine.batching`: what a server with many listeners wants); the vLLM engine's
(`ssd_demo.backends.vllm.engines.VllmEngines`) sends the chunk to a vLLM engine process. As transformers' candidate
generator is to `generate`: a strategy handed in (`Synthesizer(..., chunk_generator=...)`), not a method
overridden.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from typing import TYPE_CHECKING, Protocol

import torch

from ..config import DecodingConfig
from ..engine.cancellation import StopCheck
from ..engine.batched_forward import batches
from ..engine import machine_cache
from ..engine.batching import MAX_ROWS, BatchingEngine
from ..engine.generate import CommitCallback, RoundCallback, autoregressive_generate, speculative_generate
from ..engine.kv import describe_kernels, prepare_kernels
from ..engine.results import GenerationResult
from ..engine.run_state import ForcedTokens

if TYPE_CHECKING:
    from .synthesis import Synthesizer

#: What `BatchingEngines.measure_speculation` prompts with (the tokens it decodes are not kept).
MEASURING_TEXT = "Measuring how fast the engines decode."
#: Where `BatchingEngines.measure_speculation` keeps what it measured (`engine.machine_cache`: a later start on this
#: machine reads it instead of decoding for seconds).
COSTS_KIND = "speculation_per_batch"
#: Targets above this many parameters are not measured (23 chunks would take minutes on a CPU): "auto" then
#: speculates alone only.
MEASURED_MAX = 100_000_000


class ChunkGenerator(Protocol):
    """Generates one chunk's tokens for a `Synthesizer`, which hands itself in (its target, drafts, rule)."""

    #: Whether `on_commit` hears each round as it is committed: a backend's codec windows then decode while the LM
    #: goes on (`Synthesizer.stream`). False: the tokens come at once, and the chunk's audio is decoded then.
    commits_rounds: bool

    def describe(self, synthesizer: Synthesizer) -> str:
        """What runs the LM, for speed reports."""

    def check(self, mode: str, config: DecodingConfig) -> None:
        """An InputError (naming the setting) for what it cannot decode in `mode`; None when it can."""

    def speculation_pays(self, decoding: int) -> bool:
        """Whether speculative decoding beats AR while `decoding` requests decode at once (a server's mode "auto")."""

    def generate_chunk(self, synthesizer: Synthesizer, prompt: list[int], mode: str, config: DecodingConfig,
                       draft_name: str, *, forced: ForcedTokens | None = None, prefix_distribution=None,
                       should_stop: StopCheck | None = None, on_round: RoundCallback | None = None,
                       on_commit: CommitCallback | None = None) -> tuple[GenerationResult, float]:
        """The tokens after `prompt` in `mode` ("ar", "speculative" with `draft_name`, or "draft": that draft
        alone) under `config` as planned (seeded, length cut to fit), and the LM's seconds. `forced` and
        `prefix_distribution` are the backend's (`Backend.forced_tokens`, `Backend.plan_generation`); one that
        cannot apply them raises InputError. `should_stop` is asked once per round (`Cancelled`), `on_round(tokens,
        target calls)` and `on_commit(record)` hear each round where the generator reports rounds."""


class OurEngine:
    """Our engine: `autoregressive_generate` or `speculative_generate` in this process, every round reported."""

    commits_rounds = True

    def describe(self, synthesizer: Synthesizer) -> str:
        return f"our engine, {describe_kernels(synthesizer.target)}"

    def check(self, mode: str, config: DecodingConfig) -> None:
        return None  # every rule and setting runs here

    def speculation_pays(self, decoding: int) -> bool:
        return True  # each request decodes alone, so speculation's speedup is each request's

    def generate_chunk(self, synthesizer: Synthesizer, prompt: list[int], mode: str, config: DecodingConfig,
                       draft_name: str, *, forced: ForcedTokens | None = None, prefix_distribution=None,
                       should_stop: StopCheck | None = None, on_round: RoundCallback | None = None,
                       on_commit: CommitCallback | None = None) -> tuple[GenerationResult, float]:
        input_ids = torch.tensor([prompt], dtype=torch.long, device=synthesizer.device)
        draft = synthesizer.drafts[draft_name] if mode != "ar" else None
        model = draft if mode == "draft" else synthesizer.target  # "draft": the draft decodes alone
        prepare_kernels(model, *([draft] if mode == "speculative" else []))  # the first call's probe is not LM time
        start = time.perf_counter()
        if mode != "speculative":
            generation = autoregressive_generate(model, input_ids, config, forced=forced, should_stop=should_stop,
                                                 on_round=on_round, on_commit=on_commit,
                                                 prefix_distribution=prefix_distribution)
        else:
            generation = speculative_generate(synthesizer.target, draft, input_ids, config, forced=forced,
                                              rule=synthesizer.rule(config), should_stop=should_stop,
                                              on_round=on_round, on_commit=on_commit,
                                              prefix_distribution=prefix_distribution)
        return generation, time.perf_counter() - start


#: The chunk generator a Synthesizer gets unless handed another (it keeps no state: one serves every voice).
OUR_ENGINE = OurEngine()


class BatchingEngines:
    """Our engine with continuous batching: the autoregressive chunks of every request decode together in one
    running batch over the voice's target (`engine.batching.BatchingEngine`, one per target, up to `max_rows`
    requests at once), so a request arriving while others decode starts within one step. Speculative and draft-alone
    chunks, and targets the batched forward does not run, decode alone as `OurEngine` decodes them, one at a time.
    The batch steps in a thread of its own: there one torch intra-op thread is faster than two (`serve` sets it)."""

    commits_rounds = True

    def __init__(self, max_rows: int = MAX_ROWS):
        self.max_rows = max_rows
        self.speculation_costs: dict[int, tuple[float, float]] = {}  # batch -> (AR, speculative) tokens/s
        self._engines: dict[int, BatchingEngine] = {}  # id(target) -> its engine
        self._lock = threading.Lock()
        # Chunks decoded alone take turns: several at once would only share the cores with each other and the batch.
        self._alone = threading.Lock()

    def engine(self, target) -> BatchingEngine:
        with self._lock:
            engine = self._engines.get(id(target))
            if engine is None or engine.target is not target:
                engine = self._engines[id(target)] = BatchingEngine(target, self.max_rows)
            return engine

    def describe(self, synthesizer: Synthesizer) -> str:
        if not batches(synthesizer.target):
            return OUR_ENGINE.describe(synthesizer)
        forward = "ONNX Runtime" if self.engine(synthesizer.target).forward == "onnxruntime" else "torch"
        return (f"our engine, autoregressive requests batched (continuous batching on {forward}, up to "
                f"{self.max_rows} at once); speculative ones alone on {describe_kernels(synthesizer.target)}")

    def check(self, mode: str, config: DecodingConfig) -> None:
        return None

    def speculation_pays(self, decoding: int) -> bool:
        """From the measured tokens per second (`measure_speculation`) at the batch size nearest `decoding`, and
        only while no speculative chunk decodes now (they take turns: this one would wait for it, where the batch
        takes it at its next step); until measured, only alone."""
        if not self.speculation_costs:
            return decoding <= 1
        nearest = min(self.speculation_costs, key=lambda batch: abs(math.log(batch) - math.log(max(decoding, 1))))
        ar, speculative = self.speculation_costs[nearest]
        return speculative > ar and not self._alone.locked()

    def measure_speculation(self, synthesizer: Synthesizer, sizes: tuple[int, ...] = (1, 2, 4, 16),
                            config: DecodingConfig | None = None,
                            draft: str | None = None) -> dict[int, tuple[float, float]]:
        """Tokens per second at each batch size in `sizes`, on the voice's own chunk for a short sentence (its plan
        and forced tokens, as a request decodes it): that many requests decoded together in the batch (AR), against
        as many decoded speculatively as this generator decodes them, one at a time (the same rate at every size);
        after a warm-up of each. Kept for `speculation_pays`, and on this machine (`engine.machine_cache`, keyed by
        the models, the settings and the thread count: a later start reads them); returns {batch: (AR, speculative)}."""
        if not batches(synthesizer.target) or sum(p.numel() for p in synthesizer.target.parameters()) > MEASURED_MAX:
            return {}
        prompt = synthesizer.script(MEASURING_TEXT).prompts[0]
        config, distribution = synthesizer.backend.plan_generation(prompt, config or synthesizer.config())
        forced = synthesizer.backend.forced_tokens(prompt)
        draft = draft or synthesizer.draft_name
        engine = self.engine(synthesizer.target)

        def batched(size: int) -> float:
            start = time.perf_counter()
            tickets = [engine.submit(prompt, config.with_(seed=seed), forced=forced, prefix_distribution=distribution)
                       for seed in range(size)]
            tokens = sum(len(ticket.result().tokens) for ticket in tickets)
            return tokens / (time.perf_counter() - start)

        def speculative(seed: int) -> float:
            with self._alone:
                generation, seconds = OUR_ENGINE.generate_chunk(synthesizer, prompt, "speculative",
                                                                config.with_(seed=seed), draft, forced=forced,
                                                                prefix_distribution=distribution)
            return len(generation.tokens) / seconds

        key = (machine_cache.signature(synthesizer.target), machine_cache.signature(synthesizer.drafts[draft]), draft,
               repr(config.with_(seed=0)), sizes, torch.get_num_threads())
        batched(1)  # warm-ups (the batch's sessions and the speculative path's, whether measured or read)
        speculative(0)
        kept = machine_cache.get(COSTS_KIND, *key)
        try:
            self.speculation_costs = {int(size): (float(ar), float(spec)) for size, (ar, spec) in kept["costs"]}
            return self.speculation_costs
        except (TypeError, KeyError, ValueError):  # nothing kept (or not in this shape): measured now
            pass
        alone = statistics.median(speculative(seed) for seed in range(3))
        self.speculation_costs = {size: (batched(size), alone) for size in sizes}
        kept = [[size, list(rates)] for size, rates in self.speculation_costs.items()]
        machine_cache.put(COSTS_KIND, *key, {"costs": kept})
        return self.speculation_costs

    def generate_chunk(self, synthesizer: Synthesizer, prompt: list[int], mode: str, config: DecodingConfig,
                       draft_name: str, *, forced: ForcedTokens | None = None, prefix_distribution=None,
                       should_stop: StopCheck | None = None, on_round: RoundCallback | None = None,
                       on_commit: CommitCallback | None = None) -> tuple[GenerationResult, float]:
        if mode != "ar" or not batches(synthesizer.target):
            with self._alone:
                return OUR_ENGINE.generate_chunk(synthesizer, prompt, mode, config, draft_name, forced=forced,
                                                 prefix_distribution=prefix_distribution, should_stop=should_stop,
                                                 on_round=on_round, on_commit=on_commit)
        start = time.perf_counter()
        generation = self.engine(synthesizer.target).generate(
            prompt, config, forced=forced, prefix_distribution=prefix_distribution, should_stop=should_stop,
            on_round=on_round, on_commit=on_commit)
        return generation, time.perf_counter() - start
