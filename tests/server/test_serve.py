"""`python -m ssd_demo serve`: OpenAI's /v1/audio/speech over a preset, on a real loopback server, called by
the official `openai` client, by curl and by plain HTTP. The audio is the library's own for the same seed,
streamed piece by piece; bad input is OpenAI's JSON error, never a traceback; a full queue is a 429."""

from __future__ import annotations

import base64
import json
import shutil
import struct
import subprocess
import threading
import time

import httpx
import numpy as np
import pytest

from ssd_demo.server.openai_api import wav_header
from ssd_demo.server.service import ServerBusy, SpeechService, to_pcm16
from ssd_demo.speech.synthesis import Synthesizer, TextChunk
from support.speech_server import serve_in_thread
from support.toy_backend import TOY_KEY, ToyBackend, build_toy_synthesizer

pytestmark = pytest.mark.server

TEXT = "First sentence here. Second one, a bit longer. Third!"


class SentenceToy(ToyBackend):
    """The toy voice, one chunk per sentence (so that a text streams in several pieces)."""

    def split_text(self, text: str) -> list[TextChunk]:
        return [TextChunk(part.strip(), 120) for part in text.replace(". ", ".|").split("|") if part.strip()]


@pytest.fixture(scope="module")
def synth() -> Synthesizer:
    toy = build_toy_synthesizer(max_new_tokens=24)
    return Synthesizer(SentenceToy(24), toy.target, toy.drafts, default_draft="small")


@pytest.fixture(scope="module")
def service(synth) -> SpeechService:
    return SpeechService(TOY_KEY, synth, workers=1, max_waiting=2)


@pytest.fixture(scope="module")
def url(service):
    server, thread, address = serve_in_thread(service)
    yield address
    server.should_exit = True
    thread.join(timeout=10)


def _expected(synth: Synthesizer, mode: str = "speculative", **settings) -> bytes:
    return to_pcm16(synth.synthesize(TEXT, mode, synth.config(**settings)).audio)


def test_the_openai_client_streams_the_librarys_audio(synth, url):
    from openai import OpenAI

    client = OpenAI(base_url=url + "/v1", api_key="not-needed")
    with client.audio.speech.with_streaming_response.create(
            model="tts-1", voice="alloy", input=TEXT, response_format="pcm",
            extra_body={"seed": 5, "beta": 0.3, "draft_len": 2}) as response:
        assert response.headers["x-sample-rate"] == "16000" and response.headers["x-seed"] == "5"
        audio = b"".join(response.iter_bytes())
    assert audio == _expected(synth, seed=5, beta=0.3, draft_len=2)
    # The same through the preset's own name, as a whole WAV; and AR.
    wav = client.audio.speech.create(model=TOY_KEY, voice="default", input=TEXT, response_format="wav",
                                     extra_body={"seed": 5, "mode": "ar"}).content
    assert wav[:44] == wav_header(16_000) and wav[44:] == _expected(synth, "ar", seed=5)


def test_curl_gets_the_same_wav(synth, url):
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    body = json.dumps({"model": TOY_KEY, "voice": "default", "input": TEXT, "seed": 7})
    out = subprocess.run(["curl", "-sS", "-N", url + "/v1/audio/speech", "-H", "Content-Type: application/json",
                          "-d", body], capture_output=True, check=True, timeout=120).stdout
    riff, _, wave, channels, rate, bits = out[:4], out[4:8], out[8:12], *struct.unpack("<HI", out[22:28]), \
        struct.unpack("<H", out[34:36])[0]
    assert (riff, wave, channels, rate, bits) == (b"RIFF", b"WAVE", 1, 16_000, 16)
    assert out[44:] == _expected(synth, seed=7)


