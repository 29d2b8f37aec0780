"""The race on stage: presenter mode at 1280x720 in a real browser (headless Chromium driven by Playwright) on the
embedded voice, as a speaker uses it. The app starts as `app.py` starts it (the machine, and the race's two lane
workers, get ready in the background); then the first race, a double click, Stop, an empty text, a 600-character
paragraph and races in a row, with never two voices at once (the page's own audio log, `window.ssdAudioLog`), both
voices heard in every finished race, and the page fitting the screen in every state (screenshots saved to
$SSD_ARTIFACT_DIR when set). No timing is asserted: only what happens, and in what order; the races' times to
first sound are written next to the screenshots.
"""

from __future__ import annotations

from support.paths import REPOSITORY

import json
import os
import re
import time
from pathlib import Path

import pytest

from support.browser_support import (BOTH_VOICES_PLAYED_JS, CHROMIUM, LAST_RACE_AUDIO_JS,  # noqa: F401
                                     assert_one_voice_at_a_time, browser, open_app, voices)
from support.race_lanes import close_lane_workers

EMBEDDED_ASSETS = REPOSITORY / "assets" / "embedded"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install -y chromium)"),
    pytest.mark.skipif(not (EMBEDDED_ASSETS / "voice.json").is_file(), reason="the embedded voice is not present"),
]

#: About 600 characters: both lanes still decode when the first voice starts.
PARAGRAPH = (
    "On the morning of the fair the whole village woke early. The bakers lit their ovens before dawn, and the smell "
    "of fresh bread drifted down every street. Children ran between the stalls, counting their coins and arguing "
    "about which game to play first. An old man sat by the fountain, tuning a violin that had belonged to his "
    "grandfather. By noon the square was full of music and laughter, and the sun shone on the bright flags above "
    "the crowd. When evening came, lanterns were hung from the trees, and people danced until the stars came out "
    "over the hills."
)

#: The replays are ordinary players: which of them are making sound (playing and moving on by more than a few
#: hundredths of a second between two looks 50 ms apart), every moment two sounded at once, when each first
#: sounded after `reset()`, and every status line shown.
MONITOR_JS = """() => {
  if (window.ssdStage) { return; }
  const ids = ['ssd-replay-ar', 'ssd-replay-spec'];
  const last = {};
  const stage = window.ssdStage = {overlaps: [], first: {}, mark: performance.now(), statuses: []};
  stage.reset = () => { stage.overlaps = []; stage.first = {}; stage.mark = performance.now(); stage.statuses = []; };
  setInterval(() => {
    const status = document.querySelector('#ssd-status').innerText;
    if (stage.statuses[stage.statuses.length - 1] !== status) { stage.statuses.push(status); }
    const sounding = [];
    for (const id of ids) {
      const audio = document.querySelector('#' + id + ' audio');
      const time = audio ? audio.currentTime : 0;
      if (audio && !audio.paused && last[id] !== undefined && time - last[id] > 0.02) { sounding.push(id); }
      last[id] = time;
    }
    for (const id of sounding) {
      if (!(id in stage.first)) { stage.first[id] = (performance.now() - stage.mark) / 1000; }
    }
    if (sounding.length > 1) { stage.overlaps.push(sounding); }
  }, 50);
}"""

STATE_JS = """() => ({status: document.querySelector('#ssd-status').innerText,
                     run: !document.querySelector('#ssd-run').disabled,
                     examples: [...document.querySelectorAll('.ssd-example')].map((b) => !b.disabled),
                     playing: !!window.ssdPlayer && window.ssdPlayer.playing(),
                     toasts: document.querySelectorAll('[data-testid="toast-body"], .toast-body').length,
                     replays: Object.assign({}, window.ssdStage.first), overlaps: window.ssdStage.overlaps.length})"""

#: How long a page waits for anything by default (ms): a page of a busy machine (two cores, both decoding) loads slowly.
LOADED_MACHINE_MS = 120_000
#: The race's parts that must be on the projector in every state (the headline's verdict too, once there is one).
ON_SCREEN = ("#ssd-text", "#ssd-run", "#ssd-status", "#ssd-ar-live", "#ssd-spec-live", "#ssd-race-chart")


