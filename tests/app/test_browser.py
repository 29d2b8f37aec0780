"""End to end in a real browser: headless Chromium (Debian's) driven by Playwright.

Types a sentence, clicks the button, waits for both audio players, the token view and
the charts, and saves a screenshot (to $SSD_ARTIFACT_DIR when set, else a temp dir).
"""

from __future__ import annotations

from support.paths import REPOSITORY

import os
from pathlib import Path

import pytest

from support.race_lanes import close_lane_workers, lanes_one_after_the_other
from support.toy_backend import TOY_KEY, register_toy_preset

from support.browser_support import CHROMIUM, CHROMIUM_ARGS, open_app  # noqa: E402

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install -y chromium); CI installs it"),
]


EMBEDDED_ASSETS = REPOSITORY / "assets" / "embedded"


def _launch(preset: str):
    from ssd_demo.app.page import build_demo, launch_options

    demo = build_demo(default_preset=preset)
    _, url, _ = demo.launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True, **launch_options())
    return demo, url


@pytest.fixture(scope="module")
def app_url():
    register_toy_preset()
    with lanes_one_after_the_other((TOY_KEY,)):  # the toy voice exists in this process only (`support.race_lanes`)
        demo, url = _launch(TOY_KEY)
        yield url
        demo.close()


@pytest.fixture(scope="module")
def page():
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        context = browser.new_page(viewport={"width": 1400, "height": 1000})
        yield context
        browser.close()


def _artifact_dir(tmp_path_factory) -> Path:
    folder = os.environ.get("SSD_ARTIFACT_DIR")
    path = Path(folder) if folder else tmp_path_factory.mktemp("browser")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _type_click_and_check(page, url: str, sentence: str, screenshot: Path) -> None:
    open_app(page, url)
    page.locator("#ssd-text textarea").fill(sentence)
    page.locator("#ssd-run").click()

    timeout = 120_000
    for player in ("#ssd-ar-audio", "#ssd-spec-audio"):
        page.locator(f"{player} [data-testid^='waveform']").first.wait_for(state="visible", timeout=timeout)
        page.locator(f"{player} a[download]").first.wait_for(state="attached", timeout=timeout)
    for plot in ("#ssd-plot-time", "#ssd-plot-breakdown", "#ssd-plot-accepted", "#ssd-plot-position"):
        page.locator(f"{plot} img").first.wait_for(state="visible", timeout=timeout)
    page.locator("#ssd-tokens").get_by_text("accepted").first.wait_for(timeout=timeout)
    page.locator("#ssd-stats table").wait_for(state="visible", timeout=timeout)

    names = [page.locator(f"{player} a[download]").first.get_attribute("download")
             for player in ("#ssd-ar-audio", "#ssd-spec-audio")]
    assert names[0].endswith("_autoregressive.wav"), names
    assert "_speculative_" in names[1] and names[1].endswith(".wav"), names
    assert "Speculative" in page.locator("#ssd-stats").inner_text()

    page.screenshot(path=str(screenshot), full_page=True)
    assert screenshot.stat().st_size > 10_000


def test_type_click_and_see_both_runs(app_url, page, tmp_path_factory):
    _type_click_and_check(page, app_url, "A browser typed this sentence.",
                          _artifact_dir(tmp_path_factory) / "app_toy.png")


def test_embedded_voice_in_the_browser(page, tmp_path_factory):
    pytest.importorskip("ssd_demo.backends.embedded")
    if not (EMBEDDED_ASSETS / "voice.json").is_file():
        pytest.skip("the embedded voice's trained assets (assets/embedded/) are not present")
    demo, url = _launch("embedded")
    try:
        _type_click_and_check(page, url, "The teacher explained volcanoes to the children.",
                              _artifact_dir(tmp_path_factory) / "app.png")
    finally:
        demo.close()
        close_lane_workers("embedded")  # its race's lane workers


def test_empty_text_shows_a_message_not_a_traceback(app_url, page):
    open_app(page, app_url)
    page.locator("#ssd-text textarea").fill("")
    page.locator("#ssd-run").click()
    message = page.get_by_text("Please type some text to synthesise.").first
    message.wait_for(timeout=60_000)
    assert "Traceback" not in page.content()
