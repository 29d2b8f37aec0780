"""The speech LM on vLLM, everything else ours: `VllmSynthesizer` is a `Synthesizer` whose token generation
runs in a vLLM engine process (`vllm_process`), while the text front end, the voice-clip prompt, chunking and
the codec are the same code as with our engine, so the audio path does not change.

At most two engine processes: AR (the target alone) and speculative (target + draft, K tokens per round), each
started on first use and kept; SSD's beta travels with each request (the ssd-vllm-plugin), so a new beta needs
no new engine, while a new draft or K replaces the speculative engine (the old one is closed first: a GPU holds
two engines beside this process's models, not more). Callers in several threads (the speech server's workers)
share an engine: vLLM batches their chunks together. `render_batch` submits every chunk of every text at once,
for vLLM's continuous batching.
"""

from __future__ import annotations

import math
import os
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from ...config import DecodingConfig, resolve_seed
from ...errors import InputError
from ...rules.registry import RULES
from ...engine.results import GenerationResult, GenerationStats
from ...speech.synthesis import Synthesizer, VoicePrompt
from .worker import VLLM_BACKENDS, SpecCounts, VllmWorker, WorkerBatch, WorkerSpec


GPU_MEMORY_VARIABLE = "SSD_DEMO_VLLM_GPU_MEMORY"
#: What `measure_speculation` prompts with (the voice's prompt for it; the tokens it decodes are not kept).
MEASURING_TEXT = "Measuring how fast the engines decode."


