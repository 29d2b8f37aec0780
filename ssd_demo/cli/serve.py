"""`python -m ssd_demo serve`: OpenAI's speech endpoint over one preset; `--bench` load-tests it instead.

    python -m ssd_demo serve                          # the embedded voice on http://127.0.0.1:8000
    curl -s http://127.0.0.1:8000/v1/audio/speech -H 'Content-Type: application/json' \\
         -d '{"model": "embedded", "voice": "default", "input": "Hello there.", "beta": 0.2}' -o hello.wav
    python -m ssd_demo serve --bench --concurrency 1,4,16 --requests 16   # AR, exact and SSD under load
"""

from __future__ import annotations

import argparse
import socket
import threading
import time

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
    parser.add_argument("--port", type=int, default=8000)
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
    add_docs_argument(parser, DOCS_SECTION)


def _levels(text: str) -> list[int]:
    try:
        levels = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise InputError(f"--concurrency takes whole numbers separated by commas, got {text!r}") from None
    if not levels or min(levels) < 1:
        raise InputError(f"--concurrency takes numbers of at least 1, got {text!r}")
    return levels


def _in_background(service: SpeechService):
    """The server on a free loopback port, in a thread: (server, address)."""
    import uvicorn

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(build_speech_api(service), host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return server, f"http://127.0.0.1:{port}"


def bench(args: argparse.Namespace, service: SpeechService) -> int:
    levels = _levels(args.concurrency)
    service.max_waiting = max(service.max_waiting, max(levels))  # the test measures waiting, not refusals
    server, url = _in_background(service)
    texts = [text for _, text in visitor_texts(per_bucket=4)]
    systems = {name: {**fields, "seed": args.seed} for name, fields in BENCH_SYSTEMS.items()}
    try:
        rows = run_load(url, systems, texts, levels, args.requests, service.sample_rate, service.preset,
                        args.max_minutes * 60, progress=lambda row: print(load_table([row])[-1], flush=True))
    finally:
        server.should_exit = True
    table = "\n".join(load_table(rows))
    basis = (f"{args.preset}, {service.workers} worker(s), {args.requests} requests per system and level "
             f"({len(texts)} visitor texts in turn), seed {args.seed}; {cpu_name()}; commit {git_commit()}")
    print(f"\n{table}\n\n{basis}")
    target = docs_target(args)
    if target is not None:
        heading = f"## {DOCS_SECTION}"
        write_section(target, heading, f"{heading}\n\n{table}\n\n{basis}. Command: `python -m ssd_demo serve "
                                       f"--bench --concurrency {args.concurrency} --requests {args.requests}`\n")
    return 0


def main(args: argparse.Namespace) -> int:
    import uvicorn  # deferred: --help stays fast

    _, synthesizer = load(args.preset)
    service = SpeechService(args.preset, synthesizer, workers=args.workers, max_waiting=args.max_waiting)
    if args.bench:
        return bench(args, service)
    print(f"serving {args.preset} on http://{args.host}:{args.port}/v1/audio/speech "
          f"({args.workers} worker(s), {args.max_waiting} waiting at most)", flush=True)
    uvicorn.run(build_speech_api(service), host=args.host, port=args.port, log_level="warning")
    return 0
