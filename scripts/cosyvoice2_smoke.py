"""CosyVoice 2's whole path in the real shapes, with random weights: time and memory per stage.

    python -m scripts.cosyvoice2_smoke [--tokens 48] [--dtype float32] [--device cpu] [--threads 2]

The 0.5 B speech LM (Qwen2.5-0.5B backbone, 6,564-wide decoder), the paper's 8-layer draft, the
flow model (6 + 4 conformer blocks, 10 Euler steps with guidance) and HiFT, all at full size: a
prompt (start, text, task, 3 s of voice-prompt speech tokens) goes through AR and speculative
decoding (K 3, beta 0.4, repetition-aware sampling) and token2wav, so the shapes, dtypes and memory of
the real path are exercised without the checkpoint or a GPU. Random weights say nothing about speed-
ups or sound (acceptance of an untrained draft on a random target is chance); the per-stage times and
the peak memory are what this measures.
"""

from __future__ import annotations

import argparse
import sys
import resource
import time

import torch

from scripts._cli import run_cli

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tokens", type=int, default=48, help="speech tokens each decoder generates (default 48)")
    parser.add_argument("--text-tokens", type=int, default=24, help="text tokens in the prompt (default 24)")
    parser.add_argument("--prompt-seconds", type=float, default=3.0,
                        help="voice prompt length, 25 speech tokens a second (default 3)")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32", help="the LMs' and the flow's dtype")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights, prompt and sampling")


def _peak_mb(device: torch.device) -> str:
    host = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux
    if device.type == "cuda":
        return f"{host:,.0f} MB host, {torch.cuda.max_memory_allocated(device) / 2**20:,.0f} MB GPU"
    return f"{host:,.0f} MB"


def main(args: argparse.Namespace) -> int:
    from ssd_demo.config import DecodingConfig
    from ssd_demo.engine.generate import autoregressive_generate, speculative_generate
    from ssd_demo.engine.repetition_aware import RepetitionAwareSampling
    from ssd_demo.measure.reporting import cpu_name
    from ssd_demo.backends.cosyvoice2.flow import CosyVoice2Flow, FlowConfig
    from ssd_demo.backends.cosyvoice2.hift import HiFTConfig, HiFTVocoder
    from ssd_demo.backends.cosyvoice2.llm import (REAL_BACKBONE, SpeechVocabLayout, build_speech_lm, layer_draft,
                                                  speech_lm_config)
    from transformers import Qwen2Config

    if args.threads:
        torch.set_num_threads(args.threads)
    device, dtype = torch.device(args.device), DTYPES[args.dtype]
    torch.manual_seed(args.seed)
    print(f"CosyVoice 2 smoke run, random weights in the real shapes: {args.dtype} on {device} "
          f"({cpu_name() if device.type == 'cpu' else torch.cuda.get_device_name(device)}, "
          f"{torch.get_num_threads()} torch threads)")
    rows: list[tuple[str, float, str, str]] = []

    def stage(name: str, started: float, note: str = "") -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        rows.append((name, time.perf_counter() - started, _peak_mb(device), note))
        print(f"  {name}: {rows[-1][1]:.1f} s, peak {rows[-1][2]} {note}".rstrip(), flush=True)

    started = time.perf_counter()
    layout = SpeechVocabLayout(text_rows=REAL_BACKBONE["vocab_size"])
    config = speech_lm_config(Qwen2Config(**REAL_BACKBONE), layout, dtype=dtype)
    target = build_speech_lm(config, device=device)
    draft = layer_draft(target, 2, 6)
    parameters = sum(p.numel() for p in target.parameters())
    stage("build speech LM + layer draft", started, f"({parameters / 1e6:.0f} M parameters; the draft shares them)")

    started = time.perf_counter()
    flow = CosyVoice2Flow(FlowConfig()).to(device=device, dtype=dtype).eval()
    hift = HiFTVocoder(HiFTConfig()).to(device).eval()  # float32, as the official runs it
    stage("build flow + HiFT", started, f"({sum(p.numel() for p in flow.parameters()) / 1e6:.0f} M + "
                                  f"{sum(p.numel() for p in hift.parameters()) / 1e6:.0f} M parameters)")

    prompt_tokens = torch.randint(0, layout.speech_tokens, (int(25 * args.prompt_seconds),)).tolist()
    text = torch.randint(0, 151643, (args.text_tokens,)).tolist()
    prompt = torch.tensor([layout.prompt_ids(text, prompt_tokens)], device=device)
    # Stop ids masked and the minimum at the full length: a fixed amount of work per decoder.
    ras = RepetitionAwareSampling(min_len=args.tokens, masked_until_min_len=(layout.end_of_speech,))
    decoding = DecodingConfig(max_new_tokens=args.tokens, allowed_token_ids=list(range(layout.speech_tokens)),
                              draft_len=3, beta=0.4, acceptance="ssd", seed=args.seed)
    results = {}
    for mode in ("ar", "speculative"):
        started = time.perf_counter()
        if mode == "ar":
            results[mode] = autoregressive_generate(target, prompt, decoding, prefix_distribution=ras)
        else:
            results[mode] = speculative_generate(target, draft, prompt, decoding, prefix_distribution=ras)
        stats = results[mode].stats
        accepted = f", {stats.acceptance_rate:.0%} of drafted tokens accepted" if mode == "speculative" else ""
        stage(f"{mode} decoding", started, f"({len(results[mode].tokens)} tokens after a {prompt.shape[1]}-token prompt, "
                                           f"{stats.target_calls} target calls{accepted})")

    started = time.perf_counter()
    mel_frames = 2 * len(prompt_tokens)
    with torch.inference_mode():
        mel = flow.inference(results["speculative"].tokens, prompt_tokens, torch.randn(mel_frames, 80, device=device),
                             torch.randn(192, device=device))
    stage("flow (10 Euler steps)", started, f"({mel.shape[-1]} mel frames)")
    started = time.perf_counter()
    with torch.inference_mode():
        audio, _ = hift.inference(mel.float(), generator=torch.Generator(device=device).manual_seed(0))
    stage("HiFT", started, f"({audio.shape[-1] / 24000:.2f} s of audio at 24 kHz)")
    if not torch.isfinite(audio).all():
        print("error: the waveform holds non-finite samples")
        return 1
    print("\n| stage | seconds | peak memory so far | |\n|---|---|---|---|")
    for name, seconds, peak, note in rows:
        print(f"| {name} | {seconds:.1f} | {peak} | {note.strip('()')} |")
    print("\nSpeculative decoding here: the paper's setting (8-layer draft, K 3, beta 0.4, RAS). With random weights "
          "the draft's acceptance is chance and says nothing about speed-ups; this run checks that the real shapes "
          "and dtypes go through end to end, and what they cost in time and memory.")
    return 0


__all__ = ["add_arguments", "main"]



def cli(argv: list[str] | None = None) -> int:
    return run_cli("python -m scripts.cosyvoice2_smoke", __doc__, add_arguments, main, argv)


if __name__ == "__main__":
    sys.exit(cli())
