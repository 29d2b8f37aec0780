"""The race in a real browser (headless Chromium driven by Playwright), on the embedded voice, in the page's default
mode.

The browser plays both lanes' voices with the Web Audio API from the pieces the server sends as they are decoded
(`race_js.PLAYER_JS`); the page's own audio log (`window.ssdAudioLog`) says what was heard and when. The first voice
must start while the decoders still run, both voices must be heard and never both at once; the race must fit a
1280x720 screen without scrolling (screenshot saved to $SSD_ARTIFACT_DIR when set); Enter in the text box races;
Stop ends a race stopped with both voices silent. No timing is asserted: only what happens before what.
"""

from __future__ import annotations

from support.paths import REPOSITORY

import os
import re
from pathlib import Path

import pytest

from support.browser_support import (BOTH_VOICES_PLAYED_JS, CHROMIUM, LAST_RACE_AUDIO_JS,  # noqa: F401
                                     assert_one_voice_at_a_time, browser, open_app)
from support.race_lanes import close_lane_workers

EMBEDDED_ASSETS = REPOSITORY / "assets" / "embedded"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install -y chromium)"),
    pytest.mark.skipif(not (EMBEDDED_ASSETS / "voice.json").is_file(), reason="the embedded voice is not present"),
]

#: Long enough that the decoders still run when the first voice starts, even on a fast machine.
SENTENCES = ("The sun came out. The children ran to the park. They played there until the evening. Then it began "
             "to rain. Everyone hurried home for dinner, and the dog slept by the fire.")

#: Every status line the page shows, in ms since the click (the same clock as the audio log).
STATUS_WATCH_JS = """() => {
  window.ssdStatuses = [];
  const status = document.querySelector('#ssd-status');
  const note = () => {
    const text = status.innerText;
    const last = window.ssdStatuses[window.ssdStatuses.length - 1];
    if (!last || last.text !== text) {
      window.ssdStatuses.push({text, at: performance.now() - (window.ssdClick || 0)});
    }
  };
  new MutationObserver(note).observe(status, {childList: true, subtree: true, characterData: true});
  note();
}"""

#: Whether the buttons that start a race can be clicked, and the status line.
CONTROLS_JS = """() => ({run: !document.querySelector('#ssd-run').disabled,
                         status: document.querySelector('#ssd-status').innerText,
                         toasts: document.querySelectorAll('[data-testid="toast-body"], .toast-body').length})"""

#: What must be on a 1280x720 screen once a race is done, in either mode (the headline: its verdict line).
ON_SCREEN = ("#ssd-text", "#ssd-run", "#ssd-ar-live", "#ssd-spec-live", "#ssd-status",
             "#ssd-headline :is(h1, h2)")
#: How long a page waits for anything by default (ms): a page of a busy machine (two cores, both decoding) loads slowly.
LOADED_MACHINE_MS = 120_000
HEADLINE = re.compile(r"Speculative (is|was) |Too short for speculation to show")


@pytest.fixture(scope="module")
def app_url():
    from ssd_demo.app.page import build_demo, launch_options

    demo = build_demo(default_preset="embedded")
    _, url, _ = demo.launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True, **launch_options())
    yield url
    demo.close()
    close_lane_workers("embedded")  # the lanes' worker processes, started by the first race


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> Path:
    folder = os.environ.get("SSD_ARTIFACT_DIR")
    path = Path(folder) if folder else tmp_path_factory.mktemp("browser")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _page(browser, app_url, presenter: bool = False):
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    page.set_default_timeout(LOADED_MACHINE_MS)
    open_app(page, app_url + ("?presenter=1" if presenter else ""))
    if presenter:
        page.wait_for_function("document.body.classList.contains('ssd-presenter')", timeout=30_000)
    return page


def _done(status: str) -> bool:
    return bool(re.search(r"Now: Done\b", status))


def _race_to_the_end(page, timeout_ms: int = 300_000) -> dict:
    """Wait for the race's "Done", both voices heard to their ends and the race's buttons back; the audio log."""
    page.wait_for_function(f"/Now: Done\\b/.test(({CONTROLS_JS})().status) && ({CONTROLS_JS})().run",
                           timeout=timeout_ms)
    page.wait_for_function(BOTH_VOICES_PLAYED_JS, timeout=180_000)
    return page.evaluate(LAST_RACE_AUDIO_JS)


def _fits(page, artifacts: Path, name: str) -> None:
    """Nothing to scroll, the race's parts on the 1280x720 screen; a screenshot of what it shows."""
    assert page.evaluate("window.scrollY") == 0, name
    for element in ON_SCREEN:
        box = page.locator(element).first.bounding_box()
        assert box is not None and box["y"] >= 0 and box["y"] + box["height"] <= 720, (name, element, box)
    screenshot = artifacts / f"race_{name}_1280x720.png"
    page.screenshot(path=str(screenshot))  # the viewport only: what the screen shows
    assert screenshot.stat().st_size > 10_000


