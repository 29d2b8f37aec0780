"""`python -m ssd_demo serve`: OpenAI's speech endpoint over one preset; `--bench` load-tests it instead.

    python -m ssd_demo serve                          # the embedded voice on http://127.0.0.1:8000
    curl -s http://127.0.0.1:8000/v1/audio/speech -H 'Content-Type: application/json' \\
         -d '{"model": "embedded", "voice": "default", "input": "Hello there.", "beta": 0.2}' -o hello.wav
    python -m ssd_demo serve --bench --concurrency 1,4,16 --requests 16   # AR, exact and SSD under load
    python -m ssd_demo serve --engine vllm --preset llasa-1b-3b       # Llasa on vLLM: 16 requests share its batches
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time

import httpx

from ..backends.vllm import ENGINES, engine_choice, use_engine
from ..config import SETTINGS
from ..backends.vllm.worker import require_vllm_python
from ..errors import InputError
from ..measure.reporting import add_docs_argument, cpu_name, docs_target, git_commit, write_section
from ..measure.serve_load import load_table, run_load
from ..measure.visitor_texts import visitor_texts
from .synth import _load

#: The systems `--bench` compares, as request fields; on vLLM also mode "auto" (speculative where it pays).
BENCH_SYSTEMS = {"AR": {"mode": "ar"}, "exact speculative": {"acceptance": "exact"},
                 "SSD beta=0.2": {"acceptance": "ssd", "beta": 0.2}}
AUTO_SYSTEM = {"auto (exact)": {"mode": "auto", "acceptance": "exact"}}
DOCS_SECTION = "Serving under load: first audio as clients come at once"
SHUTDOWN_GRACE_S = 5
#: Requests decoded at once on vLLM by default: its engine batches them (each a thread that waits for its chunks).
VLLM_WORKERS = 16
#: Requests decoded at once on our engine where it batches them (`speech.chunk_generator.BatchingEngines`).
BATCH_WORKERS = 16


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", default="embedded", help="the model pair to serve (default: the embedded voice)")
    parser.add_argument("--target-model", help="custom pair: target repo id or local folder (with --draft-model)")
    parser.add_argument("--draft-model", help="custom pair: draft repo id or local folder (with --target-model)")
    parser.add_argument("--codec", default=None, help="custom pair: codec repo id or folder")
    parser.add_argument("--revision", default=None, help="custom pair: Hub revision of both models")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--engine", choices=ENGINES, default=None,
                        help="where the speech LM runs: ours (default) or vllm (Llasa presets and custom pairs, "
                             "needs .venv-vllm, see docs/vllm.md); default $SSD_DEMO_ENGINE or ours")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1: this machine only; 0.0.0.0 for every interface)")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    parser.add_argument("--workers", type=int, default=None,
                        help=f"requests decoded at once (default {BATCH_WORKERS} on our engine where it batches them "
                             f"together, the embedded voice's; {VLLM_WORKERS} on vLLM; else 1: on a CPU more only "
                             "share the cores)")
    parser.add_argument("--no-batching", action="store_true",
                        help="on our engine, decode each request alone (the default batches the autoregressive "
                             "requests of a voice whose model allows it, and requests that name no mode are auto: "
                             "speculative alone, batched among others)")
    parser.add_argument("--max-waiting", type=int, default=8,
                        help="requests that may wait for a worker; more are refused with status 429 (default 8)")
    parser.add_argument("--fix", action="append", default=[], metavar="SETTING=VALUE",
                        help="fix a decoding setting, or the draft, for every request (repeatable, e.g. --fix "
                             "draft_len=4 --fix draft=heads): one left out gets this value, another value is refused "
                             "with status 400. On vLLM a new K or draft restarts the speculative engine: a public "
                             "server pins them")
    bench = parser.add_argument_group("load test (--bench: a server on a free loopback port, then many clients)")
    bench.add_argument("--bench", action="store_true", help="load-test the server instead of serving")
    bench.add_argument("--concurrency", default="1,4,16", help="clients at once, per level (default 1,4,16)")
    bench.add_argument("--requests", type=int, default=16, help="requests per system and level (default 16)")
    bench.add_argument("--max-minutes", type=float, default=20.0, help="stop sending after this long (default 20)")
    bench.add_argument("--seed", type=int, default=0, help="every request's seed (default 0)")
    bench.add_argument("--max-new-tokens", type=int, default=None,
                       help="every request's token limit (default: the voice's own; for models that rarely stop)")
    add_docs_argument(bench, DOCS_SECTION)


def _levels(text: str) -> list[int]:
    try:
        levels = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise InputError(f"--concurrency takes whole numbers separated by commas, got {text!r}") from None
    if not levels or min(levels) < 1:
        raise InputError(f"--concurrency takes numbers of at least 1, got {text!r}")
    return levels


def _model_flags(args: argparse.Namespace) -> list[str]:
    """The flags that choose the voice, its engine and the fixed settings, for the load test's own server process."""
    flags = ["--preset", args.preset, "--engine", engine_choice(args.engine), "--device", args.device]
    for name in ("target_model", "draft_model", "codec", "revision"):
        value = getattr(args, name)
        if value:
            flags += [f"--{name.replace('_', '-')}", value]
    for fixed in args.fix:
        flags += ["--fix", fixed]
    return flags + (["--no-batching"] if args.no_batching else [])


