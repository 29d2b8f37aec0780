"""Headless Chromium settings shared by the browser tests (Debian's chromium, driven by Playwright), and what the
race page's live player (`ssd_demo.app.compare.race_js.PLAYER_JS`) tells a test about the voices it played."""

import shutil

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# A closed network: without these flags Chromium keeps trying to reach update and sync services. The race's
# voices play through the Web Audio API as the pieces come, with no click on a player: a test page must not
# need a user's gesture to start the audio.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--autoplay-policy=no-user-gesture-required",
]


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium per test module (import this fixture into a browser test module to use it)."""
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield launched
        launched.close()


def open_app(page, url: str, ready: str = "#ssd-run", timeout_ms: int = 120_000) -> None:
    """Open the app at `url` and wait until `ready` is on the page. Not "networkidle": the page keeps a heartbeat
    stream open to the server, so the network is never idle."""
    page.goto(url, wait_until="load", timeout=timeout_ms)
    page.locator(ready).first.wait_for(state="attached", timeout=timeout_ms)


#: The last race's entries of the page's audio log (`window.ssdAudioLog`: {race, lane, kind: ready | start | end |
#: stop, at: ms since the click}; a piece's start and end on the audio clock), when each lane was first heard
#: (`window.ssdHeard`, seconds since the click) and whether a voice is still to end.
LAST_RACE_AUDIO_JS = """() => {
  const log = window.ssdAudioLog || [];
  const races = log.map((e) => e.race).filter((race) => race !== null && race !== undefined);
  const race = races.length ? Math.max(...races) : null;
  return {race, races: [...new Set(races)], log: log.filter((e) => e.race === race),
          heard: Object.assign({}, window.ssdHeard || {}),
          playing: !!window.ssdPlayer && window.ssdPlayer.playing()};
}"""

#: Both voices of the last race started, and neither is still to end.
BOTH_VOICES_PLAYED_JS = """() => {
  const audio = (%s)();
  const started = new Set(audio.log.filter((e) => e.kind === 'start').map((e) => e.lane));
  return started.size === 2 && !audio.playing;
}""" % LAST_RACE_AUDIO_JS

#: How far a voice's start may come before the other voice's end in the log and still not overlap it (ms): the
#: log converts times on the audio clock to the page's clock, to within a few milliseconds.
LOG_SLACK_MS = 5.0


def voices(log: list[dict]) -> dict[str, list[tuple[float, float]]]:
    """Each lane's pieces as played, in order: (start, end) in ms since the click (a start and its end are logged
    together)."""
    spans: dict[str, list[tuple[float, float]]] = {}
    for entry, following in zip(log, log[1:]):
        if entry["kind"] == "start":
            assert following["kind"] == "end" and following["lane"] == entry["lane"], (entry, following)
            spans.setdefault(entry["lane"], []).append((entry["at"], following["at"]))
    return spans


def assert_one_voice_at_a_time(log: list[dict]) -> dict[str, list[tuple[float, float]]]:
    """Never two voices at once: every piece of the lane heard second starts after the last piece of the lane heard
    first ends. Returns the lanes' pieces (`voices`)."""
    spans = voices(log)
    if len(spans) == 2:
        first, second = sorted(spans, key=lambda lane: spans[lane][0][0])
        first_end = max(end for _, end in spans[first])
        assert all(start >= first_end - LOG_SLACK_MS for start, _ in spans[second]), (first, spans, log)
    return spans
