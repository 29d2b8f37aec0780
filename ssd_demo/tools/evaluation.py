"""`python -m ssd_demo eval`: objective evaluation of the embedded voice on text a visitor would type.

The texts are `ssd_demo.tools.visitor_texts` (hand-written, never trained on), in four length buckets
(3-8, 9-15, 16-30 words, paragraphs). eSpeak NG's own rendering of each text is the reference.
Reported per system:

- PER, the phoneme error rate heard by the phoneme recognizer (`ssd_demo.recognizer`, trained on
  eSpeak NG speech only) against the phonemes of the text: the headline intelligibility figure (the
  paper's WER analogue), per length bucket. The recognizer's own PER on the codec round trip of
  the reference is the floor (what a perfect token sequence would score).
- Duration ratio (output seconds / reference seconds), per bucket: a dropped stretch shows here.
- MCD-DTW (dB, `ssd_demo.codec.metrics`) of the output against the reference, with the codec round
  trip of the reference as the floor.
- Mean target NLL: -log q(token) per generated token under the target's temperature-1
  distribution renormalised over the speech vocabulary (how typical the output is for the target).
- Acceptance (accepted / drafted) and the expected per-token acceptance alpha.
- Speedups over AR, LM only and end to end, per generated token, as ratios of medians (each run
  timed `--repeats` times with the same seed, the fastest kept). The systems
  run interleaved (sentence by sentence, each system in turn) after one warm-up run each, so a
  change in machine load hits all of them alike.
- Next to the measured LM speedup, the strict prediction from each text's own alpha, K and measured
  costs (a draft step and a verify call in AR target steps, `results.compare_runs`): a speedup far
  below it means time is lost outside the model calls.

Writes OUT/eval.json, OUT/eval.md, and the table into docs/benchmarks.md under
"## Embedded voice evaluation" (only that section is rewritten).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from ..backends.embedded import DEFAULT_PATH, load_synthesizer
from ..engine.calibration import calibrated_costs
from ..codec.metrics import mcd_dtw
from ..config import check_setting
from ..errors import InputError, InvalidSettingError
from ..recognizer import Recognizer
from ..results import compare_runs
from .decoding_flags import add_decoding_arguments, decoding_arguments
from .reporting import add_docs_argument, cpu_name, docs_target, git_commit, median, paired_difference, write_section
from ..engine.static_cache import describe_kernels
from ..synthesis import synthesize_fastest
from ..text import check_text
from .training.render import render
from .visitor_texts import BUCKETS, visitor_texts

SECTION = "## Embedded voice evaluation"


@dataclass(frozen=True)
class System:
    label: str
    mode: str  # "ar" | "speculative"
    draft: str | None = None
    beta: float = 0.0


#: The decoding settings eval takes as flags (the voice supplies the rest; --betas lists the drafts' betas).
DECODING_FLAGS = ("draft_len", "temperature", "adaptive_draft_len", "seed")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--voice", type=Path, default=None, help="voice folder (default: the shipped voice)")
    parser.add_argument("--per-bucket", type=int, default=None,
                        help="texts per length bucket (default: all of ssd_demo.tools.visitor_texts)")
    parser.add_argument("--buckets", default=None,
                        help=f"comma-separated subset of the length buckets ({', '.join(BUCKETS)})")
    parser.add_argument("--betas", default="0,0.2,0.3,0.5", help="comma-separated beta values for the drafts")
    parser.add_argument("--drafts", default="heads,distilled,layers", help="drafts to evaluate")
    add_decoding_arguments(parser, ("draft_len", "temperature", "adaptive_draft_len"), unset="the voice's")
    parser.add_argument("--chunk-phonemes", type=int, default=None,
                        help="phoneme budget per chunk (default: the voice's; to measure how long a chunk can be)")
    parser.add_argument("--recognizer", type=Path, default=None, help="recognizer folder (default: the shipped one)")
    add_decoding_arguments(parser, ("seed",), defaults={"seed": 0})
    parser.add_argument("--repeats", type=int, default=1,
                        help="timed runs per system and sentence (same seed, same tokens); the fastest counts")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("runs/eval"),
                        help="folder for eval.json and eval.md (default runs/eval)")
    add_docs_argument(parser, "'Embedded voice evaluation'")


def target_nll(target, prompt: list[int], tokens: list[int], allowed: list[int]) -> tuple[float, int]:
    """Sum of -log q(token) over the sampled tokens (temperature 1, allowed vocabulary) and their count.

    Tokens outside `allowed` were inserted by the decoder, not sampled, and are left out.
    """
    if not tokens:
        return 0.0, 0
    ids = torch.tensor([prompt + tokens], device=target.device)
    with torch.no_grad():
        logits = target(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
    allowed_t = torch.tensor(allowed, device=logits.device)
    mask = torch.full_like(logits, float("-inf"))
    mask[:, allowed_t] = 0
    logp = torch.log_softmax(logits + mask, dim=-1)
    token_t = torch.tensor(tokens, device=logits.device)
    sampled = torch.isin(token_t, allowed_t)
    picked = logp.gather(1, token_t[:, None])[:, 0][sampled]
    return float(-picked.sum()), int(sampled.sum())


def parse_betas(text: str) -> list[float]:
    """--betas as numbers, each checked against beta's bounds (InvalidSettingError names the bad one)."""
    betas = []
    for item in (b.strip() for b in text.split(",")):
        if not item:
            continue
        try:
            beta = float(item)
        except ValueError:
            raise InvalidSettingError(f"--betas: beta must be a number, got {item!r}") from None
        check_setting("beta", beta)
        betas.append(beta)
    return betas


