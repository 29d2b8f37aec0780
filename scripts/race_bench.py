"""The race as a room perceives it: races in Chromium against a running app, every audible event logged per race.

Starts `python app.py` on a free port (or uses --url), waits until the page says it is ready, then races each text
`--races` times in a 1280x720 page (one race is stopped part-way), reading the page's own logs: `window.ssdAudioLog`
(each lane's first piece's arrival, every scheduled start and end of a piece of audio, a stop; milliseconds since the
click) and `window.ssdHeard`, the headline's ratios, the status line and the replay line. Prints one row per race and
a summary of what the room hears: which voice first, click to audible, silence between the voices, overlaps, the
slower-machine factor, the end-to-end ratio against the language model's, and whether the race fits 1280x720.

    python -m scripts.race_bench [--races 5] [--url http://127.0.0.1:7860] [--screenshot docs/race.png]

`--screenshot` keeps the page as the first finished one-sentence race left it (1280x720): README's picture.

Developer-only (imported by nothing); needs Chromium and Playwright (`requirements-dev.txt`).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from playwright.sync_api import sync_playwright

TEXTS = {
    "short line": "Good morning, everyone.",
    "sentence": "The quick brown fox jumps over the lazy dog while the old farmer watches from his porch.",
    "two sentences": ("Speculative decoding lets a small draft model guess several tokens ahead. The large model "
                      "checks all of them in a single pass and keeps the ones it agrees with."),
    "paragraph": ("On a quiet morning in early spring, the old lighthouse keeper climbed the winding stairs one last "
                  "time. He had tended the lamp for forty years, through storms that shook the glass and calm nights "
                  "when the sea lay flat as a mirror. Today a young engineer would replace the lamp with an "
                  "automatic light, and the keeper wanted to watch the sunrise from the top before he handed over "
                  "the keys."),
}
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--autoplay-policy=no-user-gesture-required"]
VISIBLE = ("#ssd-text", "#ssd-run", "#ssd-ar-live", "#ssd-spec-live", "#ssd-headline", "#ssd-race-chart")
LANES = ("autoregressive", "speculative")


@dataclass
class RaceRecord:
    text: str
    stopped: bool = False
    status: str = ""
    first_ready: str | None = None  # the lane whose first piece reached the page first
    first_heard: str | None = None  # the lane heard first
    heard: dict = field(default_factory=dict)  # lane -> seconds from the click to its first sound
    gap: float | None = None  # seconds of silence between the first voice's end and the second's start
    overlap: bool = False
    stop_silence: float | None = None  # seconds from the Stop click to both voices silent
    lm_ratio: float | None = None
    end_to_end: float | None = None
    factor: float | None = None
    together: bool = False
    fits: bool = False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_app(port: int) -> subprocess.Popen:
    env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen([sys.executable, "app.py"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def app_at(url: str | None) -> tuple[subprocess.Popen | None, str]:
    """The app at `url`, or one started on a free port (its process, to end, and its address)."""
    if url is not None:
        return None, url
    port = free_port()
    return start_app(port), f"http://127.0.0.1:{port}"


def open_when_ready(page, url: str) -> None:
    """Open the app's page once its server answers, then wait until the page says it is ready."""
    for _ in range(120):
        try:
            page.goto(url)
            break
        except Exception:  # noqa: BLE001 - the server is still starting
            time.sleep(1)
    page.wait_for_selector("#ssd-run")
    wait_ready(page)


def wait_ready(page, timeout: float = 300.0) -> None:
    """Until the status line has said "Ready" for two seconds (it says so for a moment before the page has asked
    the server how far its start-up job got)."""
    deadline, ready_since = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        if page.inner_text("#ssd-status").strip().startswith("Ready"):
            ready_since = ready_since or time.monotonic()
            if time.monotonic() - ready_since >= 2.0:
                return
        else:
            ready_since = None
        time.sleep(0.25)
    raise TimeoutError("the app did not get ready")