def test_server_sent_events_carry_the_same_audio(synth, url):
    body = {"model": TOY_KEY, "voice": "default", "input": TEXT, "seed": 3, "stream_format": "sse"}
    with httpx.stream("POST", url + "/v1/audio/speech", json=body, timeout=120) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[len("data: "):]) for line in response.iter_lines() if line.startswith("data: ")]
    assert [e["type"] for e in events][-1] == "speech.audio.done"
    expected = synth.synthesize(TEXT, "speculative", synth.config(seed=3))
    done = events[-1]["ssd"]
    assert done["output_tokens"] == expected.generation.stats.new_tokens == events[-1]["usage"]["output_tokens"]
    assert done["target_calls"] == expected.generation.stats.target_calls and done["mode"] == "speculative"
    assert done["acceptance_rate"] == round(expected.generation.stats.acceptance_rate, 4) and done["seed"] == 3
    deltas = [e for e in events if e["type"] == "speech.audio.delta"]
    assert len(deltas) > 1  # one per piece: three sentences and the pauses between them
    assert b"".join(base64.b64decode(e["audio"]) for e in deltas) == _expected(synth, seed=3)


@pytest.mark.parametrize("body, says", [
    ({"input": "   "}, "type some text"),
    ({"input": "Hi.", "beta": 5}, "beta must be"),
    ({"input": "Hi.", "betta": 0.2}, "unknown setting(s) betta"),
    ({"input": "Hi.", "mode": "fast"}, "mode must be one of speculative, ar"),
    ({"input": "Hi.", "draft": "huge"}, "unknown draft 'huge'"),
    ({"input": "Hi.", "temperature": -1}, "temperature must be"),
    ({"input": "Hi.", "response_format": "mp3"}, "use 'wav' or 'pcm'"),
    ({"input": "Hi.", "model": "other"}, "model must be"),
    ({"input": "Hi.", "speed": 2.0}, "speed 2 is not supported"),
    ({"input": "Ünïcode ✓"}, "printable ASCII"),
    ({"voice": "x"}, "input: Field required"),
    ({"input": ["a", "list"]}, "input:"),
])
def test_bad_input_is_a_json_error_that_says_what_to_change(url, body, says):
    response = httpx.post(url + "/v1/audio/speech", json={"model": TOY_KEY, "voice": "default", **body}, timeout=60)
    assert response.status_code == 400
    error = response.json()["error"]
    assert says in error["message"] and error["type"] == "invalid_request_error"
    assert "Traceback" not in response.text
    named = {"beta": "beta", "betta": "betta", "mode": "mode", "draft": "draft", "temperature": "temperature",
             "voice": "input", "input": "input"}  # the field an OpenAI client shows next to the message
    field = next((name for name in body if name != "input"), "input")
    if field in named and field != "input":
        assert error["param"] == named[field], error


def test_a_body_that_is_not_json_is_refused_plainly(url):
    response = httpx.post(url + "/v1/audio/speech", content=b"{not json", headers={"Content-Type": "application/json"})
    assert response.status_code == 400 and "Traceback" not in response.text
    assert response.json()["error"]["message"].startswith("the body is not valid JSON")


def test_unknown_paths_and_methods_answer_in_openais_error_object(url):
    missing = httpx.post(url + "/v1/audio/speeches", json={})
    assert missing.status_code == 404 and "this server has POST /v1/audio/speech" in missing.json()["error"]["message"]
    wrong = httpx.get(url + "/v1/audio/speech")
    assert wrong.status_code == 405 and wrong.json()["error"]["message"] == "GET is not allowed on /v1/audio/speech"


