"""The race in a real browser (headless Chromium driven by Playwright), on the embedded voice.

Both streamed players must receive their audio while the decoders still run (the autoregressive one
playing it; the speculative one waits for its turn when the other voice is still speaking); presenter mode must show the
result on a 1280x720 screen without scrolling (screenshot saved to $SSD_ARTIFACT_DIR when set).
No timing is asserted: only what happens before what.
"""

from __future__ import annotations

from support.paths import REPOSITORY

import os
import re
import shutil
import time
from pathlib import Path

import pytest

from support.browser_support import CHROMIUM, browser  # noqa: F401 (a shared fixture)

EMBEDDED_ASSETS = REPOSITORY / "assets" / "embedded"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install -y chromium)"),
    pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="streamed audio needs FFmpeg (apt-get install -y ffmpeg)"),
    pytest.mark.skipif(not (EMBEDDED_ASSETS / "voice.json").is_file(), reason="the embedded voice is not present"),
]

#: Long enough that the speculative run is still decoding when its player has buffered its first piece,
#: even on a loaded machine.
SENTENCES = ("The sun came out. The children ran to the park. They played there until the evening. Then it began "
             "to rain. Everyone hurried home for dinner, and the dog slept by the fire.")

#: What each streamed player is doing, and what the page's one status line says.
STATE_JS = """() => {
  const audio = (id) => document.querySelector('#' + id + ' audio');
  const playing = (a) => !!a && !a.paused && a.currentTime > 0;
  const received = (a) => !!a && a.buffered.length > 0 && a.buffered.end(a.buffered.length - 1) > 0;
  const status = document.querySelector('#ssd-status');
  return {ar: playing(audio('ssd-ar-stream')), spec: received(audio('ssd-spec-stream')),
          status: status ? status.innerText : ''};
}"""


@pytest.fixture(scope="module")
def app_url():
    from ssd_demo.app.page import build_demo, launch_options

    demo = build_demo(default_preset="embedded")
    _, url, _ = demo.launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True, **launch_options())
    yield url
    demo.close()


def _artifact_dir(tmp_path_factory) -> Path:
    folder = os.environ.get("SSD_ARTIFACT_DIR")
    path = Path(folder) if folder else tmp_path_factory.mktemp("browser")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _still_decoding(status: str) -> bool:
    return "Autoregressive decoding" in status or "Speculative decoding" in status