def voices(log: list[dict]) -> dict[str, tuple[float, float]]:
    """Each lane's first scheduled start and last end (ms since the click)."""
    spans: dict[str, tuple[float, float]] = {}
    for entry in log:
        lane, at = entry["lane"], entry["at"]
        if lane is None or entry["kind"] not in ("start", "end"):
            continue
        start, end = spans.get(lane, (float("inf"), float("-inf")))
        spans[lane] = (min(start, at) if entry["kind"] == "start" else start, max(end, at))
    return spans


def number(pattern: str, text: str) -> float | None:
    found = re.search(pattern, text)
    return float(found.group(1)) if found else None


def race_once(page, name: str, text: str, stop_after: float | None = None) -> RaceRecord:
    record = RaceRecord(name, stopped=stop_after is not None)
    page.fill("#ssd-text textarea", text)
    page.click("#ssd-run")
    started = time.monotonic()  # the last race's status stays until this race's first update
    while time.monotonic() - started < 10 and not re.search(r"Now: (?!Done)", page.inner_text("#ssd-status")):
        time.sleep(0.05)
    if stop_after is not None:
        time.sleep(stop_after)
        clicked = page.evaluate("performance.now() - window.ssdClick")
        page.click("#ssd-stop")
        time.sleep(0.5)
        log = page.evaluate("window.ssdAudioLog.filter((e) => e.race === window.ssdAudioLog.at(-1).race)")
        stops = [e["at"] for e in log if e["kind"] == "stop" and e["at"] >= clicked]
        record.stop_silence = (stops[0] - clicked) / 1000 if stops else None
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        record.status = page.inner_text("#ssd-status")
        if re.search(r"\bDone\b|Stopped|Not run", record.status):
            break
        time.sleep(0.1)
    if not record.stopped:  # let both voices play out
        while time.monotonic() < deadline and page.evaluate("window.ssdPlayer.playing()"):
            time.sleep(0.2)
    time.sleep(0.3)
    log = page.evaluate("window.ssdAudioLog")
    log = [e for e in log if e["race"] == log[-1]["race"]] if log else []
    ready = [e["lane"] for e in log if e["kind"] == "ready"]
    record.first_ready = ready[0] if ready else None
    spans = voices(log)
    if spans:
        record.first_heard = min(spans, key=lambda lane: spans[lane][0])
        record.heard = {lane: start / 1000 for lane, (start, _) in spans.items()}
    if len(spans) == 2 and not record.stopped:
        first, second = sorted(spans.values())
        record.gap = (second[0] - first[1]) / 1000
        record.overlap = second[0] < first[1] - 5  # a few ms: the log's own clock
    headline = page.inner_text("#ssd-headline")
    record.lm_ratio = number(r"Language model ([0-9.]+)×", headline)
    record.end_to_end = number(r"end to end ([0-9.]+)×", headline)
    record.factor = number(r"As on a ([0-9.]+)× slower machine", page.inner_text("#ssd-replay-note"))
    record.together = "at once" in record.status
    boxes = [page.locator(selector).bounding_box() for selector in VISIBLE]
    record.fits = all(box is not None and box["y"] >= 0 and box["y"] + box["height"] <= 720 for box in boxes)
    return record


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))] if ordered else float("nan")


