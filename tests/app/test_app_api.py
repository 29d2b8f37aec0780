"""The running app, called the way users script it: through gradio_client."""

from __future__ import annotations

from support.paths import REPOSITORY

import json
import threading
from pathlib import Path

import pytest
import soundfile
import torch
from gradio_client import Client
from gradio_client.exceptions import AppError

from ssd_demo.engine.generate import autoregressive_generate, speculative_generate
from ssd_demo.backends.registry import load_preset
from support.race_lanes import IN_TESTS_ONLY, lanes_one_after_the_other
from support.toy_backend import EOS_ID, TOKEN_SECONDS, TOY_KEY, ToyBackend, build_toy_synthesizer, register_toy_preset

pytestmark = pytest.mark.server

OUTPUTS = ("ar_audio", "spec_audio", "stats", "tokens", "tokens_vs_time", "breakdown", "accepted_length",
           "by_position", "details", "seed_used")


def _launch(default_preset: str):
    from ssd_demo.app.page import build_demo

    demo = build_demo(default_preset=default_preset)
    _, url, _ = demo.launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True)
    return demo, url


@pytest.fixture(scope="module")
def launched():
    register_toy_preset()
    # The toy voice and the presets standing in below exist in this process only: their races decode one lane
    # after the other (`support.race_lanes`).
    with lanes_one_after_the_other():
        demo, url = _launch(TOY_KEY)
        yield demo, url
        demo.close()


@pytest.fixture(scope="module")
def server(launched):
    return launched[1]


@pytest.fixture(scope="module")
def client(server):
    return Client(server, verbose=False)


def _named(result) -> dict:
    assert len(result) == len(OUTPUTS)
    return dict(zip(OUTPUTS, result))


def _expected_tokens(text: str, details: dict) -> tuple[list[int], list[int]]:
    """What the engine itself produces for this text and the settings the app reports."""
    synthesizer = load_preset(TOY_KEY)
    config = synthesizer.config(**{k: details["config"][k] for k in ("draft_len", "beta", "temperature", "top_k",
                                                                    "top_p", "max_new_tokens", "seed", "acceptance")})
    prompt = torch.tensor([synthesizer.backend.prompt_ids(text)])
    ar = autoregressive_generate(synthesizer.target, prompt, config)
    spec = speculative_generate(synthesizer.target, synthesizer.drafts[details["draft"]], prompt, config)
    return ar.tokens, spec.tokens


def test_text_alone_is_enough(client):
    out = _named(client.predict("Hello from the API.", api_name="/synthesize"))
    details = out["details"]
    for key, run in (("ar_audio", "autoregressive"), ("spec_audio", "speculative")):
        path = Path(out[key])
        assert path.suffix == ".wav" and run in path.name
        info = soundfile.info(str(path))
        assert info.subtype == "PCM_16"
        speech_tokens = [t for t in details[run]["tokens"] if t != EOS_ID]
        # Plausible: the toy voice speaks TOKEN_SECONDS per speech token.
        assert info.duration == pytest.approx(len(speech_tokens) * TOKEN_SECONDS)
        assert 0.1 < info.duration < 5
    assert out["seed_used"] == details["seed"] == 0
    assert all(out[name]["plot"].startswith("data:image/png") for name in
               ("tokens_vs_time", "breakdown", "accepted_length", "by_position"))
    assert "| Autoregressive | Speculative |" in out["stats"]


def test_statistics_match_the_engine(client):
    text = "Same text, same settings."
    out = _named(client.predict(text, api_name="/synthesize"))
    details = out["details"]
    ar_tokens, spec_tokens = _expected_tokens(text, details)
    assert details["autoregressive"]["tokens"] == ar_tokens
    assert details["speculative"]["tokens"] == spec_tokens
    stats = details["speculative"]["stats"]
    assert stats["new_tokens"] == len(spec_tokens)
    assert f"| Tokens sampled | {len(ar_tokens)} | {len(spec_tokens)} |" in out["stats"]  # toy voice: nothing inserted
    assert sum(1 for span in out["tokens"] if span["token"] == " | ") == stats["rounds"] - 1
    accepted = sum(1 for span in out["tokens"] if span["class_or_confidence"] == "accepted")
    assert accepted == stats["accepted_tokens"]


