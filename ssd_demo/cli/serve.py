"""`python -m ssd_demo serve`: OpenAI's speech endpoint over one preset.

    python -m ssd_demo serve                          # the embedded voice on http://127.0.0.1:8000
    curl -s http://127.0.0.1:8000/v1/audio/speech -H 'Content-Type: application/json' \\
         -d '{"model": "embedded", "voice": "default", "input": "Hello there.", "beta": 0.2}' -o hello.wav
"""

from __future__ import annotations

import argparse

from ..comparison import load
from ..server.openai_api import build_speech_api
from ..server.service import SpeechService


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", default="embedded", help="the model pair to serve (default: the embedded voice)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1: this machine only; 0.0.0.0 for every interface)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--workers", type=int, default=1,
                        help="requests decoded at once (default 1: on a CPU more only share the cores)")
    parser.add_argument("--max-waiting", type=int, default=8,
                        help="requests that may wait for a worker; more are refused with status 429 (default 8)")


def main(args: argparse.Namespace) -> int:
    import uvicorn  # deferred: --help stays fast

    _, synthesizer = load(args.preset)
    service = SpeechService(args.preset, synthesizer, workers=args.workers, max_waiting=args.max_waiting)
    print(f"serving {args.preset} on http://{args.host}:{args.port}/v1/audio/speech "
          f"({args.workers} worker(s), {args.max_waiting} waiting at most)", flush=True)
    uvicorn.run(build_speech_api(service), host=args.host, port=args.port, log_level="warning")
    return 0
