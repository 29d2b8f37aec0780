"""Continuous batching: many requests' autoregressive decoding in one running batch, one target call per step.

A request joins between steps (its prompt prefilled into a row of its own), takes a step with every other live
request (its new tokens in, one sampled token out; or it waits a step, below), and leaves the moment it ends, so a
request that arrives while others decode waits for one step, not for them. Each row keeps everything a lone run keeps (`run_state.Run`: its settings, seed and
generator, allowed-token mask, forced-token schedule, prefix distribution), so a row samples as
`generate.autoregressive_generate` samples, and the batched forward's rows do not depend on each other
(`batched_forward`), so a seeded request decodes the same tokens alone or in a batch.

Forced tokens ride with the token they follow: a row's step feeds every token it committed since its last step,
as `autoregressive_generate` feeds them. The step is ONNX Runtime's (`onnx_batched`) where it runs the target
(faster on the CPUs measured), else torch's (`batched_forward`). ONNX Runtime's takes several tokens for only a
few rows a step; a row it leaves waiting samples at a later step, once it has fed all it committed.

One thread (the engine's) runs the steps; callers block in `Ticket.result()`. `on_commit` and `on_round` are called
from the engine's thread after each of the row's sampled tokens, and must be quick (a stream's codec feed is).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from ..config import DecodingConfig
from . import onnx_batched
from .batched_forward import BatchedLM
from .onnx_batched import OnnxBatchedLM
from .cancellation import Cancelled, StopCheck
from .results import GenerationResult, RoundRecord
from .run_state import MAX_FORCED_PER_TOKEN, ForcedTokens, PrefixDistribution, Run, resolve_seed, run_result
from .sampling import sample

#: Rows a batching engine decodes at once unless told (more requests wait for a row to free).
MAX_ROWS = 32
#: The batched step: ONNX Runtime's where it runs the target ("auto"; faster on the CPUs measured), else torch's.
FORWARDS = ("auto", "onnxruntime", "torch")


class Ticket:
    """A submitted request: `result()` waits for its `GenerationResult` (or raises what ended it)."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self._result: GenerationResult | None = None
        self._error: BaseException | None = None

    def result(self, timeout: float | None = None) -> GenerationResult:
        if not self._done.wait(timeout):
            raise TimeoutError("the request is still decoding")
        if self._error is not None:
            raise self._error
        return self._result

    def done(self) -> bool:
        return self._done.is_set()

    def _finish(self, result: GenerationResult | None = None, error: BaseException | None = None) -> None:
        self._result, self._error = result, error
        self._done.set()


@dataclass(eq=False)  # compared and hashed by identity (its run holds tensors)
class _Request:
    """A request as submitted; `run` is built when it takes a row."""

    prompt: list[int]
    config: DecodingConfig
    forced: ForcedTokens | None
    prefix_distribution: PrefixDistribution | None
    should_stop: StopCheck | None
    on_round: Callable[[int, int], None] | None
    on_commit: Callable[[RoundRecord], None] | None
    ticket: Ticket = field(default_factory=Ticket)
    run: Run | None = None
    started: float = 0.0
    prefill_seconds: float = 0.0
    calls: int = 0  # target calls with tokens of this request (its prefill and every step it did not wait)
    unsampled_seconds: float = 0.0  # steps it waited through since its last sample (counted in its next record)
    sampling: object = None  # rows with equal keys share one call making their distributions (`_distributions`)


@dataclass
class BatchStats:
    """What the engine has done since it started: for reports and the benchmark."""

    steps: int = 0
    rows_stepped: int = 0  # sum over steps of the rows in each
    most_rows: int = 0
    requests: int = 0

    @property
    def mean_rows(self) -> float:
        return self.rows_stepped / self.steps if self.steps else 0.0


