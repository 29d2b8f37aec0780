"""`eval --engine vllm`: each system's texts submitted to the vLLM engine at once (its continuous batching).

Our engine times one text at a time; under batching a text's time is shared with the others, so the rows report
what a batch means instead: throughput over the whole batch (tokens per second and seconds of audio per second of
LM time, `vllm_batch.summary`), each text's latency from the batch's submission (median and max), and the
throughput relative to AR's batch. WER and DNSMOS are scored text by text as with our engine.

Texts that share a voice prompt (all of them, unless a Seed-TTS test set gives one per item) go in one batch;
`VllmSynthesizer.render_batch` takes one voice prompt per batch. Each system runs on its own engine process,
ended before the next system starts (an engine holds its models; several at once would not fit a GPU).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from ..errors import InputError
from ..backends.vllm import engine_choice
from ..backends.vllm.worker import require_vllm_python
from ..config import DecodingConfig
from ..speech.system import DecodingSystem
from .evaluation_inputs import EvalItem, Pair
from .reporting import median
from .vllm_batch import summary, summary_line

#: Presets whose LM the vLLM engine serves (custom pairs are Llama/Qwen2 speech LMs loaded as Llasa).
VLLM_PRESET_PREFIX = "llasa"


def check_engine(args: argparse.Namespace, pair: Pair) -> str:
    """The engine `eval` runs on (--engine, else $SSD_DEMO_ENGINE for a pair vLLM serves, else ours); vLLM's
    limits refused before any model loads."""
    engine = engine_choice(args.engine)
    if engine != "vllm":
        return engine
    served = pair.preset is None or pair.preset.startswith(VLLM_PRESET_PREFIX)
    if args.engine is None and not served:
        return "ours"  # SSD_DEMO_ENGINE=vllm moves only the voices vLLM serves, as the preset loaders do
    if not served:
        raise InputError(f"--engine vllm serves the Llasa presets and custom Llama/Qwen2 pairs; {pair.label} runs on "
                         "our engine only (leave out --engine)")
    if args.repeats != 1:
        raise InputError("--repeats re-times our engine's one-text runs; with --engine vllm each system's texts run "
                         "once, in one batch")
    if args.adaptive_draft_len:
        raise InputError("--adaptive-draft-len needs our engine: the vLLM engine drafts a fixed K per round")
    require_vllm_python()
    return engine


def voice_groups(items: list[EvalItem]) -> list[list[int]]:
    """Indices of the items that share a voice prompt (one batch each), in first-seen order."""
    groups: dict[int, list[int]] = {}
    for index, item in enumerate(items):
        groups.setdefault(id(item.voice_prompt), []).append(index)
    return list(groups.values())


def render_systems(synth, systems: list[DecodingSystem], items: list[EvalItem], base: DecodingConfig, seed: int,
                   clip_scores: Callable[[object, int, str], dict]) -> tuple[dict[str, list[dict]], dict[str, dict]]:
    """Every system's texts through vLLM in batches: (per-text rows by system, batch numbers by system)."""
    per_text: dict[str, list[dict]] = {}
    speeds: dict[str, dict] = {}
    for system in systems:
        config = system.config(base, seed=seed)
        try:
            synth.render_batch(["Warm up, please."], mode=system.mode, config=config, draft=system.draft,
                               voice_prompt=items[0].voice_prompt)  # starts the engine; first steps pay for setup
            renders = [(group, synth.render_batch([items[i].text for i in group], mode=system.mode, config=config,
                                                  draft=system.draft, voice_prompt=items[group[0]].voice_prompt))
                       for group in voice_groups(items)]
        finally:
            synth.close()  # this system's engine ends before the next one's starts
        rows: list[dict | None] = [None] * len(items)
        for group, render in renders:
            for index, text in zip(group, render.texts):
                rows[index] = text_row(items[index], text, render, clip_scores)
        per_text[system.label] = rows
        speeds[system.label] = batch_numbers([render for _, render in renders])
        print(f"{system.label}: " + summary_line(speeds[system.label]))
    return per_text, speeds


def text_row(item: EvalItem, text, render, clip_scores) -> dict:
    """One text's row: its tokens, audio and latency within the batch, and its WER and DNSMOS."""
    reasons = chunk_finish_reasons(render, text)
    return {"id": item.id, "bucket": item.bucket, "tokens": text.tokens, "chunks": len(text.chunk_tokens),
            "finish": "eos" if all(r == "stop" for r in reasons) else "length",
            "audio_s": len(text.audio) / render.sample_rate, "latency_s": text.latency_seconds,
            **clip_scores(text.audio, render.sample_rate, item.text)}


def chunk_finish_reasons(render, text) -> list[str]:
    """vLLM's finish reason for each chunk of `text` (the batch lists all texts' chunks in order)."""
    offset = 0
    for other in render.texts:
        if other is text:
            return render.batch.finish_reasons[offset:offset + len(text.chunk_tokens)]
        offset += len(other.chunk_tokens)
    raise ValueError("the text is not in this batch")


def batch_numbers(renders: list) -> dict:
    """`vllm_batch.summary` of one batch, or of several (one per voice prompt) added up."""
    if len(renders) == 1:
        return {**summary(renders[0]), "batches": 1}
    parts = [summary(render) for render in renders]
    latencies = [latency for part in parts for latency in part["latency_seconds"]["each"]]
    total = {key: sum(part[key] for part in parts) for key in ("texts", "tokens", "lm_seconds", "codec_seconds",
                                                                "audio_seconds")}
    drafted = sum(render.batch.draft_tokens for render in renders)
    accepted = sum(render.batch.accepted_tokens for render in renders)
    lm = total["lm_seconds"]
    return {"mode": parts[0]["mode"], **total, "batches": len(renders),
            "tokens_per_second": total["tokens"] / lm if lm > 0 else 0.0,
            "audio_seconds_per_second": total["audio_seconds"] / lm if lm > 0 else 0.0,
            "latency_seconds": {"median": median(latencies), "max": max(latencies), "each": latencies},
            "acceptance_rate": accepted / drafted if parts[0]["mode"] == "speculative" and drafted else None}


def speed_row(numbers: dict, ar_numbers: dict, rows: list[dict]) -> dict:
    """The speed columns of a system's row under batching (our engine's per-text speedups do not apply)."""
    ar_rate = ar_numbers["tokens_per_second"]
    return {"acceptance": numbers["acceptance_rate"], "alpha": None,
            "tokens_per_second": numbers["tokens_per_second"],
            "audio_seconds_per_second": numbers["audio_seconds_per_second"],
            "latency_median_s": numbers["latency_seconds"]["median"], "latency_max_s": numbers["latency_seconds"]["max"],
            "throughput_vs_ar": numbers["tokens_per_second"] / ar_rate if ar_rate > 0 else float("nan"),
            "lm_rtf": numbers["lm_seconds"] / numbers["audio_seconds"] if numbers["audio_seconds"] > 0 else float("nan"),
            "batches": numbers["batches"], "audio_s": median([r["audio_s"] for r in rows]),
            "eos_rate": sum(r["finish"] == "eos" for r in rows) / len(rows)}
