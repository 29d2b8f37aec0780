"""The vLLM engine processes a voice holds, and the `ChunkGenerator` that sends each chunk to them (`VllmEngines`).

At most two engine processes: AR (the target alone) and speculative (target + draft, K tokens per round), each
started on first use and kept; SSD's beta travels with each request (the ssd-vllm-plugin), so a new beta needs
no new engine, while a new draft or K replaces the speculative engine (the old one is closed first: a GPU holds
two engines beside this process's models, not more). Callers in several threads (the speech server's workers)
share an engine: vLLM batches their chunks together.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ...config import DecodingConfig, resolve_seed
from ...errors import InputError
from ...rules.registry import RULES
from ...engine.results import GenerationResult, GenerationStats
from .worker import SpecCounts, VllmWorker, WorkerBatch, WorkerSpec

GPU_MEMORY_VARIABLE = "SSD_DEMO_VLLM_GPU_MEMORY"


class VllmEngines:
    """A voice's vLLM engine processes, and the chunk generator a `VllmSynthesizer` is handed: each chunk's
    tokens from the engine for its decoder, all at once (vLLM reports no rounds: `commits_rounds` is False, so a
    chunk's audio is decoded when its tokens come)."""

    commits_rounds = False

    def speculation_pays(self, decoding: int) -> bool:
        return True  # until measured: `VllmSynthesizer.speculation_pays` answers from the engines' costs

    def __init__(self, max_num_seqs: int = 64):
        self.max_num_seqs = max_num_seqs
        self._workers: dict[str, VllmWorker] = {}  # "ar" / "speculative" -> its engine
        self._users: dict[str, int] = {"ar": 0, "speculative": 0}  # callers inside each engine now
        self._line: dict[str, list] = {"ar": [], "speculative": []}  # callers waiting for an engine, in order
        self._changing = threading.Condition()  # guards all three; an engine is replaced when no one uses it

    # -- the ChunkGenerator ------------------------------------------------------------------------------

    def describe(self, synthesizer) -> str:
        versions = sorted({worker.version for worker in self._workers.values() if worker.version})
        return f"vLLM {', '.join(versions) or '(no engine started yet)'} and its own kernels"

    def check(self, mode: str, config: DecodingConfig) -> None:
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

    def generate_chunk(self, synthesizer, prompt: list[int], mode: str, config: DecodingConfig, draft_name: str, *,
                       forced=None, prefix_distribution=None, should_stop=None, on_round=None,
                       on_commit=None) -> tuple[GenerationResult, float]:
        """One chunk on the engine for `mode`; `on_round` and `on_commit` hear nothing (vLLM reports no rounds)."""
        if forced is not None or prefix_distribution is not None:
            raise InputError("the vLLM engine samples every token from the LM alone: this voice's forced tokens or "
                             "own sampling need our engine")
        self.check(mode, config)
        with self.engine(worker_spec(synthesizer, mode, config, draft_name, self.max_num_seqs)) as worker:
            batch = self.submit(worker, [prompt], [config.max_new_tokens], config, mode, should_stop)
        return generation_record(batch, 0, mode, config), batch.wall_seconds

    # -- the engine processes ----------------------------------------------------------------------------

    @contextmanager
    def engine(self, spec: WorkerSpec) -> Iterator[VllmWorker]:
        """The engine process for `spec`'s decoder, started on first use (tens of seconds), held while the block
        runs. Callers in other threads share it (vLLM batches their requests). One that asks for another draft or
        K waits until the engine is free, then replaces it (the old one is closed first); callers go in arrival
        order, so a request for the running engine that comes after it waits too (no one starves)."""
        mode = "speculative" if spec.draft is not None else "ar"
        ticket = (object(), spec)
        with self._changing:
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
                    self._changing.wait()
            finally:
                line.remove(ticket)
                self._changing.notify_all()
            self._users[mode] += 1
            worker = self._workers[mode]
        try:
            yield worker
        finally:
            with self._changing:
                self._users[mode] -= 1
                self._changing.notify_all()

    def engines(self) -> list[WorkerSpec]:
        """The engine processes held now."""
        return [worker.spec for worker in self._workers.values()]

    def close(self) -> None:
        """End every engine process started here."""
        close_all(self._workers)

    @staticmethod
    def submit(worker: VllmWorker, prompts: list[list[int]], limits: list[int], config: DecodingConfig, mode: str,
               should_stop=None) -> WorkerBatch:
        eos = config.eos_token_id
        stops = list(eos) if isinstance(eos, (tuple, list)) else ([] if eos is None else [eos])
        # beta reaches the engine only for a rule that reads it (ssd): "exact" at any beta is exact, as on our engine.
        beta = config.beta if mode == "speculative" and RULES[config.acceptance].uses_beta else 0.0
        return worker.generate(prompts, limits, temperature=config.temperature, top_p=config.top_p,
                               top_k=config.top_k, seed=resolve_seed(config.seed), stop_token_ids=stops,
                               allowed_token_ids=config.allowed_token_ids or None, beta=beta,
                               should_stop=should_stop)


def worker_spec(synthesizer, mode: str, config: DecodingConfig, draft_name: str, max_num_seqs: int) -> WorkerSpec:
    """The engine `synthesizer`'s voice needs for `mode` (the models' folders, K, the context, the GPU's share)."""
    if mode not in ("ar", "speculative"):
        raise InputError(f"mode must be 'ar' or 'speculative', got {mode!r}")
    speculative = mode == "speculative"
    if speculative and draft_name not in synthesizer.drafts:
        raise InputError(f"unknown draft {draft_name!r}; available: {', '.join(synthesizer.drafts)}")
    return WorkerSpec(target=_folder(synthesizer.target),
                      draft=_folder(synthesizer.drafts[draft_name]) if speculative else None,
                      draft_len=config.draft_len if speculative else 0,
                      dtype=str(synthesizer.target.dtype).removeprefix("torch."),
                      max_model_len=int(synthesizer.backend.max_context or 2048), max_num_seqs=max_num_seqs,
                      gpu_memory_utilization=gpu_share() if synthesizer.device.type == "cuda" else None)


def generation_record(batch: WorkerBatch, index: int, mode: str, config: DecodingConfig) -> GenerationResult:
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


def close_all(workers: dict) -> None:
    for worker in workers.values():
        worker.close()
    workers.clear()


def _folder(model) -> str:
    """Where a loaded transformers model came from (a local folder, or the Hub cache's snapshot folder)."""
    path = getattr(model, "name_or_path", "") or getattr(model.config, "_name_or_path", "")
    if not path:
        raise InputError("the vLLM engine needs the model's folder; this model was built in memory")
    return str(path)