def test_a_full_queue_refuses_at_once_and_frees_its_places(synth):
    service = SpeechService(TOY_KEY, synth, workers=1, max_waiting=1)
    order = service.order(TEXT, settings={"seed": 1})
    held = [service.admit(order), service.admit(order)]  # one decoding, one waiting
    with pytest.raises(ServerBusy, match="the server is busy: 1 decoding and 1 waiting"):
        service.admit(order)
    server, thread, address = serve_in_thread(service)
    try:
        response = httpx.post(address + "/v1/audio/speech", json={"model": TOY_KEY, "voice": "v", "input": "Hi."})
        assert response.status_code == 429 and response.json()["error"]["type"] == "rate_limit_error"
        for job in held:
            job.release()
        assert service.load == 0
        assert httpx.post(address + "/v1/audio/speech", json={"model": TOY_KEY, "voice": "v", "input": "Hi."},
                          timeout=60).status_code == 200
        assert service.load == 0
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_pieces_leave_as_they_are_decoded_and_a_client_that_hangs_up_frees_its_place(synth):
    service = SpeechService(TOY_KEY, synth)
    job = service.admit(service.order(TEXT, settings={"seed": 2}))
    stream = job.pcm()
    first = next(stream)  # the first sentence's audio, before the rest is decoded
    assert 0 < len(first) < len(_expected(synth, seed=2)) and service.load == 1
    stream.close()  # the client went away: decoding stops, the place is free
    assert service.load == 0
    job.release()  # idempotent
    assert service.load == 0
    pieces = list(service.admit(service.order(TEXT, settings={"seed": 2})).pcm())
    assert len(pieces) == 5 and b"".join(pieces) == _expected(synth, seed=2)  # 3 sentences, 2 pauses
    assert np.frombuffer(pieces[1], "<i2").any() == False  # noqa: E712 - a pause is silence


def test_the_load_test_reports_every_system_and_level(synth):
    from ssd_demo.measure.serve_load import Answer, check_loopback, load_table, run_load, summarise
    from ssd_demo.errors import InputError

    service = SpeechService(TOY_KEY, synth, workers=1, max_waiting=4)
    server, thread, address = serve_in_thread(service)
    systems = {"AR": {"mode": "ar", "seed": 1}, "SSD": {"beta": 0.3, "seed": 1}}
    try:
        rows = run_load(address, systems, ["Hello there.", "A second text."], [1, 3], requests=3,
                        sample_rate=16_000, model=TOY_KEY, max_seconds=300)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
    assert [(r.system, r.concurrency) for r in rows] == [("AR", 1), ("SSD", 1), ("AR", 3), ("SSD", 3)]
    for row in rows:
        assert row.requests == 3 and row.refused == 0
        assert 0 < row.first_audio_p50 <= row.first_audio_p95 <= row.first_audio_p99
        assert row.tokens_per_second > 0 and row.real_time_factor > 0
        assert (row.acceptance is None) == (row.system == "AR")
    assert len(load_table(rows)) == 2 + len(rows)
    # a level the time ran out before: said so, not a row of NaNs
    unsent = summarise("SSD", 32, [], wall=0.0, sample_rate=16_000)
    assert load_table([unsent])[-1] == ("| SSD | 32 | 0 | - | not run: the bench's time (--max-minutes) ran out | - | "
                                        "- | - | - |")
    refused = summarise("SSD", 32, [Answer(429, None, 0.01, 0, None)] * 3, wall=0.5, sample_rate=16_000)
    assert load_table([refused])[-1] == "| SSD | 32 | 3 | 3 | none served | - | - | - | - |"
    with pytest.raises(InputError, match="only calls a server on this machine"):
        check_loopback("http://example.org:8000")


def test_turns_are_given_in_arrival_order():
    from ssd_demo.server.service import FairTurns

    turns, order, started = FairTurns(1), [], []
    gate = threading.Event()

    def worker(n: int) -> None:
        started.append(n)
        with turns.turn():
            order.append(n)
            if n == 0:
                gate.wait(10)  # the first holds its turn while the others line up

    threads = [threading.Thread(target=worker, args=(0,))]
    threads[0].start()
    while not order:
        time.sleep(0.01)
    for n in range(1, 8):  # each starts waiting only after the one before is in line
        thread = threading.Thread(target=worker, args=(n,))
        thread.start()
        threads.append(thread)
        while len(turns._waiting) < n:
            time.sleep(0.01)
    gate.set()
    for thread in threads:
        thread.join(10)
    assert order == list(range(8))


