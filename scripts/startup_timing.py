"""`python -m scripts.startup_timing`: how soon the command line and the app answer, as a person waits for them.

Times, in fresh processes, interleaved over --repeats rounds after one untimed round (which fills this machine's
cache of measured costs, `engine.machine_cache`, as any first run here does): `python -m ssd_demo --help`,
`python -m ssd_demo synth --help`, and a warm `python -m ssd_demo synth` of a short sentence (wall time from the
command to the WAV written); then the app: `python app.py` on a free port, until its page is served (HTTP 200) and
until the page, opened in Chromium, says "Ready" (the decoders warmed up, this machine's costs known). Medians and
ranges; with `--docs FILE` the table goes under "## Start-up: how soon the command line and the app answer".
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import date
from pathlib import Path

from scripts._cli import run_cli
from scripts.race_bench import CHROMIUM_ARGS, free_port

from ssd_demo.measure.reporting import add_docs_argument, cpu_name, docs_target, git_commit, write_section

SECTION = "## Start-up: how soon the command line and the app answer"
TEXT = "Hello there, how are you?"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False"}


def command_seconds(args: list[str]) -> float:
    """Wall seconds of one fresh `python -m ssd_demo ARGS` (which must succeed)."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "ssd_demo", *args], env=ENV, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def app_seconds(browser) -> tuple[float, float]:
    """(page served, page says Ready): seconds after `python app.py` was started."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    started = time.perf_counter()
    app = subprocess.Popen([sys.executable, "app.py"], env={**ENV, "GRADIO_SERVER_PORT": str(port)},
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        served = None
        while served is None:
            if app.poll() is not None or time.perf_counter() - started > 300:
                raise RuntimeError("the app did not serve its page")
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    if response.status == 200:
                        served = time.perf_counter() - started
            except OSError:
                time.sleep(0.05)
        page = browser.new_page(viewport={"width": 1280, "height": 720})
        page.goto(url)
        while not page.inner_text("#ssd-status").strip().startswith("Ready"):
            if time.perf_counter() - started > 300:
                raise RuntimeError("the app did not get ready")
            time.sleep(0.05)
        ready = time.perf_counter() - started
        page.close()
        return served, ready
    finally:
        app.terminate()
        app.wait(timeout=30)


def cell(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} s ({min(values):.2f}-{max(values):.2f})"


def run(args) -> int:
    from playwright.sync_api import sync_playwright

    out = Path(tempfile.mkdtemp()) / "startup.wav"
    commands = {
        "`python -m ssd_demo --help`": ["--help"],
        "`python -m ssd_demo synth --help`": ["synth", "--help"],
        f'warm `python -m ssd_demo synth "{TEXT}"`': ["synth", TEXT, "--out", str(out)],
    }
    times: dict[str, list[float]] = {name: [] for name in [*commands, "`python app.py`: page served",
                                                           "`python app.py`: page says Ready"]}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=shutil.which("chromium"), args=CHROMIUM_ARGS)
        for round_ in range(args.repeats + 1):  # round 0 is the untimed first run
            for name, command in commands.items():
                seconds = command_seconds(command)
                if round_:
                    times[name].append(seconds)
            served, ready = app_seconds(browser)
            if round_:
                times["`python app.py`: page served"].append(served)
                times["`python app.py`: page says Ready"].append(ready)
            print(f"round {round_}{' (untimed)' if not round_ else ''}: "
                  + ", ".join(f"{name} {values[-1]:.2f} s" for name, values in times.items() if values), flush=True)
        browser.close()
    table = "\n".join(f"| {name} | {cell(values)} |" for name, values in times.items())
    section = (f"{SECTION}\n\n`python -m scripts.startup_timing --repeats {args.repeats}` (commit {git_commit()}, "
               f"{cpu_name()}, {os.cpu_count()} cores, idle, {date.today().isoformat()}): wall seconds in fresh "
               f"processes, median (range) of {args.repeats} interleaved rounds after an untimed one.\n\n"
               f"| what a person waits for | seconds |\n|---|---|\n{table}\n")
    print("\n" + section)
    docs = docs_target(args)
    if docs is not None:
        write_section(docs, SECTION, section)
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds (default 3)")
    add_docs_argument(parser, SECTION)


def main(argv: list[str] | None = None) -> int:
    return run_cli("python -m scripts.startup_timing", __doc__, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