class VllmSynthesizer(Synthesizer):
    """A Synthesizer whose LM runs on vLLM. Build it with `VllmSynthesizer.wrap(synthesizer)`."""

    on_vllm = True

    @classmethod
    def wrap(cls, synthesizer: Synthesizer, *, max_num_seqs: int = 64) -> "VllmSynthesizer":
        """The same voice (backend, models) with generation moved to vLLM. The model folders are the ones the
        synthesizer loaded (a local folder or the Hub cache's snapshot)."""
        backend_name = getattr(synthesizer.backend, "name", "")
        if backend_name not in VLLM_BACKENDS:
            raise InputError(f"the vLLM engine serves Llasa presets and custom Llama/Qwen2 pairs; this voice "
                             f"({backend_name or type(synthesizer.backend).__name__}) runs on our engine only")
        wrapped = cls(synthesizer.backend, synthesizer.target, synthesizer.drafts, synthesizer.draft_name)
        wrapped._workers: dict[str, VllmWorker] = {}  # "ar" / "speculative" -> its engine
        wrapped._users: dict[str, int] = {"ar": 0, "speculative": 0}  # callers inside each engine now
        wrapped._line: dict[str, list] = {"ar": [], "speculative": []}  # callers waiting for an engine, in order
        wrapped._engines_changing = threading.Condition()  # guards both; an engine is replaced when no one uses it
        wrapped._max_num_seqs = max_num_seqs
        wrapped.speculation_costs: dict[int, tuple[float, float]] = {}  # batch -> (AR, speculative) tokens/s
        weakref.finalize(wrapped, _close_all, wrapped._workers)  # engine processes end with their synthesizer
        return wrapped

    def unwrapped(self) -> Synthesizer:
        """The same voice on our engine (this one's engine processes end)."""
        self.close()
        return Synthesizer(self.backend, self.target, self.drafts, self.draft_name)

    # -- one chunk at a time: the Synthesizer's own path (synth, compare, the app) --------------------

    def _generate(self, prompt, mode, config, draft_name, should_stop, on_round=None, voice_prompt=None):
        config = self._checked(config, prompt, mode)
        with self.engine(mode, config, draft_name) as worker:
            batch = self._submit(worker, [prompt], [config.max_new_tokens], config, mode, should_stop)
        return self._generation(batch, 0, mode, config), config, batch.wall_seconds

    # -- many texts at once --------------------------------------------------------------------------

    def render_batch(self, texts: list[str], mode: str = "speculative", config: DecodingConfig | None = None,
                     draft: str | None = None, voice_prompt: VoicePrompt | None = None) -> "BatchRender":
        """Every text's chunks submitted to the engine in one batch; audio decoded by our codec afterwards.
        Text i is seeded with config.seed + (its first chunk's index among all chunks), as chunk seeds are."""
        config = (config or self.config()).with_(eos_token_id=self.backend.eos_token_id,
                                                 allowed_token_ids=self.backend.allowed_token_ids())
        config = config.with_(seed=resolve_seed(config.seed))
        scripts = [self.script(text, voice_prompt) for text in texts]
        prompts = [prompt for script in scripts for prompt in script.prompts]
        limits = [self._checked(config, prompt, mode).max_new_tokens for prompt in prompts]
        with self.engine(mode, config, draft or self.draft_name) as worker:
            batch = self._submit(worker, prompts, limits, config, mode)
        started = time.perf_counter()
        renders, offset = [], 0
        for text, script in zip(texts, scripts):
            count = len(script.prompts)
            audio = self._decode(script, batch.tokens[offset:offset + count], voice_prompt)
            chunk_tokens = batch.tokens[offset:offset + count]
            at_limit = "length" in batch.finish_reasons[offset:offset + count]
            renders.append(TextRender(text, audio, chunk_tokens, max(batch.latencies[offset:offset + count]),
                                      stopped_at_limit=at_limit))
            offset += count
        return BatchRender(renders, self.backend.sample_rate, batch, mode, config,
                           codec_seconds=time.perf_counter() - started)

    # -- engines ---------------------------------------------------------------------------------------

    @contextmanager
    def engine(self, mode: str, config: DecodingConfig, draft_name: str) -> Iterator[VllmWorker]:
        """The engine process for this decoder (`mode`), started on first use (tens of seconds), held while the
        block runs. Callers in other threads share it (vLLM batches their requests). One that asks for another
        draft or K waits until the engine is free, then replaces it (the old one is closed first); callers go in
        arrival order, so a request for the running engine that comes after it waits too (no one starves)."""
        spec = self._spec(mode, config, draft_name)
        ticket = (object(), spec)
        with self._engines_changing:
            line = self._line[mode]
            line.append(ticket)
            try:
                while True:
                    # an earlier caller that wants another engine goes first
                    if all(wanted == spec for _, wanted in line[: line.index(ticket)]):
                        current = self._workers.get(mode)
                        if current is None:
                            self._workers[mode] = VllmWorker.start(spec)
                            continue
                        if current.spec == spec:
                            break
                        if self._users[mode] == 0:
                            self._workers.pop(mode).close()
                            continue
                    self._engines_changing.wait()
            finally:
                line.remove(ticket)
                self._engines_changing.notify_all()
            self._users[mode] += 1
            worker = self._workers[mode]
        try:
            yield worker
        finally:
            with self._engines_changing:
                self._users[mode] -= 1
                self._engines_changing.notify_all()

    def _spec(self, mode: str, config: DecodingConfig, draft_name: str) -> WorkerSpec:
        if mode not in ("ar", "speculative"):
            raise InputError(f"mode must be 'ar' or 'speculative', got {mode!r}")
        speculative = mode == "speculative"
        if speculative and draft_name not in self.drafts:
            raise InputError(f"unknown draft {draft_name!r}; available: {', '.join(self.drafts)}")
        return WorkerSpec(target=_folder(self.target), draft=_folder(self.drafts[draft_name]) if speculative else None,
                          draft_len=config.draft_len if speculative else 0,
                          dtype=str(self.target.dtype).removeprefix("torch."),
                          max_model_len=int(getattr(self.backend, "max_context", 2048) or 2048),
                          max_num_seqs=self._max_num_seqs,
                          gpu_memory_utilization=gpu_share() if self.device.type == "cuda" else None)

    # -- speculation only where it pays ----------------------------------------------------------------

    def measure_speculation(self, batches: tuple[int, ...] = (1, 4, 16), tokens: int = 32,
                            config: DecodingConfig | None = None, draft: str | None = None) -> dict[int, tuple[float, float]]:
        """AR's and speculative decoding's tokens per second on this voice's two engines at each batch size (after
        one warm-up request each; `tokens` per prompt with the end token ignored, so both decode as much; beta 0,
        the exact rule), kept as `speculation_costs` for `speculation_pays`. Returns {batch: (AR, speculative)}."""
        prompt = self.script(MEASURING_TEXT).prompts[0]
        config = self._checked(config or self.config(), prompt, "speculative")
        draft = draft or self.draft_name
        costs = {}
        for batch in (1, *batches):  # the first pass is the warm-up
            rates = []
            for mode in ("ar", "speculative"):
                with self.engine(mode, config, draft) as worker:
                    answer = worker.generate([prompt] * batch, tokens, temperature=config.temperature,
                                             top_p=config.top_p, top_k=config.top_k, seed=resolve_seed(config.seed),
                                             allowed_token_ids=config.allowed_token_ids or None, ignore_eos=True)
                rates.append(batch * tokens / answer.wall_seconds)
            costs[batch] = (rates[0], rates[1])
        self.speculation_costs = {batch: costs[batch] for batch in batches}
        return self.speculation_costs

    def speculation_pays(self, decoding: int) -> bool:
        """Whether the speculative engine's measured tokens per second beat AR's at the measured batch size
        nearest to `decoding` (in ratio); yes until `measure_speculation` has run."""
        costs = self.speculation_costs
        if not costs:
            return True
        nearest = min(costs, key=lambda batch: abs(math.log(batch) - math.log(max(decoding, 1))))
        ar, speculative = costs[nearest]
        return speculative > ar

    def engines(self) -> list[WorkerSpec]:
        """The engine processes this synthesizer holds now."""
        return [worker.spec for worker in self._workers.values()]

    def close(self) -> None:
        """End every engine process this synthesizer started."""
        _close_all(self._workers)

    # -- helpers -----------------------------------------------------------------------------------------

    def engine_description(self) -> str:
        versions = sorted({worker.version for worker in self._workers.values() if worker.version})
        return f"vLLM {', '.join(versions) or '(no engine started yet)'} and its own kernels"

    def check_decoding(self, mode: str, config: DecodingConfig) -> None:
        """An InputError (naming the setting) for what vLLM cannot do: untempered ids in any mode; in speculative
        decoding, rules other than SSD's and an adaptive K."""
        if config.untempered_token_ids:
            raise InputError("the vLLM engine samples every token at one temperature: untempered_token_ids needs our "
                             "engine", param="untempered_token_ids")
        if mode == "ar":
            return
        if config.acceptance not in ("ssd", "exact"):
            raise InputError(f"the vLLM engine verifies with SSD's rule (beta) only; acceptance {config.acceptance!r} "
                             "runs on our engine", param="acceptance")
        if config.adaptive_draft_len:
            raise InputError("the vLLM engine drafts a fixed K per round: turn off the adaptive draft length",
                             param="adaptive_draft_len")

    def _checked(self, config: DecodingConfig, prompt: list[int], mode: str) -> DecodingConfig:
        """What vLLM can do of `config` (else a clear error), the length cut to the model's context."""
        self.check_decoding(mode, config)
        max_context = getattr(self.backend, "max_context", None)
        if max_context is not None and len(prompt) + config.max_new_tokens > max_context:
            room = max_context - len(prompt)
            if room < 1:
                raise InputError(f"the prompt takes {len(prompt)} of the model's {max_context} tokens: shorten the text")
            config = config.with_(max_new_tokens=room)
        return config

    def _submit(self, worker: VllmWorker, prompts: list[list[int]], limits: list[int], config: DecodingConfig,
                mode: str, should_stop=None) -> WorkerBatch:
        eos = config.eos_token_id
        stops = list(eos) if isinstance(eos, (tuple, list)) else ([] if eos is None else [eos])
        # beta reaches the engine only for a rule that reads it (ssd): "exact" at any beta is exact, as on our engine.
        beta = config.beta if mode == "speculative" and RULES[config.acceptance].uses_beta else 0.0
        return worker.generate(prompts, limits, temperature=config.temperature, top_p=config.top_p,
                               top_k=config.top_k, seed=resolve_seed(config.seed), stop_token_ids=stops,
                               allowed_token_ids=config.allowed_token_ids or None, beta=beta,
                               should_stop=should_stop)

    def _decode(self, script, chunk_tokens: list[list[int]], voice_prompt: VoicePrompt | None) -> np.ndarray:
        parts = []
        for index, (chunk, prompt, tokens) in enumerate(zip(script.chunks, script.prompts, chunk_tokens)):
            context = {} if voice_prompt is None else {"prompt_ids": prompt}
            parts.append(self.backend.tokens_to_audio(tokens, **context))
            if index < len(script.chunks) - 1 and chunk.pause_after_ms:
                parts.append(np.zeros(int(self.backend.sample_rate * chunk.pause_after_ms / 1000), dtype=np.float32))
        return np.concatenate(parts) if parts else np.zeros(0, np.float32)

    def _generation(self, batch: WorkerBatch, index: int, mode: str, config: DecodingConfig) -> GenerationResult:
        """Our result record for one request, with its own speculation counts; there are no per-round records
        (`steps` is empty)."""
        tokens, wall = batch.tokens[index], batch.latencies[index]
        counts = batch.requests[index] if batch.requests else SpecCounts()
        speculative = mode == "speculative"
        rounds = counts.drafts if speculative else len(tokens)
        stats = GenerationStats(
            mode=mode, new_tokens=len(tokens), rounds=rounds, target_calls=rounds + (1 if speculative else 0),
            draft_calls=rounds * config.draft_len if speculative else 0,
            drafted_tokens=counts.draft_tokens, accepted_tokens=counts.accepted_tokens,
            acceptance_rate=counts.acceptance_rate, alpha=counts.acceptance_rate,
            mean_tokens_per_call=len(tokens) / rounds if rounds else 0.0,
            mean_accepted_length=counts.accepted_tokens / rounds if rounds and speculative else 0.0,
            prefill_seconds=0.0, draft_seconds=0.0, verify_seconds=0.0, wall_seconds=wall,
            tokens_per_second=len(tokens) / wall if wall > 0 else 0.0, mean_draft_step_seconds=0.0,
            mean_target_call_seconds=wall / rounds if rounds else 0.0,
            finish_reason="eos" if batch.finish_reasons[index] == "stop" else "length",
            draft_len=config.draft_len if speculative else 0, seed=resolve_seed(config.seed))
        return GenerationResult(tokens=list(tokens), steps=[], stats=stats)


