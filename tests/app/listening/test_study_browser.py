"""Raters complete a MUSHRA study and an ABX study on the rater-only study page, in headless Chromium
(Playwright + Debian chromium), with listen-before-rate gating enforced by the server."""

from __future__ import annotations

import base64
import re
import time
from pathlib import Path

import pytest

from ssd_demo.listening.attention import parse_check
from ssd_demo.listening.screening import attention_failed
from ssd_demo.listening.study_store import ListeningStore
from ssd_demo.listening.study_results import read_long_csv
from ssd_demo.listening.stimuli import tone_renderer
from ssd_demo.listening.study_setup import create_study

sync_api = pytest.importorskip("playwright.sync_api")
gradio_client = pytest.importorskip("gradio_client")
from support.browser_support import CHROMIUM, CHROMIUM_ARGS  # noqa: E402

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (apt-get install -y chromium)")]
REVEALING = re.compile(r"\bAR\b|SSD|beta|exact|speculative|anchor|lowpass|attention|hypothes", re.IGNORECASE)
WAIT_MS = 60_000  # a loaded 2-core machine: wait on conditions, generously
SYSTEMS = '["SSD beta=0.3 K=4", "exact speculative K=4"]'
STUDIES = {
    "mushra-pilot": f"""
name = "mushra-pilot"
title = "Speech quality"
instructions = "Use headphones."
systems = {SYSTEMS}
items_per_rater = 2
sentences = ["One sentence.", "Two sentences here.", "Three of them now."]
[mushra]
""",
    "abx-pilot": f"""
name = "abx-pilot"
systems = {SYSTEMS}
items_per_rater = 1
sentences = ["One sentence.", "Two sentences here."]
[abx]
""",
    "spoken-pilot": """
name = "spoken-pilot"
systems = ["SSD beta=0.3 K=4"]
items_per_rater = 1
sentences = ["One sentence.", "Two sentences here."]
[mushra]
[ab]
[attention]
kind = "spoken"
per_block = 1
""",
    "long-clips": f"""
name = "long-clips"
systems = {SYSTEMS}
items_per_rater = 1
sentences = ["One sentence."]
[mushra]
""",
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One study server for three studies at once: two of short tones (raters listen in the browser) and one
    of 30-second clips (a play reported at once is certainly too soon)."""
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setenv("SSD_DEMO_RESULTS_TOKEN", "test-token")
    monkeypatch.delenv("SSD_DEMO_LISTENING_DB", raising=False)
    root = tmp_path_factory.mktemp("studies")
    for name, text in STUDIES.items():
        path = root / f"{name}.toml"
        path.write_text(text, encoding="utf-8")
        seconds = 30.0 if name == "long-clips" else 0.5
        create_study(path, root=root / "data", render=tone_renderer(seconds=seconds))
    from ssd_demo.app.listening.service import close_listening_apps
    from ssd_demo.app.listening.study_page import build_study_demo, study_launch_options

    demo = build_study_demo(list(STUDIES), root / "data")
    demo.launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True, **study_launch_options())
    try:
        yield demo.local_url.rstrip("/"), root / "data" / "listening.sqlite3"
    finally:
        demo.close()
        close_listening_apps()
        monkeypatch.undo()


@pytest.fixture()
def page(server):
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM,
                                             args=[*CHROMIUM_ARGS, "--autoplay-policy=no-user-gesture-required"])
        try:
            yield browser.new_page()
        finally:
            browser.close()


def expect(locator):
    return sync_api.expect(locator)


def start(page, url: str, study: str, rater: str) -> None:
    page.goto(f"{url}/?study={study}")
    expect(page.locator("#study-start")).to_be_visible(timeout=WAIT_MS)
    page.fill("#study-rater", rater)
    page.click("#study-start")
    expect(page.locator("#study-progress")).to_contain_text("Trial 1 of", timeout=WAIT_MS)


def listen(page, label: str) -> None:
    """Play one sample to the end (looping off); its state turns to 'heard' once the server recorded the play."""
    page.locator("#study-loop").set_checked(False)
    page.click(f"[data-play='{label}']")
    heard = "reference, played" if label == "Reference" else "heard"
    expect(page.locator(f"[data-row='{label}'] .state")).to_have_text(heard, timeout=WAIT_MS)


def assert_rater_only(page) -> None:
    body = page.inner_text("body")
    assert not REVEALING.search(body), body
    for text in ("Compare", "Benchmark", "Results", "Export"):
        assert page.get_by_role("tab", name=text).count() == 0
        assert page.get_by_role("button", name=text).count() == 0
    assert page.get_by_label("Download").count() == 0 and page.get_by_label("Share").count() == 0
    assert page.locator("a[download], a[href*='admin']").count() == 0
    assert not page.locator(".nav-holder").is_visible()
    assert page.locator(".error:visible").count() == 0


def test_mushra_session_end_to_end(server, page):
    url, db = server
    start(page, url, "mushra-pilot", "mushra-rater")
    assert_rater_only(page)
    labels = page.locator("input[data-score]").evaluate_all("nodes => nodes.map(n => n.dataset.score)")
    assert labels == ["A", "B", "C", "D"]  # hidden reference, two systems, the low anchor
    assert all(page.locator(f"input[data-score='{label}']").is_disabled() for label in labels)

    # Submitting with nothing heard is a message beside each slider; the trial stays usable.
    page.click("#study-submit")
    expect(page.locator("[data-message='A']")).to_contain_text("to the end first", timeout=WAIT_MS)
    assert page.locator(".error:visible").count() == 0
    expect(page.locator("#study-progress")).to_contain_text("Trial 1 of 2")

    listen(page, "Reference")  # the labelled reference plays but has no slider
    given = {}
    for index, label in enumerate(labels):
        listen(page, label)
        expect(page.locator(f"input[data-score='{label}']")).to_be_enabled(timeout=WAIT_MS)
        if label != "D":
            given[label] = 20 + 25 * index
            page.locator(f"input[data-score='{label}']").fill(str(given[label]))
    page.click("#study-submit")
    expect(page.locator("[data-message='D']")).to_contain_text("Move this slider", timeout=WAIT_MS)
    page.locator("input[data-score='D']").fill("7")
    given["D"] = 7
    page.click("#study-submit")
    expect(page.locator("#study-progress")).to_contain_text("Trial 2 of 2", timeout=WAIT_MS)

    # A reload resumes trial 2, with the sample already heard still unlocked.
    listen(page, "B")
    page.reload()
    expect(page.locator("#study-progress")).to_contain_text("Trial 2 of 2", timeout=WAIT_MS)
    expect(page.locator("input[data-score='B']")).to_be_enabled(timeout=WAIT_MS)
    assert page.locator("input[data-score='A']").is_disabled()
    for label in labels:
        if label != "B":
            listen(page, label)
        page.locator(f"input[data-score='{label}']").fill("50")
    page.click("#study-submit")
    expect(page.locator("#study-done")).to_contain_text("Thank you", timeout=WAIT_MS)
    code = page.inner_text("#study-code").strip()
    assert re.fullmatch(r"[0-9A-F]{10}", code), code
    assert_rater_only(page)
    page.reload()  # the closing screen and its code come back after a reload too
    expect(page.locator("#study-code")).to_have_text(code, timeout=WAIT_MS)

    with ListeningStore(db, app_version="reader") as store:
        ratings = [r for r in store.study_ratings("mushra-pilot") if r.rater_id == "mushra-rater"]
        session_id = ratings[0].session_id
        assert store.completion_code(session_id) == code
    first = {r.label: r.score for r in ratings if r.trial_index == 0}
    assert first == given
    assert {r.score for r in ratings if r.trial_index == 1} == {50}
    assert all(r.plays >= 1 for r in ratings)


def test_abx_session_end_to_end(server, page):
    url, db = server
    start(page, url, "abx-pilot", "abx-rater")
    assert_rater_only(page)
    for number in (1, 2):
        expect(page.locator("#study-progress")).to_contain_text(f"Trial {number} of 2", timeout=WAIT_MS)
        choice = page.locator("input[name=study-choice][value=A]")
        assert choice.is_disabled()
        page.click("#study-submit")  # no answer yet: a message beside the choice, no overlay
        expect(page.locator("[data-message='study-choice']")).to_contain_text("to the end first", timeout=WAIT_MS)
        listen(page, "A")
        listen(page, "B")
        assert choice.is_disabled()  # X not heard yet
        listen(page, "X")
        expect(choice).to_be_enabled(timeout=WAIT_MS)
        page.locator("input[name=study-choice][value=A]").check()
        page.click("#study-submit")
    expect(page.locator("#study-done")).to_contain_text("Thank you", timeout=WAIT_MS)
    code = page.inner_text("#study-code").strip()
    with ListeningStore(db, app_version="reader") as store:
        ratings = [r for r in store.study_ratings("abx-pilot") if r.rater_id == "abx-rater"]
        assert store.completion_code(ratings[0].session_id) == code
        answers = store.study_answers(ratings[0].session_id)
    assert [a.answer for a in answers] == [{"choice": "A"}, {"choice": "A"}]
    assert len(ratings) == 2 and all(r.kind == "abx" and r.plays >= 3 for r in ratings)


def test_api_refuses_a_rating_before_the_clip_ended(server):
    url, db = server
    client = gradio_client.Client(url + "/", verbose=False)
    view = client.predict("long-clips", "api-rater", api_name="/study_start")
    assert view["state"] == "trial" and view["kind"] == "mushra"
    rated = [c["label"] for c in view["conditions"] if c["rated"]]
    scores = {label: 50 for label in rated}
    refused = client.predict(view["session"], view["trial"], {"scores": scores}, api_name="/study_submit")
    assert "to the end" in refused["refused"]
    # A play of a clip this session never fetched is refused, however long ago the trial was shown...
    unfetched = client.predict(view["session"], view["trial"], rated[0], api_name="/study_played")
    assert "never loaded" in unfetched["refused"], unfetched
    clip = client.predict(view["session"], view["trial"], rated[0], api_name="/study_clip")
    assert base64.b64decode(clip["wav"])[:4] == b"RIFF"
    # ...and one reported at once after fetching a 30-second clip cannot have been a play to the end.
    early = client.predict(view["session"], view["trial"], rated[0], api_name="/study_played")
    assert "to the end yet" in early["refused"], early
    assert "refused" in client.predict(view["session"], view["trial"], {"scores": scores}, api_name="/study_submit")
    # A study this server does not serve is closed; a forged resume token starts nothing.
    assert client.predict("not-served", "", api_name="/study_start")["refused"]
    assert client.predict("forged.token", "long-clips", api_name="/study_resume")["state"] == "start"
    with ListeningStore(db, app_version="reader") as store:
        assert store.study_answers(view["session"]) == []
        assert store.study_plays(view["session"]) == []
        assert [label for _, label, _ in store.clip_fetches(view["session"])] == [rated[0]]


def test_admin_page_needs_the_token_and_serves_results_and_exports(server, page):
    url, _ = server
    client = gradio_client.Client(url + "/", verbose=False)
    with pytest.raises(Exception, match="token"):
        client.predict("wrong", "mushra-pilot", True, api_name="/study_admin_results")
    # A scripted rater answers one ABX trial: it fetches each clip, whose plays count half a second later.
    view = client.predict("abx-pilot", "scripted-rater", api_name="/study_start")
    for label in ("A", "B", "X"):
        assert client.predict(view["session"], view["trial"], label, api_name="/study_clip")["label"] == label
    for label in ("A", "B", "X"):
        deadline = time.monotonic() + WAIT_MS / 1000
        while "refused" in (result := client.predict(view["session"], view["trial"], label, api_name="/study_played")):
            assert "cannot have been played" in result["refused"] and time.monotonic() < deadline, result
            time.sleep(0.2)
    # The answer needs 90% of A, B and X end to end since the trial was shown (1.35 s here).
    deadline = time.monotonic() + WAIT_MS / 1000
    while "refused" in (result := client.predict(view["session"], view["trial"], {"choice": "B"},
                                                 api_name="/study_submit")):
        assert "before answering" in result["refused"] and time.monotonic() < deadline, result
        time.sleep(0.2)
    assert result["state"] == "trial"
    files = client.predict("test-token", "abx-pilot", api_name="/study_admin_export")
    assert sorted(Path(f).suffix for f in files) == [".csv", ".json"]
    rows = read_long_csv(next(f for f in files if f.endswith(".csv")))
    assert any(row.rater == "scripted-rater" and row.kind == "abx" for row in rows)

    # In the browser: the admin page is its own address; with the token it shows live progress per rater.
    page.goto(f"{url}/admin")
    page.locator("#study-admin-token input").fill("test-token")
    page.click("#study-admin-open")
    expect(page.locator("#study-admin-status")).to_contain_text("sessions", timeout=WAIT_MS)
    page.goto(f"{url}/?study=mushra-pilot")
    expect(page.locator("#study-start")).to_be_visible(timeout=WAIT_MS)
    assert page.locator("#study-admin-token").count() == 0


def test_switching_samples_keeps_the_playback_position_and_a_partial_play_unlocks_nothing(server, page):
    url, _ = server
    start(page, url, "long-clips", "switching-rater")
    page.locator("#study-loop").set_checked(True)
    page.click("[data-play='A']")
    position = "label => document.querySelector(`audio[data-clip='${label}']`).currentTime"
    page.wait_for_function(f"({position})('A') > 1.0", timeout=WAIT_MS)
    page.click("[data-play='B']")
    page.wait_for_function(f"({position})('B') > 0.5", timeout=WAIT_MS)
    state = page.evaluate("""() => {
        const a = document.querySelector("audio[data-clip='A']"), b = document.querySelector("audio[data-clip='B']");
        return {aPaused: a.paused, bPaused: b.paused, a: a.currentTime, b: b.currentTime};
    }""")
    # B took over from where A stopped (not from the start), and A no longer plays.
    assert state["aPaused"] and not state["bPaused"] and state["b"] >= state["a"] - 0.05, state
    assert page.locator("[data-play='B']").get_attribute("class") == "active"
    # Neither sample was heard from start to end: both sliders stay locked.
    assert page.locator("input[data-score='A']").is_disabled() and page.locator("input[data-score='B']").is_disabled()
    expect(page.locator("[data-row='A'] .state")).to_have_text("play to the end")


def answer_trial(page, store: ListeningStore, session_id: str) -> bool:
    """Listen to the shown trial and answer it, a spoken attention check as its instruction says (the test reads
    the target from the database: a rater hears it); whether the trial was a check."""
    number = int(re.search(r"Trial (\d+) of", page.inner_text("#study-progress")).group(1))
    trial = store.study_trials(session_id)[number - 1]
    spoken = {c.label: parse_check(c.system)[1] for c in trial.conditions if parse_check(c.system)}
    for condition in trial.conditions:
        if condition.must_play:
            listen(page, condition.label)
    if trial.kind == "mushra":
        for condition in trial.conditions:
            if condition.role == "rated":
                page.locator(f"input[data-score='{condition.label}']").fill(str(spoken.get(condition.label, 75)))
    else:
        choice = next(iter(spoken.values())) if spoken else "A"
        page.locator(f"input[name=study-choice][value={choice}]").check()
    page.click("#study-submit")
    return trial.attention_check


def test_a_session_with_spoken_attention_checks_answered_as_told_passes_the_screening(server, page):
    url, db = server
    start(page, url, "spoken-pilot", "spoken-rater")
    assert_rater_only(page)  # a check trial looks like any other: nothing on the page names it
    with ListeningStore(db, app_version="reader") as store:
        session_id = next(s.session_id for s in store.study_sessions("spoken-pilot") if s.rater_id == "spoken-rater")
        checks = []
        for number in range(1, 5):  # MUSHRA: the sentence and a check; A/B: the pair and a check
            expect(page.locator("#study-progress")).to_contain_text(f"Trial {number} of 4", timeout=WAIT_MS)
            checks.append(answer_trial(page, store, session_id))
        expect(page.locator("#study-done")).to_contain_text("Thank you", timeout=WAIT_MS)
        assert checks.count(True) == 2
        rows = [r for r in store.study_ratings("spoken-pilot") if r.rater_id == "spoken-rater"]
    verdicts = [(row.kind, attention_failed(row)) for row in rows if attention_failed(row) is not None]
    assert sorted(verdicts) == [("ab", False), ("mushra", False)]
    assert_rater_only(page)
