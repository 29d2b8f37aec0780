"""End to end in a real browser: headless Chromium (Debian's) driven by Playwright.

Types a sentence, clicks the button, waits for both audio players, the token view and
the charts, and saves a screenshot (to $SSD_ARTIFACT_DIR when set, else a temp dir).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from toy_backend import TOY_KEY, register_toy_preset

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="Chromium is not installed (apt-get install -y chromium); CI installs it"
)


@pytest.fixture(scope="module")
def app_url():
    from ssd_demo.ui import build_demo, launch_options

    register_toy_preset()
    demo = build_demo(default_preset=TOY_KEY)
    _, url, _ = demo.launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True, **launch_options())
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


def test_type_click_and_see_both_runs(app_url, page, tmp_path_factory):
    page.goto(app_url, wait_until="networkidle")
    page.locator("#ssd-text textarea").fill("A browser typed this sentence.")
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

    shot = _artifact_dir(tmp_path_factory) / "app.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000


def test_empty_text_shows_a_message_not_a_traceback(app_url, page):
    page.goto(app_url, wait_until="networkidle")
    page.locator("#ssd-text textarea").fill("")
    page.locator("#ssd-run").click()
    message = page.get_by_text("Please type some text to synthesise.").first
    message.wait_for(timeout=60_000)
    assert "Traceback" not in page.content()