def test_every_setting_is_honoured(client):
    out = _named(client.predict(
        "Settings check.", TOY_KEY, "copy", 2, 0.0, "exact", 1, 0.9, 0.8, 10, 0.95, 11, False, 16,
        api_name="/synthesize",
    ))
    config = out["details"]["config"]
    assert (config["draft_len"], config["acceptance"], config["top_k"], config["seed"]) == (2, "exact", 10, 11)
    assert config["temperature"] == pytest.approx(0.8) and config["max_new_tokens"] == 16
    assert out["details"]["draft"] == "copy"
    assert out["details"]["speculative"]["stats"]["acceptance_rate"] == 1.0


def test_randomised_seed_is_returned(client):
    out = _named(client.predict("Random seed.", randomize_seed=True, api_name="/synthesize"))
    assert out["seed_used"] == out["details"]["seed"] == out["details"]["config"]["seed"]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"text": ""}, "type some text"),
        ({"text": "x" * 400}, "at most 120"),
        ({"text": "Fine text.", "draft_len": 2.5}, "draft_len must be an integer"),  # our validation
        ({"text": "Fine text.", "draft_len": 0}, "draft_len must be an integer from 1 to 16"),  # named, not Gradio's range text
        ({"text": "Fine text.", "acceptance": "magic"}, "magic"),
        ({"text": "Fine text.", "preset": "no-such-preset"}, "no-such-preset"),
        ({"text": "Fine text.", "text_normalizer": "official"}, "text normaliser is CosyVoice 2's"),
        ({"text": "Fine text.", "text_normalizer": "loud"}, "text_normalizer"),
    ],
)
def test_bad_input_gives_a_clear_error_and_the_server_keeps_serving(client, kwargs, message):
    with pytest.raises(AppError) as raised:
        client.predict(**kwargs, api_name="/synthesize")
    text = str(raised.value)
    assert message in text and "Traceback" not in text
    assert Path(client.predict("Still alive.", max_new_tokens=8, api_name="/synthesize")[0]).is_file()


def test_four_concurrent_clients_get_their_own_results(server):
    texts = ["First caller.", "Second caller!", "Third caller?", "Fourth caller, last."]
    results: dict[str, dict] = {}
    errors: list[BaseException] = []

    def call(text: str) -> None:
        try:
            results[text] = _named(Client(server, verbose=False).predict(text, api_name="/synthesize"))
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=call, args=(text,)) for text in texts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=240)
    assert not errors and set(results) == set(texts)
    for text, out in results.items():
        assert out["details"]["text"] == text
        ar_tokens, spec_tokens = _expected_tokens(text, out["details"])
        assert out["details"]["autoregressive"]["tokens"] == ar_tokens
        assert out["details"]["speculative"]["tokens"] == spec_tokens
    assert len({out["spec_audio"] for out in results.values()}) == 4
    assert len({tuple(out["details"]["speculative"]["tokens"]) for out in results.values()}) == 4


def test_preset_endpoint_returns_its_defaults(client):
    result = client.predict(TOY_KEY, api_name="/select_preset")
    info, draft = result[0], result[1]
    assert "Toy voice" in info and "MIT" in info
    assert draft["value"] == "small" and [choice[1] for choice in draft["choices"]] == ["small", "copy"]


def test_rule_options_endpoint(client):
    result = client.predict("topk", api_name="/rule_options")
    assert len(result) == 3


def test_queue_and_events_are_configured(launched):
    demo = launched[0]
    config = demo.get_config_file()
    dependencies = config["dependencies"]
    by_name = {d.get("api_name"): d for d in dependencies if d.get("api_name")}
    assert {"synthesize", "select_preset", "rule_options"} <= set(by_name)
    synthesize = by_name["synthesize"]
    # The Stop button cancels the synthesis event.
    assert any(synthesize["id"] in (d.get("cancels") or []) for d in dependencies)
    # Model work runs one job at a time, and the queue is bounded.
    assert demo._queue.max_size is not None
    limits = {fn.concurrency_id: fn.concurrency_limit for fn in demo.fns.values() if fn.api_name in ("synthesize", "select_preset")}
    assert limits == {"model": 1}


