"""A vLLM engine in its own process and its own environment, spoken to in JSON lines.

vLLM pins torch and transformers versions that differ from this project's, so it lives in a virtual
environment of its own (`bash scripts/vllm_env.sh` builds `.venv-vllm` at the repository root) with the
ssd-vllm-plugin installed; this module starts `python -m ssd_vllm_plugin.worker` there and exchanges one
JSON object per line with it (the protocol is in ssd_vllm_plugin/worker.py): requests go out under ids as
callers make them and answers come back as they finish, so callers in several threads share the engine's batches.
SSD_DEMO_VLLM_PYTHON names another environment's interpreter.
"""

from __future__ import annotations

import itertools
import json
import os
import queue
import subprocess
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ...config import SETTINGS, check_setting
from ...engine.cancellation import Cancelled
from ...errors import InputError, UserError

PYTHON_VARIABLE = "SSD_DEMO_VLLM_PYTHON"
#: The repository root, where scripts/vllm_env.sh builds .venv-vllm (a checkout; see docs/vllm.md).
ROOT = Path(__file__).resolve().parents[3]
SETUP_HINT = "build it with `bash scripts/vllm_env.sh` (CPU) or `bash scripts/vllm_env.sh --gpu`, see docs/vllm.md"


#: Model families whose LMs the vLLM engine serves (Llasa presets and custom Llama/Qwen2 pairs).
VLLM_BACKENDS = ("llasa",)


class VllmUnavailableError(UserError):
    """The vLLM engine was chosen but its environment is missing or its engine failed to start."""


def vllm_python() -> Path | None:
    """The vLLM environment's interpreter, or None when there is none."""
    named = os.environ.get(PYTHON_VARIABLE, "").strip()
    candidate = Path(named) if named else ROOT / ".venv-vllm" / "bin" / "python"
    return candidate if candidate.is_file() else None


def require_vllm_python() -> Path:
    python = vllm_python()
    if python is None:
        where = os.environ.get(PYTHON_VARIABLE) or str(ROOT / ".venv-vllm")
        raise VllmUnavailableError(f"the vLLM engine needs its own environment and there is none at {where}: "
                                   + SETUP_HINT)
    return python


@dataclass(frozen=True)
class WorkerSpec:
    """One engine: a target, optionally a draft proposing `draft_len` tokens per round (default: the settings'
    own, `config.SETTINGS`). SSD's beta is not the engine's: each request carries its own (`generate`), so one
    engine serves every beta. `options()` is what the worker process is started with."""

    target: str
    draft: str | None = None
    draft_len: int = SETTINGS["draft_len"].default
    dtype: str = "float32"
    max_model_len: int = 2048
    max_num_seqs: int = 64
    gpu_memory_utilization: float | None = None
    eager: bool = True  # False: CUDA graphs on a GPU (faster steps, a longer start)

    def options(self) -> dict:
        return {"target": self.target, "draft": self.draft, "draft_len": self.draft_len, "dtype": self.dtype,
                "max_model_len": self.max_model_len, "max_num_seqs": self.max_num_seqs,
                "gpu_memory_utilization": self.gpu_memory_utilization, "eager": self.eager}


@dataclass(frozen=True)
class SpecCounts:
    """Verify steps (`drafts`), drafted and accepted tokens: of one request, or of a whole batch."""

    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0

    @classmethod
    def of(cls, answer: dict | None) -> "SpecCounts":
        answer = answer or {}
        return cls(int(answer.get("drafts", 0)), int(answer.get("draft_tokens", 0)),
                   int(answer.get("accepted_tokens", 0)))

    @property
    def acceptance_rate(self) -> float:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else 0.0


@dataclass
class WorkerBatch:
    """What the engine answered for one batch: per request tokens, finish reason, latency and speculation
    counts (`requests`); the batch's totals."""

    tokens: list[list[int]]
    finish_reasons: list[str]
    latencies: list[float]
    wall_seconds: float
    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    requests: list[SpecCounts] = field(default_factory=list)

    @property
    def acceptance_rate(self) -> float:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else 0.0