def _fixed(args: argparse.Namespace) -> dict[str, object]:
    """`--fix SETTING=VALUE` flags as {setting: value} (values are checked by the service, as a request's are)."""
    fixed: dict[str, object] = {}
    for item in args.fix:
        name, equals, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not equals or not name or not value:
            raise InputError(f"--fix takes SETTING=VALUE, e.g. draft_len=4; got {item!r}")
        if name in SETTINGS and SETTINGS[name].kind == "bool":
            switch = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}
            if value.lower() not in switch:
                raise InputError(f"--fix {name} takes true or false; got {value!r}")
            fixed[name] = switch[value.lower()]
        else:
            fixed[name] = value
    return fixed


def _workers(args: argparse.Namespace, batching: bool = False) -> int:
    if args.workers is not None:
        return args.workers
    return VLLM_WORKERS if engine_choice(args.engine) == "vllm" else BATCH_WORKERS if batching else 1


def _with_batching(synthesizer, args: argparse.Namespace) -> bool:
    """On our engine, unless told not to: the voice's autoregressive requests decode in one running batch
    (`BatchingEngines`) where its model allows it. Whether it does."""
    from ..engine.batched_forward import batches
    from ..speech.chunk_generator import BatchingEngines

    if engine_choice(args.engine) != "ours" or args.no_batching or not batches(synthesizer.target):
        return False
    synthesizer.chunk_generator = BatchingEngines(max_rows=_workers(args, batching=True))
    # The batch runs in the engine's own thread, where two intra-op threads made its steps slower than one (an AMD
    # EPYC, 2 cores: 12.9 / 19.8 / 29.7 ms at 1 / 8 / 16 rows against 6.8 / 13.9 / 21.7 with one thread); one
    # also leaves the other core to the codec. (Speculative requests run ONNX Runtime, with threads of its own.)
    import torch

    torch.set_num_threads(1)
    return True


def _name(args: argparse.Namespace) -> str:
    return "custom" if args.target_model or args.draft_model else args.preset


def _voice(args: argparse.Namespace):
    """The synthesizer to serve, on the engine asked for (vLLM's environment checked before the models load)."""
    engine = engine_choice(args.engine)
    if engine == "vllm":
        require_vllm_python()
    from ..comparison.models import preferred_device

    args.voice = None  # what synth's loader reads besides the model flags
    if args.device == "auto" and preferred_device() == "cuda":
        args.device = "cuda"  # as the app: a GPU when there is one
    return use_engine(_load(args), engine)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _server_process(args: argparse.Namespace, levels: list[int]) -> tuple[subprocess.Popen, str]:
    """`serve` in its own process on a free loopback port (so that the clients' threads do not share its
    interpreter), once it answers /health."""
    port = _free_port()
    command = [sys.executable, "-m", "ssd_demo", "serve", *_model_flags(args), "--port", str(port),
               *(["--workers", str(args.workers)] if args.workers is not None else []),
               "--max-waiting", str(max(args.max_waiting, max(levels)))]
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


def _engine_name(args: argparse.Namespace) -> str:
    return "vLLM's engine" if engine_choice(args.engine) == "vllm" else "our engine"


def _costs_note(costs: dict) -> str:
    """What mode "auto" decided from: the engines' tokens per second per batch size, as the server measured them."""
    if not costs:
        return ""
    parts = [f"batch {batch}: AR {rates['ar']:.0f}, speculative {rates['speculative']:.0f}"
             for batch, rates in costs.items()]
    return "; mode auto from the engines' tokens/s measured at start (" + "; ".join(parts) + ")"