def test_app_starts_even_when_the_default_preset_cannot_load():
    from ssd_demo.backends.registry import Preset, register
    from ssd_demo.app.page import build_demo

    def broken(device):
        raise FileNotFoundError("no voice files here")

    register(Preset(key="missing", label="Missing voice", description="", licence="", drafts=("d",),
                    default_draft="d", loader=broken))
    demo = build_demo(default_preset="missing")
    _, url, _ = demo.launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True)
    try:
        with pytest.raises(AppError, match="Could not load the model preset 'Missing voice'.*no voice files"):
            Client(url, verbose=False).predict("Hello.", api_name="/synthesize")
    finally:
        demo.close()


# --- the embedded voice, the app's real default, once its assets exist --------------------------

EMBEDDED_ASSETS = REPOSITORY / "assets" / "embedded"


def test_default_app_speaks_with_the_embedded_voice():
    pytest.importorskip("ssd_demo.backends.embedded")
    if not EMBEDDED_ASSETS.is_dir() or not any(EMBEDDED_ASSETS.iterdir()):
        pytest.skip("the embedded voice's trained assets (assets/embedded/) are not present")
    demo, url = _launch("embedded")
    try:
        out = _named(Client(url, verbose=False).predict("The cat sat on the mat.", api_name="/synthesize"))
    finally:
        demo.close()
    assert out["details"]["preset"] == "embedded"
    for key in ("ar_audio", "spec_audio"):
        info = soundfile.info(out[key])
        assert info.subtype == "PCM_16" and 0.3 < info.duration < 15


PARAGRAPH_600 = (
    "Welcome to the harbour museum. On the ground floor, the exhibition tells the story of the port, from the "
    "first wooden fishing boats to the enormous container ships of today. Upstairs you will find paintings by "
    "local artists, including several portraits that have never been shown in public before. Guided tours start "
    "every hour, on the hour, and last about forty-five minutes. The cafe next to the entrance is open until five "
    "o'clock, and the gift shop sells postcards, maps and books. Please ask at the desk if you need a wheelchair "
    "or an audio guide. Photography is allowed everywhere except in the special exhibition room."
)


def test_a_600_character_paragraph_through_synthesize():
    pytest.importorskip("ssd_demo.backends.embedded")
    if not (EMBEDDED_ASSETS / "voice.json").exists():
        pytest.skip("the embedded voice's trained assets (assets/embedded/) are not present")
    assert len(PARAGRAPH_600) >= 600
    demo, url = _launch("embedded")
    try:
        out = _named(Client(url, verbose=False).predict(PARAGRAPH_600, seed=2, api_name="/synthesize"))
    finally:
        demo.close()
    details = out["details"]
    for key, run in (("ar_audio", "autoregressive"), ("spec_audio", "speculative")):
        chunks = details[run]["chunks"]
        assert len(chunks) >= 6 and all(c["finish_reason"] == "eos" for c in chunks)
        assert " ".join(c["text"] for c in chunks).startswith("Welcome to the harbour museum.")
        assert chunks[-1]["text"].endswith("special exhibition room.")
        assert soundfile.info(out[key]).duration > 30  # eSpeak says it in about 40 s
        assert details[run]["stats"]["new_tokens"] == len(details[run]["tokens"])
    # Stats and charts describe the whole text, not just its first chunk.
    assert f"| Text chunks (decoded one after another) | {len(details['autoregressive']['chunks'])} |" in out["stats"]
    assert all(out[name]["plot"].startswith("data:image/png") for name in
               ("tokens_vs_time", "breakdown", "accepted_length", "by_position"))


# The /synthesize parameters as they were before the settings table, in order: a caller's
# positional or named call keeps working; settings added since come after max_new_tokens.
PUBLISHED_PARAMETERS = ["text", "preset", "draft", "draft_len", "beta", "acceptance", "topk_tolerance", "pcg_theta",
                        "temperature", "top_k", "top_p", "seed", "randomize_seed", "max_new_tokens"]


