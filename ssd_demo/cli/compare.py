"""`python -m ssd_demo compare "Some text"`: the app's comparison from the command line.

    python -m ssd_demo compare "The cat sat on the mat." --out-dir cmp
    python -m ssd_demo compare "Hello there." --draft distilled --beta 0.3 --seed 7 --json cmp.json

The same pipeline as one click of the app's Compare tab (`ssd_demo.comparison`): load the preset, check
the text and settings, warm up, measure this machine's draft and verify costs, then decode the text
autoregressively and speculatively with the same settings and seed. Prints both runs' times, the measured
and predicted LM speedups and the acceptance; writes `ar.wav` and `speculative.wav` (16-bit PCM).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

from typing import TYPE_CHECKING

from ..backends import registry as presets
from ..config import DecodingConfig
from ..errors import InputError
from ..models.cpu_threads import check_thread_count
from ..backends.vllm import ENGINE_VARIABLE
from ..backends.vllm.worker import require_vllm_python
from .decoding_flags import add_decoding_arguments, decoding_arguments
from .synth import PRESETS_HELP

if TYPE_CHECKING:  # the pipeline (torch, the models' code) loads when the command runs, not for its --help
    from ..comparison import Comparison
    from ..speech.synthesis import SynthesisResult

#: The decoding settings compare takes as flags (the preset supplies the rest).
DECODING_FLAGS = ("draft_len", "beta", "acceptance", "topk_tolerance", "pcg_theta", "temperature", "top_k", "top_p",
                  "seed", "max_new_tokens", "adaptive_draft_len", "adaptive_threshold")

#: The files written to --out-dir, one per run.
WAV_NAMES = {"autoregressive": "ar.wav", "speculative": "speculative.wav"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("text", help="English text to speak (as typed into the app)")
    parser.add_argument("--preset", default="embedded", help=f"model preset: {PRESETS_HELP}")
    parser.add_argument("--draft", default=None,
                        help="draft name within the preset (default: the preset's; embedded: heads, distilled, layers)")
    add_decoding_arguments(parser, DECODING_FLAGS)
    parser.add_argument("--out-dir", type=Path, default=Path("."),
                        help="folder for ar.wav and speculative.wav (default: the current folder)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (default: 1 for small models such as the embedded voice, else "
                             "torch's choice; as $SSD_TORCH_THREADS)")
    parser.add_argument("--json", type=Path, default=None, help="also write the comparison's numbers to this file")
    parser.add_argument("--engine", choices=("ours", "vllm"), default=None,
                        help="where the speech LM runs: ours (default) or vllm (Llasa presets and custom pairs; "
                             "needs .venv-vllm, see docs/vllm.md); sets $SSD_DEMO_ENGINE for this run")


class ProgressLines:
    """The pipeline's progress as one line per stage on stderr (`progress(fraction, desc=...)`)."""

    def __init__(self) -> None:
        self.last, self.started = None, time.perf_counter()

    def __call__(self, fraction: float = 0.0, desc: str | None = None, **_: object) -> None:
        if desc and desc != self.last:
            self.last = desc
            print(f"[{float(fraction):4.0%} {time.perf_counter() - self.started:6.1f} s] {desc}", file=sys.stderr,
                  flush=True)


def _check_out_dir(out_dir: Path) -> None:
    """Fail before the models load, not after both runs: the folder exists or can be made, and is writable."""
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"--out-dir {out_dir} is a file: give a folder")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise InputError(f"--out-dir {out_dir} cannot be made: {error.strerror or error}") from None
    if not os.access(out_dir, os.W_OK):
        raise InputError(f"--out-dir {out_dir} is not writable")


def _write_wav(path: Path, result: SynthesisResult) -> None:
    import numpy as np
    import soundfile as sf

    pcm = (np.clip(result.audio, -1.0, 1.0) * 32767).astype(np.int16)
    try:
        sf.write(str(path), pcm, result.sample_rate, format="WAV", subtype="PCM_16")
    except (OSError, RuntimeError) as error:  # soundfile's LibsndfileError is a RuntimeError (disk full, ...)
        raise InputError(f"{path} could not be written: {error}") from None


