"""Speech as a service, without HTTP: one loaded preset, a bounded queue in front of it, and each request's
audio as 16-bit PCM pieces the moment they are decoded.

`SpeechService.admit` either takes a request into the queue or refuses it at once (`ServerBusy`) when
`max_waiting` requests already wait, so a flood is told to come back instead of piling up threads and
memory. Admitted requests decode `workers` at a time (one by default: on a CPU two decodes at once only
share the cores, and every request's first audio comes later), in the order they came (`FairTurns`). `SpeechJob.pcm()` yields the audio
piece by piece and gives its place back when it ends, fails or is closed (a client that hung up).
Settings are checked by the library's one validator before anything is admitted (`comparison.request`).
Mode "auto" speculates only where it pays at the current load: the synthesizer decides for the number of
requests decoding at that moment (`speculation_pays`; on vLLM from the engines' measured costs per batch size,
on our engine always where each request decodes alone, and only alone where it batches: `serve`'s default, whose
requests that name no mode are "auto").
An operator may fix settings for every request (`fixed`, `serve --fix draft_len=4`): a request that leaves one
out gets the fixed value, one that asks for another is refused with a 400 naming it (on vLLM a new K or draft
restarts the speculative engine, so a public server pins them rather than let clients churn it).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from ..comparison.request import REQUEST_SETTINGS, REQUEST_SPECS, Request, build_config, check_text, request_seed
from ..config import DecodingConfig
from ..engine.cancellation import Cancelled
from ..errors import InputError, UserError
from ..speech.synthesis import Script, SynthesisResult, Synthesizer

#: What a request may name besides its text: the decoding mode, the draft and every decoding setting.
MODES = ("speculative", "ar", "auto")


class ServerBusy(UserError):
    """The queue is full: the client should retry later."""

    title = "Server busy"


@dataclass(frozen=True)
class SpeechOrder:
    """One request, checked: what to say and how to decode it."""

    text: str
    mode: str
    draft: str
    config: DecodingConfig
    script: Script  # the text split and prompted, checked before the request takes a place


@dataclass
class SpeechJob:
    """An admitted request: `pcm()` waits for a worker, then yields its audio as it is decoded."""

    service: "SpeechService"
    order: SpeechOrder
    result: SynthesisResult | None = None  # once `pcm()` has yielded the last piece
    _released: bool = field(default=False, repr=False)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)

    def stop(self) -> None:
        """Stop the decoding within one round (from any thread: the client left while a piece was decoding)."""
        self._stop.set()

    def pcm(self) -> Iterator[bytes]:
        """16-bit little-endian mono PCM at the voice's sample rate, one piece at a time."""
        stop = self._stop
        try:
            with self.service._turns.turn():
                stream = self.service.synthesizer.stream(self.order.text, self.service.mode_now(self.order),
                                                         self.order.config,
                                                         self.order.draft, should_stop=stop.is_set,
                                                         script=self.order.script)
                for piece in stream:
                    yield to_pcm16(piece.audio)
                self.result = stream.result
        except Cancelled:
            return
        finally:
            stop.set()  # a closed generator (the client left) stops the decoding within one round
            self.release()

    def release(self) -> None:
        """Give the queue place back (once): at the end of `pcm()`, or by the caller when it never started."""
        if not self._released:
            self._released = True
            self.service._leave_queue()


def usage(result: SynthesisResult) -> dict:
    """What a finished request cost and how speculation went (for the client and the load test)."""
    stats = result.generation.stats
    return {"mode": result.mode, "output_tokens": stats.new_tokens, "target_calls": stats.target_calls,
            "acceptance_rate": round(stats.acceptance_rate, 4), "lm_seconds": round(result.lm_seconds, 4),
            "codec_seconds": round(result.codec_seconds, 4), "audio_seconds": round(result.duration_seconds, 4),
            "seed": stats.seed}


def to_pcm16(audio: np.ndarray) -> bytes:
    """Float samples in [-1, 1] as 16-bit little-endian PCM (clipped, rounded)."""
    return (np.clip(np.asarray(audio, dtype=np.float32), -1.0, 1.0) * 32767.0).round().astype("<i2").tobytes()


class FairTurns:
    """At most `workers` holders at once, admitted in arrival order (a plain semaphore wakes waiters in any order,
    which lets one request wait behind many that came later: a long tail of first-audio times)."""

    def __init__(self, workers: int) -> None:
        self._workers = self._free = workers
        self._waiting: deque[object] = deque()
        self._condition = threading.Condition()

    @property
    def holders(self) -> int:
        """Turns taken now."""
        with self._condition:
            return self._workers - self._free

    @contextmanager
    def turn(self) -> Iterator[None]:
        ticket = object()
        with self._condition:
            self._waiting.append(ticket)
            self._condition.wait_for(lambda: self._free > 0 and self._waiting[0] is ticket)
            self._waiting.popleft()
            self._free -= 1
            self._condition.notify_all()  # the next in line may have a free place too
        try:
            yield
        finally:
            with self._condition:
                self._free += 1
                self._condition.notify_all()