def test_synthesize_parameters_come_from_the_settings_table(client):
    from ssd_demo.app.compare import COMPARE_SETTINGS

    names = [p["parameter_name"] for p in client.view_api(print_info=False, return_format="dict")
             ["named_endpoints"]["/synthesize"]["parameters"]]
    assert names[: len(PUBLISHED_PARAMETERS)] == PUBLISHED_PARAMETERS
    assert names == ["text", "preset", "draft", *[s.name for s in COMPARE_SETTINGS], "voice_audio", "voice_transcript"]
    assert "adaptive_draft_len" in names  # added by one entry in COMPARE_SETTINGS


def test_adaptive_draft_length_reaches_the_decoder(client):
    out = _named(client.predict("Adaptive rounds.", adaptive_draft_len=True, draft_len=6, seed=3,
                                api_name="/synthesize"))
    details = out["details"]
    assert details["config"]["adaptive_draft_len"] is True
    rounds = details["speculative"]["rounds"]
    # K is chosen per round from this machine's measured costs: 0 (a plain AR step) where drafting
    # does not pay, as for the toy pair, whose one-layer draft costs about as much as its target.
    assert rounds and all(0 <= r["drafted"] <= 6 and 0 <= r["accepted"] <= r["drafted"] for r in rounds)
    assert details["config"]["verify_costs"] == details["calibration"]["verify_costs"]
    assert sum(r["drafted"] for r in rounds) == details["speculative"]["stats"]["drafted_tokens"]
    assert details["autoregressive"]["rounds"] == []
    default = _named(client.predict("Adaptive rounds.", seed=3, api_name="/synthesize"))["details"]
    assert default["config"]["adaptive_draft_len"] is False


@pytest.mark.parametrize(("changes", "message"), [
    ({"seed": "abc"}, "seed must be an integer from 0 to 2,147,483,647, got 'abc'"),
    ({"seed": 1.5}, "seed must be an integer from 0 to 2,147,483,647, got 1.5"),  # (NaN cannot travel in JSON)
    ({"seed": 2**40}, "seed must be an integer from 0 to 2,147,483,647, got 1099511627776"),
    ({"beta": 5}, "beta must be between 0 and 1 (1 keeps every drafted token), got 5"),  # the library's words
    ({"draft_len": 100}, "draft_len must be an integer from 1 to 16, got 100"),
    ({"max_new_tokens": 10**9}, "max_new_tokens must be an integer from 1 to 2048"),
    ({"temperature": "hot"}, "temperature must be between 0 and 2, got 'hot'"),
    ({"top_k": -3}, "top_k must be an integer from 0 to 1,000,000 (0 = off), got -3"),
    ({"adaptive_draft_len": "maybe"}, "adaptive_draft_len must be true or false"),
])
def test_every_bad_setting_is_refused_by_name(client, changes, message):
    with pytest.raises(AppError, match=message.replace("(", r"\(").replace(")", r"\)")):
        client.predict("Bad settings.", **changes, api_name="/synthesize")


@pytest.mark.parametrize(("text", "changes", "message"), [
    (123, {}, "The text must be a string, got int"),
    ("Fine.", {"beta": True}, "beta must be between 0 and 1 \\(1 keeps every drafted token\\), got True"),
    ("Fine.", {"top_k": 10**30}, "top_k must be an integer from 0 to 1,000,000 \\(0 = off\\), got 1e\\+30"),
    ("Fine.", {"max_new_tokens": 1e308}, "max_new_tokens must be an integer from 1 to 2048, got 1e\\+308"),
])
def test_odd_values_from_scripts_are_refused_plainly(client, text, changes, message):
    with pytest.raises(AppError, match=message):
        client.predict(text, **changes, api_name="/synthesize")


# --- the race: both decoders streamed, through gradio_client's streaming -----------------------------

RACE_OUTPUTS = ("status", "ar_live", "spec_live", "live_audio", "chart", "headline", "replay_ar", "replay_spec",
                "replay_note", *OUTPUTS)


