"""OpenAI's speech endpoint over one loaded preset: `POST /v1/audio/speech`, so that existing clients (the
`openai` Python package, curl scripts) can point at this server.

The body is OpenAI's (`input`, `model`, `voice`, `response_format` "wav" or "pcm", `speed` 1.0,
`stream_format` "audio" or "sse"), plus this project's fields: `mode` ("speculative", "ar", or "auto":
speculative where it pays at the current load; left out: the server's default, `SpeechService.default_mode`),
`draft`, and any decoding setting by its library name (`beta`, `draft_len`, `temperature`, `seed`, ...; left out:
the preset's default). `model` is the loaded preset's key or one of OpenAI's model names (both mean the loaded
preset); `voice` is accepted and ignored (each preset speaks in its own voice).

The audio streams as it is decoded: "wav" is a WAV header whose sizes say "unknown length" (as OpenAI's
streamed WAV) followed by 16-bit PCM, "pcm" the bare samples (`X-Sample-Rate` says the rate), "sse" OpenAI's
`speech.audio.delta` events with base64 audio and a final `speech.audio.done` (with `usage`, and under
`ssd` the run's tokens, target calls, acceptance rate, LM and codec seconds). Errors are OpenAI's JSON
error object with status 400 (bad input), 429 (queue full) or 500 (a bug: logged with its traceback,
never sent), so a client never sees a traceback.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import struct
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException as StarletteHTTPException
from pydantic import BaseModel, ConfigDict

from ..errors import UserError
from .service import ServerBusy, SpeechJob, SpeechService, usage

log = logging.getLogger(__name__)

#: OpenAI's model names; a client written for OpenAI sends one of these and gets the loaded preset.
OPENAI_MODELS = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts", "gpt-4o-mini-tts-2025-12-15")
#: Fields of the body that are not decoding settings.
OWN_FIELDS = ("mode", "draft")
#: How often a response waiting for its next piece checks whether the client is still there (seconds).
HANG_UP_POLL_S = 0.1
_END = object()


class SpeechBody(BaseModel):
    """OpenAI's request body; extra fields (this project's settings) are kept and checked by the service."""

    model_config = ConfigDict(extra="allow")

    input: str
    model: str
    voice: str | dict = "default"
    instructions: str | None = None
    response_format: str = "wav"
    speed: float = 1.0
    stream_format: Literal["audio", "sse"] = "audio"


def wav_header(sample_rate: int) -> bytes:
    """A 16-bit mono WAV header for a stream of unknown length (RIFF and data sizes 0xFFFFFFFF)."""
    unknown = 0xFFFFFFFF
    return (b"RIFF" + struct.pack("<I", unknown) + b"WAVE" + b"fmt " +
            struct.pack("<IHHIIHH", 16, 1, 1, sample_rate, sample_rate * 2, 2, 16) + b"data" + struct.pack("<I", unknown))


def error_response(status: int, message: str, kind: str, param: str | None = None) -> JSONResponse:
    """OpenAI's error object."""
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": None}}, status_code=status)


def _refusal(body: SpeechBody, service: SpeechService) -> str | None:
    """What OpenAI's fields ask that this server cannot do, or None."""
    if body.model not in (service.preset, *OPENAI_MODELS):
        return f"model must be {service.preset!r} (the loaded preset) or one of OpenAI's {', '.join(OPENAI_MODELS)}; got {body.model!r}"
    if body.response_format not in ("wav", "pcm"):
        return f"response_format {body.response_format!r} is not served here; use 'wav' or 'pcm'"
    if body.speed != 1.0:
        return f"speed {body.speed:g} is not supported: the voice speaks at its own pace (use 1.0)"
    if body.instructions:
        return "instructions are not supported by these voices"
    return None


def _audio(job: SpeechJob, body: SpeechBody, sample_rate: int) -> Iterator[bytes]:
    if body.stream_format == "sse":
        for pcm in job.pcm():
            yield f"data: {json.dumps({'type': 'speech.audio.delta', 'audio': base64.b64encode(pcm).decode()})}\n\n".encode()
        if job.result is None:  # stopped (the client left, the server is shutting down): nothing to sum up
            return
        done = {"type": "speech.audio.done", "usage": {"output_tokens": job.result.generation.stats.new_tokens}}
        yield f"data: {json.dumps({**done, 'ssd': usage(job.result)})}\n\n".encode()
        return
    if body.response_format == "wav":
        yield wav_header(sample_rate)
    yield from job.pcm()