def test_mode_auto_speculates_only_where_the_voice_says_it_pays_at_the_current_load(synth):
    class Batching(Synthesizer):
        """Stands in for an engine that batches: speculation pays for fewer than 2 requests at once."""

        def speculation_pays(self, decoding: int) -> bool:
            return decoding < 2

    service = SpeechService(TOY_KEY, Batching(synth.backend, synth.target, synth.drafts, "small"), workers=2)
    order = service.order(TEXT, mode="auto", settings={"seed": 3})
    alone = service.admit(order)
    assert b"".join(alone.pcm()) == _expected(synth, seed=3) and alone.result.mode == "speculative"
    first, second = service.admit(order), service.admit(order)
    first_stream = first.pcm()
    next(first_stream)  # the first decodes (alone: speculative) ...
    assert b"".join(second.pcm()) and second.result.mode == "ar"  # ... so the second one decodes beside it: AR
    list(first_stream)
    assert first.result.mode == "speculative" and service.load == 0
    # our own engine decodes each request alone: auto is speculative at any load
    assert SpeechService(TOY_KEY, synth).mode_now(order) == "speculative"
    with pytest.raises(Exception, match="mode must be one of speculative, ar, auto"):
        service.order(TEXT, mode="fastest")


def test_a_client_that_hangs_up_mid_piece_stops_its_decoding_at_once(synth):
    from ssd_demo.engine.cancellation import Cancelled

    from ssd_demo.speech.chunk_generator import OUR_ENGINE

    class SlowPieces:
        """A chunk generator whose every chunk takes 20 s unless told to stop (an engine that decodes a whole chunk
        per call, as vLLM's)."""

        commits_rounds = False
        stopped_after: list[float] = []

        def describe(self, synthesizer):
            return "a slow engine"

        def check(self, mode, config):
            return None

        def generate_chunk(self, synthesizer, prompt, mode, config, draft_name, *, should_stop=None, **rest):
            started = time.monotonic()
            while time.monotonic() - started < 20:
                if should_stop is not None and should_stop():
                    SlowPieces.stopped_after.append(time.monotonic() - started)
                    raise Cancelled()
                time.sleep(0.02)
            return OUR_ENGINE.generate_chunk(synthesizer, prompt, mode, config, draft_name, should_stop=should_stop,
                                             **rest)

    service = SpeechService(TOY_KEY, Synthesizer(synth.backend, synth.target, synth.drafts, "small",
                                                 chunk_generator=SlowPieces()))
    server, thread, address = serve_in_thread(service)
    try:
        with httpx.stream("POST", address + "/v1/audio/speech", timeout=30,
                          json={"model": TOY_KEY, "voice": "v", "input": TEXT, "response_format": "pcm"}) as response:
            assert response.status_code == 200  # the headers came; the first piece is still decoding
            time.sleep(0.5)
        deadline = time.monotonic() + 10
        while service.load and time.monotonic() < deadline:
            time.sleep(0.05)
        assert service.load == 0, "the decoding went on after the client left"
        assert SlowPieces.stopped_after and SlowPieces.stopped_after[0] < 10
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_settings_the_engine_cannot_decode_are_refused_before_the_audio_starts(synth, url):
    class Narrow(Synthesizer):
        def check_decoding(self, mode, config):
            from ssd_demo.errors import InputError

            if mode != "ar" and config.acceptance == "pcg":
                raise InputError("this engine verifies with SSD's rule only", param="acceptance")

    service = SpeechService(TOY_KEY, Narrow(synth.backend, synth.target, synth.drafts, "small"))
    server, thread, address = serve_in_thread(service)
    try:
        body = {"model": TOY_KEY, "voice": "v", "input": "Hi.", "acceptance": "pcg"}
        refused = httpx.post(address + "/v1/audio/speech", json=body)
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "acceptance"
        assert httpx.post(address + "/v1/audio/speech", json={**body, "mode": "ar"}, timeout=60).status_code == 200
        assert httpx.post(address + "/v1/audio/speech", json={**body, "mode": "auto"}).status_code == 400
        assert service.load == 0
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_health_says_what_runs_the_lm_for_speed_reports(url):
    health = httpx.get(url + "/health").json()
    assert health["status"] == "ok" and health["load"] == 0
    assert health["engine"].startswith("our engine, ") and "matmuls" in health["engine"]  # the kernels chosen here


