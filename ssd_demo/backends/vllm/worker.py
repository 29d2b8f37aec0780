"""A vLLM engine in its own process and its own environment, spoken to in JSON lines.

vLLM pins torch and transformers versions that differ from this project's, so it lives in a virtual
environment of its own (`bash scripts/vllm_env.sh` builds `.venv-vllm` at the repository root) with the
ssd-vllm-plugin installed; this module starts `python -m ssd_vllm_plugin.worker` there and exchanges one
JSON object per line with it (the protocol is in ssd_vllm_plugin/worker.py).
SSD_DEMO_VLLM_PYTHON names another environment's interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from ...config import SETTINGS
from ...errors import UserError

PYTHON_VARIABLE = "SSD_DEMO_VLLM_PYTHON"
#: The repository root, where scripts/vllm_env.sh builds .venv-vllm (a checkout; see README).
ROOT = Path(__file__).resolve().parents[3]
SETUP_HINT = "build it with `bash scripts/vllm_env.sh` (CPU) or `bash scripts/vllm_env.sh --gpu`, see README"


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
    """One engine: a target, optionally a draft proposing `draft_len` tokens per round, and the SSD tolerance beta
    (both default to the settings' own, `config.SETTINGS`). `options()` is what the worker process is started with."""

    target: str
    draft: str | None = None
    draft_len: int = SETTINGS["draft_len"].default
    beta: float = SETTINGS["beta"].default
    dtype: str = "float32"
    max_model_len: int = 2048
    max_num_seqs: int = 64
    gpu_memory_utilization: float | None = None
    eager: bool = True  # False: CUDA graphs on a GPU (faster steps, a longer start)

    def options(self) -> dict:
        return {"target": self.target, "draft": self.draft, "draft_len": self.draft_len, "dtype": self.dtype,
                "max_model_len": self.max_model_len, "max_num_seqs": self.max_num_seqs,
                "gpu_memory_utilization": self.gpu_memory_utilization, "eager": self.eager}


@dataclass
class WorkerBatch:
    """What the engine answered for one batch: per request tokens, finish reason and latency; totals."""

    tokens: list[list[int]]
    finish_reasons: list[str]
    latencies: list[float]
    wall_seconds: float
    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else 0.0


@dataclass
class VllmWorker:
    """A started engine process; `close()` (or the context manager) ends it."""

    spec: WorkerSpec
    startup_seconds: float = 0.0
    version: str = ""
    _process: subprocess.Popen | None = field(default=None, repr=False)
    _log: deque = field(default_factory=lambda: deque(maxlen=40), repr=False)

    @classmethod
    def start(cls, spec: WorkerSpec, env: dict | None = None) -> "VllmWorker":
        python = require_vllm_python()
        worker = cls(spec)
        variables = {**os.environ, **worker_environment(spec), **(env or {})}
        worker._process = subprocess.Popen(
            [str(python), "-m", "ssd_vllm_plugin.worker", json.dumps(spec.options())], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=variables, bufsize=1)
        threading.Thread(target=worker._drain_stderr, daemon=True).start()
        ready = worker._read()
        worker.startup_seconds, worker.version = ready.get("startup_s", 0.0), ready.get("vllm", "")
        return worker

    def generate(self, prompts: list[list[int]], max_tokens: int | list[int], *, temperature: float,
                 top_p: float = SETTINGS["top_p"].default, top_k: int = SETTINGS["top_k"].default,
                 seed: int = SETTINGS["seed"].default, stop_token_ids: list[int] = (),
                 allowed_token_ids: list[int] | None = None, ignore_eos: bool = False) -> WorkerBatch:
        """All `prompts` queued at once (continuous batching); request i is seeded with seed + i. Every field goes
        to the worker, which holds no defaults of its own."""
        request = {"op": "generate", "prompts": [list(map(int, p)) for p in prompts], "max_tokens": max_tokens,
                   "temperature": temperature, "top_p": top_p, "top_k": top_k, "seed": seed,
                   "stop_token_ids": list(stop_token_ids), "allowed_token_ids": allowed_token_ids, "ignore_eos": ignore_eos}
        self._write(request)
        answer = self._read()
        outputs, spec = answer["outputs"], answer.get("spec", {})
        return WorkerBatch(tokens=[o["tokens"] for o in outputs], finish_reasons=[o["finish_reason"] for o in outputs],
                           latencies=[o["latency_s"] for o in outputs], wall_seconds=answer["wall_s"],
                           drafts=spec.get("drafts", 0), draft_tokens=spec.get("draft_tokens", 0),
                           accepted_tokens=spec.get("accepted_tokens", 0))

    def close(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        try:
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

    def _write(self, request: dict) -> None:
        if self._process is None or self._process.poll() is not None:
            raise VllmUnavailableError("the vLLM engine process has ended" + self._tail())
        self._process.stdin.write(json.dumps(request) + "\n")
        self._process.stdin.flush()

    def _read(self) -> dict:
        line = self._process.stdout.readline() if self._process is not None else ""
        if not line:
            self.close()
            raise VllmUnavailableError("the vLLM engine stopped without answering" + self._tail())
        answer = json.loads(line)
        if "error" in answer:
            raise VllmUnavailableError(f"the vLLM engine failed: {answer['error']}" + self._tail())
        return answer

    def _drain_stderr(self) -> None:
        for line in self._process.stderr:
            self._log.append(line.rstrip())

    def _tail(self) -> str:
        lines = [line for line in self._log if line.strip()][-12:]
        return (":\n" + "\n".join(lines)) if lines else ""


def worker_environment(spec: WorkerSpec) -> dict:
    """What the engine process reads: the plugin's beta, and on a CPU a small KV cache and no thread pinning
    (both are vLLM's CPU settings; a value the caller exported wins)."""
    variables = {"SSD_VLLM_BETA": repr(float(spec.beta))}
    for name, value in (("VLLM_CPU_KVCACHE_SPACE", "1"), ("VLLM_CPU_OMP_THREADS_BIND", "nobind")):
        variables[name] = os.environ.get(name, value)
    return variables