def summary(comparison: Comparison) -> dict:
    """The comparison's numbers (what --json writes): settings, both runs, the speedups and the costs."""
    config = dataclasses.asdict(comparison.config)
    config.pop("allowed_token_ids", None)  # thousands of ids; not useful to a reader

    def run(result: SynthesisResult) -> dict:
        stats = result.generation.stats
        return {"audio_seconds": result.duration_seconds, "lm_seconds": result.lm_seconds,
                "codec_seconds": result.codec_seconds, "total_seconds": result.total_seconds,
                "real_time_factor": result.real_time_factor, "chunks": max(len(result.chunks), 1),
                "tokens": stats.sampled_tokens, "target_calls": stats.target_calls, "draft_calls": stats.draft_calls,
                "acceptance_rate": stats.acceptance_rate, "finish_reason": stats.finish_reason}

    from ..engine.calibration import best_draft_len

    report, costs = comparison.report, comparison.costs
    calibration = None
    if costs is not None:
        best_k, best = best_draft_len(report.alpha, costs, comparison.config.draft_len)
        calibration = {"cost_ratio": costs.draft, "verify_costs": list(costs.verify), "kernels": costs.kernels,
                       "best_draft_len": best_k, "predicted_speedup_at_best": best}
    return {
        "text": comparison.ar.text, "not_spoken": comparison.left_out, "preset": comparison.preset,
        "draft": comparison.draft, "seed": comparison.seed, "config": config,
        "autoregressive": run(comparison.ar), "speculative": run(comparison.spec),
        "speedup": {"measured": report.measured, "predicted": report.predicted,
                    "predicted_strict": report.predicted_strict, "alpha": report.alpha,
                    "cost_ratio": report.cost_ratio, "verify_ratio": report.verify_ratio},
        "calibration": calibration,
    }


def report_lines(comparison: Comparison) -> list[str]:
    """What the command prints: both runs side by side, then the speedups and the acceptance."""
    lines = [f"preset {comparison.preset}, draft {comparison.draft}, seed {comparison.seed}, "
             f"K {comparison.config.draft_len}{' (adaptive)' if comparison.config.adaptive_draft_len else ''}, "
             f"{comparison.config.acceptance} rule"]
    for name, result in (("autoregressive", comparison.ar), ("speculative", comparison.spec)):
        stats = result.generation.stats
        lines.append(f"{name:>14}: {result.duration_seconds:6.2f} s of audio, LM {result.lm_seconds:7.3f} s, "
                     f"codec {result.codec_seconds:6.3f} s, {stats.sampled_tokens} tokens, "
                     f"{stats.target_calls} target calls")
    report, spec = comparison.report, comparison.spec.generation.stats
    lines.append(f"LM speedup per token: measured {report.measured:.2f}x, predicted {report.predicted_strict:.2f}x "
                 f"(with the measured verify cost; {report.predicted:.2f}x with verify = 1 step)")
    lines.append(f"acceptance {spec.acceptance_rate:.1%} of drafted tokens, {spec.mean_accepted_length:.2f} accepted "
                 f"per round, alpha {report.alpha:.3f}")
    return lines


def main(args: argparse.Namespace) -> int:
    from ..comparison import Request, compare

    if args.threads is not None:
        check_thread_count(args.threads)
        os.environ["SSD_TORCH_THREADS"] = str(args.threads)  # what the pipeline sets the CPU threads from
    settings = decoding_arguments(args, DECODING_FLAGS)
    DecodingConfig(**settings)  # refuse an impossible value before the model loads
    preset = presets.get_preset(args.preset)  # an unknown preset is refused with the list of presets
    if args.engine is not None:  # the library's loaders read it (ssd_demo.backends.vllm.environment_engine)
        os.environ[ENGINE_VARIABLE] = args.engine
        if args.engine == "vllm" and not preset.key.startswith("llasa"):
            raise InputError(f"--engine vllm serves the Llasa presets; '{preset.key}' runs on our engine only")
        if args.engine == "vllm":
            require_vllm_python()
    if args.draft is not None and args.draft not in preset.drafts:
        raise InputError(f"--draft {args.draft}: preset '{preset.key}' has the drafts {', '.join(preset.drafts)}")
    _check_out_dir(args.out_dir)
    progress = ProgressLines()
    comparison = compare(Request(text=args.text, preset=args.preset, draft=args.draft, **settings), progress)
    if comparison.requested_draft:
        print(f"note: preset '{comparison.preset}' has no draft '{comparison.requested_draft}'; "
              f"used '{comparison.draft}'", file=sys.stderr)
    for name, result in (("autoregressive", comparison.ar), ("speculative", comparison.spec)):
        _write_wav(args.out_dir / WAV_NAMES[name], result)
        if result.generation.stats.finish_reason == "length":
            print(f"note: the {name} run stopped at the length limit ({result.config.max_new_tokens} tokens) before "
                  "the end token; its audio may be cut off", file=sys.stderr)
    if comparison.left_out:
        print(f"note: not spoken: {comparison.left_out} (letters of other scripts, Greek words and emoji are left out)",
              file=sys.stderr)
    print("\n".join(report_lines(comparison)))
    print(f"wrote {args.out_dir / WAV_NAMES['autoregressive']} and {args.out_dir / WAV_NAMES['speculative']}")
    if args.json is not None:
        try:
            args.json.write_text(json.dumps(summary(comparison), indent=2, default=str) + "\n", encoding="utf-8")
        except OSError as error:
            raise InputError(f"--json {args.json} could not be written: {error.strerror or error}") from None
        print(f"wrote {args.json}")
    return 0
