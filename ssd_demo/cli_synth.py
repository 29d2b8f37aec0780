"""`python -m ssd_demo synth "Some text" --out out.wav`: speak text with the embedded voice.

    python -m ssd_demo synth "Hello there." --out hello.wav --mode speculative --draft-len 4 --beta 0.3
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import soundfile as sf


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("text", help="English text to speak (one short sentence, at most 100 characters)")
    parser.add_argument("--out", type=Path, default=Path("out.wav"), help="output WAV file (16-bit PCM)")
    parser.add_argument("--mode", choices=("ar", "speculative"), default="speculative")
    parser.add_argument("--draft", choices=("distilled", "layers"), default="distilled", help="draft model")
    parser.add_argument("--draft-len", type=int, default=None, help="tokens drafted per round (K)")
    parser.add_argument("--beta", type=float, default=None, help="SSD tolerance; 0 = exact speculative sampling")
    parser.add_argument("--temperature", type=float, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--voice", type=Path, default=None, help="voice folder (default: the shipped voice)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (default: torch's choice; 1 is faster on a busy machine)")


def main(args: argparse.Namespace) -> int:
    import torch

    from .backends.embedded import load_synthesizer

    if args.threads is not None:
        if args.threads < 1:
            raise ValueError(f"--threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    synthesizer = load_synthesizer(draft=args.draft, path=args.voice)
    overrides = {"seed": args.seed}
    for name in ("draft_len", "beta", "temperature"):
        value = getattr(args, name)
        if value is not None:
            overrides[name] = value
    config = synthesizer.config(**overrides)
    result = synthesizer.synthesize(args.text, mode=args.mode, config=config)
    pcm = np.clip(result.audio, -1.0, 1.0)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    sf.write(str(args.out), (pcm * 32767).astype(np.int16), result.sample_rate, subtype="PCM_16")
    stats = result.generation.stats
    print(f"wrote {args.out}: {result.duration_seconds:.2f} s of audio, {stats.new_tokens} tokens, "
          f"LM {result.lm_seconds:.2f} s, codec {result.codec_seconds:.2f} s"
          + (f", acceptance {stats.acceptance_rate:.2f}" if args.mode == "speculative" else ""))
    return 0
