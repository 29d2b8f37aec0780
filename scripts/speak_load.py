"""A room of phones on the app: many clients press "Just speak it" at once (`/speak`), as `serve --bench` loads the
speech server.

Starts `python app.py` on a free port (or uses --url), waits until its page says it is ready (the start-up job has
timed the race's lanes and measured the shared voice), then for each level sends `--requests` texts from that many
clients at once over loopback with gradio_client, each reading the event's updates as they come: the player's
payloads (`app.compare.speak.SpokenAudio`, pieces numbered from 0). Per level: first audio P50/P95/P99 (from the
submit to the first update carrying audio), streams that stalled (a piece came later than the audio before it lasts,
by more than the server load test's tolerance), the real-time factor (median) and the modes the status lines name.
The clients are threads of this process, which uses little CPU beside the app's.

    python -m scripts.speak_load [--concurrency 1,4,8,16] [--requests 32] [--url http://127.0.0.1:7860]

Developer-only (imported by nothing); needs Chromium and Playwright for the readiness check (`requirements-dev.txt`).
"""

from __future__ import annotations

import argparse
import base64
import json
import queue
import re
import shutil
import threading
import time
from collections import Counter

from gradio_client import Client
from playwright.sync_api import sync_playwright

from scripts.race_bench import CHROMIUM_ARGS, app_at, open_when_ready
from ssd_demo.measure.reporting import cpu_name
from ssd_demo.measure.serve_load import STALL_TOLERANCE_S, Answer, load_table, summarise
from ssd_demo.measure.visitor_texts import visitor_texts

BYTES_PER_SAMPLE = 2


def speak_once(client: Client, text: str) -> tuple[Answer, str]:
    """One text from a visitor's open page: the answer as `serve_load` counts it, and the last status line."""
    started = time.perf_counter()
    job = client.submit(text, "embedded", api_name="/speak")
    first, received, stalled, seen, status, rate = None, 0, False, set(), "", 22_050
    for status, payload in job:
        now = time.perf_counter() - started
        if not isinstance(payload, str) or not payload:
            continue
        data = json.loads(payload)
        rate = data["rate"]
        for piece in data["pieces"]:
            if piece["index"] in seen:
                continue
            seen.add(piece["index"])
            first = now if first is None else first
            stalled = stalled or now - first > received / BYTES_PER_SAMPLE / rate + STALL_TOLERANCE_S
            received += len(base64.b64decode(piece["pcm"]))
    final = job.outputs()[-1][0] if job.outputs() else status
    ok = final.startswith("**Decoded:**")
    # serve_load's RTF divides by 16-bit samples at the rate its caller names: count these at 22,050 Hz for it
    audio_bytes = int(received * 22_050 / rate)
    return Answer(200 if ok else 500, first, time.perf_counter() - started, audio_bytes, None, stalled), final


def run_level(url: str, texts: list[str], concurrency: int, requests: int) -> tuple[list[Answer], float, Counter]:
    todo: queue.Queue[int] = queue.Queue()
    for index in range(requests):
        todo.put(index)
    answers, modes, lock = [], Counter(), threading.Lock()
    # Each visitor's page is open before the level starts (a client reads the app's config and API once).
    clients = [Client(url, verbose=False) for _ in range(concurrency)]

    def visitor(client: Client) -> None:
        while True:
            try:
                index = todo.get_nowait()
            except queue.Empty:
                return
            answer, status = speak_once(client, texts[index % len(texts)])
            mode = re.search(r"; (autoregressive|speculative)", status)
            with lock:
                answers.append(answer)
                modes[mode.group(1) if mode else "not spoken"] += 1

    started = time.perf_counter()
    threads = [threading.Thread(target=visitor, args=(client,)) for client in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers, time.perf_counter() - started, modes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", default="1,4,8,16")
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--url", default=None, help="a running app (default: start one on a free port)")
    args = parser.parse_args(argv)
    process, url = app_at(args.url)
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=shutil.which("chromium"), args=CHROMIUM_ARGS,
                                                 headless=True)
            open_when_ready(browser.new_page(), url)
            browser.close()
        texts = [text for _, text in visitor_texts(per_bucket=4)]
        speak_once(Client(url, verbose=False), texts[0])  # warm-up
        rows = []
        for level in [int(level) for level in args.concurrency.split(",")]:
            answers, wall, modes = run_level(url, texts, level, args.requests)
            rows.append(summarise("speak", level, answers, wall, 22_050))
            print(load_table(rows[-1:])[-1], "modes:", dict(modes), flush=True)
        print("\n" + "\n".join(load_table(rows)))
        print(f"\nthe app's /speak ('Just speak it'), {args.requests} texts per level ({len(texts)} visitor texts in "
              f"turn, after one warm-up), clients over loopback; {cpu_name()}")
    finally:
        if process is not None:
            process.terminate()
            process.wait(timeout=60)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