def test_both_players_get_their_audio_before_the_runs_end(app_url, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.goto(app_url, wait_until="networkidle")
        # Three times the paragraph: on a fast, idle machine the speculative run of one paragraph can end
        # before a browser has fetched and started its first streamed piece, which says nothing about streaming.
        page.locator("#ssd-text textarea").fill(" ".join([SENTENCES] * 3))
        page.locator("#ssd-run").click()
        started_while_decoding = {"ar": False, "spec": False}
        seen_statuses = []
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            state = page.evaluate(STATE_JS)
            if not seen_statuses or seen_statuses[-1] != state["status"]:
                seen_statuses.append(state["status"])
            for lane in ("ar", "spec"):
                if state[lane] and _still_decoding(state["status"]):
                    started_while_decoding[lane] = True
            if "Done" in state["status"].split("Now:")[-1][:8]:
                break
            page.wait_for_timeout(100)
        assert started_while_decoding == {"ar": True, "spec": True}, seen_statuses
        page.locator("#ssd-headline").get_by_text(re.compile(r"Speculative (is|was) ")).wait_for(timeout=60_000)
        page.locator("#ssd-plot-time img").wait_for(state="visible", timeout=60_000)
    finally:
        page.close()


def test_presenter_mode_fits_a_projector(app_url, browser, tmp_path_factory):
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    try:
        page.goto(app_url + "?presenter=1", wait_until="networkidle")
        page.wait_for_function("document.body.classList.contains('ssd-presenter')", timeout=30_000)
        assert not page.locator("#ssd-plot-time").is_visible()  # developer detail hidden
        page.locator(".ssd-example").first.click()  # one click: an example sentence, then the race
        page.locator("#ssd-headline").get_by_text(re.compile(r"Speculative (is|was) ")).wait_for(timeout=300_000)
        page.wait_for_function("document.querySelector('#ssd-status').innerText.includes('Done')", timeout=120_000)
        for element in ("#ssd-headline :is(h1, h2)", "#ssd-ar-live", "#ssd-spec-live", "#ssd-status", "#ssd-ar-stream",
                        "#ssd-spec-stream", "#ssd-replay-both", "#ssd-replay-spec"):
            box = page.locator(element).first.bounding_box()
            assert box is not None and box["y"] >= 0 and box["y"] + box["height"] <= 720, (element, box)
        assert page.evaluate("window.scrollY") == 0
        screenshot = _artifact_dir(tmp_path_factory) / "presenter_1280x720.png"
        page.screenshot(path=str(screenshot))  # the viewport only: what the projector shows
        assert screenshot.stat().st_size > 10_000
    finally:
        page.close()


#: Whether the buttons that start a race can be clicked, and whether a live player is playing.
CONTROLS_JS = """() => {
  const audio = (id) => document.querySelector('#' + id + ' audio');
  const idle = (a) => !a || a.paused;
  return {run: !document.querySelector('#ssd-run').disabled,
          examples: [...document.querySelectorAll('.ssd-example')].map(b => !b.disabled),
          idle: idle(audio('ssd-ar-stream')) && idle(audio('ssd-spec-stream')),
          status: document.querySelector('#ssd-status').innerText,
          toasts: document.querySelectorAll('[data-testid="toast-body"], .toast-body').length};
}"""


def _presenter_page(browser, app_url):
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    page.goto(app_url + "?presenter=1", wait_until="networkidle")
    page.wait_for_function("document.body.classList.contains('ssd-presenter')", timeout=30_000)
    return page


def test_one_race_at_a_time_and_stop_ends_it_stopped(app_url, browser):
    page = _presenter_page(browser, app_url)
    try:
        # A long text, so that the race is still decoding when the Stop click lands, however fast this machine
        # decodes (an example sentence's whole race can end before a click on a loaded machine gets through).
        page.locator("#ssd-text textarea").fill(" ".join([SENTENCES] * 3))
        page.locator("#ssd-run").click()  # starts a race
        page.wait_for_function(f"!({CONTROLS_JS})().run", timeout=10_000)
        state = page.evaluate(CONTROLS_JS)
        assert not state["run"] and not any(state["examples"])  # no second race while this one runs
        page.wait_for_function(f"({CONTROLS_JS})().status.includes('Autoregressive decoding')", timeout=120_000)
        page.get_by_role("button", name="Stop").click()
        page.wait_for_function(f"({CONTROLS_JS})().status.startsWith('Stopped')", timeout=30_000)
        page.wait_for_function(f"({CONTROLS_JS})().run", timeout=10_000)
        page.wait_for_timeout(2_000)  # nothing comes after the final frame; the players are paused again for 1.5 s
        state = page.evaluate(CONTROLS_JS)
        assert state["status"].startswith("Stopped") and state["idle"] and all(state["examples"]), state
        for lane in ("#ssd-ar-live", "#ssd-spec-live"):
            assert "running" not in page.locator(lane).inner_text()
    finally:
        page.close()


def test_an_empty_text_is_refused_in_the_status_line_with_idle_players(app_url, browser):
    page = _presenter_page(browser, app_url)
    try:
        page.locator("#ssd-run").click()
        page.wait_for_function(f"({CONTROLS_JS})().status.startsWith('Not run')", timeout=30_000)
        page.wait_for_function(f"({CONTROLS_JS})().run", timeout=10_000)
        page.wait_for_timeout(2_000)  # the page pauses its players again for 1.5 s after a refusal
        state = page.evaluate(CONTROLS_JS)
        assert "type some text" in state["status"] and "Error" not in state["status"], state  # one message
        assert state["toasts"] == 0 and state["idle"], state
        # The next race replaces the message.
        page.locator("#ssd-text textarea").fill("Hello there.")
        page.locator("#ssd-run").click()
        page.wait_for_function(f"!({CONTROLS_JS})().status.startsWith('Not run')", timeout=30_000)
        page.wait_for_function(f"({CONTROLS_JS})().run", timeout=300_000)  # ... and ends
    finally:
        page.close()
