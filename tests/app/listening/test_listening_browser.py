"""A rater completes a short session of the listening tab's A/B + MOS study in a real browser (Playwright +
Debian chromium)."""

from __future__ import annotations

import re

import gradio as gr
import pytest

from ssd_demo.listening.migrations import TAB_STUDY
from ssd_demo.listening.stimuli import create_stimulus_set, tone_renderer
from ssd_demo.listening.study_store import ListeningStore
from ssd_demo.app.listening.service import close_listening_apps
from ssd_demo.app.listening.tab import build_listening_tab

sync_api = pytest.importorskip("playwright.sync_api")
from support.browser_support import CHROMIUM, CHROMIUM_ARGS  # noqa: E402
pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (apt-get install -y chromium)")]
REVEALING = re.compile(r"\bAR\b|SSD|beta|exact|speculative", re.IGNORECASE)


@pytest.fixture()
def app_url(tmp_path, monkeypatch):
    monkeypatch.setenv("SSD_DEMO_LISTENING_TRIALS", "3")
    monkeypatch.delenv("SSD_DEMO_RESULTS_TOKEN", raising=False)
    monkeypatch.delenv("SSD_DEMO_LISTENING_DB", raising=False)
    monkeypatch.delenv("SSD_DEMO_STIMULUS_SET", raising=False)
    texts = ["The birch canoe slid on the smooth planks."]
    create_stimulus_set(
        "tones", texts, ["AR", "SSD beta=0.3 K=4", "exact speculative"], tone_renderer(seconds=0.2), root=tmp_path
    )
    # Laid out as the app does: the listening test is not the first tab, so it is not shown on load.
    with gr.Blocks() as demo, gr.Tabs():
        with gr.Tab("Compare"):
            gr.Markdown("Another tab.")
        with gr.Tab("Listening test", id="listening"):
            build_listening_tab(tmp_path)
    demo.queue().launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True)
    try:
        yield demo.local_url, tmp_path / "listening.sqlite3"
    finally:
        demo.close()
        close_listening_apps()


def play(page, clip: str, until) -> None:
    """Press a clip's Play until `until` (an expectation) holds, as a rater would press it again: a press that
    lands while the page swaps in the next trial's players starts nothing on a busy machine."""
    for attempt in range(3):
        page.locator(f"#listening-audio-{clip.lower()}").get_by_label("Play", exact=True).first.click()
        try:
            until(10_000)
            return
        except AssertionError:
            if attempt == 2:
                raise


def listen_to_both(page) -> None:
    """Play an A/B trial's clips to the end, one after the other; the choice unlocks once the server has both plays."""
    play(page, "A", lambda ms: sync_api.expect(page.locator("#listening-status")).to_contain_text("Now play clip B",
                                                                                                 timeout=ms))
    assert page.locator("#listening-choice input").first.is_disabled()
    play(page, "B", lambda ms: sync_api.expect(page.locator("#listening-choice input").first).to_be_enabled(timeout=ms))


def open_tab(page) -> None:
    page.get_by_role("tab", name="Listening test").click()


def test_rater_completes_a_session_with_clicks(app_url):
    url, db = app_url
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=[*CHROMIUM_ARGS, "--autoplay-policy=no-user-gesture-required"])
        try:
            page = browser.new_page()
            page.goto(url)
            open_tab(page)
            page.get_by_placeholder("leave empty to stay anonymous").fill("browser-rater")
            page.click("#listening-start")
            progress = page.locator("#listening-progress")
            # 3 A/B trials (one sentence, three pairs of systems), then the 3 systems' MOS trials.
            sync_api.expect(progress).to_contain_text("Trial 1 of 6", timeout=20_000)
            assert not REVEALING.search(page.inner_text("body"))
            # The trial comes first, then its clips, which the page fetches (the server records each fetch).
            sync_api.expect(page.locator("#listening-audio-b audio").first).to_be_attached(timeout=20_000)
            assert page.locator("audio").count() >= 2
            # No download or share button on a rater's clip.
            assert page.locator("#listening-audio-a").get_by_label("Download").count() == 0
            assert page.locator("#listening-audio-a").get_by_label("Share").count() == 0
            assert not page.locator("#listening-score-a").is_visible()  # an A/B trial asks for the choice only

            # The choice stays locked until both clips have played to the end.
            assert page.locator("#listening-choice input").first.is_disabled()
            listen_to_both(page)

            # Submitting without a choice is a message beside the button, and the trial stays usable.
            page.locator("#listening-submit").click()
            status = page.locator("#listening-status")
            sync_api.expect(status).to_contain_text("Choose A, B or no preference", timeout=20_000)
            assert page.locator(".error:visible").count() == 0
            sync_api.expect(progress).to_contain_text("Trial 1 of 6")

            # A double click on submit stores one vote and moves on by exactly one trial.
            page.locator("#listening-choice").get_by_text("A", exact=True).click()
            page.locator("#listening-submit").dblclick()
            sync_api.expect(progress).to_contain_text("Trial 2 of 6", timeout=20_000)

            # A reload resumes the session where it was, rather than starting a new one.
            page.reload()
            open_tab(page)
            sync_api.expect(progress).to_contain_text("Trial 2 of 6", timeout=20_000)

            for number, choice in ((3, "B"), (4, "No preference")):
                listen_to_both(page)
                page.locator("#listening-choice").get_by_text(choice, exact=True).click()
                page.locator("#listening-submit").click()
                sync_api.expect(progress).to_contain_text(f"Trial {number} of 6", timeout=20_000)

            # The MOS trials: one clip, its score locked until it has played to the end.
            sync_api.expect(page.locator("#listening-audio-b")).to_be_hidden(timeout=20_000)
            assert not page.locator("#listening-choice").is_visible()
            for number, score in ((5, "4"), (6, "2"), (None, "5")):
                assert page.locator("#listening-score-a input").first.is_disabled()
                play(page, "A", lambda ms: sync_api.expect(page.locator("#listening-score-a input").first).to_be_enabled(
                    timeout=ms))
                if number == 5:  # no score yet: a message, not an error
                    page.locator("#listening-submit").click()
                    sync_api.expect(status).to_contain_text("Rate the clip", timeout=20_000)
                page.locator("#listening-score-a").get_by_text(score, exact=True).click()
                page.locator("#listening-submit").click()
                if number is not None:
                    sync_api.expect(progress).to_contain_text(f"Trial {number} of 6", timeout=20_000)
            done = page.locator("#listening-done")
            sync_api.expect(done).to_contain_text("Thank you", timeout=20_000)
            code = re.search(r"completion code: ([0-9A-F]{10})", done.inner_text()).group(1)
            assert not REVEALING.search(page.inner_text("body"))
        finally:
            browser.close()

    with ListeningStore(db, app_version="reader") as store:
        [session] = store.study_sessions(TAB_STUDY)
        answers = store.study_answers(session.session_id)
        ratings = store.study_ratings(TAB_STUDY)
        assert store.completion_code(session.session_id) == code
        first_trial = store.study_trials(session.session_id)[0].trial_id
        fetched = [label for trial, label, _ in store.clip_fetches(session.session_id) if trial == first_trial]
    assert fetched == ["A", "B"]  # each clip fetched once: the refused submission did not load them again
    assert session.rater_id == "browser-rater"
    assert [a.answer for a in answers] == [{"choice": "A"}, {"choice": "B"}, {"choice": "none"},
                                           {"score": 4}, {"score": 2}, {"score": 5}]
    assert sorted({r.trial_index for r in ratings}) == list(range(6))
    assert all(r.plays >= 1 for r in ratings)
