"""`python -m ssd_demo vllm-batch texts.txt`: render a file of texts through the vLLM engine in one batch.

    python -m ssd_demo vllm-batch texts.txt --preset llasa-1b-3b --mode speculative --beta 0.3 --out-dir wavs
    python -m ssd_demo vllm-batch texts.txt --target-model ./llasa-3b --draft-model ./llasa-1b --json batch.json

One text per line (blank lines and lines starting with # skipped, as in `eval --test-set`). Every text's chunks go to vLLM at once (continuous batching); our text
front end builds the prompts and our codec decodes the tokens. Reports the LM's throughput (tokens per second,
seconds of audio per second) and each text's latency from submission; --out-dir writes one WAV per text.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np
import soundfile as sf

from ..errors import InputError
from ..serving import use_engine
from ..serving.vllm_process import require_vllm_python
from .decoding_flags import add_decoding_arguments, decoding_arguments
from .synth import _load

DECODING_FLAGS = ("draft_len", "beta", "temperature", "top_p", "max_new_tokens", "seed")


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


def read_texts(path: Path) -> list[str]:
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist" if not path.exists() else f"{path} is not a file")
    try:
        lines = [line.strip() for line in path.read_text(encoding="utf-8-sig").splitlines()]
        texts = [line for line in lines if line and not line.startswith("#")]
    except UnicodeDecodeError as error:
        raise InputError(f"{path} is not UTF-8 text (byte {error.start}): save it as UTF-8") from None
    if not texts:
        raise InputError(f"{path} holds no text: give one text per line (lines starting with # are skipped)")
    return texts


def summary(render) -> dict:
    latencies = [text.latency_seconds for text in render.texts]
    return {"mode": render.mode, "texts": len(render.texts), "tokens": render.tokens,
            "lm_seconds": render.lm_seconds, "codec_seconds": render.codec_seconds,
            "audio_seconds": render.audio_seconds, "tokens_per_second": render.tokens_per_second,
            "audio_seconds_per_second": render.audio_seconds_per_second,
            "latency_seconds": {"median": statistics.median(latencies), "max": max(latencies),
                                "each": latencies},
            "acceptance_rate": render.batch.acceptance_rate if render.mode == "speculative" else None,
            "stopped_at_limit": [index for index, text in enumerate(render.texts) if text.stopped_at_limit],
            "max_new_tokens": getattr(render.config, "max_new_tokens", None)}


def summary_line(numbers: dict) -> str:
    """`summary`'s numbers in one line, as `vllm-batch`, `eval --engine vllm` and `stimuli --engine vllm` print them."""
    acceptance = numbers.get("acceptance_rate")
    return (f"{numbers['texts']} texts, {numbers['mode']}: {numbers['tokens']} tokens in {numbers['lm_seconds']:.2f} s "
            f"of LM time = {numbers['tokens_per_second']:.1f} tokens/s, {numbers['audio_seconds_per_second']:.2f} s of "
            f"audio per s; latency median {numbers['latency_seconds']['median']:.2f} s, max "
            f"{numbers['latency_seconds']['max']:.2f} s; codec {numbers['codec_seconds']:.2f} s"
            + (f"; acceptance {acceptance:.1%}" if acceptance is not None else ""))


def limit_note(numbers: dict) -> str | None:
    """A note naming the texts (1-based lines of the kept texts) that ran to the length limit, if any."""
    cut = numbers.get("stopped_at_limit") or []
    if not cut:
        return None
    which = ", ".join(str(index + 1) for index in cut[:10]) + (", ..." if len(cut) > 10 else "")
    return (f"note: {len(cut)} of {numbers['texts']} texts stopped at the length limit ({numbers['max_new_tokens']} "
            f"tokens per chunk) before the end token, so their audio may be cut off (texts {which})")


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