def test_race_streams_both_decoders_and_ends_with_every_result(client):
    job = client.submit("Race me.", seed=4, api_name="/race")
    final = dict(zip(RACE_OUTPUTS, job.result()))
    updates = [dict(zip(RACE_OUTPUTS, values)) for values in job.outputs()]
    assert len(updates) >= 3  # live frames before the end
    # Each decoder's first audio is reported while the race still runs (before the final frame), in either order:
    # the lanes decode one after the other here and are replayed on one clock, the faster one first.
    heard = {name: next(i for i, u in enumerate(updates) if "First audio after **–**" not in u[name])
             for name in ("ar_live", "spec_live")}
    assert max(heard.values()) < len(updates) - 1
    assert "Done" in final["status"] and f"one after the other ({IN_TESTS_ONLY})" in final["status"]
    # The browser's player is sent every piece of both lanes, each lane numbered from 0, and told both are done.
    payloads = [json.loads(update["live_audio"]) for update in updates  # an update that left it as it was: not str
                if isinstance(update["live_audio"], str) and update["live_audio"]]
    sent = {(piece["lane"], piece["index"]) for payload in payloads for piece in payload["pieces"]}
    last = json.loads(final["live_audio"])
    for lane in ("autoregressive", "speculative"):
        assert last["lanes"][lane]["done"] and last["lanes"][lane]["pieces"] > 0
        assert {(lane, index) for index in range(last["lanes"][lane]["pieces"])} <= sent
    assert last["rate"] == ToyBackend.sample_rate and len({payload["race"] for payload in payloads}) == 1
    assert final["chart"].startswith("<svg") and final["chart"].count("<polyline") == 2  # both lanes drawn
    details = final["details"]
    # The race decodes what /synthesize decodes for the same seed.
    same = _named(client.predict("Race me.", seed=4, api_name="/synthesize"))["details"]
    for run in ("autoregressive", "speculative"):
        assert details[run]["tokens"] == same[run]["tokens"]
        race = details["race"][run]
        assert race["tokens"] == len(details[run]["tokens"]) and race["pieces"]
        assert 0 <= race["time_to_first_audio"] <= race["time_to_last_audio"]
        assert race["target_calls"] == details[run]["stats"]["target_calls"]
    assert Path(final["replay_ar"]).name.startswith("slow_motion_x")
    assert final["replay_note"].startswith("**As on a ")
    assert soundfile.info(final["replay_ar"]).duration == soundfile.info(final["replay_spec"]).duration > 0
    assert Path(final["ar_audio"]).is_file() and final["stats"].startswith("| | Autoregressive")
    assert final["tokens_vs_time"]["plot"].startswith("data:image/png")
    assert "Speculative is" in final["headline"] or "Speculative was" in final["headline"]  # was: one short run


def test_race_refuses_bad_input_plainly(client):
    with pytest.raises(AppError, match=r"beta must be between 0 and 1 \(1 keeps every drafted token\), got 5") as raised:
        client.predict("Bad race.", beta=5, api_name="/race")
    assert "Traceback" not in str(raised.value)
    with pytest.raises(AppError, match="type some text"):
        client.predict("", api_name="/race")
    # The page's status line says why nothing ran, for refusals before the run and inside it (the text
    # is checked once the model is loaded), instead of keeping its last stage ("Loading the model").
    for text, message in (("", "type some text"), ("x" * 400, "at most 120")):
        job = client.submit(text, api_name="/race")
        with pytest.raises(AppError, match=message):
            job.result()
        status = dict(zip(RACE_OUTPUTS, job.outputs()[-1]))["status"]
        assert status.startswith("**Not run:**") and message in status


# --- settings left out are not given: the preset the caller names fills them -------------------------

def _preset_config(index: int) -> "DecodingConfig":
    """Defaults unlike the page's default preset (the toy voice) and unlike each other, in every setting."""
    from ssd_demo.config import DecodingConfig

    return DecodingConfig(draft_len=4 + index, beta=round(0.3 + 0.05 * index, 2), acceptance=("exact", "topk", "ssd")[index % 3],
                          topk_tolerance=2 + index, pcg_theta=round(0.5 + 0.05 * index, 2),
                          temperature=round(0.6 + 0.1 * index, 2), top_k=10 + index, top_p=round(0.95 - 0.05 * index, 2),
                          seed=100 + index, max_new_tokens=20 + 2 * index)