def test_the_first_voice_starts_while_the_lanes_decode_and_the_voices_never_overlap(app_url, browser, artifacts):
    page = _page(browser, app_url)
    try:
        page.evaluate(STATUS_WATCH_JS)
        # Three times the paragraph: on a fast, idle machine a paragraph's race can end before the browser has
        # started its first voice, which says nothing about streaming.
        page.locator("#ssd-text textarea").fill(" ".join([SENTENCES] * 3))
        page.locator("#ssd-run").click()
        audio = _race_to_the_end(page)
        statuses = page.evaluate("window.ssdStatuses")
        log = audio["log"]
        spans = assert_one_voice_at_a_time(log)
        assert set(spans) == {"autoregressive", "speculative"}, log  # both voices heard
        assert set(audio["heard"]) == {"autoregressive", "speculative"}, audio["heard"]
        # The first voice started before the race was done decoding (on one clock: ms since the click).
        done_at = next(s["at"] for s in statuses if _done(s["text"]))
        first_start = min(start for pieces in spans.values() for start, _ in pieces)
        assert first_start < done_at, (first_start, statuses)
        # While it ran, the status line said how the lanes decode: at once, or one after the other and why.
        racing = [s["text"] for s in statuses if "Now:" in s["text"] and not _done(s["text"])]
        assert any("at once" in s or "one after the other" in s for s in racing), statuses
        for lane in ("#ssd-ar-live", "#ssd-spec-live"):  # when each voice was heard, after the lane's numbers
            assert re.search(r"heard \d+\.\d\d s after the click", page.locator(lane).inner_text())
        page.locator("#ssd-headline").get_by_text(HEADLINE).wait_for(timeout=60_000)
        headline = page.locator("#ssd-headline").inner_text()
        assert re.search(r"Language model [0-9.]+×", headline) and re.search(r"end to end [0-9.]+×", headline)
        assert page.locator("#ssd-race-chart svg polyline").count() == 2  # both lanes drawn
        _fits(page, artifacts, "default_paragraph")
        page.locator("#ssd-plot-time img").wait_for(state="visible", timeout=60_000)  # the charts, last
    finally:
        page.close()


def test_the_race_fits_a_1280x720_screen_in_both_modes(app_url, browser, artifacts):
    for presenter in (False, True):
        page = _page(browser, app_url, presenter)
        try:
            page.locator("#ssd-text textarea").fill("The weather is nice today, so we will walk to the river.")
            page.locator("#ssd-run").click()
            _race_to_the_end(page)
            page.locator("#ssd-headline").get_by_text(HEADLINE).wait_for(timeout=60_000)
            _fits(page, artifacts, "presenter" if presenter else "default")
            if presenter:
                assert not page.locator("#ssd-plot-time").is_visible()  # developer detail hidden
        finally:
            page.close()


def test_enter_in_the_text_box_races(app_url, browser):
    page = _page(browser, app_url)
    try:
        page.wait_for_function("window.ssdEnterRaces === true")  # the page's load installed the key's handler
        box = page.locator("#ssd-text textarea")
        box.fill("Hello there.")
        box.press("Shift+Enter")  # a new line, no race
        page.wait_for_timeout(1_000)
        assert page.evaluate(CONTROLS_JS)["run"] and "\n" in box.input_value()
        box.fill("Hello there. How are you today?")
        box.press("Enter")
        page.wait_for_function(f"!({CONTROLS_JS})().run", timeout=10_000)  # the race started
        assert "\n" not in box.input_value()  # Enter raced instead of starting a line
        audio = _race_to_the_end(page)
        assert_one_voice_at_a_time(audio["log"])
    finally:
        page.close()


def test_one_race_at_a_time_and_stop_silences_both_voices(app_url, browser):
    page = _page(browser, app_url)
    try:
        # A long text, so that the race is still decoding when the Stop click lands, however fast this machine.
        page.locator("#ssd-text textarea").fill(" ".join([SENTENCES] * 3))
        page.locator("#ssd-run").click()
        page.wait_for_function(f"!({CONTROLS_JS})().run", timeout=10_000)  # no second race while this one runs
        # Stop once a voice is heard.
        page.wait_for_function(f"({LAST_RACE_AUDIO_JS})().log.some((e) => e.kind === 'start')", timeout=300_000)
        page.locator("#ssd-stop").click()
        page.wait_for_function(f"({CONTROLS_JS})().status.startsWith('Stopped')", timeout=30_000)
        page.wait_for_function(f"({CONTROLS_JS})().run", timeout=10_000)
        page.wait_for_timeout(2_000)  # nothing comes after the final frame
        audio = page.evaluate(LAST_RACE_AUDIO_JS)
        log = audio["log"]
        stops = [entry["at"] for entry in log if entry["kind"] == "stop"]
        assert stops, log  # the page's Stop silenced the voices at once, in the browser
        assert all(entry["at"] <= stops[0] for entry in log if entry["kind"] == "start"), log  # none sounded after
        assert not audio["playing"], audio
        assert_one_voice_at_a_time(log)
        assert page.evaluate(CONTROLS_JS)["status"].startswith("Stopped")
        for lane in ("#ssd-ar-live", "#ssd-spec-live"):
            assert "running" not in page.locator(lane).inner_text()
    finally:
        page.close()


def test_an_empty_text_is_refused_in_the_status_line_with_silent_voices(app_url, browser):
    page = _page(browser, app_url)
    try:
        page.locator("#ssd-run").click()
        page.wait_for_function(f"({CONTROLS_JS})().status.startsWith('Not run')", timeout=30_000)
        page.wait_for_function(f"({CONTROLS_JS})().run", timeout=10_000)
        state = page.evaluate(CONTROLS_JS)
        assert "type some text" in state["status"] and "Error" not in state["status"], state  # one message
        assert state["toasts"] == 0, state
        assert page.evaluate(LAST_RACE_AUDIO_JS)["log"] == []  # the player was given nothing
        # The next race replaces the message.
        page.locator("#ssd-text textarea").fill("Hello there.")
        page.locator("#ssd-run").click()
        page.wait_for_function(f"!({CONTROLS_JS})().status.startsWith('Not run')", timeout=30_000)
        page.wait_for_function(f"({CONTROLS_JS})().run", timeout=300_000)  # ... and ends
    finally:
        page.close()