@pytest.fixture(scope="module")
def app_url():
    """The app as `python app.py` starts it: the page, then the machine made ready in the background."""
    from ssd_demo.app.page import build_demo, launch_options
    from ssd_demo.comparison import get_ready_in_background

    demo = build_demo(default_preset="embedded")
    get_ready_in_background("embedded")
    _, url, _ = demo.launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True, **launch_options())
    yield url
    demo.close()
    close_lane_workers("embedded")  # the lanes' worker processes, started by the start-up job


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> Path:
    folder = os.environ.get("SSD_ARTIFACT_DIR")
    path = Path(folder) if folder else tmp_path_factory.mktemp("stage")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def page(browser, app_url):
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))  # a script that fails leaves the room silent
    page.set_default_timeout(LOADED_MACHINE_MS)
    open_app(page, app_url + "?presenter=1")
    page.wait_for_function("document.body.classList.contains('ssd-presenter')", timeout=30_000)
    page.evaluate(MONITOR_JS)
    yield page
    page.close()
    assert not errors, errors


def _state(page) -> dict:
    return page.evaluate(STATE_JS)


def _audio(page) -> dict:
    return page.evaluate(LAST_RACE_AUDIO_JS)


def _fits(page, artifacts: Path, name: str) -> None:
    """Every part of the race on the 1280x720 screen without scrolling; a screenshot of what it shows."""
    assert page.evaluate("window.scrollY") == 0, name
    headline = page.locator("#ssd-headline :is(h1, h2)")
    shown = ON_SCREEN + (("#ssd-headline :is(h1, h2)",) if headline.count() else ())
    for element in shown:
        box = page.locator(element).first.bounding_box()
        assert box is not None and box["y"] >= 0 and box["y"] + box["height"] <= 720, (name, element, box)
    page.screenshot(path=str(artifacts / f"stage_{name}.png"))


def _statuses_until(page, done, timeout: float = 300) -> list[str]:
    """Every status line seen (in order, without repeats) until `done(state)`."""
    seen, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = _state(page)
        if not seen or seen[-1] != state["status"]:
            seen.append(state["status"])
        if done(state):
            return seen
        page.wait_for_timeout(100)
    raise AssertionError(f"timed out; statuses seen: {seen}")


def _race_done(state: dict) -> bool:
    return bool(re.search(r"Now: Done\b", state["status"])) and state["run"]


def _both_voices_played(page, timeout_ms: int = 180_000) -> dict:
    """Once both voices of the last race were heard to their ends: its audio log, never two voices at once."""
    page.wait_for_function(BOTH_VOICES_PLAYED_JS, timeout=timeout_ms)
    audio = _audio(page)
    spans = assert_one_voice_at_a_time(audio["log"])
    assert set(spans) == {"autoregressive", "speculative"}, audio["log"]  # both voices started
    return audio


def _stop_once_heard(page, last_race: int | None) -> None:
    """Stop the running race once its first voice is heard: both voices silent at once, nothing after.
    `last_race`: the race before it, whose log is the last one until this race's first word reaches the page."""
    page.wait_for_function(f"(last) => {{ const audio = ({LAST_RACE_AUDIO_JS})(); return audio.race !== last && "
                           "audio.log.some((e) => e.kind === 'start'); }", arg=last_race, timeout=300_000)
    page.get_by_role("button", name="Stop").click()
    page.wait_for_function(f"({STATE_JS})().status.startsWith('Stopped')", timeout=30_000)
    page.wait_for_function(f"({STATE_JS})().run", timeout=10_000)
    log = _audio(page)["log"]
    stops = [entry["at"] for entry in log if entry["kind"] == "stop"]
    assert stops, log
    # Nothing sounded after Stop (a piece is logged about 20 ms before it sounds: one logged just before the click
    # was silenced before its first sample).
    assert all(entry["at"] <= stops[0] + 50 for entry in log if entry["kind"] == "start"), log
    assert_one_voice_at_a_time(log)
    assert not _state(page)["playing"]