@dataclass
class VllmWorker:
    """A started engine process; `close()` (or the context manager) ends it. Thread-safe: callers in several
    threads may `generate` at once, and their requests share the engine's batches (each answer is matched to its
    caller by the request's id)."""

    spec: WorkerSpec
    startup_seconds: float = 0.0
    version: str = ""
    _process: subprocess.Popen | None = field(default=None, repr=False)
    _log: deque = field(default_factory=lambda: deque(maxlen=40), repr=False)
    _waiting: dict = field(default_factory=dict, repr=False)  # request id -> the queue its answer goes to
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _ids: "itertools.count" = field(default_factory=itertools.count, repr=False)

    @classmethod
    def start(cls, spec: WorkerSpec, env: dict | None = None) -> "VllmWorker":
        python = require_vllm_python()
        worker = cls(spec)
        variables = {**os.environ, **worker_environment(spec), **(env or {})}
        worker._process = subprocess.Popen(
            [str(python), "-m", "ssd_vllm_plugin.worker", json.dumps(spec.options())], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=variables, bufsize=1)
        threading.Thread(target=worker._drain_stderr, daemon=True).start()
        ready = worker._ready()
        worker.startup_seconds, worker.version = ready.get("startup_s", 0.0), ready.get("vllm", "")
        threading.Thread(target=worker._dispatch_answers, daemon=True).start()
        return worker

    def generate(self, prompts: list[list[int]], max_tokens: int | list[int], *, temperature: float,
                 top_p: float = SETTINGS["top_p"].default, top_k: int = SETTINGS["top_k"].default,
                 seed: int = SETTINGS["seed"].default, stop_token_ids: list[int] = (),
                 allowed_token_ids: list[int] | None = None, ignore_eos: bool = False,
                 beta: float | list[float] = 0.0, should_stop: Callable[[], bool] | None = None) -> WorkerBatch:
        """All `prompts` queued at once (continuous batching, beside other callers' requests); prompt i is seeded
        with seed + i and verified with SSD's tolerance `beta` (one for all, or one per prompt; 0 is exact
        speculative sampling). `should_stop` is asked while waiting: when it says so, the prompts leave the
        engine and `Cancelled` is raised. Every field goes to the worker, which holds no defaults of its own."""
        betas = beta if isinstance(beta, (list, tuple)) else [beta] * len(prompts)
        if len(betas) != len(prompts):
            raise InputError(f"{len(betas)} betas for {len(prompts)} prompts: give one beta, or one per prompt")
        request = {"op": "generate", "prompts": [list(map(int, p)) for p in prompts], "max_tokens": max_tokens,
                   "temperature": temperature, "top_p": top_p, "top_k": top_k, "seed": seed,
                   "stop_token_ids": list(stop_token_ids), "allowed_token_ids": allowed_token_ids, "ignore_eos": ignore_eos,
                   "beta": [_checked_beta(b) for b in betas]}
        answer = self._ask(request, should_stop)
        outputs, spec = answer["outputs"], SpecCounts.of(answer.get("spec"))
        return WorkerBatch(tokens=[o["tokens"] for o in outputs], finish_reasons=[o["finish_reason"] for o in outputs],
                           latencies=[o["latency_s"] for o in outputs], wall_seconds=answer["wall_s"],
                           drafts=spec.drafts, draft_tokens=spec.draft_tokens, accepted_tokens=spec.accepted_tokens,
                           requests=[SpecCounts.of(o.get("spec")) for o in outputs])

    @property
    def in_flight(self) -> int:
        """Requests sent and not yet answered."""
        with self._lock:
            return len(self._waiting)

    def close(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        try:
            with self._lock:
                process.stdin.write(json.dumps({"op": "quit"}) + "\n")
                process.stdin.flush()
            process.wait(timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            process.kill()
            process.wait()

    def __enter__(self) -> "VllmWorker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- the protocol ------------------------------------------------------------------------------------

    def _ask(self, request: dict, should_stop: Callable[[], bool] | None) -> dict:
        """Send `request` under a fresh id and wait for its answer (asking for an abort when told to stop)."""
        answers: queue.Queue = queue.Queue(maxsize=2)
        with self._lock:
            request_id = str(next(self._ids))
            self._waiting[request_id] = answers
            try:
                self._send({**request, "id": request_id})
            except VllmUnavailableError:
                del self._waiting[request_id]
                raise
        stopping = False
        while True:
            try:
                answer = answers.get(timeout=0.05 if should_stop is not None else None)
            except queue.Empty:
                if not stopping and should_stop():
                    stopping = True
                    with self._lock:
                        self._send({"op": "abort", "id": request_id}, missing_ok=True)
                continue
            if answer.get("aborted") or stopping:
                raise Cancelled()
            if "error" in answer:
                raise VllmUnavailableError(f"the vLLM engine failed: {answer['error']}" + self._tail())
            return answer

    def _send(self, message: dict, missing_ok: bool = False) -> None:
        """One line to the worker (the caller holds `_lock`)."""
        process = self._process
        if process is None or process.poll() is not None:
            if missing_ok:
                return
            raise VllmUnavailableError("the vLLM engine process has ended" + self._tail())
        process.stdin.write(json.dumps(message) + "\n")
        process.stdin.flush()

    def _ready(self) -> dict:
        line = self._process.stdout.readline()
        if not line:
            self.close()
            raise VllmUnavailableError("the vLLM engine stopped without answering" + self._tail())
        answer = json.loads(line)
        if "error" in answer:
            raise VllmUnavailableError(f"the vLLM engine failed: {answer['error']}" + self._tail())
        return answer

    def _dispatch_answers(self) -> None:
        """Each answer to the caller waiting for its id; when the process ends, every waiter gets an error."""
        process = self._process
        for line in process.stdout:
            try:
                answer = json.loads(line)
            except json.JSONDecodeError:
                continue
            with self._lock:
                answers = self._waiting.pop(str(answer.get("id")), None)
            if answers is not None:  # None: an abort's answer after the request had finished
                answers.put(answer)
        process.wait()
        with self._lock:
            waiting, self._waiting = self._waiting, {}
        for answers in waiting.values():
            answers.put({"error": "the engine process ended (exit status "
                                  f"{process.returncode}) before answering"})

    def _drain_stderr(self) -> None:
        for line in self._process.stderr:
            self._log.append(line.rstrip())

    def _tail(self) -> str:
        lines = [line for line in self._log if line.strip()][-12:]
        return (":\n" + "\n".join(lines)) if lines else ""


def _checked_beta(value) -> float:
    check_setting("beta", value)  # an InvalidSettingError that names beta and its range
    return float(value)


def worker_environment(spec: WorkerSpec) -> dict:
    """What the engine process reads: on a CPU a small KV cache and no thread pinning (both are vLLM's CPU
    settings; a value the caller exported wins)."""
    variables = {}
    for name, value in (("VLLM_CPU_KVCACHE_SPACE", "1"), ("VLLM_CPU_OMP_THREADS_BIND", "nobind")):
        variables[name] = os.environ.get(name, value)
    return variables
