"""`python -m ssd_demo eval`: objective evaluation of the embedded voice on held-out sentences.

For each held-out sentence, eSpeak NG's own rendering is the reference. Reported per system:

- MCD-DTW (dB, `ssd_demo.codec.metrics`) of the output against the reference. Two anchors:
  the codec round trip of the reference (the floor: the best any token sequence can do) and a
  wrong-text control (the AR output for sentence i scored against the reference of sentence
  i + 1: the ceiling for "says something else").
- Duration ratio (output seconds / reference seconds).
- Mean target NLL: -log q(token) per generated token under the target's temperature-1
  distribution renormalised over the speech vocabulary (how typical the output is for the target).
- Acceptance (accepted / drafted) and the expected per-token acceptance alpha.
- Speedups over AR, LM only and end to end, per generated token, as ratios of medians (each run
  timed `--repeats` times with the same seed, the fastest kept). The systems
  run interleaved (sentence by sentence, each system in turn) after one warm-up run each, so a
  change in machine load hits all of them alike.

Writes OUT/eval.json, OUT/eval.md, and the table into docs/benchmarks.md under
"## Embedded voice evaluation" (only that section is rewritten).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .reporting import git_commit, median, write_section
from .synthesis import synthesize_fastest

SECTION = "## Embedded voice evaluation"


@dataclass(frozen=True)
class System:
    label: str
    mode: str  # "ar" | "speculative"
    draft: str | None = None
    beta: float = 0.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--voice", type=Path, default=None, help="voice folder (default: the shipped voice)")
    parser.add_argument("--sentences", type=int, default=20, help="held-out sentences to use")
    parser.add_argument("--betas", default="0,0.2,0.3,0.5", help="comma-separated beta values for the drafts")
    parser.add_argument("--drafts", default="distilled,layers", help="drafts to evaluate")
    parser.add_argument("--draft-len", type=int, default=None, help="K (default: the voice's default)")
    parser.add_argument("--adaptive-k", action="store_true",
                        help="choose K each round, 1..K, from the acceptance measured so far (exact at beta 0)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=1,
                        help="timed runs per system and sentence (same seed, same tokens); the fastest counts")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("runs/eval"))
    parser.add_argument("--docs", type=Path, default=Path("docs/benchmarks.md"),
                        help="markdown file whose 'Embedded voice evaluation' section is rewritten ('' to skip)")


def target_nll(target, prompt: list[int], tokens: list[int], allowed: list[int]) -> float:
    """Mean -log q(token) of the generated tokens under the target (temperature 1, speech vocabulary)."""
    if not tokens:
        return float("nan")
    ids = torch.tensor([prompt + tokens], device=target.device)
    with torch.no_grad():
        logits = target(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
    allowed_t = torch.tensor(allowed, device=logits.device)
    mask = torch.full_like(logits, float("-inf"))
    mask[:, allowed_t] = 0
    logp = torch.log_softmax(logits + mask, dim=-1)
    picked = logp.gather(1, torch.tensor(tokens, device=logits.device)[:, None])
    return float(-picked.mean())


def run_evaluation(args: argparse.Namespace) -> dict:
    from .backends.embedded import load_synthesizer
    from .codec.metrics import mcd_dtw
    from .training.render import render

    torch.set_num_threads(args.threads)
    synth = load_synthesizer(path=args.voice)
    backend = synth.backend
    voice_dir = Path(args.voice) if args.voice else None
    meta_path = (voice_dir or Path(__file__).resolve().parents[1] / "assets" / "embedded") / "voice.json"
    meta = json.loads(meta_path.read_text())
    sentences = meta["test_sentences"][: args.sentences]
    if len(sentences) < 2:
        raise ValueError("the evaluation needs at least two held-out sentences")
    betas = [float(b) for b in args.betas.split(",") if b.strip()]
    drafts = [d.strip() for d in args.drafts.split(",") if d.strip()]
    base = synth.config(seed=args.seed)
    if args.draft_len is not None:
        base = base.with_(draft_len=args.draft_len)
    if args.adaptive_k:
        base = base.with_(adaptive_draft_len=True)
    systems = [System("AR", "ar")] + [
        System(f"SSD {d} beta={b:g}", "speculative", d, b) for d in drafts for b in betas
    ]
    allowed = backend.allowed_token_ids()

    references = [render(s) for s in sentences]
    floor = [mcd_dtw(backend.codec.decode(backend.codec.encode(r)), r) for r in references]

    def run(system: System, text: str, seed: int, repeats: int = 1):
        config = base.with_(beta=system.beta, seed=seed)
        return synthesize_fastest(synth, text, repeats, mode=system.mode, config=config, draft=system.draft)

    for system in systems:  # warm-up: first calls pay for allocation and lazy initialisation
        run(system, "Warm up.", args.seed)

    rows: dict[str, list[dict]] = {s.label: [] for s in systems}
    ar_audio: list[np.ndarray] = []
    repeats = max(args.repeats, 1)
    for index, (text, reference) in enumerate(zip(sentences, references)):
        for system in systems:
            timed = run(system, text, args.seed + index, repeats)
            result = timed.result
            stats = result.generation.stats
            tokens = [t for t in result.generation.tokens if t != backend.eos_token_id]
            prompt = backend.prompt_ids(text)
            rows[system.label].append({
                "mcd": mcd_dtw(result.audio, reference) if len(result.audio) > 400 else float("nan"),
                "duration_ratio": result.duration_seconds / (len(reference) / backend.sample_rate),
                "nll": target_nll(synth.target, prompt, tokens, allowed),
                "tokens": stats.new_tokens,
                "finish": stats.finish_reason,
                "lm_s_per_token": timed.lm_seconds_per_token,
                "total_s_per_token": timed.total_seconds / max(stats.new_tokens, 1),
                "acceptance": stats.acceptance_rate,
                "alpha": stats.alpha,
                "accepted_length": stats.mean_accepted_length,
            })
            if system.mode == "ar":
                ar_audio.append(result.audio)
    # Wrong-text control: AR output of sentence i against the reference of sentence i + 1.
    control = [mcd_dtw(ar_audio[i], references[(i + 1) % len(references)]) for i in range(len(references))]

    ar_lm = median([r["lm_s_per_token"] for r in rows["AR"]])
    ar_total = median([r["total_s_per_token"] for r in rows["AR"]])
    table = [{"system": "codec round trip (floor)", "mcd": median(floor)}]
    for system in systems:
        r = rows[system.label]
        table.append({
            "system": system.label,
            "mcd": median([x["mcd"] for x in r]),
            "duration_ratio": median([x["duration_ratio"] for x in r]),
            "nll": median([x["nll"] for x in r]),
            "acceptance": median([x["acceptance"] for x in r]) if system.mode == "speculative" else None,
            "alpha": median([x["alpha"] for x in r]) if system.mode == "speculative" else None,
            "lm_speedup": ar_lm / median([x["lm_s_per_token"] for x in r]),
            "e2e_speedup": ar_total / median([x["total_s_per_token"] for x in r]),
            "eos_rate": sum(x["finish"] == "eos" for x in r) / len(r),
        })
    table.append({"system": "wrong-text control (ceiling)", "mcd": median(control)})
    ar_mcd, floor_mcd, ceiling = table[1]["mcd"], table[0]["mcd"], table[-1]["mcd"]
    return {
        "sentences": sentences,
        "voice": voice_summary(meta),
        "config": {k: v for k, v in base.__dict__.items() if k != "allowed_token_ids"},
        "systems": table,
        "per_sentence": rows,
        "floor": floor,
        "control": control,
        "intelligibility_ratio": (ar_mcd - floor_mcd) / (ceiling - floor_mcd) if ceiling > floor_mcd else None,
        "machine": f"{platform.machine()}, {args.threads} torch threads, torch {torch.__version__}",
        "repeats": repeats,
        "commit": git_commit(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def voice_summary(meta: dict) -> dict:
    """Sizes and training cost of the evaluated voice, from its voice.json."""
    training = meta.get("training", {})
    return {
        "models": meta.get("models"),
        "parameters": {name: t.get("parameters") for name, t in training.items()},
        "test_ce": {name: t.get("test_ce") for name, t in training.items()},
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
    lines = [
        SECTION,
        "",
        f"Command: `{command}` (commit {report['commit']}, {report['date']}, {report['machine']}).",
        f"{len(report['sentences'])} held-out sentences; reference = eSpeak NG's own rendering; medians over sentences; "
        f"times are the fastest of {report.get('repeats', 1)} identical runs.",
        f"Sampling: temperature {report['config']['temperature']}, top-k {report['config']['top_k']}, "
        f"top-p {report['config']['top_p']}, "
        + (f"K chosen each round in 1..{report['config']['draft_len']} (adaptive)."
           if report["config"].get("adaptive_draft_len") else f"K = {report['config']['draft_len']}."),
        "",
        "| system | MCD-DTW dB | duration ratio | target NLL | acceptance | alpha | LM speedup | end-to-end speedup | ended with EOS |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in report["systems"]:
        lines.append(
            f"| {row['system']} | {_fmt(row.get('mcd'))} | {_fmt(row.get('duration_ratio'))} | {_fmt(row.get('nll'))} | "
            f"{_fmt(row.get('acceptance'))} | {_fmt(row.get('alpha'))} | {_fmt(row.get('lm_speedup'))} | "
            f"{_fmt(row.get('e2e_speedup'))} | {_fmt(row.get('eos_rate'))} |"
        )
    voice = report.get("voice")
    if voice and voice.get("parameters"):
        params, ce, secs, steps = voice["parameters"], voice["test_ce"], voice["training_seconds"], voice["steps"]
        lines += ["", "Voice: " + "; ".join(
            f"{name} {params[name] / 1e6:.1f} M parameters, {steps[name]} steps, {secs[name] / 60:.1f} min, "
            f"held-out cross-entropy {ce[name]:.2f} nats/token" for name in params)
            + f". Training stages add up to {voice['total_training_seconds'] / 60:.0f} min on 2 shared CPU cores "
            "(summed; the two draft stages are independent and may run side by side), "
            f"plus {voice['dataset_build_seconds']:.0f} s to render, fit the codec and tokenise "
            f"{voice['train_sentences']} training sentences."]
    ratio = report["intelligibility_ratio"]
    lines += ["", f"Intelligibility proxy: (AR - floor) / (control - floor) = {_fmt(ratio)} (bar: <= 0.30).", ""]
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    report = run_evaluation(args)
    args.out.mkdir(parents=True, exist_ok=True)
    options = [("voice", args.voice), ("sentences", args.sentences), ("betas", args.betas), ("drafts", args.drafts),
               ("draft-len", args.draft_len), ("repeats", args.repeats), ("threads", args.threads)]
    command = "python -m ssd_demo eval " + " ".join(f"--{k} {v}" for k, v in options if v is not None)
    if args.adaptive_k:
        command += " --adaptive-k"
    section = markdown(report, command)
    (args.out / "eval.json").write_text(json.dumps(report, indent=1) + "\n")
    (args.out / "eval.md").write_text(section)
    print(section)
    if args.docs and str(args.docs) not in ("", "."):  # --docs '' skips (Path("") is ".")
        write_section(Path(args.docs), SECTION, section)
    return 0
