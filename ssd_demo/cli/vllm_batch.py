"""`python -m ssd_demo vllm-batch`: its flags, and the numbers it prints (the summary is
`ssd_demo.measure.vllm_batch`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import soundfile as sf

from ..backends.vllm import use_engine
from ..backends.vllm.worker import require_vllm_python
from .decoding_flags import add_decoding_arguments, decoding_arguments
from .synth import _load
from ..measure.vllm_batch import DECODING_FLAGS, limit_note, read_texts, summary, summary_line


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("texts", type=Path, help="UTF-8 file, one text per line")
    parser.add_argument("--mode", choices=("ar", "speculative"), default="speculative")
    parser.add_argument("--preset", default="llasa-1b-3b", help="a Llasa preset (default llasa-1b-3b)")
    parser.add_argument("--target-model", help="custom pair: target repo id or local folder (with --draft-model)")
    parser.add_argument("--draft-model", help="custom pair: draft repo id or local folder (with --target-model)")
    parser.add_argument("--codec", default=None, help="custom pair: codec repo id or folder")
    parser.add_argument("--revision", default=None, help="custom pair: Hub revision of both models")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--out-dir", type=Path, default=None, help="write text_NNN.wav here")
    parser.add_argument("--json", type=Path, default=None, help="also write the numbers to this file")
    add_decoding_arguments(parser, DECODING_FLAGS, defaults={"seed": 0})


def main(args: argparse.Namespace) -> int:
    texts = read_texts(args.texts)
    settings = decoding_arguments(args, DECODING_FLAGS)
    require_vllm_python()  # before the models load
    args.voice = None  # what synth's loader reads besides the model flags
    synthesizer = use_engine(_load(args), "vllm")
    try:
        render = synthesizer.render_batch(texts, mode=args.mode, config=synthesizer.config(**settings))
    finally:
        synthesizer.close()
    numbers = summary(render)
    if args.out_dir is not None:
        args.out_dir.mkdir(parents=True, exist_ok=True)
        for index, text in enumerate(render.texts):
            pcm = (np.clip(text.audio, -1.0, 1.0) * 32767).astype(np.int16)
            sf.write(str(args.out_dir / f"text_{index:03d}.wav"), pcm, render.sample_rate, subtype="PCM_16")
    print(summary_line(numbers))
    note = limit_note(numbers)
    if note:
        print(note, file=sys.stderr)
    if args.json is not None:
        args.json.write_text(json.dumps(numbers, indent=2) + "\n", encoding="utf-8")
    return 0