@dataclass
class TextRender:
    text: str
    audio: np.ndarray
    chunk_tokens: list[list[int]]
    latency_seconds: float  # from the batch's submission to this text's last chunk
    stopped_at_limit: bool = False  # a chunk ran to its length limit before the end token: audio may be cut

    @property
    def tokens(self) -> int:
        return sum(len(t) for t in self.chunk_tokens)


@dataclass
class BatchRender:
    """A batch rendered through vLLM: each text's audio and latency, and the throughput of the whole."""

    texts: list[TextRender]
    sample_rate: int
    batch: WorkerBatch
    mode: str
    config: DecodingConfig
    codec_seconds: float

    @property
    def lm_seconds(self) -> float:
        return self.batch.wall_seconds

    @property
    def tokens(self) -> int:
        return sum(t.tokens for t in self.texts)

    @property
    def audio_seconds(self) -> float:
        return sum(len(t.audio) for t in self.texts) / self.sample_rate

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.lm_seconds if self.lm_seconds > 0 else 0.0

    @property
    def audio_seconds_per_second(self) -> float:
        """Seconds of audio per second of LM time (the codec's time is reported apart)."""
        return self.audio_seconds / self.lm_seconds if self.lm_seconds > 0 else 0.0


def gpu_share() -> float:
    """The fraction of the GPU's memory each engine may take ($SSD_DEMO_VLLM_GPU_MEMORY, default 0.35: an AR and
    a speculative engine beside this process's own copy of the models)."""
    raw = os.environ.get(GPU_MEMORY_VARIABLE, "").strip() or "0.35"
    try:
        share = float(raw)
    except ValueError:
        share = -1.0
    if not 0.0 < share < 1.0:
        raise InputError(f"{GPU_MEMORY_VARIABLE}={raw!r}: give a fraction of the GPU's memory, e.g. 0.35")
    return share


def _close_all(workers: dict) -> None:
    for worker in workers.values():
        worker.close()
    workers.clear()


def _folder(model) -> str:
    """Where a loaded transformers model came from (a local folder, or the Hub cache's snapshot folder)."""
    path = getattr(model, "name_or_path", "") or getattr(model.config, "_name_or_path", "")
    if not path:
        raise InputError("the vLLM engine needs the model's folder; this model was built in memory")
    return str(path)