def test_the_first_race_after_start_up_finds_the_machine_ready(page, artifacts):
    # The page says what the start-up is doing, or that it is done, once it has read the start-up job (until then
    # a neutral "Checking whether this machine is ready...", never a "Ready" it may have to take back).
    status = _state(page)["status"]
    assert status.startswith(("Checking whether", "Getting ready", "Ready")), status
    page.wait_for_function(f"!({STATE_JS})().status.startsWith('Checking whether')", timeout=60_000)
    status = _state(page)["status"]
    assert status.startswith(("Getting ready", "Ready")), status
    _fits(page, artifacts, "idle")
    _statuses_until(page, lambda state: state["status"].startswith("Ready"), timeout=300)  # the page says when
    sentence = page.locator(".ssd-example").first
    sentence.click()
    seen = _statuses_until(page, _race_done)
    # The first race does none of the start-up's work itself (its lanes' workers are up and warm).
    race = [s for s in seen if "Now:" in s]
    start_up_work = re.compile(r"Measuring this machine|Warming up|Starting the two lanes")
    assert race and not any(start_up_work.search(s) for s in race), seen
    first = _both_voices_played(page)
    _fits(page, artifacts, "done")
    # A warm race of the same sentence, for the record (written down, not asserted).
    sentence.click()
    _statuses_until(page, _race_done)
    warm = _both_voices_played(page)
    (artifacts / "first_race_after_start_up.json").write_text(json.dumps(
        {"first_race_heard_seconds": first["heard"], "warm_race_heard_seconds": warm["heard"], "statuses": seen},
        indent=1))
    # "Replay both": the autoregressive replay plays, then the speculative one, never both at once.
    page.wait_for_function(r"/As on a [0-9.]+× slower machine/.test("
                           "document.querySelector('#ssd-replay-note').innerText)")
    page.evaluate("window.ssdStage.reset()")
    page.locator("#ssd-replay-both").click()
    page.wait_for_function("'ssd-replay-spec' in window.ssdStage.first", timeout=120_000)
    state = _state(page)
    assert state["replays"]["ssd-replay-ar"] < state["replays"]["ssd-replay-spec"], state
    assert state["overlaps"] == 0 and not state["playing"], state  # and the live voices silent


def test_a_double_click_races_once(page, artifacts):
    page.locator("#ssd-text textarea").fill("Hello there. How are you today?")
    page.locator("#ssd-run").dblclick()
    page.wait_for_function(f"!({STATE_JS})().run", timeout=10_000)
    state = _state(page)
    assert not state["run"] and not any(state["examples"])
    page.wait_for_timeout(1_500)
    _fits(page, artifacts, "racing")
    _statuses_until(page, _race_done)
    _both_voices_played(page)
    page.wait_for_timeout(3_000)  # a second race would have started by now
    assert len(_audio(page)["races"]) == 1, _audio(page)  # one race's voices only
    assert _race_done(_state(page))


def test_stop_ends_the_race_stopped_with_both_voices_silent(page, artifacts):
    page.locator("#ssd-text textarea").fill(PARAGRAPH)
    last_race = _audio(page)["race"]
    page.locator("#ssd-run").click()
    _stop_once_heard(page, last_race)
    page.wait_for_timeout(2_000)  # nothing comes after the final frame
    state = _state(page)
    assert state["status"].startswith("Stopped") and not state["playing"] and all(state["examples"]), state
    assert len([entry for entry in _audio(page)["log"] if entry["kind"] == "stop"]) == 1  # nothing after it
    for lane in ("#ssd-ar-live", "#ssd-spec-live"):
        assert "running" not in page.locator(lane).inner_text()
    _fits(page, artifacts, "stopped")


def test_an_empty_text_is_one_message_with_silent_voices(page, artifacts):
    page.locator(".ssd-example").first.click()  # a race first, so that the voices have had audio
    _statuses_until(page, _race_done)
    races = _audio(page)["races"]
    page.locator("#ssd-text textarea").fill("")
    page.locator("#ssd-run").click()
    page.wait_for_function(f"({STATE_JS})().status.startsWith('Not run')", timeout=30_000)
    page.wait_for_function(f"({STATE_JS})().run", timeout=10_000)
    page.wait_for_timeout(2_000)
    state = _state(page)
    assert "type some text" in state["status"] and state["toasts"] == 0, state
    assert not state["playing"], state  # the click silenced the race before's voices; nothing new to play
    assert _audio(page)["races"] == races  # the player was given nothing
    assert page.locator("#ssd-headline").inner_text().strip() == ""  # no number from the race before
    _fits(page, artifacts, "error")