async def _while_connected(request: Request, job: SpeechJob, chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    """`chunks`, produced by a thread of the job's own while this watches the client: when it hangs up (or the
    server shuts down) the decoding is told to stop at once, within one round, instead of finishing the piece
    it is decoding. (Iterating in Starlette's thread pool, a hang-up is noticed only after that piece.)"""
    loop = asyncio.get_running_loop()
    pieces: asyncio.Queue = asyncio.Queue()

    def hand_over(item: object) -> None:
        try:
            loop.call_soon_threadsafe(pieces.put_nowait, item)
        except RuntimeError:  # the event loop has closed: the server is gone
            job.stop()

    def produce() -> None:
        try:
            for chunk in chunks:
                hand_over(chunk)
        except BaseException as error:  # noqa: BLE001 - re-raised in the response, where it is logged
            hand_over(error)
        else:
            hand_over(_END)

    threading.Thread(target=produce, name="speech-job", daemon=True).start()
    try:
        while True:
            try:
                item = await asyncio.wait_for(pieces.get(), HANG_UP_POLL_S)
            except asyncio.TimeoutError:
                if await request.is_disconnected():
                    return
                continue
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        job.stop()  # a no-op once the audio has ended


def build_speech_api(service: SpeechService) -> FastAPI:
    """The HTTP app over `service` (run it with uvicorn; `python -m ssd_demo serve` does)."""
    api = FastAPI(title="ssd_demo speech", docs_url=None, redoc_url=None)

    @api.exception_handler(RequestValidationError)
    async def invalid_body(request: Request, error: RequestValidationError) -> JSONResponse:
        first = error.errors()[0] if error.errors() else {}
        if first.get("type") == "json_invalid":  # its location is a character position, not a field
            return error_response(400, f"the body is not valid JSON ({first.get('ctx', {}).get('error', 'unreadable')})",
                                  "invalid_request_error")
        where = ".".join(str(part) for part in first.get("loc", ()) if part != "body")
        return error_response(400, f"{where or 'body'}: {first.get('msg', 'invalid request body')}",
                              "invalid_request_error", where or None)

    @api.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        """Unknown paths and methods in OpenAI's error object too."""
        message = {404: f"no such endpoint: {request.url.path} (this server has POST /v1/audio/speech)",
                   405: f"{request.method} is not allowed on {request.url.path}"}.get(error.status_code, str(error.detail))
        return error_response(error.status_code, message, "invalid_request_error")

    @api.exception_handler(Exception)
    async def internal(request: Request, error: Exception) -> JSONResponse:
        log.exception("internal error serving %s", request.url.path)
        return error_response(500, "internal error (a bug, logged on the server)", "server_error")

    @api.get("/health")
    def health() -> dict:
        costs = getattr(service.synthesizer, "speculation_costs", None) or {}
        return {"status": "ok", "preset": service.preset, "load": service.load,
                "engine": service.synthesizer.engine_description(), "fixed": service.fixed,
                "workers": service.workers, "default_mode": service.default_mode,
                "speculation_tokens_per_second": {str(batch): {"ar": ar, "speculative": speculative}
                                                  for batch, (ar, speculative) in costs.items()}}

    @api.get("/v1/models")
    def models() -> dict:
        return {"object": "list", "data": [{"id": service.preset, "object": "model", "owned_by": "ssd_demo"}]}

    @api.post("/v1/audio/speech", response_model=None)
    def speech(body: SpeechBody, request: Request) -> StreamingResponse | JSONResponse:
        refusal = _refusal(body, service)
        if refusal:
            return error_response(400, refusal, "invalid_request_error")
        extras = dict(body.model_extra or {})
        own = {name: extras.pop(name) for name in OWN_FIELDS if name in extras}
        try:
            order = service.order(body.input, own.get("mode", service.default_mode), own.get("draft"), extras)
            job = service.admit(order)
        except ServerBusy as error:
            return error_response(429, str(error), "rate_limit_error")
        except UserError as error:
            return error_response(400, str(error), "invalid_request_error", error.param)
        media = ("text/event-stream" if body.stream_format == "sse"
                 else "audio/wav" if body.response_format == "wav" else "audio/pcm")
        headers = {"X-Sample-Rate": str(service.sample_rate), "X-Seed": str(order.config.seed),
                   "X-Mode": order.mode, "Cache-Control": "no-store"}
        # The place in the queue goes back when the audio ends, or after the response if it never started.
        return StreamingResponse(_while_connected(request, job, _audio(job, body, service.sample_rate)),
                                 media_type=media, headers=headers, background=BackgroundTask(job.release))

    return api