def test_settings_an_operator_fixes_apply_to_every_request_and_another_value_is_a_400(synth):
    """`serve --fix draft_len=2 --fix draft=copy`: a request that leaves them out gets them, one that asks for the
    same value is served, another value is refused naming the setting (K and the draft cannot churn an engine)."""
    from ssd_demo.errors import InputError, UserError

    service = SpeechService(TOY_KEY, synth, fixed={"draft_len": "2", "draft": "copy", "beta": 0.25})
    assert service.fixed == {"draft_len": 2, "draft": "copy", "beta": 0.25}
    order = service.order(TEXT)
    assert order.config.draft_len == 2 and order.draft == "copy" and order.config.beta == 0.25
    assert service.order(TEXT, draft="copy", settings={"draft_len": 2.0, "temperature": 0.7}).config.temperature == 0.7
    for draft, settings, param in ((None, {"draft_len": 3}, "draft_len"), ("small", {}, "draft"),
                                   (None, {"beta": "0.3"}, "beta")):
        with pytest.raises(InputError, match=f"{param} is fixed at") as refused:
            service.order(TEXT, draft=draft, settings=settings)
        assert refused.value.param == param
    server, thread, address = serve_in_thread(service)
    try:
        body = {"model": TOY_KEY, "voice": "v", "input": "Hi.", "draft_len": 4}
        refused = httpx.post(address + "/v1/audio/speech", json=body)
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "draft_len"
        assert httpx.get(address + "/health").json()["fixed"] == {"draft_len": 2, "draft": "copy", "beta": 0.25}
    finally:
        server.should_exit = True
        thread.join(timeout=10)
    for fixed, says in (({"draft": "nope"}, "cannot fix draft to 'nope'"), ({"seed": 1}, "cannot fix 'seed'"),
                        ({"frobnicate": 1}, "cannot fix 'frobnicate'"), ({"draft_len": 99}, "draft_len must be")):
        with pytest.raises(UserError, match=says):
            SpeechService(TOY_KEY, synth, fixed=fixed)


def test_serve_refuses_a_malformed_fix_before_loading_any_model(capsys, monkeypatch):
    from ssd_demo.__main__ import main
    from ssd_demo.cli import serve

    monkeypatch.setattr(serve, "_voice", lambda args: pytest.fail("models loaded before --fix was checked"))
    for flag, says in (("draft_len", "--fix takes SETTING=VALUE"), ("=4", "--fix takes SETTING=VALUE"),
                       ("adaptive_draft_len=maybe", "--fix adaptive_draft_len takes true or false")):
        assert main(["serve", "--fix", flag]) == 2
        err = capsys.readouterr().err
        assert says in err and "Traceback" not in err


def test_on_a_batching_engine_the_start_up_measurement_uses_the_fixed_k_and_draft(synth, capsys):
    """Mode auto decides from what the server will actually run: the operator's K and draft, not the preset's."""
    from ssd_demo.cli.serve import speculation_costs

    asked = {}

    class Batching(Synthesizer):
        measures_speculation = True

        def measure_speculation(self, config=None, draft=None):
            asked.update(config=config, draft=draft)
            return {1: (10.0, 12.0)}

    batching = Batching(synth.backend, synth.target, synth.drafts, "small")
    service = SpeechService(TOY_KEY, batching, fixed={"draft_len": 2, "draft": "copy"})
    speculation_costs(batching, service.fixed)
    assert asked["config"].draft_len == 2 and asked["draft"] == "copy"
    assert "batch  1: AR 10 tokens/s, speculative 12 tokens/s -> speculative" in capsys.readouterr().out