class BatchingEngine:
    """Autoregressive decoding of every submitted request in one running batch over `target` (see the module)."""

    def __init__(self, target, max_rows: int = MAX_ROWS, forward: str = "auto"):
        if max_rows < 1:
            raise ValueError(f"max_rows must be at least 1; got {max_rows}")
        if forward not in FORWARDS:
            raise ValueError(f"forward must be one of {', '.join(FORWARDS)}; got {forward!r}")
        self._auto = forward == "auto"
        if self._auto:
            forward = "onnxruntime" if onnx_batched.available(target) else "torch"
        self.target, self.max_rows, self.forward = target, max_rows, forward
        self.device = next(target.parameters()).device
        self.vocab = target.get_output_embeddings().weight.shape[0]
        self.stats = BatchStats()
        self._forward: BatchedLM | OnnxBatchedLM | None = None  # built by the engine's thread on its first request
        self._waiting: list[_Request] = []
        self._live: list[_Request] = []  # the request in row i is _live[i]
        self._lock = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False

    def submit(self, prompt: list[int], config: DecodingConfig, *, forced: ForcedTokens | None = None,
               prefix_distribution: PrefixDistribution | None = None, should_stop: StopCheck | None = None,
               on_round: Callable[[int, int], None] | None = None,
               on_commit: Callable[[RoundRecord], None] | None = None) -> Ticket:
        """Queue one request (`prompt` ids, decoded as `autoregressive_generate` decodes it); it joins the batch
        at the next step. `should_stop` is asked before each of its steps (`Cancelled` then ends it alone)."""
        if not prompt:
            raise ValueError("the prompt needs at least one token")
        if min(prompt) < 0 or max(prompt) >= self.target.get_input_embeddings().weight.shape[0]:
            raise ValueError("the prompt contains ids outside the vocabulary")
        request = _Request(list(prompt), config, forced, prefix_distribution, should_stop, on_round, on_commit)
        with self._lock:
            if self._closed:
                raise RuntimeError("the batching engine is closed")
            self._waiting.append(request)
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="batching-engine", daemon=True)
                self._thread.start()
            self._lock.notify()
        return request.ticket

    def generate(self, prompt: list[int], config: DecodingConfig, **hooks) -> GenerationResult:
        """`submit` and wait for the result."""
        return self.submit(prompt, config, **hooks).result()

    def close(self) -> None:
        """Stop the engine's thread; requests not finished end with `Cancelled`."""
        with self._lock:
            self._closed = True
            self._lock.notify()
        if self._thread is not None:
            self._thread.join()

    # The engine's thread.

    def _serve(self) -> None:
        try:
            self._loop()
        except BaseException as error:  # a bug here must not leave callers waiting forever
            with self._lock:
                self._closed = True
                for request in self._waiting + self._live:
                    request.ticket._finish(error=error)
                self._waiting, self._live = [], []
            raise

    @torch.inference_mode()
    def _loop(self) -> None:
        while True:
            with self._lock:
                while not self._closed and not self._waiting and not self._live:
                    self._lock.wait()
                if self._closed:
                    for request in self._waiting + self._live:
                        request.ticket._finish(error=Cancelled("the engine closed"))
                    self._waiting, self._live = [], []
                    return
                joining = self._waiting[: self.max_rows - len(self._live)]
                self._waiting = self._waiting[len(joining):]
            for request in joining:
                self._admit(request)
            if self._live:
                self._step()

    def _admit(self, request: _Request) -> None:
        """Give the request a row (after the live ones) and prefill its prompt there, all but its last token."""
        try:
            request.started = time.perf_counter()
            config = request.config
            request.run = Run(config, self.device, self.vocab, request.prompt, seed=resolve_seed(config),
                              forced=request.forced, prefix_distribution=request.prefix_distribution)
            # A prefix distribution reads the row's own tokens; otherwise only the sampling settings count.
            request.sampling = (request if request.prefix_distribution is not None
                                else config.with_(seed=None, max_new_tokens=1))
            need = len(request.prompt) + config.max_new_tokens + MAX_FORCED_PER_TOKEN + 2
            if self._forward is None:
                self._forward = self._new_forward(max(need, 256))
            row = len(self._live)
            rows = self._forward.rows if row < self._forward.rows else min(2 * self._forward.rows, self.max_rows)
            self._forward.reserve(rows, need)  # (rows grow by doubling: a reservation copies the caches)
            self._forward.prefill(row, request.prompt[:-1])
            request.calls = 1 if len(request.prompt) > 1 else 0
            request.prefill_seconds = time.perf_counter() - request.started
            self._live.append(request)
            self.stats.requests += 1
        except Exception as error:  # noqa: BLE001 - a bad request ends alone, the batch goes on
            request.ticket._finish(error=error)

    def _new_forward(self, capacity: int) -> BatchedLM | OnnxBatchedLM:
        """The batched step this engine was asked for; where "auto" chose ONNX Runtime's and it cannot be built
        here (a session or operator this build lacks), torch's."""
        rows = min(4, self.max_rows)
        if self.forward == "onnxruntime":
            try:
                return OnnxBatchedLM(self.target, rows=rows, capacity=capacity)
            except Exception:  # noqa: BLE001 - any failure to build: the engine still decodes, on torch's step
                if not self._auto:
                    raise
                self.forward = "torch"
        return BatchedLM(self.target, rows=rows, capacity=capacity)

    def _step(self) -> None:
        """Stop the rows asked to, then one step of every live row (its new tokens), then each row's sample."""
        for request in [r for r in self._live if r.should_stop is not None]:
            try:
                stopped = request.should_stop()
            except Exception as error:  # noqa: BLE001
                self._leave(request, error=error)
                continue
            if stopped:
                self._leave(request, error=Cancelled("stopped"))
        if not self._live:
            return
        forward = self._forward
        inputs = [r.run.committed[forward.lengths[row]:] for row, r in enumerate(self._live)]
        started = time.perf_counter()
        try:
            logits = forward.step(inputs)
            # a row samples once it has fed everything it committed (the step may leave a row waiting)
            ready = [row for row, r in enumerate(self._live) if forward.lengths[row] == len(r.run.committed)]
            probs = self._distributions(logits, ready)
        except Exception as error:  # noqa: BLE001 - the forward failed: every row ends with its error
            for request in list(self._live):
                self._leave(request, error=error)
            return
        seconds = time.perf_counter() - started
        self.stats.steps += 1
        self.stats.rows_stepped += len(self._live)
        self.stats.most_rows = max(self.stats.most_rows, len(self._live))
        endings: list[tuple[_Request, GenerationResult | None, BaseException | None]] = []
        for row, request in enumerate(self._live):
            if row not in probs:  # it waited: nothing of its own went in
                request.unsampled_seconds += seconds
                continue
            request.calls += 1
            try:
                if self._sample(request, probs[row], seconds + request.unsampled_seconds, forward.lengths[row]):
                    endings.append((request, run_result(request.run, "ar", request.prefill_seconds,
                                                        time.perf_counter() - request.started,
                                                        target_calls=request.calls, draft_calls=0), None))
            except Exception as error:  # noqa: BLE001 - a callback failed: this request ends with its error
                endings.append((request, None, error))
        for request, result, error in endings:
            self._leave(request, result, error)

    def _distributions(self, logits: torch.Tensor, rows: list[int]) -> dict[int, torch.Tensor]:
        """The sampling distribution [1, V] of each of `rows` from its logits (a row of `logits` [B, V]), as its
        `Run` makes it; rows with the same sampling settings in one call (the per-row maths runs along each row
        alone: the same bits)."""
        groups: dict[object, list[int]] = {}
        for row in rows:
            groups.setdefault(self._live[row].sampling, []).append(row)
        probs: dict[int, torch.Tensor] = {}
        for members in groups.values():
            _, group = self._live[members[0]].run.distributions(
                logits[members] if len(members) > 1 else logits[members[0]:][:1])
            for index, row in enumerate(members):
                probs[row] = group[index:index + 1]
        return probs

    def _sample(self, request: _Request, probs: torch.Tensor, seconds: float, cached: int) -> bool:
        """The row's next token from `probs` [1, V], committed with its forced ones and reported (`seconds`: the
        steps since its last sample); whether the request is over."""
        run = request.run
        token = int(sample(probs, run.generator)[0])
        before = len(run.committed)
        done, forced_counts = run.commit([token])
        record = RoundRecord(drafted=[], accepted=0, next_token=token, next_kind="sampled", draft_seconds=0.0,
                             verify_seconds=seconds, end_seconds=time.perf_counter() - request.started,
                             target_cache_len=cached, forced_counts=forced_counts, committed=run.committed[before:])
        run.steps.append(record)
        request.unsampled_seconds = 0.0
        if request.on_commit is not None:
            request.on_commit(record)
        if request.on_round is not None:
            request.on_round(len(run.new_tokens), request.calls)
        return done

    def _leave(self, request: _Request, result: GenerationResult | None = None,
               error: BaseException | None = None) -> None:
        """End the request and free its row: the last live row moves into it, so the live rows stay 0..B-1."""
        row = self._live.index(request)
        last = len(self._live) - 1
        if row != last:
            self._forward.move(last, row)
            self._live[row] = self._live[last]
        self._live.pop()
        request.ticket._finish(result, error)