def speculation_costs(synthesizer, fixed: dict[str, object] | None = None) -> None:
    """On an engine that batches (vLLM's, our batching one): measure AR and speculative tokens/s per batch size,
    which mode "auto" decides from, with the settings the operator fixed (K and the draft among them); printed."""
    if not getattr(synthesizer, "measures_speculation", False):
        return
    fixed = fixed or {}
    decoding = {name: value for name, value in fixed.items() if name in SETTINGS}
    print("measuring AR and speculative decoding per batch size (mode auto decides from these) ...", flush=True)
    costs = synthesizer.measure_speculation(config=synthesizer.config(**decoding) if decoding else None,
                                            draft=fixed.get("draft"))
    if not costs:
        print("  not measured (a target this large would take minutes): auto speculates alone only", flush=True)
    for batch, (ar, speculative) in costs.items():
        verdict = "speculative" if speculative > ar else "AR"
        print(f"  batch {batch:>2}: AR {ar:.0f} tokens/s, speculative {speculative:.0f} tokens/s -> {verdict}", flush=True)


def bench(args: argparse.Namespace) -> int:
    levels = _levels(args.concurrency)
    process, url = _server_process(args, levels)
    texts = [text for _, text in visitor_texts(per_bucket=4)]
    on_vllm = engine_choice(args.engine) == "vllm"
    limit = {} if args.max_new_tokens is None else {"max_new_tokens": args.max_new_tokens}
    try:
        warm_up = httpx.post(url + "/v1/audio/speech", json={"model": _name(args), "voice": "default", "input": texts[0],
                                                              "response_format": "pcm", **limit}, timeout=600)
        if warm_up.status_code != 200:
            raise InputError(f"the server refused the warm-up request: {warm_up.text[:500]}")
        rate = int(warm_up.headers["x-sample-rate"])
        batching = httpx.get(url + "/health", timeout=10).json().get("default_mode") == "auto"  # ours, batching
        systems = {name: {**fields, "seed": args.seed, **limit}
                   for name, fields in {**BENCH_SYSTEMS, **(AUTO_SYSTEM if on_vllm or batching else {})}.items()}
        rows = run_load(url, systems, texts, levels, args.requests, rate, _name(args), args.max_minutes * 60,
                        progress=lambda row: print(load_table([row])[-1], flush=True))
        health = httpx.get(url + "/health", timeout=10).json()
        costs, engine = health.get("speculation_tokens_per_second", {}), health.get("engine", "")
        workers = health.get("workers", "?")
    finally:
        process.terminate()
        process.wait(timeout=30)
    table = "\n".join(load_table(rows))
    basis = (f"{_name(args)} on {_engine_name(args)}, {workers} worker(s), the server in its own "
             f"process, {args.requests} requests per "
             f"system and level ({len(texts)} visitor texts in turn, after one warm-up request), seed {args.seed}; "
             f"{cpu_name()}; {engine}; commit {git_commit()}" + _costs_note(costs))
    print(f"\n{table}\n\n{basis}")
    target = docs_target(args)
    if target is not None:
        heading = f"## {DOCS_SECTION}" + (" on vLLM" if engine_choice(args.engine) == "vllm" else "")
        write_section(target, heading, f"{heading}\n\n{table}\n\n{basis}. Command: `python -m ssd_demo serve "
                                       f"{' '.join(_model_flags(args))} --bench --concurrency {args.concurrency} "
                                       f"--requests {args.requests}"
                                       + ("" if args.max_new_tokens is None else f" --max-new-tokens {args.max_new_tokens}")
                                       + (" --no-batching" if args.no_batching else "")
                                       + "`\n")
    return 0


def main(args: argparse.Namespace) -> int:
    if args.bench:
        return bench(args)
    import uvicorn  # deferred, as the server and the models' code: --help stays fast

    from ..server.openai_api import build_speech_api
    from ..server.service import SpeechService

    fixed = _fixed(args)  # the syntax checked before the models load
    synthesizer = _voice(args)
    batching = _with_batching(synthesizer, args)
    service = SpeechService(_name(args), synthesizer, workers=_workers(args, batching), max_waiting=args.max_waiting,
                            fixed=fixed, default_mode="auto" if batching else "speculative")
    speculation_costs(synthesizer, service.fixed)
    pinned = f"; fixed for every request: {', '.join(f'{k}={v}' for k, v in service.fixed.items())}" if fixed else ""
    print(f"serving {_name(args)} on http://{args.host}:{args.port}/v1/audio/speech, {_engine_name(args)} "
          f"({service.workers} worker(s), {args.max_waiting} waiting at most{pinned}"
          f"{'; autoregressive requests batched, mode auto by default' if batching else ''})", flush=True)
    try:
        # On Ctrl-C, requests still decoding get SHUTDOWN_GRACE_S to finish, then are stopped within one round.
        uvicorn.run(build_speech_api(service), host=args.host, port=args.port, log_level="warning",
                    timeout_graceful_shutdown=SHUTDOWN_GRACE_S)
    finally:
        getattr(synthesizer, "close", lambda: None)()  # vLLM's engine processes end with the server
    return 0
