""""Just speak it" in a real browser (headless Chromium driven by Playwright), on the embedded voice: four pages,
as four phones in a room, click at once; each hears its own text through the page's player (`race_js.PLAYER_JS`),
piece by piece, and its status line says it was spoken with other voices. What each page heard when (first sound
after the click, gaps between pieces) goes to $SSD_ARTIFACT_DIR/speak_room.json when set. No timing is asserted.
"""

from __future__ import annotations

from support.paths import REPOSITORY

import json
import os
import re
from pathlib import Path

import pytest

from support.browser_support import CHROMIUM, LAST_RACE_AUDIO_JS, browser, open_app, voices  # noqa: F401

EMBEDDED_ASSETS = REPOSITORY / "assets" / "embedded"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install -y chromium)"),
    pytest.mark.skipif(not (EMBEDDED_ASSETS / "voice.json").is_file(), reason="the embedded voice is not present"),
]

TEXTS = ("Hi there! Can you hear me from the back of the room?", "Where is the small compass that I left here?",
         "The score was three to eight at half time.", "See you soon, and thanks for listening.")
STATUS_JS = "() => document.querySelector('#ssd-status').innerText"


@pytest.fixture(scope="module")
def app_url():
    from ssd_demo.app.page import build_demo, launch_options
    from ssd_demo.comparison.speaking import shared_voice

    demo = build_demo(default_preset="embedded")
    shared_voice("embedded").get_ready()  # as the app's start-up job does (`comparison.startup`)
    _, url, _ = demo.launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True, **launch_options())
    yield url
    demo.close()


def test_phones_that_speak_at_once_each_hear_their_own_text(app_url, browser):
    pages = []
    try:
        for text in TEXTS:
            page = browser.new_page(viewport={"width": 390, "height": 844})  # a phone's screen
            page.set_default_timeout(120_000)
            open_app(page, app_url, ready="#ssd-speak")
            page.locator("#ssd-text textarea").fill(text)
            pages.append(page)
        for page in pages:  # as near at once as one driver clicks
            page.locator("#ssd-speak").click()
        # One at a time per page: speaking, the page's race and speak buttons are disabled (its player plays one).
        assert pages[0].locator("#ssd-run").is_disabled() and pages[0].locator("#ssd-speak").is_disabled()
        heard = []
        for page in pages:
            page.wait_for_function(f"/^Decoded:/.test(({STATUS_JS})())", timeout=300_000)
            page.wait_for_function(f"!({LAST_RACE_AUDIO_JS})().playing && ({LAST_RACE_AUDIO_JS})().log.some("
                                   "(e) => e.kind === 'end')", timeout=120_000)
            audio = page.evaluate(LAST_RACE_AUDIO_JS)
            spans = voices(audio["log"])
            assert set(spans) == {"voice"}, audio["log"]  # one lane: the text's own voice
            pieces = spans["voice"]
            gaps = [round(start - end, 1) for (_, end), (start, _) in zip(pieces, pieces[1:])]
            heard.append({"status": page.evaluate(STATUS_JS), "first_sound_ms": round(pieces[0][0]),
                          "pieces": len(pieces), "gaps_ms": gaps, "speech_ms": round(sum(e - s for s, e in pieces))})
            page.wait_for_function("!document.querySelector('#ssd-run').disabled", timeout=30_000)
            assert page.locator("#ssd-speak").is_enabled()
    finally:
        for page in pages:
            page.close()
    folder = os.environ.get("SSD_ARTIFACT_DIR")
    if folder:
        Path(folder, "speak_room.json").write_text(json.dumps(heard, indent=1) + "\n")
    print(json.dumps(heard, indent=1))
    assert all(h["speech_ms"] > 1_000 for h in heard), heard  # each heard a sentence, not a click
    # they shared the machine
    assert any(re.search(r"with up to \d+ other voices? at once", h["status"]) for h in heard), heard
