"""`python -m ssd_demo vllm-batch texts.txt`: render a file of texts through the vLLM engine in one batch.

    python -m ssd_demo vllm-batch texts.txt --preset llasa-1b-3b --mode speculative --beta 0.3 --out-dir wavs
    python -m ssd_demo vllm-batch texts.txt --target-model ./llasa-3b --draft-model ./llasa-1b --json batch.json

One text per line (blank lines and lines starting with # skipped, as in `eval --test-set`). Every text's chunks go to vLLM at once (continuous batching); our text
front end builds the prompts and our codec decodes the tokens. Reports the LM's throughput (tokens per second,
seconds of audio per second) and each text's latency from submission; --out-dir writes one WAV per text.
"""

from __future__ import annotations

import statistics
from pathlib import Path


from ..errors import InputError

DECODING_FLAGS = ("draft_len", "beta", "temperature", "top_p", "max_new_tokens", "seed")


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