def summary(records: list[RaceRecord]) -> list[str]:
    finished = [r for r in records if not r.stopped and r.heard]
    sentence_races = [r for r in finished if r.text != "short line"]
    spec_first_due = [r for r in finished if r.first_ready == "speculative"]
    one_sentence = [r.heard.get("speculative") for r in finished if r.text == "sentence" and "speculative" in r.heard]
    gaps = [r.gap for r in finished if r.gap is not None]
    ratios = [r.end_to_end / r.lm_ratio for r in finished if r.end_to_end and r.lm_ratio]
    stops = [r.stop_silence for r in records if r.stopped and r.stop_silence is not None]
    return [
        f"| races | {len(records)} ({sum(r.stopped for r in records)} stopped) |",
        f"| both lanes decoding at once | {sum(r.together for r in records)} of {len(records)} |",
        f"| speculative heard first where its audio was ready first | "
        f"{sum(r.first_heard == 'speculative' for r in spec_first_due)} of {len(spec_first_due)} |",
        f"| speculative heard first, all finished races | "
        f"{sum(r.first_heard == 'speculative' for r in finished)} of {len(finished)} |",
        f"| speculative click to audible, one sentence: median / P95 | "
        f"{statistics.median(one_sentence):.2f} / {percentile(one_sentence, 95):.2f} s |" if one_sentence else "| - |",
        f"| silence between the voices: median / P95 / max | {statistics.median(gaps):.2f} / "
        f"{percentile(gaps, 95):.2f} / {max(gaps):.2f} s |" if gaps else "| - |",
        f"| races with both voices at once | {sum(r.overlap for r in finished)} |",
        f"| slower-machine factor > 1, races of a sentence or more | "
        f"{sum((r.factor or 0) > 1 for r in sentence_races)} of {len(sentence_races)} |",
        f"| end to end / language-model ratio: median (range) | {statistics.median(ratios):.2f} "
        f"({min(ratios):.2f}-{max(ratios):.2f}) |" if ratios else "| - |",
        f"| Stop to silence | {', '.join(f'{s:.2f} s' for s in stops) or '-'} |",
        f"| race fits 1280x720 (text, button, both lanes, headline, chart) | {sum(r.fits for r in records)} of "
        f"{len(records)} |",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--races", type=int, default=5, help="races per text (default 5: 20 races)")
    parser.add_argument("--url", help="a running app (default: start one on a free port)")
    parser.add_argument("--screenshot", type=Path, help="save the page after the first finished one-sentence race")
    args = parser.parse_args(argv)
    app, url = app_at(args.url)
    records: list[RaceRecord] = []
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=shutil.which("chromium"), args=CHROMIUM_ARGS)
            # The audience's browser runs on its own machine; here it shares the server's two cores, so it yields
            # to the decoders (a lower priority, not fewer cores: its audio and page still run as they come).
            subprocess.run(["sh", "-c", "for p in $(pgrep -f chromium); do renice -n 10 -p $p; done"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            page = browser.new_page(viewport={"width": 1280, "height": 720})
            open_when_ready(page, url)
            stop_race = (args.races * len(TEXTS)) // 2  # then one more race, a paragraph's, stopped part-way
            plan = [(name, text, None) for _ in range(args.races) for name, text in TEXTS.items()]
            plan.insert(stop_race, ("paragraph", TEXTS["paragraph"], 2.0))
            shot = False
            for index, (name, text, stop_after) in enumerate(plan):
                r = race_once(page, name, text, stop_after)
                records.append(r)
                if args.screenshot and name == "sentence" and not r.stopped and not shot:
                    page.screenshot(path=str(args.screenshot))  # replaces the file: the first such race of this run
                    shot = True
                print(f"{index + 1:2d} {r.text:13s} {'stopped ' if r.stopped else ''}ready first {r.first_ready}, "
                      f"heard first {r.first_heard}, heard {({k[:4]: round(v, 2) for k, v in r.heard.items()})}, "
                      f"gap {r.gap if r.gap is None else round(r.gap, 2)}, LM {r.lm_ratio}x, e2e {r.end_to_end}x, "
                      f"factor {r.factor}, at once {r.together}, fits {r.fits}"
                      + (f", stop to silence {r.stop_silence:.2f} s" if r.stop_silence is not None else ""),
                      flush=True)
            browser.close()
    finally:
        if app is not None:
            app.terminate()
            app.wait(timeout=30)
    print("\n| what the room hears | measured |\n|---|---|")
    print("\n".join(summary(records)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
