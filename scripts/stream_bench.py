"""`python -m scripts.stream_bench`: time to first audio of the app's race, through `gradio_client` streaming.

Launches the app in this process on a local port, clicks `/race` once to load and warm up, then
races `--runs` times on a two-sentence text and reads every streamed update as it arrives.

Reported per run, from the server's clock (`details["race"]`, what the page shows): the time to the
full AR result (its stream's start to its last piece) and the time to first audio of the speculative
stream (its start to its first piece), and their ratio (the bar: at most 40 %). From the client's
clock, bounds that can only be worse for speculative decoding: its first audio counted from the last
update that still showed AR running (the speculative run starts after that), and the AR run from the
first update that showed it running to the last one before it was done. Writes the table into
docs/benchmarks.md under "## Streaming: time to first audio".
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from dataclasses import dataclass

import torch

from scripts._cli import run_cli

from ssd_demo.measure.reporting import add_docs_argument, cpu_name, docs_target, git_commit, median, write_section

SECTION = "## Streaming: time to first audio"
TEXT = "The quick brown fox jumps over the lazy dog. Speculative decoding lets the small model guess ahead."
#: /race outputs, in order (see ssd_demo/app/compare/race_view.py: status, both lanes' counters, then the rest).
STATUS, AR_LIVE, SPEC_LIVE = 0, 1, 2
DETAILS = -2
NO_AUDIO_YET = "First audio after **–**"


@dataclass
class StreamRun:
    ar_full: float  # server: AR stream start -> its last piece
    spec_first: float  # server: speculative stream start -> its first piece
    client_ar_full: float  # client: lower bound of the AR run
    client_spec_first: float  # client: upper bound of the speculative time to first audio
    pieces: int  # speculative pieces
    ar_rtf: float
    spec_rtf: float

    @property
    def ratio(self) -> float:
        return self.spec_first / self.ar_full

    @property
    def client_ratio(self) -> float:
        return self.client_spec_first / self.client_ar_full


def race_once(client, text: str, seed: int) -> StreamRun:
    """One /race call, every streamed update time-stamped on arrival."""
    job = client.submit(text, seed=seed, api_name="/race")
    arrivals: list[tuple[float, list]] = []
    while True:
        done = job.done()
        outputs = job.outputs()
        now = time.perf_counter()
        arrivals += [(now, values) for values in outputs[len(arrivals):]]
        if done:
            break
        time.sleep(0.005)
    final = job.result()
    details = final[DETAILS]
    race = details["race"]
    ar_running = [t for t, v in arrivals if "running" in v[AR_LIVE]]
    spec_heard = next(t for t, v in arrivals if NO_AUDIO_YET not in v[SPEC_LIVE])
    return StreamRun(
        ar_full=race["autoregressive"]["time_to_last_audio"],
        spec_first=race["speculative"]["time_to_first_audio"],
        client_ar_full=ar_running[-1] - ar_running[0],
        client_spec_first=spec_heard - ar_running[-1],
        pieces=len(race["speculative"]["pieces"]),
        ar_rtf=details["autoregressive"]["real_time_factor"],
        spec_rtf=details["speculative"]["real_time_factor"],
    )


def markdown(runs: list[StreamRun], command: str, meta: dict) -> str:
    rows = [f"| {i + 1} | {r.ar_full:.2f} s | {r.spec_first:.2f} s | **{100 * r.ratio:.0f} %** | "
            f"{r.client_ar_full:.2f} s | {r.client_spec_first:.2f} s | {100 * r.client_ratio:.0f} % | {r.pieces} | "
            f"{r.ar_rtf:.2f} / {r.spec_rtf:.2f} |" for i, r in enumerate(runs)]
    worst = max(r.ratio for r in runs)
    return "\n".join([
        SECTION, "",
        f"Command: `{command}`  ",
        f"CPU: {meta['cpu']}; torch threads: {meta['threads']}; {meta['date']}; commit {meta['commit']}.  ",
        f"Text (two sentences, the embedded voice speaks them as {meta['chunks']} chunks): \"{meta['text']}\"", "",
        "Each run is one `/race` call through `gradio_client` streaming (AR stream, then speculative stream, "
        "one after the other), after one warm-up call. Server: the times the page shows (each stream timed "
        "from its own start). Client: bounds from the arrival times of the streamed updates, both in AR's "
        "favour (the speculative first audio counted from the last update that still showed AR running, "
        "the AR run from its first to its last running update).", "",
        "| run | AR full result | speculative first audio | ratio | client: AR run ≥ | client: spec. first audio ≤ "
        "| client ratio ≤ | spec. pieces | RTF AR / spec. |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *rows, "",
        f"Bar: the speculative stream's time to first audio is at most 40 % of the time to the full AR result. "
        f"Worst run: {100 * worst:.0f} % (median {100 * median([r.ratio for r in runs]):.0f} %); "
        f"{'met' if worst <= 0.40 else 'not met'}.",
    ])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", default="embedded", help="model preset (default: the embedded voice)")
    parser.add_argument("--text", default=TEXT, help="text to race (default: two sentences)")
    parser.add_argument("--runs", type=int, default=3, help="measured races after the warm-up (default 3)")
    parser.add_argument("--seed", type=int, default=1)
    add_docs_argument(parser, "streaming")


def main(args: argparse.Namespace) -> int:
    if args.runs < 1:
        raise ValueError("--runs must be at least 1")
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    from gradio_client import Client

    from ssd_demo.app.compare import load
    from ssd_demo.app.page import build_demo

    demo = build_demo(default_preset=args.preset)
    _, url, _ = demo.launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True)
    try:
        client = Client(url, verbose=False)
        race_once(client, "Warm up.", args.seed)  # loads the models, warms up, calibrates
        runs = []
        for index in range(args.runs):
            run = race_once(client, args.text, args.seed + index)
            print(f"run {index + 1}: AR full {run.ar_full:.2f} s, speculative first audio {run.spec_first:.2f} s "
                  f"({100 * run.ratio:.0f} %); client bounds {run.client_ar_full:.2f} s / "
                  f"{run.client_spec_first:.2f} s ({100 * run.client_ratio:.0f} %)", flush=True)
            runs.append(run)
        _, synthesizer = load(args.preset)
        split = getattr(synthesizer.backend, "split_text", None)
        chunks = len(split(args.text)) if split is not None else 1
    finally:
        demo.close()
    meta = {"cpu": cpu_name(), "threads": torch.get_num_threads(), "commit": git_commit(), "text": args.text,
            "date": datetime.date.today().isoformat(), "chunks": chunks}
    env = " ".join(f"{name}={os.environ[name]}" for name in ("OMP_NUM_THREADS", "HF_HUB_OFFLINE") if name in os.environ)
    command = " ".join(part for part in (env, "python -m scripts.stream_bench", *sys.argv[1:]) if part)
    table = markdown(runs, command.strip(), meta)
    print(table)
    if docs_target(args) is not None:
        write_section(docs_target(args), SECTION, table)
    return 0



def cli(argv: list[str] | None = None) -> int:
    return run_cli("python -m scripts.stream_bench", __doc__, add_arguments, main, argv)


if __name__ == "__main__":
    sys.exit(cli())
