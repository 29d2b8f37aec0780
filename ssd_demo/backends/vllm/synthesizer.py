"""The speech LM on vLLM, everything else ours: `VllmSynthesizer` is a `Synthesizer` handed the vLLM engine's
chunk generator (`engines.VllmEngines`), so each chunk's tokens come from a vLLM engine process, while the text
front end, the voice-clip prompt, chunking and the codec are the same code as with our engine, so the audio path
does not change. `render_batch` submits every chunk of every text at once, for vLLM's continuous batching;
`measure_speculation` times both engines, so that speculation runs only where it pays.
"""

from __future__ import annotations

import math
import time
import weakref
from dataclasses import dataclass

import numpy as np

from ...config import DecodingConfig, resolve_seed
from ...errors import InputError
from ...speech.synthesis import Synthesizer, VoicePrompt
from .engines import VllmEngines, worker_spec
from .worker import VLLM_BACKENDS, WorkerBatch, WorkerSpec

#: What `measure_speculation` prompts with (the voice's prompt for it; the tokens it decodes are not kept).
MEASURING_TEXT = "Measuring how fast the engines decode."


class VllmSynthesizer(Synthesizer):
    """A Synthesizer whose LM runs on vLLM. Build it with `VllmSynthesizer.wrap(synthesizer)`."""

    on_vllm = True

    measures_speculation = True  # its two engines, per batch size

    @classmethod
    def wrap(cls, synthesizer: Synthesizer, *, max_num_seqs: int = 64) -> "VllmSynthesizer":
        """The same voice (backend, models) with generation moved to vLLM. The model folders are the ones the
        synthesizer loaded (a local folder or the Hub cache's snapshot)."""
        backend_name = synthesizer.backend.name
        if backend_name not in VLLM_BACKENDS:
            raise InputError(f"the vLLM engine serves Llasa presets and custom Llama/Qwen2 pairs; this voice "
                             f"({backend_name}) runs on our engine only")
        engines = VllmEngines(max_num_seqs)
        wrapped = cls(synthesizer.backend, synthesizer.target, synthesizer.drafts, synthesizer.draft_name,
                      chunk_generator=engines)
        weakref.finalize(wrapped, engines.close)  # engine processes end with their synthesizer
        return wrapped

    def unwrapped(self) -> Synthesizer:
        """The same voice on our engine (this one's engine processes end)."""
        self.close()
        return Synthesizer(self.backend, self.target, self.drafts, self.draft_name)

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
            batch = VllmEngines.submit(worker, prompts, limits, config, mode)
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

    def engine(self, mode: str, config: DecodingConfig, draft_name: str):
        """The engine process for this decoder (`mode`), held while the block runs (`VllmEngines.engine`)."""
        engines = self.chunk_generator
        return engines.engine(worker_spec(self, mode, config, draft_name, engines.max_num_seqs))

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
        return self.chunk_generator.engines()

    def close(self) -> None:
        """End every engine process this synthesizer started."""
        self.chunk_generator.close()

    # -- helpers -----------------------------------------------------------------------------------------

    def _checked(self, config: DecodingConfig, prompt: list[int], mode: str) -> DecodingConfig:
        """What vLLM can do of `config` (else a clear error), the length cut to the model's context."""
        self.check_decoding(mode, config)
        max_context = self.backend.max_context
        if max_context is not None and len(prompt) + config.max_new_tokens > max_context:
            room = max_context - len(prompt)
            if room < 1:
                raise InputError(f"the prompt takes {len(prompt)} of the model's {max_context} tokens: shorten the text")
            config = config.with_(max_new_tokens=room)
        return config

    def _decode(self, script, chunk_tokens: list[list[int]], voice_prompt: VoicePrompt | None) -> np.ndarray:
        parts = []
        for index, (chunk, prompt, tokens) in enumerate(zip(script.chunks, script.prompts, chunk_tokens)):
            context = {"prompt_ids": prompt} if voice_prompt is not None or self.backend.codec_reads_prompt else {}
            parts.append(self.backend.tokens_to_audio(tokens, **context))
            if index < len(script.chunks) - 1 and chunk.pause_after_ms:
                parts.append(np.zeros(int(self.backend.sample_rate * chunk.pause_after_ms / 1000), dtype=np.float32))
        return np.concatenate(parts) if parts else np.zeros(0, np.float32)


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
