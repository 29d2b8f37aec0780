"""`python -m ssd_demo eval`: its flags, and the report it writes (the evaluation is ssd_demo.measure.evaluation)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from ..measure.asr import DEFAULT_WHISPER, NORMALISERS, TINY_EN
from ..backends.vllm import ENGINES
from .decoding_flags import add_decoding_arguments
from ..measure.evaluation_report import markdown, transcripts
from ..measure.reporting import add_docs_argument, docs_target, write_section
from ..measure.visitor_texts import BUCKETS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", default="embedded",
                        help="model preset to evaluate (default embedded; see `python -m ssd_demo compare --help`)")
    parser.add_argument("--target-model", default=None,
                        help="custom pair: the target model (Hub repo id or local folder), with --draft-model")
    parser.add_argument("--draft-model", default=None, help="custom pair: the draft model, with --target-model")
    parser.add_argument("--codec", default=None, help="custom pair: the codec (default: Llasa's XCodec2)")
    parser.add_argument("--device", default=None,
                        help="cpu, cuda, ... (default: the embedded voice on the CPU, other pairs on CUDA if present)")
    parser.add_argument("--voice", type=Path, default=None, help="voice folder (default: the shipped voice)")
    parser.add_argument("--test-set", type=Path, default=None,
                        help="texts to speak: one per line, or Seed-TTS meta lines id|prompt text|prompt wav|target "
                             "text (prompt wav relative to the file); blank lines and # comments skipped "
                             "(default: the visitor texts)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N items of --test-set")
    parser.add_argument("--per-bucket", type=int, default=None,
                        help="visitor texts per length bucket (default: all of ssd_demo.measure.visitor_texts)")
    parser.add_argument("--buckets", default=None,
                        help=f"comma-separated subset of the visitor texts' buckets ({', '.join(BUCKETS)})")
    parser.add_argument("--betas", default="0,0.2,0.3,0.5",
                        help="comma-separated beta values for the drafts (0, exact speculative, is always added)")
    parser.add_argument("--drafts", default=None,
                        help="drafts to evaluate (default: all of the pair's, its default first)")
    add_decoding_arguments(parser, ("draft_len", "temperature", "adaptive_draft_len", "max_new_tokens"),
                           unset="the voice's")
    parser.add_argument("--chunk-phonemes", type=int, default=None,
                        help="embedded voice: phoneme budget per chunk (default: the voice's; to measure how long a "
                             "chunk can be)")
    parser.add_argument("--metrics", default=None,
                        help="comma-separated: wer (Whisper), dnsmos (DNSMOS P.835 OVRL and SIG) "
                             "(default: wer,dnsmos for the embedded voice, wer otherwise)")
    parser.add_argument("--whisper", default=None,
                        help=f"Whisper for WER: {TINY_EN} (Whisper tiny.en from the package index, run by faster-whisper "
                             "on the CPU), or a checkpoint: Hub repo id (read from the local cache when there; "
                             "HF_HUB_OFFLINE=1 never downloads) or local folder "
                             f"(default: {TINY_EN} for the embedded voice, {DEFAULT_WHISPER} otherwise)")
    parser.add_argument("--normaliser", choices=NORMALISERS, default=None,
                        help="text normalisation before counting words: seed-tts (punctuation removed, lower case; "
                             "the Seed-TTS evaluation's) or whisper (Whisper's English normaliser) "
                             f"(default: whisper with {TINY_EN}, seed-tts with a checkpoint)")
    add_decoding_arguments(parser, ("seed",), defaults={"seed": 0})
    parser.add_argument("--seeds", default=None,
                        help="comma-separated seeds, e.g. 0,100,200: the whole evaluation once per seed (in place of "
                             "--seed), each seed's report in OUT/seed-S, and a table over the seeds (means of WER, "
                             "DNSMOS and speedups; texts misheard and endings cut added up) in OUT/eval.md")
    parser.add_argument("--repeats", type=int, default=1,
                        help="timed runs per system and sentence (same seed, same tokens); the fastest counts "
                             "(default 1)")
    parser.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1),
                        help="torch CPU threads (default 2, or 1 on a one-CPU machine; ONNX Runtime's forward runs "
                             "as many only where they time faster than one, which the report names)")
    parser.add_argument("--engine", choices=ENGINES, default=None,
                        help="where the speech LM runs: ours (default; texts one at a time, speedups per token) or "
                             "vllm (Llasa presets and custom pairs; each system's texts in one batch, throughput and "
                             "latency reported; needs .venv-vllm, see docs/vllm.md); default $SSD_DEMO_ENGINE or ours")
    parser.add_argument("--out", type=Path, default=Path("runs/eval"),
                        help="folder for eval.json and eval.md (default runs/eval)")
    add_docs_argument(parser, "'Embedded voice evaluation' (or 'Evaluation: <pair> on <test set>')")


def command_line(args: argparse.Namespace) -> str:
    """The command as run, for the report: the options that were given, in a fixed order."""
    options = [("preset", args.preset if args.preset != "embedded" else None), ("target-model", args.target_model),
               ("draft-model", args.draft_model), ("codec", args.codec), ("device", args.device),
               ("voice", args.voice), ("test-set", args.test_set), ("limit", args.limit),
               ("per-bucket", args.per_bucket), ("temperature", args.temperature),
               ("buckets", f"'{args.buckets}'" if args.buckets else None), ("betas", args.betas),
               ("drafts", args.drafts), ("draft-len", args.draft_len), ("max-new-tokens", args.max_new_tokens),
               ("chunk-phonemes", args.chunk_phonemes),
               ("metrics", args.metrics), ("whisper", args.whisper), ("normaliser", args.normaliser),
               ("seed", None if args.seeds else args.seed or None), ("seeds", args.seeds),
               ("repeats", args.repeats), ("threads", args.threads),
               ("engine", args.engine)]
    command = "python -m ssd_demo eval " + " ".join(f"--{k} {v}" for k, v in options if v is not None)
    return command + (" --adaptive-draft-len" if args.adaptive_draft_len else "")


def main(args: argparse.Namespace) -> int:
    if args.seeds is not None:
        return main_over_seeds(args)
    from ..measure.evaluation import run_evaluation  # deferred (torch, the models' code): --help stays quick

    report = run_evaluation(args)
    section = markdown(report, command_line(args))
    write_report(args.out, report, section)
    print(section)
    if docs_target(args) is not None:
        write_section(docs_target(args), report["section"], section)
    return 0


def main_over_seeds(args: argparse.Namespace) -> int:
    """`--seeds`: one evaluation per seed, each report kept as it finishes, then the table over them."""
    from ..measure.evaluation import run_evaluation
    from ..measure.evaluation_seeds import combined_markdown, parse_seeds

    seeds = parse_seeds(args.seeds)
    command = command_line(args)
    reports = []
    for seed in seeds:
        print(f"seed {seed} ({len(reports) + 1} of {len(seeds)})")
        report = run_evaluation(argparse.Namespace(**{**vars(args), "seed": seed}))
        write_report(args.out / f"seed-{seed}", report, markdown(report, command))
        reports.append(report)
    section = combined_markdown(reports, seeds, command)
    (args.out / "eval.md").write_text(section)
    print(section)
    if docs_target(args) is not None:
        write_section(docs_target(args), reports[0]["section"], section)
    return 0


def write_report(out: Path, report: dict, section: str) -> None:
    """OUT/eval.json (every text's scores and transcripts) and OUT/eval.md (the tables, then what was heard)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "eval.json").write_text(json.dumps(report, indent=1) + "\n")  # first: the measurements are kept
    (out / "eval.md").write_text(section + transcripts(report))  # the docs get the tables only
