"""Text in, audio out: a backend (prompt format + codec) around the decoding engine.

The engine only knows token ids. A `Backend` knows one model family: how to turn
text into prompt ids, which ids are speech tokens, and how generated ids become a
waveform (the contract, every hook with its default: `ssd_demo.speech.backend`). `Synthesizer` joins a
backend, a target, drafts and a chunk generator (ours, or the vLLM engine's: `ssd_demo.speech.chunk_generator`),
and times the language model and the codec separately. `Synthesizer.stream()` yields the audio
piece by piece as it is decoded (`ssd_demo.speech.streaming`; with a windowed codec, window by window while
the LM goes on: `ssd_demo.speech.overlap`); `synthesize()` is the same chunks decoded at once, consumed.
What it takes and gives back (`VoicePrompt`, `Script`, `SynthesisResult`, ...) is `ssd_demo.speech.results`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from collections.abc import Generator

import numpy as np
import torch

from ..engine.cancellation import StopCheck, check as check_stop
from ..engine.draft_heads import is_heads
from ..config import DecodingConfig, resolve_seed
from ..engine.generate import CommitCallback, RoundCallback
from ..errors import InputError, InvalidSettingError, TextError
from ..engine.results import GenerationResult, combine
from ..rules import RULES, AcceptanceRule, make_rule
from .backend import Backend
from .chunk_generator import OUR_ENGINE, ChunkGenerator
from .overlap import overlapped_chunk
from .results import ChunkResult, Script, SynthesisResult, TextChunk, VoicePrompt
from .streaming import AudioPiece, SynthesisStream, WindowFeed

__all__ = ["Backend", "ChunkGenerator", "Script", "SynthesisResult", "Synthesizer", "TextChunk", "TextError",
           "TimedSynthesis", "VoicePrompt", "synthesize_fastest"]


class Synthesizer:
    """A backend with its target and drafts, ready to speak. `chunk_generator`: how each chunk's tokens are
    generated (`ChunkGenerator`; ours unless another is handed in, e.g. the vLLM engine's)."""

    def __init__(self, backend: Backend, target, drafts: dict, default_draft: str | None = None,
                 chunk_generator: ChunkGenerator | None = None):
        if not drafts:
            raise ValueError("a Synthesizer needs at least one draft model")
        self.backend, self.target, self.drafts = backend, target, dict(drafts)
        self.chunk_generator = chunk_generator or OUR_ENGINE
        self.speculation_costs: dict[int, tuple[float, float]] = {}  # batch -> (AR, speculative) tokens/s, measured
        self.draft_name = default_draft or next(iter(self.drafts))
        self._acoustic: torch.Tensor | None = None
        if self.draft_name not in self.drafts:
            raise InputError(f"unknown draft {self.draft_name!r}; available: {', '.join(self.drafts)}")

    @property
    def device(self) -> torch.device:
        return next(self.target.parameters()).device

    def engine_description(self) -> str:
        """What runs the LM here, for speed reports: our engine and the target's matmul kernels, or vLLM's."""
        return self.chunk_generator.describe(self)

    def check_decoding(self, mode: str, config: DecodingConfig) -> None:
        """An InputError for what the chunk generator cannot decode in `mode` (ours: none; vLLM's is narrower)."""
        self.chunk_generator.check(mode, config)

    def speculation_pays(self, decoding: int) -> bool:
        """Whether speculation beats AR with `decoding` requests at once (the server's mode "auto"), as the chunk
        generator says: ours decodes each alone, so yes; a batching one from its measured tokens per second (vLLM's
        answers from its engines')."""
        return self.chunk_generator.speculation_pays(decoding)

    @property
    def measures_speculation(self) -> bool:
        """Whether `measure_speculation` has something to measure: a chunk generator that batches."""
        return hasattr(self.chunk_generator, "measure_speculation")

    def measure_speculation(self, config: DecodingConfig | None = None,
                            draft: str | None = None) -> dict[int, tuple[float, float]]:
        """AR's and speculative decoding's tokens per second per batch size, as the chunk generator measures them
        (`BatchingEngines.measure_speculation`; none for one that decodes each request alone); kept as
        `speculation_costs`. Returns {batch: (AR, speculative)}."""
        if self.measures_speculation:
            self.speculation_costs = self.chunk_generator.measure_speculation(self, config=config, draft=draft)
        return self.speculation_costs

    def config(self, **overrides) -> DecodingConfig:
        """The backend's default settings with the speech-token mask and end token filled in."""
        base = self.backend.default_config().with_(eos_token_id=self.backend.eos_token_id,
                                                    allowed_token_ids=self.backend.allowed_token_ids())
        return base.with_(**overrides) if overrides else base

    def grouping_embeddings(self) -> torch.Tensor:
        """[V, d] table the pcg rule groups tokens by: the backend's acoustic embeddings when it has
        them (e.g. codec centroids), else the target's input embeddings (the PCG paper's choice)."""
        if self._acoustic is None:
            acoustic = self.backend.acoustic_embeddings(self.target.get_input_embeddings().weight.shape[0])
            if acoustic is None:
                return self.target.get_input_embeddings().weight.detach()
            self._acoustic = acoustic.to(self.device)
        return self._acoustic

    def left_out(self, text: str) -> str:
        """What of `text` the voice will not speak, where its backend can tell ("" otherwise)."""
        return self.backend.left_out(text)

    def rule(self, config: DecodingConfig) -> AcceptanceRule:
        """The acceptance rule `config` names, built with this voice's grouping table when it needs one."""
        return make_rule(config, embeddings=self.grouping_embeddings() if RULES[config.acceptance].needs_embeddings else None)

    def synthesize(
        self,
        text: str,
        mode: str = "speculative",
        config: DecodingConfig | None = None,
        draft: str | None = None,
        voice_prompt: VoicePrompt | None = None,
        should_stop: StopCheck | None = None,
        on_progress: RoundCallback | None = None,
        script: Script | None = None,
    ) -> SynthesisResult:
        """Speak `text`: split into the backend's chunks, each decoded on its own (AR and speculative
        decode the same chunks with the same per-chunk seeds), audio joined with the chunks' pauses.
        `should_stop` is asked before every chunk and every decoding round (`Cancelled` when it says so);
        `on_progress(tokens, target calls)` hears the whole text's counts so far after every round.
        The same work as `stream()`, each chunk's codes decoded at once."""
        return self.stream(text, mode, config, draft, voice_prompt, should_stop, windows=False,
                           on_progress=on_progress, script=script).run()

    def stream(
        self,
        text: str,
        mode: str = "speculative",
        config: DecodingConfig | None = None,
        draft: str | None = None,
        voice_prompt: VoicePrompt | None = None,
        should_stop: StopCheck | None = None,
        windows: bool = True,
        on_progress: RoundCallback | None = None,
        script: Script | None = None,
        on_commit: CommitCallback | None = None,
    ) -> SynthesisStream:
        """`synthesize` as a stream of `AudioPiece`s, each yielded as soon as it is decoded: one per text
        chunk, or (`windows`, for a backend with a `window_codec`, the embedded voice and Llasa, on a chunk
        generator that `commits_rounds`, ours) one per codec window, decoded while the LM goes on (in a thread of
        its own) as soon as the window's codes are committed: the first audio waits for one window, and the
        codec's time overlaps the LM's. Joined, the pieces are the clip; after the last one `stream.result` holds
        the whole `SynthesisResult`. The tokens are those of `synthesize` for the same seed; so are the samples,
        except that codec windows blend at their joins (`ssd_demo.speech.streaming`). `on_commit(record)` hears
        every round's `RoundRecord` (from a chunk generator that reports rounds).

        Text and settings are checked here, before the first piece is asked for. `script`: the text
        already split and prompted (`script()`, with the same voice prompt), so that runs of the same
        text build it once; each piece's ready time then counts from the decoding, not the text work."""
        if mode not in ("ar", "speculative", "draft"):
            raise InputError(f"mode must be 'ar', 'speculative' or 'draft' (the draft alone), got {mode!r}")
        draft_name = self.solo_draft(draft) if mode == "draft" else draft or self.draft_name
        if mode == "speculative" and draft_name not in self.drafts:
            raise InputError(f"unknown draft {draft_name!r}; available: {', '.join(self.drafts)}")
        started = time.perf_counter()
        config = config or self.config()
        # Whatever the caller passed, the LM must stay inside the speech vocabulary and stop at
        # the backend's end token, or the codec would receive ids it cannot decode.
        config = config.with_(eos_token_id=self.backend.eos_token_id, allowed_token_ids=self.backend.allowed_token_ids())
        if script is None:
            script = self.script(text, voice_prompt)
        pieces = self._pieces(text, mode, config, draft_name, voice_prompt, should_stop, on_progress, windows,
                              script.chunks, script.prompts, started, on_commit)
        return SynthesisStream(pieces)

    def solo_draft(self, name: str | None = None) -> str:
        """The draft that decodes alone in mode "draft": `name`, else the default draft, else the first that is a
        language model of its own (draft heads read the target's hidden state: they cannot speak alone)."""
        if name is not None and name not in self.drafts:
            raise InputError(f"unknown draft {name!r}; available: {', '.join(self.drafts)}")
        alone = [n for n in ([name] if name else [self.draft_name, *self.drafts]) if not is_heads(self.drafts[n])]
        if not alone:
            raise InputError(f"draft {name or self.draft_name!r} is draft heads on the target's hidden state, not a "
                             "model that decodes alone; name a draft model (e.g. distilled or layers)")
        return alone[0]

    def script(self, text: str, voice_prompt: VoicePrompt | None = None, text_normalizer: str | None = None) -> Script:
        """`text` split into the backend's chunks, with every chunk's prompt built first: a chunk that
        cannot be spoken fails (TextError) before any decoding. `text_normalizer`: how a backend with
        normaliser modes (CosyVoice 2) reads this text, None for its own setting; "default" for any other."""
        modes = self.backend.text_normalizers
        if text_normalizer not in (None, "default") and not modes:
            raise InvalidSettingError(f"the {text_normalizer!r} text normaliser is CosyVoice 2's; this voice reads "
                                      "text its own way (choose default)")
        if text_normalizer is not None and modes:
            chunks = self.backend.split_text(text, text_normalizer=text_normalizer)
        else:
            chunks = self.backend.split_text(text)
        return Script(list(chunks), [self.backend.prompt_ids(chunk.text, voice_prompt) for chunk in chunks])

    def _pieces(self, text: str, mode: str, config: DecodingConfig, draft_name: str, voice_prompt: VoicePrompt | None,
                should_stop: StopCheck | None, on_progress: RoundCallback | None, windows: bool,
                chunks: list[TextChunk], prompts: list[list[int]], started: float,
                on_commit: CommitCallback | None = None) -> Generator[AudioPiece, None, SynthesisResult]:
        base_seed = resolve_seed(config.seed)  # None: a fresh one, reported in the result's stats
        streams = windows and self.chunk_generator.commits_rounds  # codec windows need each round's commits
        overlapped = False  # whether a chunk's codec ran beside its LM (the run's wall time is then the pieces')
        results: list[ChunkResult] = []
        played: list[np.ndarray] = []
        tokens = calls = position = 0
        last_ready = 0.0  # when the last piece was ready (seconds since `started`)
        for index, (chunk, prompt) in enumerate(zip(chunks, prompts)):
            check_stop(should_stop)
            seed = (base_seed + index) % 2**63
            on_round = None if on_progress is None else (  # the chunk's counts on top of the earlier chunks'
                lambda chunk_tokens, chunk_calls, before=(tokens, calls):
                    on_progress(before[0] + chunk_tokens, before[1] + chunk_calls))
            # Decode after the voice prompt, or from the prompt on (`Backend.codec_reads_prompt`).
            context = {"prompt_ids": prompt} if voice_prompt is not None or self.backend.codec_reads_prompt else {}
            decoding = (config.with_(seed=seed), draft_name, should_stop, on_round, voice_prompt)
            window_codec = self.backend.window_codec(**context) if streams else None
            if window_codec is not None:
                # Token-level streaming: the LM decodes in its own thread while this one decodes each codec
                # window as soon as its codes exist, so first audio waits for one window, not the whole chunk.
                overlapped = True
                parts = self._overlapped(prompt, mode, *decoding, on_commit, WindowFeed(window_codec), context)
            else:
                parts = self._whole_chunk(prompt, mode, *decoding, on_commit, context)
            chunk_start, codec_seconds = position, 0.0
            while True:
                try:
                    audio, seconds, lm_charged, (chunk_tokens, chunk_calls) = next(parts)
                except StopIteration as done:
                    generation, chunk_config, lm_seconds = done.value
                    break
                codec_seconds += seconds
                ready = time.perf_counter() - started
                # Decoded after the LM, a piece costs its codec seconds (the chunk's first also the LM's); overlapped,
                # the wall time since the last piece, so that together they are the run's wall time.
                cost = seconds + lm_charged if window_codec is None else ready - last_ready
                yield self._piece(len(played), index, chunk.text, audio, position, ready, cost, tokens + chunk_tokens,
                                  calls + chunk_calls)
                last_ready = ready
                played.append(audio)
                position += len(audio)
            tokens, calls = tokens + len(generation.tokens), calls + generation.stats.target_calls
            speech_end = position
            if index < len(chunks) - 1 and chunk.pause_after_ms:  # the pause is a piece of its own
                pause = np.zeros(int(self.backend.sample_rate * chunk.pause_after_ms / 1000), dtype=np.float32)
                yield self._piece(len(played), index, "", pause, position, time.perf_counter() - started, 0.0,
                                  tokens, calls)
                played.append(pause)
                position += len(pause)
            results.append(ChunkResult(chunk.text, generation, chunk_config, chunk_start, speech_end, lm_seconds,
                                       codec_seconds))
        generation = combine([r.generation for r in results])
        generation.stats.seed = base_seed
        return SynthesisResult(
            text=text,
            mode=mode,
            audio=np.concatenate(played) if played else np.zeros(0, np.float32),
            sample_rate=self.backend.sample_rate,
            generation=generation,
            # The settings as decoded; a length limit cut to the model's context shows as the tightest cut.
            config=config.with_(seed=base_seed, max_new_tokens=min(r.config.max_new_tokens for r in results)),
            lm_seconds=sum(r.lm_seconds for r in results),
            codec_seconds=sum(r.codec_seconds for r in results),
            chunks=results,
            wall_seconds=last_ready if overlapped else None,
        )

    def _piece(self, index: int, chunk_index: int, text: str, audio: np.ndarray, start_sample: int, ready: float,
               seconds: float, tokens: int, calls: int) -> AudioPiece:
        return AudioPiece(index=index, chunk_index=chunk_index, text=text, audio=audio,
                          sample_rate=self.backend.sample_rate, start_sample=start_sample, ready_seconds=ready,
                          processing_seconds=seconds, tokens_so_far=tokens, target_calls_so_far=calls)

    def _whole_chunk(self, prompt: list[int], mode: str, config: DecodingConfig, draft_name: str,
                     should_stop: StopCheck | None, on_round: RoundCallback | None, voice_prompt: VoicePrompt | None,
                     on_commit: CommitCallback | None, context: dict) -> Generator[tuple, None, tuple]:
        """A chunk decoded, then its codes decoded at once: yields (samples, codec seconds, LM seconds charged,
        (the chunk's tokens, its target calls)) and returns what `_generate` returns."""
        decoded = self._generate(prompt, mode, config, draft_name, should_stop, on_round, voice_prompt, on_commit)
        start = time.perf_counter()
        audio = np.asarray(self.backend.tokens_to_audio(decoded[0].tokens, **context), dtype=np.float32)
        counts = (len(decoded[0].tokens), decoded[0].stats.target_calls)
        yield audio, time.perf_counter() - start, decoded[2], counts
        return decoded

    def _overlapped(self, prompt: list[int], mode: str, config: DecodingConfig, draft_name: str,
                    should_stop: StopCheck | None, on_round: RoundCallback | None, voice_prompt: VoicePrompt | None,
                    on_commit: CommitCallback | None, feed: WindowFeed, context: dict) -> Generator[tuple, None, tuple]:
        """`overlap.overlapped_chunk` of this chunk: its LM in a thread, its codec windows here."""
        def generate(stop: StopCheck, counted: RoundCallback, commit: CommitCallback) -> tuple:
            return self._generate(prompt, mode, config, draft_name, stop, counted, voice_prompt, commit)

        def silence(tokens: list[int]) -> np.ndarray:  # a chunk with no codes: decoded as its backend decodes it
            return self.backend.tokens_to_audio(tokens, **context)

        return overlapped_chunk(generate, feed, silence, should_stop, on_round, on_commit)

    def _generate(self, prompt: list[int], mode: str, config: DecodingConfig, draft_name: str,
                  should_stop: StopCheck | None, on_round: RoundCallback | None = None,
                  voice_prompt: VoicePrompt | None = None,
                  on_commit: CommitCallback | None = None) -> tuple[GenerationResult, DecodingConfig, float]:
        """One chunk's tokens, the config as decoded, and the LM seconds: the chunk planned here (the backend's
        plan, the cut to its context, its forced tokens), its tokens generated by the chunk generator."""
        # A backend may bound the length by the prompt and sample its own way (CosyVoice 2: 2-20 speech
        # tokens per text token, repetition-aware sampling), for both decoders alike.
        config, distribution = self.backend.plan_generation(prompt, config, voice_prompt)
        # A backend may declare the context its model was trained on (Llasa: 2048 tokens);
        # generating past it gives audio of unknown quality, so the length limit is cut to fit.
        max_context = self.backend.max_context
        if max_context is not None and len(prompt) + config.max_new_tokens > max_context:
            room = max_context - len(prompt)
            if room < 1:
                raise TextError(f"the prompt takes {len(prompt)} of the model's {max_context} tokens: shorten the text")
            config = config.with_(max_new_tokens=room)
        generation, seconds = self.chunk_generator.generate_chunk(
            self, prompt, mode, config, draft_name, forced=self.backend.forced_tokens(prompt),
            prefix_distribution=distribution, should_stop=should_stop, on_round=on_round, on_commit=on_commit)
        return generation, config, seconds


@dataclass
class TimedSynthesis:
    """One synthesis re-timed `repeats` times: the first result and the fastest timings."""

    result: SynthesisResult
    lm_seconds_per_token: float  # decode seconds per generated token (prefill excluded)
    total_seconds: float  # LM + codec seconds of the fastest run
    repeats: int


def synthesize_fastest(synth: Synthesizer, text: str, repeats: int = 1, **kwargs) -> TimedSynthesis:
    """Synthesise `text` `repeats` times with the same settings and keep the fastest timings.

    With a fixed seed every run decodes the same tokens, so extra runs only re-time the same work;
    a shared machine's stalls only ever add time, so the minimum is the least noisy estimate (as in
    timeit). Without a seed each run would sample different tokens, and the minimum would pick the
    luckiest output rather than the fastest timing, so a seed is required when repeating.
    """
    repeats = max(int(repeats), 1)
    config = kwargs.get("config")
    if repeats > 1 and (config is None or config.seed is None):
        raise ValueError("synthesize_fastest needs a config with a fixed seed to repeat the same work")
    runs = [synth.synthesize(text, **kwargs) for _ in range(repeats)]
    return TimedSynthesis(
        result=runs[0],
        lm_seconds_per_token=min(r.generation.stats.decode_seconds_per_token for r in runs),
        total_seconds=min(r.total_seconds for r in runs),
        repeats=repeats,
    )