def test_a_long_paragraph_is_heard_one_voice_at_a_time(page, artifacts):
    page.locator("#ssd-text textarea").fill(PARAGRAPH)
    page.locator("#ssd-run").click()
    _statuses_until(page, _race_done)
    _both_voices_played(page)
    _fits(page, artifacts, "done_paragraph")


#: Races a speaker runs in a row in the order test (the issue's "twenty races as a speaker would do them").
RACES = int(os.environ.get("SSD_STAGE_RACES", "20"))
ONE_LINERS = ("Hello there. How are you today?", "The weather is nice today.", "Call me back after 6 p.m. tomorrow.",
              "My sister bought a red bicycle last week.", "Speculative decoding drafts and verifies at once.")


def _first_audio(page, lane: str) -> float | None:
    found = re.search(r"First audio after ([0-9.]+) s", page.locator(f"#{lane}").inner_text())
    return float(found.group(1)) if found else None


def test_races_in_a_row_play_both_voices_one_at_a_time(page, artifacts):
    """Each race: both voices heard, never two at once, none after the next race starts; one race is stopped.
    Click-to-sound seconds (the browser's clock), each lane's first audio and which lane was ready and heard first
    are written next to the screenshots."""
    records = []
    for n in range(RACES):
        stop = n == RACES // 2  # a paragraph stopped once a voice is heard; the races go on after it
        page.locator("#ssd-text textarea").fill(PARAGRAPH if stop else ONE_LINERS[n % len(ONE_LINERS)])
        last_race = _audio(page)["race"]
        page.locator("#ssd-run").click()
        if stop:
            _stop_once_heard(page, last_race)
            continue
        try:
            _statuses_until(page, _race_done)
            audio = _both_voices_played(page)
        finally:  # what the player did, kept for a failure
            (artifacts / f"race_{n}_audio.json").write_text(json.dumps(
                {"audio": _audio(page), "lanes": [page.locator(f"#{lane}").inner_text()
                                                  for lane in ("ssd-ar-live", "ssd-spec-live")]}, indent=1))
        spans = voices(audio["log"])
        ready = [entry["lane"] for entry in audio["log"] if entry["kind"] == "ready"]
        records.append({"race": n, "text": ONE_LINERS[n % len(ONE_LINERS)],
                        "first_ready": ready[0] if ready else None,
                        "first_heard": min(spans, key=lambda lane: spans[lane][0][0]),
                        "click_to_sound": audio["heard"],
                        "first_audio": {"autoregressive": _first_audio(page, "ssd-ar-live"),
                                        "speculative": _first_audio(page, "ssd-spec-live")}})
        for lane in ("#ssd-ar-live", "#ssd-spec-live"):  # when each voice was heard, beside its lane's numbers
            assert "heard" in page.locator(lane).inner_text(), (n, lane)
    (artifacts / "races_in_a_row.json").write_text(json.dumps({"races": records}, indent=1))


def test_a_toast_does_not_outlive_its_race(browser, app_url):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(LOADED_MACHINE_MS)
    try:
        open_app(page, app_url)
        page.evaluate(MONITOR_JS)
        draft = page.get_by_label("Draft model")
        draft.fill("no-such-draft")
        draft.press("Enter")
        page.locator("#ssd-text textarea").fill("Hello there.")
        page.locator("#ssd-run").click()
        page.wait_for_function(f"({STATE_JS})().toasts > 0", timeout=300_000)  # "... is not available; used ..."
        page.wait_for_function(f"({STATE_JS})().run", timeout=300_000)
        page.locator("#ssd-run").click()  # the next race: the pop-up from the one before is gone
        page.wait_for_function(f"({STATE_JS})().toasts === 0", timeout=10_000)
        _statuses_until(page, _race_done)
    finally:
        page.close()