def run_evaluation(args: argparse.Namespace) -> dict:
    settings = decoding_arguments(args, DECODING_FLAGS)  # checked before any model loads
    betas = parse_betas(args.betas)
    torch.set_num_threads(args.threads)
    synth = load_synthesizer(path=args.voice)
    recognizer = Recognizer.load(args.recognizer)
    backend = synth.backend
    if args.chunk_phonemes is not None:
        if args.chunk_phonemes < 10:
            raise InputError(f"--chunk-phonemes must be at least 10, got {args.chunk_phonemes}")
        backend.chunk_phonemes = args.chunk_phonemes
    voice_dir = Path(args.voice) if args.voice else None
    meta_path = (voice_dir or DEFAULT_PATH) / "voice.json"
    meta = json.loads(meta_path.read_text())
    items = visitor_texts(args.per_bucket)
    if args.buckets:
        wanted = [b.strip() for b in args.buckets.split(",") if b.strip()]
        unknown = [b for b in wanted if b not in BUCKETS]
        if unknown:
            raise InputError(f"unknown bucket(s) {unknown}; choose from {', '.join(BUCKETS)}")
        items = [(bucket, text) for bucket, text in items if bucket in wanted]
    if len(items) < 2:
        raise InputError(f"the evaluation needs at least two texts, got {len(items)}: raise --per-bucket or "
                         "choose more --buckets")
    drafts = [d.strip() for d in args.drafts.split(",") if d.strip()]
    base = synth.config(**settings)
    systems = [System("AR", "ar")] + [
        System(f"SSD {d} beta={b:g}", "speculative", d, b) for d in drafts for b in betas
    ]
    allowed = backend.allowed_token_ids()

    texts = [text for _, text in items]
    buckets = [bucket for bucket, _ in items]
    references = [render(check_text(t)) for t in texts]  # eSpeak reads the same normalised text
    round_trips = [backend.codec.decode(backend.codec.encode(r)) for r in references]
    floor_mcd = [mcd_dtw(rt, r) for rt, r in zip(round_trips, references)]
    floor_per = [recognizer.per(rt, t) for rt, t in zip(round_trips, texts)]

    def run(system: System, text: str, seed: int, repeats: int = 1):
        config = base.with_(beta=system.beta, seed=seed)
        if config.adaptive_draft_len and system.mode == "speculative":  # K from this machine's costs
            costs = calibrated_costs(synth.target, synth.drafts[system.draft])
            config = config.with_(cost_ratio=costs.draft, verify_costs=costs.verify)
        return synthesize_fastest(synth, text, repeats, mode=system.mode, config=config, draft=system.draft)

    for system in systems:  # warm-up: first calls pay for allocation and lazy initialisation
        run(system, "Warm up, please.", args.seed)

    rows: dict[str, list[dict]] = {s.label: [] for s in systems}
    repeats = max(args.repeats, 1)
    for index, (text, reference) in enumerate(tqdm(list(zip(texts, references)), desc="eval", mininterval=5)):
        ar_generation = None
        for system in systems:
            timed = run(system, text, args.seed + index, repeats)
            result = timed.result
            stats = result.generation.stats
            if system.mode == "ar":
                ar_generation = result.generation
            # the strict formula with this text's own alpha, K and measured costs: how close the loop comes to its calls
            speedup = compare_runs(ar_generation, result.generation) if system.mode == "speculative" else None
            nll_sum, nll_count = 0.0, 0
            for chunk in result.chunks:
                total, count = target_nll(synth.target, backend.prompt_ids(chunk.text), chunk.generation.tokens, allowed)
                nll_sum, nll_count = nll_sum + total, nll_count + count
            rows[system.label].append({
                "bucket": buckets[index],
                "per": recognizer.per(result.audio, text),
                "mcd": mcd_dtw(result.audio, reference) if len(result.audio) > 400 else float("nan"),
                "duration_ratio": result.duration_seconds / (len(reference) / backend.sample_rate),
                "nll": nll_sum / nll_count if nll_count else float("nan"),
                "tokens": stats.sampled_tokens,
                "chunks": len(result.chunks),
                "finish": stats.finish_reason,
                "lm_s_per_token": timed.lm_seconds_per_token,
                "total_s_per_token": timed.total_seconds / max(stats.sampled_tokens, 1),
                "acceptance": stats.acceptance_rate,
                "alpha": stats.alpha,
                "accepted_length": stats.mean_accepted_length,
                "predicted_strict": speedup.predicted_strict if speedup else None,
                "cost_ratio": speedup.cost_ratio if speedup else None,
                "verify_ratio": speedup.verify_ratio if speedup else None,
            })

    ar_rows = rows["AR"]
    ar_lm = median([r["lm_s_per_token"] for r in ar_rows])
    ar_total = median([r["total_s_per_token"] for r in ar_rows])
    table = [{"system": "codec round trip of eSpeak (floor)", "per": _mean(floor_per), "mcd": median(floor_mcd),
              "per_by_bucket": _by_bucket(floor_per, buckets)}]
    for system in systems:
        r = rows[system.label]
        per = [x["per"] for x in r]
        row = {
            "system": system.label,
            "per": _mean(per),
            "per_by_bucket": _by_bucket(per, buckets),
            "duration_by_bucket": _by_bucket([x["duration_ratio"] for x in r], buckets, median),
            "mcd": median([x["mcd"] for x in r]),
            "nll": median([x["nll"] for x in r]),
            "acceptance": median([x["acceptance"] for x in r]) if system.mode == "speculative" else None,
            "alpha": median([x["alpha"] for x in r]) if system.mode == "speculative" else None,
            "lm_speedup": ar_lm / median([x["lm_s_per_token"] for x in r]),
            "e2e_speedup": ar_total / median([x["total_s_per_token"] for x in r]),
            "eos_rate": sum(x["finish"] == "eos" for x in r) / len(r),
        }
        if system.mode == "speculative":
            row["per_vs_ar"] = paired_difference(per, [x["per"] for x in ar_rows])
            row["cost_ratio"] = median([x["cost_ratio"] for x in r])
            row["verify_ratio"] = median([x["verify_ratio"] for x in r])
            # with adaptive K the rounds' K varies, and the formula's one K would not describe them
            row["predicted_strict"] = None if base.adaptive_draft_len else median([x["predicted_strict"] for x in r])
        table.append(row)
    return {
        "texts": texts,
        "buckets": buckets,
        "voice": voice_summary(meta),
        "recognizer": recognizer.meta.get("accuracy"),
        "config": {k: v for k, v in base.__dict__.items() if k != "allowed_token_ids"},
        "chunk_phonemes": backend.chunk_phonemes,
        "systems": table,
        "per_text": rows,
        "floor_per": floor_per,
        "floor_mcd": floor_mcd,
        "machine": f"{cpu_name()}, torch threads: {args.threads}, torch {torch.__version__}, "
                   f"{describe_kernels(synth.target)}",
        "repeats": repeats,
        "commit": git_commit(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def _mean(values: list[float]) -> float:
    values = [v for v in values if v == v]
    return sum(values) / len(values) if values else float("nan")


def _by_bucket(values: list[float], buckets: list[str], reduce=_mean) -> dict[str, float]:
    return {b: reduce([v for v, vb in zip(values, buckets) if vb == b]) for b in BUCKETS if b in buckets}


def voice_summary(meta: dict) -> dict:
    """Sizes and training cost of the evaluated voice, from its voice.json."""
    training = meta.get("training", {})
    return {
        "models": meta.get("models"),
        "parameters": {name: t.get("parameters") for name, t in training.items()},
        "test_ce": {name: t.get("test_ce") for name, t in training.items()},
        # draft heads have no cross-entropy of their own: their held-out expected acceptance per step instead
        "expected_acceptance": {name: t["expected_acceptance"] for name, t in training.items() if "expected_acceptance" in t},
        "steps": {name: t.get("steps") for name, t in training.items()},
        "training_seconds": {name: t.get("wall_seconds") for name, t in training.items()},
        "total_training_seconds": meta.get("total_training_seconds"),
        "dataset_build_seconds": meta.get("dataset_build_seconds"),
        "train_sentences": meta.get("train_sentences"),
    }


def _fmt(value, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return ""
    return f"{value:.{digits}f}"


def markdown(report: dict, command: str) -> str:
    buckets = list(report["systems"][0]["per_by_bucket"])
    lines = [
        SECTION,
        "",
        f"Command: `{command}` (commit {report['commit']}, {report['date']}, {report['machine']}).",
        f"{len(report['texts'])} texts a visitor would type (`ssd_demo/tools/visitor_texts.py`, never trained on); "
        "reference = eSpeak NG's own rendering; PER = phoneme error rate heard by the phoneme recognizer "
        "(mean over texts); other columns are medians; times are the fastest of "
        f"{report.get('repeats', 1)} identical runs; speedups per sampled token; c / v = a draft step / a verify "
        "call in AR target steps, and `predicted (strict)` = (1 - alpha^(K+1)) / ((1 - alpha)(K c + v)) per text, "
        "medians; text spoken in chunks of at most "
        f"{report.get('chunk_phonemes')} phonemes.",
        f"Sampling: temperature {report['config']['temperature']}, top-k {report['config']['top_k']}, "
        f"top-p {report['config']['top_p']}, "
        + (f"K chosen each round in 0..{report['config']['draft_len']} (adaptive, with this machine's measured costs)."
           if report["config"].get("adaptive_draft_len") else f"K = {report['config']['draft_len']}."),
        "",
        "| system | PER | PER - AR (95% CI) | MCD-DTW dB | target NLL | acceptance | alpha | c / v | LM speedup | "
        "predicted (strict) | end-to-end speedup |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in report["systems"]:
        diff = row.get("per_vs_ar")
        diff_text = f"{diff[0]:+.3f} [{diff[1]:+.3f}, {diff[2]:+.3f}]" if diff else ""
        lines.append(
            f"| {row['system']} | {_fmt(row.get('per'), 3)} | {diff_text} | {_fmt(row.get('mcd'))} | "
            f"{_fmt(row.get('nll'))} | {_fmt(row.get('acceptance'))} | {_fmt(row.get('alpha'))} | "
            + (f"{_fmt(row['cost_ratio'])} / {_fmt(row['verify_ratio'])}" if row.get("cost_ratio") is not None else "")
            + f" | {_fmt(row.get('lm_speedup'))} | {_fmt(row.get('predicted_strict'))} | {_fmt(row.get('e2e_speedup'))} |"
        )
    lines += ["", "By length (PER / duration ratio output : eSpeak):", "",
              "| system | " + " | ".join(buckets) + " |", "|---|" + "---|" * len(buckets)]
    for row in report["systems"]:
        durations = row.get("duration_by_bucket", {})
        cells = [f"{_fmt(row['per_by_bucket'].get(b), 3)}" + (f" / {_fmt(durations[b])}" if b in durations else "")
                 for b in buckets]
        lines.append(f"| {row['system']} | " + " | ".join(cells) + " |")
    recognizer = report.get("recognizer") or {}
    if recognizer:
        lines += ["", f"Recognizer (its own held-out sentences): PER {_fmt(recognizer.get('per_clean'), 3)} on clean "
                  f"eSpeak speech, {_fmt(recognizer.get('per_round_trip'), 3)} through the codec; the floor row above is "
                  "its PER on the codec round trip of these very texts."]
    voice = report.get("voice")
    if voice and voice.get("parameters"):
        params, ce, secs, steps = voice["parameters"], voice["test_ce"], voice["training_seconds"], voice["steps"]
        accept = voice.get("expected_acceptance", {})

        def held_out(name: str) -> str:
            if ce.get(name) is not None:
                return f"held-out cross-entropy {ce[name]:.2f} nats/token"
            if name in accept:
                return "held-out expected acceptance (temperature 1) " + " / ".join(f"{a:.2f}" for a in accept[name]) \
                    + " after 1.." + str(len(accept[name])) + " steps"
            return "no held-out score"

        lines += ["", "Voice: " + "; ".join(
            f"{name} {params[name] / 1e6:.1f} M parameters, {steps[name]} steps, {secs[name] / 60:.1f} min, "
            + held_out(name) for name in params)
            + f". Training stages add up to {voice['total_training_seconds'] / 60:.0f} min on 2 shared CPU cores "
            "(summed; the two draft stages are independent and may run side by side), "
            f"plus {voice['dataset_build_seconds']:.0f} s to render and tokenise "
            f"{voice['train_sentences']} training sentences."]
    lines.append("")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    report = run_evaluation(args)
    args.out.mkdir(parents=True, exist_ok=True)
    options = [("voice", args.voice), ("per-bucket", args.per_bucket), ("temperature", args.temperature),
               ("buckets", f"'{args.buckets}'" if args.buckets else None), ("betas", args.betas), ("drafts", args.drafts),
               ("draft-len", args.draft_len), ("chunk-phonemes", args.chunk_phonemes), ("repeats", args.repeats),
               ("threads", args.threads)]
    command = "python -m ssd_demo eval " + " ".join(f"--{k} {v}" for k, v in options if v is not None)
    if args.adaptive_draft_len:
        command += " --adaptive-k"
    (args.out / "eval.json").write_text(json.dumps(report, indent=1) + "\n")  # first: the measurements are kept
    section = markdown(report, command)
    (args.out / "eval.md").write_text(section)
    print(section)
    if docs_target(args) is not None:
        write_section(docs_target(args), SECTION, section)
    return 0