class SpeechService:
    """One loaded preset behind a bounded queue (see the module's docstring)."""

    def __init__(self, preset: str, synthesizer: Synthesizer, workers: int = 1, max_waiting: int = 8,
                 fixed: Mapping[str, object] | None = None, default_mode: str = "speculative") -> None:
        if workers < 1 or max_waiting < 0:
            raise InputError(f"workers must be at least 1 and the queue at least 0, got {workers} and {max_waiting}")
        if default_mode not in MODES:
            raise InputError(f"the default mode must be one of {', '.join(MODES)}, got {default_mode!r}")
        #: A request's mode when it names none ("auto" on a server that batches: speculative alone, else batched).
        self.default_mode = default_mode
        self.preset, self.synthesizer = preset, synthesizer
        self.fixed = self._checked_fixed(fixed or {})
        self.workers, self.max_waiting = workers, max_waiting
        self._turns = FairTurns(workers)
        self._lock = threading.Lock()
        self._queued = 0  # admitted and not finished: decoding or waiting for a worker

    def _checked_fixed(self, fixed: Mapping[str, object]) -> dict[str, object]:
        """The operator's fixed settings, each validated as a request's would be (InputError at start-up)."""
        checked: dict[str, object] = {}
        for name, value in fixed.items():
            if name == "draft":
                if value not in self.synthesizer.drafts:
                    raise InputError(f"cannot fix draft to {value!r}: this preset has {', '.join(self.synthesizer.drafts)}")
                checked[name] = value
            elif name in REQUEST_SETTINGS and name != "seed":
                checked[name] = REQUEST_SPECS[name].accept(value, False, self.synthesizer.config())
            else:
                raise InputError(f"cannot fix {name!r}: the settings that can be fixed are draft and "
                                 f"{', '.join(n for n in REQUEST_SETTINGS if n != 'seed')}")
        return checked

    def _with_fixed(self, draft: str | None, settings: dict[str, object]) -> str | None:
        """Apply the fixed settings to a request's `settings` (in place) and draft; a request that asks for another
        value is refused, naming the setting."""
        defaults = self.synthesizer.config() if self.fixed else None
        for name, value in self.fixed.items():
            given = draft if name == "draft" else settings.get(name)
            if given is None:
                continue
            if name != "draft":
                given = REQUEST_SPECS[name].accept(given, False, defaults)
            if given != value:
                raise InputError(f"{name} is fixed at {value} on this server; leave it out or send {value}", param=name)
        settings.update({name: value for name, value in self.fixed.items() if name != "draft"})
        return self.fixed.get("draft", draft)

    @property
    def sample_rate(self) -> int:
        return self.synthesizer.backend.sample_rate

    def order(self, text: object, mode: str = "speculative", draft: str | None = None,
              settings: Mapping[str, object] | None = None) -> SpeechOrder:
        """Check a request (text, mode, draft, decoding settings by their library names); a `UserError` names
        what is wrong. A setting left out takes the preset's default, as everywhere in the project."""
        settings = dict(settings or {})
        unknown = sorted(set(settings) - set(REQUEST_SETTINGS))
        if unknown:
            raise InputError(f"unknown setting(s) {', '.join(unknown)}; the settings are {', '.join(REQUEST_SETTINGS)}",
                             param=unknown[0])
        if mode not in MODES:
            raise InputError(f"mode must be one of {', '.join(MODES)}, got {mode!r}", param="mode")
        draft = self._with_fixed(draft, settings)
        text = check_text(self.synthesizer, text)  # type: ignore[arg-type]
        if draft is not None and draft not in self.synthesizer.drafts:
            raise InputError(f"unknown draft {draft!r}; this preset has {', '.join(self.synthesizer.drafts)}", param="draft")
        request = Request(text=text, preset=self.preset, draft=draft, **settings)
        config = build_config(self.synthesizer, request, request_seed(self.synthesizer, request))
        self.synthesizer.check_decoding("speculative" if mode == "auto" else mode, config)
        script = self.synthesizer.script(text)  # a text the voice cannot speak fails here, before it takes a place
        return SpeechOrder(text, mode, draft or self.synthesizer.draft_name, config, script)

    def admit(self, order: SpeechOrder) -> SpeechJob:
        """A place in the queue for `order`, or `ServerBusy` at once when every place is taken."""
        with self._lock:
            if self._queued >= self.workers + self.max_waiting:
                raise ServerBusy(f"the server is busy: {self.workers} decoding and {self.max_waiting} waiting; "
                                 "retry in a few seconds")
            self._queued += 1
        return SpeechJob(self, order)

    def mode_now(self, order: SpeechOrder) -> str:
        """The mode `order` decodes in, decided as it starts: "auto" is speculative where speculation pays for the
        requests decoding now (this one among them), else AR."""
        if order.mode != "auto":
            return order.mode
        return "speculative" if self.synthesizer.speculation_pays(self._turns.holders) else "ar"

    def _leave_queue(self) -> None:
        with self._lock:
            self._queued -= 1

    @property
    def load(self) -> int:
        """Requests admitted and not finished (decoding or waiting)."""
        with self._lock:
            return self._queued
