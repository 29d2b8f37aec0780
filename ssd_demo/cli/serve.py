"""`python -m ssd_demo serve`: OpenAI's speech endpoint over one preset; `--bench` load-tests it instead.

    python -m ssd_demo serve                          # the embedded voice on http://127.0.0.1:8000
    curl -s http://127.0.0.1:8000/v1/audio/speech -H 'Content-Type: application/json' \\
         -d '{"model": "embedded", "voice": "default", "input": "Hello there.", "beta": 0.2}' -o hello.wav
    python -m ssd_demo serve --bench --concurrency 1,4,16 --requests 16   # AR, exact and SSD under load
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time

import httpx

from ..comparison import load
from ..errors import InputError
from ..measure.reporting import add_docs_argument, cpu_name, docs_target, git_commit, write_section
from ..measure.serve_load import load_table, run_load
from ..measure.visitor_texts import visitor_texts
from ..server.openai_api import build_speech_api
from ..server.service import SpeechService

#: The systems `--bench` compares, as request fields.
BENCH_SYSTEMS = {"AR": {"mode": "ar"}, "exact speculative": {"acceptance": "exact"},
                 "SSD beta=0.2": {"acceptance": "ssd", "beta": 0.2}}
DOCS_SECTION = "Serving under load: first audio at 1, 4 and 16 clients"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", default="embedded", help="the model pair to serve (default: the embedded voice)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1: this machine only; 0.0.0.0 for every interface)")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    parser.add_argument("--workers", type=int, default=1,
                        help="requests decoded at once (default 1: on a CPU more only share the cores)")
    parser.add_argument("--max-waiting", type=int, default=8,
                        help="requests that may wait for a worker; more are refused with status 429 (default 8)")
    bench = parser.add_argument_group("load test (--bench: a server on a free loopback port, then many clients)")
    bench.add_argument("--bench", action="store_true", help="load-test the server instead of serving")
    bench.add_argument("--concurrency", default="1,4,16", help="clients at once, per level (default 1,4,16)")
    bench.add_argument("--requests", type=int, default=16, help="requests per system and level (default 16)")
    bench.add_argument("--max-minutes", type=float, default=20.0, help="stop sending after this long (default 20)")
    bench.add_argument("--seed", type=int, default=0, help="every request's seed (default 0)")
    add_docs_argument(bench, DOCS_SECTION)


def _levels(text: str) -> list[int]:
    try:
        levels = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise InputError(f"--concurrency takes whole numbers separated by commas, got {text!r}") from None
    if not levels or min(levels) < 1:
        raise InputError(f"--concurrency takes numbers of at least 1, got {text!r}")
    return levels


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _server_process(args: argparse.Namespace, levels: list[int]) -> tuple[subprocess.Popen, str]:
    """`serve` in its own process on a free loopback port (so that the clients' threads do not share its
    interpreter), once it answers /health."""
    port = _free_port()
    command = [sys.executable, "-m", "ssd_demo", "serve", "--preset", args.preset, "--port", str(port),
               "--workers", str(args.workers), "--max-waiting", str(max(args.max_waiting, max(levels)))]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 600
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return process, url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    process.kill()
    raise InputError(f"the server for the load test did not start (exit status {process.poll()})")


def bench(args: argparse.Namespace) -> int:
    levels = _levels(args.concurrency)
    process, url = _server_process(args, levels)
    texts = [text for _, text in visitor_texts(per_bucket=4)]
    systems = {name: {**fields, "seed": args.seed} for name, fields in BENCH_SYSTEMS.items()}
    try:
        rate = int(httpx.post(url + "/v1/audio/speech", json={"model": args.preset, "voice": "default", "input": texts[0],
                                                               "response_format": "pcm"}, timeout=600)
                   .headers["x-sample-rate"])  # also the warm-up
        rows = run_load(url, systems, texts, levels, args.requests, rate, args.preset, args.max_minutes * 60,
                        progress=lambda row: print(load_table([row])[-1], flush=True))
    finally:
        process.terminate()
        process.wait(timeout=30)
    table = "\n".join(load_table(rows))
    basis = (f"{args.preset}, {args.workers} worker(s), the server in its own process, {args.requests} requests per "
             f"system and level ({len(texts)} visitor texts in turn, after one warm-up request), seed {args.seed}; "
             f"{cpu_name()}; commit {git_commit()}")
    print(f"\n{table}\n\n{basis}")
    target = docs_target(args)
    if target is not None:
        heading = f"## {DOCS_SECTION}"
        write_section(target, heading, f"{heading}\n\n{table}\n\n{basis}. Command: `python -m ssd_demo serve "
                                       f"--bench --concurrency {args.concurrency} --requests {args.requests}`\n")
    return 0


def main(args: argparse.Namespace) -> int:
    if args.bench:
        return bench(args)
    import uvicorn  # deferred: --help stays fast

    _, synthesizer = load(args.preset)
    service = SpeechService(args.preset, synthesizer, workers=args.workers, max_waiting=args.max_waiting)
    print(f"serving {args.preset} on http://{args.host}:{args.port}/v1/audio/speech "
          f"({args.workers} worker(s), {args.max_waiting} waiting at most)", flush=True)
    uvicorn.run(build_speech_api(service), host=args.host, port=args.port, log_level="warning")
    return 0
