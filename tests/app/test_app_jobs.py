"""Hosting in public: a synthesis flood never turns a rater's votes away, and Stop frees the model.

Both against a launched app (toy voice + listening test) through gradio_client and the REST API."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from gradio_client import Client

from ssd_demo.app import jobs as ui_jobs
from ssd_demo.app.listening.service import close_listening_apps
from ssd_demo.listening.study_store import ListeningStore
from ssd_demo.backends.registry import Preset, register
from ssd_demo.speech.synthesis import Synthesizer
from ssd_demo.listening import study_sessions as sessions_module
from ssd_demo.listening.migrations import TAB_STUDY
from support.listening_tab import START, TRIALS, answer, make_data
from support.toy_backend import EOS_ID, TOY_KEY, ToyBackend, register_toy_preset, tiny_llama

SLOW_KEY = "toy-slow"
STEP_SECONDS = 0.002  # added to every target forward: a 2,048-token run takes several seconds


class EndlessToyBackend(ToyBackend):
    """The toy voice without its end token: every run goes to the length limit."""

    def allowed_token_ids(self) -> list[int]:
        return [t for t in super().allowed_token_ids() if t != EOS_ID]


def slow_toy(calls: list[int]) -> Synthesizer:
    target = tiny_llama(layers=2, seed=1234)

    def slow_forward(module, args):
        calls[0] += 1
        time.sleep(STEP_SECONDS)

    target.model.embed_tokens.register_forward_pre_hook(slow_forward)  # the static-cache forward calls it too
    return Synthesizer(EndlessToyBackend(max_new_tokens=64), target, {"small": tiny_llama(layers=1, seed=99)},
                       default_draft="small")


@pytest.fixture(scope="module")
def target_calls() -> list[int]:
    return [0]


@pytest.fixture(scope="module")
def app(tmp_path_factory, target_calls):
    from ssd_demo.app.page import build_demo

    data = make_data(tmp_path_factory.mktemp("jobs") / "data")
    patch = pytest.MonkeyPatch()
    for name, value in {"SSD_DEMO_DATA_DIR": str(data), "SSD_DEMO_LISTENING_TRIALS": "12"}.items():
        patch.setenv(name, value)
    for name in ("SSD_DEMO_RESULTS_TOKEN", "SSD_DEMO_LISTENING_DB", "SSD_DEMO_STIMULUS_SET"):
        patch.delenv(name, raising=False)
    patch.setattr(sessions_module, "LISTEN_FRACTION", 0.0)  # the test clips are 100 ms: a play counts at once
    register_toy_preset()
    register(Preset(key=SLOW_KEY, label="Slow endless toy (tests)", description="", licence="MIT",
                    drafts=("small",), default_draft="small", loader=lambda device: slow_toy(target_calls)))
    demo = build_demo(default_preset=TOY_KEY)
    demo.launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True)
    yield demo.local_url, data
    demo.close()
    close_listening_apps()
    patch.undo()


def _client(url: str) -> Client:
    return Client(url, download_files=False, verbose=False, ssl_verify=False)


@pytest.mark.server
def test_a_synthesis_flood_leaves_a_raters_votes_all_accepted(app):
    url, data = app
    # The flood: 200 REST submissions as fast as one client can post them (no waiting for results),
    # more than the old 64-slot queue held.
    flood_ids: list[str] = []
    parameters = _client(url).view_api(print_info=False, return_format="dict")["named_endpoints"]["/synthesize"]
    defaults = [p.get("parameter_default") for p in parameters["parameters"]]

    def flood() -> None:
        with httpx.Client(base_url=url, timeout=30) as http:
            for i in range(200):
                reply = http.post("/gradio_api/call/synthesize", json={"data": [f"Flood number {i}.", *defaults[1:]]})
                reply.raise_for_status()
                flood_ids.append(reply.json()["event_id"])

    flooder = threading.Thread(target=flood)
    flooder.start()
    rater = _client(url)
    out = rater.predict("rater-under-flood", api_name=START)
    for i in range(TRIALS):
        out = answer(rater, out, ("A", "B", "none")[i % 3], "4")
    flooder.join()
    assert out[1] == "" and "Thank you" in out[9]
    with ListeningStore(data / "listening.sqlite3", app_version="reader") as store:
        votes = [a for s in store.study_sessions(TAB_STUDY) if s.rater_id == "rater-under-flood"
                 for a in store.study_answers(s.session_id)]
    assert len(votes) == TRIALS and len({v.trial_id for v in votes}) == TRIALS

    # The flood drains: most of it is refused at once as one client's excess, a few run.
    outcomes = {"complete": 0, "busy": 0, "other": 0}
    with httpx.Client(base_url=url, timeout=120) as http:
        for event_id in flood_ids:
            stream = http.get(f"/gradio_api/call/synthesize/{event_id}").text
            if "event: complete" in stream:
                outcomes["complete"] += 1
            elif "waiting for the model" in stream:
                outcomes["busy"] += 1
            else:
                outcomes["other"] += 1
    assert outcomes["other"] == 0, outcomes
    assert outcomes["busy"] >= 150 and outcomes["complete"] >= 1, outcomes


@pytest.mark.server
def test_stop_exists_and_a_cancelled_run_frees_the_model_within_a_round(app, target_calls):
    url, _ = app
    api = _client(url)
    assert "/stop" in api.view_api(print_info=False, return_format="dict")["named_endpoints"]
    api.predict(api_name="/stop")  # nothing running: a no-op, not an error

    short = {"preset": SLOW_KEY, "max_new_tokens": 96, "seed": 1, "api_name": "/synthesize"}
    api.predict("Warm the slow voice.", **short)  # loads and warms up
    started = time.perf_counter()
    api.predict("Time me alone.", **short)
    alone = time.perf_counter() - started

    before = target_calls[0]
    long_run = api.submit("A very long run.", preset=SLOW_KEY, max_new_tokens=2048, seed=2, api_name="/synthesize")
    deadline = time.time() + 60
    while target_calls[0] < before + 300 and time.time() < deadline:  # decoding is under way
        time.sleep(0.02)
    assert time.time() < deadline
    long_run.cancel()
    time.sleep(0.2)
    started = time.perf_counter()
    api.predict("Time me after a cancel.", **short)
    after = time.perf_counter() - started
    # Without a cooperative stop, the long run (2 x 2,048 tokens at >= 2 ms each) would hold the model
    # for several more seconds; stopped within a round, the next request runs as if alone.
    assert after <= 1.5 * alone + 0.5, (after, alone)
    assert target_calls[0] - before < 2 * 2048  # the long run never finished (AR alone is 2,048 calls)

    # An API client stops its own run with /stop (from the same session).
    before = target_calls[0]
    long_run = api.submit("Another very long run.", preset=SLOW_KEY, max_new_tokens=2048, seed=4, api_name="/synthesize")
    deadline = time.time() + 60
    while target_calls[0] < before + 300 and time.time() < deadline:
        time.sleep(0.02)
    api.predict(api_name="/stop")
    time.sleep(0.2)
    started = time.perf_counter()
    api.predict("Time me after a stop.", **short)
    assert time.perf_counter() - started <= 1.5 * alone + 0.5
    assert target_calls[0] - before < 2 * 2048


def test_a_client_with_two_jobs_waiting_has_the_next_one_dropped():
    class Event:
        def __init__(self, session: str, host: str):
            self.session_hash = session
            self.request = type("R", (), {"headers": {}, "client": type("C", (), {"host": host})()})()

    request = Event("me", "10.0.0.1").request
    request.session_hash = "me"
    waiting = [Event("me", "10.0.0.1"), Event("other", "10.0.0.2")]
    original = ui_jobs._waiting_events
    try:
        ui_jobs._waiting_events = lambda concurrency_id: iter(waiting)
        ui_jobs.admit(request, "model")  # one waiting: fine
        waiting.append(Event("me", "10.0.0.1"))
        with pytest.raises(ui_jobs.BusyError, match="2 requests waiting"):
            ui_jobs.admit(request, "model")
        # A shared address (a conference room) gets more room than one session.
        waiting[:] = [Event(f"s{i}", "10.0.0.9") for i in range(ui_jobs.MAX_WAITING_PER_ADDRESS - 1)]
        request.client.host = "10.0.0.9"
        ui_jobs.admit(request, "model")
        waiting.append(Event("s-last", "10.0.0.9"))
        with pytest.raises(ui_jobs.BusyError):
            ui_jobs.admit(request, "model")
    finally:
        ui_jobs._waiting_events = original
    forwarded = type("R", (), {"headers": {"x-forwarded-for": "1.2.3.4, 5.6.7.8"},
                               "client": type("C", (), {"host": "10.0.0.3"})()})()
    assert ui_jobs.client_address(forwarded, trust_forwarded=True) == "5.6.7.8"  # the hop the proxy added
    assert ui_jobs.client_address(forwarded, trust_forwarded=False) == "10.0.0.3"  # no proxy: a claim, ignored
    assert ui_jobs.behind_proxy({"SPACE_ID": "user/space"}) and not ui_jobs.behind_proxy({})


def test_an_hour_long_voice_prompt_is_refused_from_its_header(tmp_path):
    import tracemalloc

    import numpy as np
    import soundfile

    from ssd_demo.app.compare import VoiceUpload, read_voice_upload

    hour = tmp_path / "hour.flac"  # silence compresses to almost nothing: small upload, 1 h of samples
    with soundfile.SoundFile(hour, "w", samplerate=8000, channels=1, format="FLAC") as out:
        block = np.zeros(8000 * 60, dtype=np.int16)
        for _ in range(60):
            out.write(block)
    assert hour.stat().st_size < 16 * 2**20
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=r"3600\.0 s long; upload a clip of at most 10 s"):
            read_voice_upload(VoiceUpload(str(hour), "words"), max_seconds=10)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 50 * 2**20  # decoding it would take 115 MB of float32

    text = tmp_path / "notes.wav"
    text.write_text("not audio at all")
    with pytest.raises(ValueError, match="not an audio file"):
        read_voice_upload(VoiceUpload(str(text), "words"))


@pytest.mark.server
def test_a_voice_prompt_for_a_voice_that_takes_none_is_refused_before_reading(app, tmp_path):
    from gradio_client import handle_file
    from gradio_client.exceptions import AppError

    url, _ = app
    clip = tmp_path / "clip.txt"
    clip.write_text("never read")  # not even audio: the preset check comes first
    with pytest.raises(AppError, match="takes no voice prompt"):
        _client(url).predict("Hello.", preset=TOY_KEY, voice_audio=handle_file(str(clip)),
                             voice_transcript="hello", api_name="/synthesize")


@pytest.mark.server
def test_custom_pairs_belong_to_the_session_that_added_them(app, monkeypatch):
    from gradio_client.exceptions import AppError

    url, _ = app
    alice, bob = _client(url), _client(url)
    dropdown = alice.predict("HKUSTAudio/Llasa-3B", "HKUSTAudio/Llasa-1B", "", api_name="/add_custom_pair")[0]
    key = dropdown["value"]
    assert key.startswith("custom-") and "Llasa" not in key  # an opaque key: it names no repository or path
    assert key in [choice[1] for choice in dropdown["choices"]]
    # Bob never sees it: not in his list, and its key is as unknown to him as a made-up one.
    bobs = bob.predict("HKUSTAudio/Llasa-1B", "HKUSTAudio/Llasa-1B", "", api_name="/add_custom_pair")[0]
    assert key not in [choice[1] for choice in bobs["choices"]]
    for preset in (key, "custom-000000000000"):
        with pytest.raises(AppError, match="unknown preset"):
            bob.predict("Hello.", preset=preset, api_name="/synthesize")
    # A session keeps a handful; the oldest goes.
    keys = [alice.predict(f"some-org/target-{n}", "HKUSTAudio/Llasa-1B", "", api_name="/add_custom_pair")[0]["value"]
            for n in range(4)]
    from ssd_demo.backends import registry as presets

    mine = [p.key for p in presets.list_presets(owner=alice.session_hash) if p.owner]
    assert mine == keys[-presets.MAX_CUSTOM_PER_OWNER:] and key not in mine
    with pytest.raises(AppError, match="characters long"):
        alice.predict("org/" + "x" * 300, "HKUSTAudio/Llasa-1B", "", api_name="/add_custom_pair")
    with pytest.raises(AppError, match="control characters"):
        alice.predict("HKUSTAudio/Llasa-3B\nrm -rf /", "HKUSTAudio/Llasa-1B", "", api_name="/add_custom_pair")
    again = alice.predict("some-org/target-3", "HKUSTAudio/Llasa-1B", "", api_name="/add_custom_pair")[0]["value"]
    assert again == keys[-1]  # the same pair twice is one preset
    # One visitor cannot push out another's pairs: when the server is full, new pairs are refused.
    monkeypatch.setattr(presets, "MAX_CUSTOM_PAIRS", len([p for p in presets.list_presets(owner=alice.session_hash)
                                                           if p.owner]) + 1)  # bob's one + alice's
    mallory = _client(url)
    with pytest.raises(AppError, match="already holds"):
        mallory.predict("HKUSTAudio/Llasa-3B", "HKUSTAudio/Llasa-1B", "", api_name="/add_custom_pair")
    assert keys[-1] in [p.key for p in presets.list_presets(owner=alice.session_hash)]


@pytest.mark.server
def test_with_local_folders_off_every_path_gets_the_same_refusal(app, monkeypatch, tmp_path):
    from gradio_client.exceptions import AppError

    url, _ = app
    monkeypatch.setenv("SSD_DEMO_LOCAL_MODELS", "0")
    api = _client(url)
    messages = set()
    for path in ("/etc", "/no/such/dir", str(tmp_path), "~/models", "../up", "./here"):
        with pytest.raises(AppError) as refused:
            api.predict(path, "HKUSTAudio/Llasa-1B", "", api_name="/add_custom_pair")
        messages.add(str(refused.value))
    assert len(messages) == 1 and "local folders are turned off" in messages.pop()


def test_a_pair_that_fails_its_checks_never_evicts_the_resident_one():
    from ssd_demo.backends import registry as presets

    register_toy_preset()
    resident = presets.load_preset(TOY_KEY)

    def failing_check() -> None:
        raise presets.ModelLoadError("no config.json")

    presets.register(Preset(key="custom-broken", label="broken", description="", licence="", drafts=("d",),
                            default_draft="d", loader=lambda device: pytest.fail("must not load"),
                            preflight=failing_check))
    try:
        with pytest.raises(presets.ModelLoadError, match="no config.json"):
            presets.load_preset("custom-broken")
        assert presets.load_preset(TOY_KEY) is resident  # still resident: no reload
    finally:
        presets._REGISTRY.pop("custom-broken", None)


@pytest.mark.server
def test_a_made_up_forwarded_address_does_not_open_more_slots(app):
    url, _ = app
    parameters = _client(url).view_api(print_info=False, return_format="dict")["named_endpoints"]["/synthesize"]
    defaults = [p.get("parameter_default") for p in parameters["parameters"]]
    ids = []
    with httpx.Client(base_url=url, timeout=30) as http:
        for i in range(40):  # a new claimed address (and a new session) for every request
            reply = http.post("/gradio_api/call/synthesize", json={"data": [f"Spoof {i}.", *defaults[1:]]},
                              headers={"x-forwarded-for": f"203.0.113.{i + 1}"})
            ids.append(reply.json()["event_id"])
        streams = [http.get(f"/gradio_api/call/synthesize/{event_id}", timeout=120).text for event_id in ids]
    busy = sum("waiting for the model" in stream for stream in streams)
    assert busy >= 20, busy  # one address (the peer's): at most a few of the 40 run