class _StandInBackend(ToyBackend):
    """The toy voice with a preset's own defaults."""

    def __init__(self, config) -> None:
        super().__init__(config.max_new_tokens)
        self.defaults = config

    def default_config(self):
        return self.defaults


@pytest.fixture()
def every_preset_standing_in(launched):
    """Every preset in the registry, loaded as the toy voice with defaults of its own (no weights, no
    downloads): {key: (preset, its defaults)}. The toy preset, the page's default, keeps its own."""
    from dataclasses import replace

    from ssd_demo.backends import registry
    from ssd_demo.speech.synthesis import Synthesizer

    shared = build_toy_synthesizer()  # one pair for all: warmed up and measured once
    originals = [p for p in registry.list_presets() if p.key != TOY_KEY]
    standing_in = {TOY_KEY: (registry.get_preset(TOY_KEY), load_preset(TOY_KEY).config())}
    for index, preset in enumerate(originals):
        config = _preset_config(index)

        def loader(device, preset=preset, config=config):
            drafts = {name: shared.drafts["small"] for name in preset.drafts}
            return Synthesizer(_StandInBackend(config), shared.target, drafts, default_draft=preset.default_draft)

        registry.register(replace(preset, loader=loader, preflight=None, needs_download=False))
        standing_in[preset.key] = (preset, Synthesizer(_StandInBackend(config), shared.target, {"d": shared.target}).config())
    registry.unload()
    try:
        yield standing_in
    finally:
        for preset in originals:
            registry.register(preset)
        registry.unload()


def _assert_preset_defaults(details: dict, preset, defaults) -> None:
    from ssd_demo.config import SETTINGS

    assert details["preset"] == preset.key and details["draft"] == preset.default_draft
    for name in SETTINGS:
        shown, wanted = details["config"][name], getattr(defaults, name)
        assert shown == (pytest.approx(wanted) if isinstance(wanted, float) else wanted), (preset.key, name)


def test_every_preset_named_with_the_settings_left_out_gets_its_own_defaults(client, every_preset_standing_in):
    """The page's default preset (the toy voice) is not where an API caller's defaults come from: each
    preset named alone decodes with that preset's own settings and draft."""
    assert len(every_preset_standing_in) >= 4  # the built-ins (embedded, Llasa, CosyVoice 2) and the toy voice
    for key, (preset, defaults) in every_preset_standing_in.items():
        out = _named(client.predict("Defaults, please.", preset=key, api_name="/synthesize"))
        _assert_preset_defaults(out["details"], preset, defaults)
        assert out["seed_used"] == defaults.seed


def test_the_race_named_with_another_preset_gets_its_defaults(client, every_preset_standing_in):
    preset, defaults = every_preset_standing_in["cosyvoice2-paper"]
    final = dict(zip(RACE_OUTPUTS, client.predict("Race on its defaults.", preset=preset.key, api_name="/race")))
    _assert_preset_defaults(final["details"], preset, defaults)
    # A setting that is given still wins over the preset's default.
    given = _named(client.predict("Given.", preset=preset.key, beta=0.0, draft_len=2, api_name="/synthesize"))
    assert (given["details"]["config"]["beta"], given["details"]["config"]["draft_len"]) == (0.0, 2)
    assert given["details"]["config"]["temperature"] == pytest.approx(defaults.temperature)


def test_the_synthesize_parameters_leave_settings_to_the_preset(client):
    parameters = client.view_api(print_info=False, return_format="dict")["named_endpoints"]["/synthesize"]["parameters"]
    defaults = {p["parameter_name"]: p["parameter_default"] for p in parameters}
    from ssd_demo.app.compare import COMPARE_SETTINGS

    assert defaults["preset"] == TOY_KEY  # the page's default preset ...
    assert all(defaults[s.name] is None for s in COMPARE_SETTINGS) and defaults["draft"] is None  # ... not its settings
