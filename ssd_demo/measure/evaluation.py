"""`python -m ssd_demo eval`: AR, exact speculative and SSD side by side, scored for intelligibility, quality and speed.

What: the embedded voice (default), any preset (`--preset`) or a custom target/draft pair (`--target-model` and
`--draft-model`), on the visitor texts (`ssd_demo.measure.visitor_texts`: hand-written, never trained on, in
four length buckets) or a test-set file (`--test-set`: one text per line, or the Seed-TTS meta format
`id|prompt text|prompt wav|target text`, whose prompt wav is the voice to imitate where the backend clones
voices; `ssd_demo.measure.test_sets`). Systems: AR, then for each draft SSD at each of `--betas` (beta 0, exact
speculative sampling, is always among them). Reported per system:

- WER, the word error rate heard by Whisper (`ssd_demo.measure.asr`; `--whisper`): for the embedded voice
  Whisper tiny.en from the package index (`measure.judge`, Whisper's English normaliser on both sides), for
  every other pair openai/whisper-large-v3 as the Seed-TTS evaluation uses for English (`--whisper tiny.en`
  is their offline option). Mean over texts and corpus-wide, per length bucket, paired difference from AR.
- DNSMOS P.835 OVRL and SIG (`measure.judge.dnsmos`, 1-5, higher is better; `--metrics dnsmos`, on by default
  for the embedded voice, usable for any pair): mean over texts, per length bucket, paired difference from AR.
- Cut endings (`measure.endings`, any pair, from the audio alone): the share of clips whose sound stops at full
  loudness (the last 30 ms of sound above a third of the loudest frame's RMS), the teacher's row beside them.
- Embedded voice only: mean target NLL, -log q(token) per generated token under the target's temperature-1
  distribution renormalised over the speech vocabulary (how typical the output is for the target); and, where
  the teacher voice is installed (`measure.teacher_reference`), against the teacher's own rendering of each
  text: duration ratio (output seconds / teacher seconds) per bucket, where a dropped stretch shows, and
  MCD-DTW (dB, `ssd_demo.measure.mcd`). Two reference rows score the teacher's rendering itself ("teacher")
  and its codec round trip (what a perfect token sequence sounds like). Without the teacher there are no such
  rows, and a note says so.
- Acceptance (accepted / drafted) and the expected per-token acceptance alpha.
- Speedups over AR, LM only and end to end, per generated token, as ratios of medians (each run timed
  `--repeats` times with the same seed, the fastest kept); LM-RTF, LM seconds over audio seconds on all texts
  (the paper's speed column). The systems run interleaved (text by text, each system in turn) after one
  warm-up run each, so a change in machine load hits all of them alike.
- Next to the measured LM speedup, the strict prediction from each text's own alpha, K and measured
  costs (a draft step and a verify call in AR target steps, `results.compare_runs`): a speedup far
  below it means time is lost outside the model calls.

Writes OUT/eval.json (every text's scores and transcripts too) and OUT/eval.md; with `--docs FILE` the table
goes into FILE under "## Embedded voice evaluation" for the default run, else under "## Evaluation: <pair> on
<test set>" (only that section is rewritten). `--engine vllm` (Llasa presets and custom pairs) submits each
system's texts to the vLLM engine at once and reports throughput and latency instead (`evaluation_batch`).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from . import judge, teacher_reference
from .asr import default_normaliser, load_scorer
from ..backends.embedded import DEFAULT_PATH, EmbeddedBackend
from ..engine.calibration import calibrated_costs
from ..config import DecodingConfig, check_setting, given_settings
from ..errors import InputError, InvalidSettingError
from ..models.cpu_threads import check_thread_count
from ..backends.vllm import use_engine
from .evaluation_batch import check_engine, render_systems, speed_row
from .evaluation_inputs import (BUCKET_ORDER, EvalItem, Pair, choose_drafts, choose_metrics, choose_pair,
                                choose_whisper, describe_test_set, load_pair, prepare_items, read_items)
from .evaluation_report import voice_summary
from .evaluation_scoring import EmbeddedReference, Scoring, summarise
from .reporting import cpu_name, git_commit
from .test_sets import TestSet
from ..engine.kv import describe_kernels
from ..speech.latent_codec import LatentCodec
from ..speech.synthesis import synthesize_fastest
from ..speech.system import DecodingSystem

SECTION = "## Embedded voice evaluation"

#: The decoding settings eval takes as flags (the voice supplies the rest; --betas lists the drafts' betas).
DECODING_FLAGS = ("draft_len", "temperature", "adaptive_draft_len", "max_new_tokens", "seed")


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


def with_exact(betas: list[float]) -> list[float]:
    """The betas with 0 first when missing: the exact speculative row is the reference at no loss."""
    return betas if 0.0 in betas else [0.0, *betas]


def evaluation_systems(drafts: list[str], betas: list[float]) -> list[DecodingSystem]:
    """AR, then for each draft SSD at each beta (the base config's acceptance rule is ssd)."""
    return [DecodingSystem.autoregressive("AR")] + [
        DecodingSystem.speculative(f"SSD {draft} beta={beta:g}", draft, beta=beta)
        for draft in drafts for beta in betas]


@dataclass(frozen=True)
class EvalPlan:
    """What the command line asks for, every choice checked before a model loads."""

    settings: dict
    betas: list[float]
    pair: Pair
    metrics: tuple[str, ...]
    test_set: TestSet | None
    rows: list[tuple[str, str, str]]
    engine: str


def plan_evaluation(args: argparse.Namespace) -> EvalPlan:
    """The flags checked: decoding settings, betas, the pair, metrics, texts, engine and chunk budget."""
    settings = given_settings(vars(args), DECODING_FLAGS)
    check_thread_count(args.threads)
    if args.repeats < 1:
        raise InputError(f"--repeats must be at least 1 (timed runs per system and text), got {args.repeats}")
    betas = with_exact(parse_betas(args.betas))
    pair = choose_pair(args)
    metrics = choose_metrics(args.metrics, pair)
    test_set, rows = read_items(args)
    engine = check_engine(args, pair)
    if args.chunk_phonemes is not None and (not pair.embedded or args.chunk_phonemes < 10):
        raise InputError("--chunk-phonemes is the embedded voice's chunk budget, at least 10; got "
                         f"{args.chunk_phonemes}"
                         + ("" if pair.embedded else f" for {pair.label}"))
    return EvalPlan(settings, betas, pair, metrics, test_set, rows, engine)


def load_whisper(plan: EvalPlan, args: argparse.Namespace) -> tuple[object | None, str, str]:
    """(the WER scorer or None, its checkpoint, its normaliser); every text must keep words after normalising.
    Loaded before the pair: a checkpoint missing from the cache fails in seconds, not after a large load."""
    whisper_ref = choose_whisper(args.whisper, plan.pair)
    normaliser = args.normaliser or default_normaliser(whisper_ref)
    whisper = load_scorer(whisper_ref, args.device, normaliser) if "wer" in plan.metrics else None
    for item_id, text, _ in plan.rows if whisper else ():
        if not whisper.words(text):
            raise InputError(f"text {item_id!r} has no words left after {normaliser} normalisation: WER cannot "
                             "score it")
    return whisper, whisper_ref, normaliser


def run_evaluation(args: argparse.Namespace) -> dict:
    """`eval` as the command line asks: every system on every text, scored; the report (see the module)."""
    plan = plan_evaluation(args)
    started = {"commit": git_commit(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    torch.set_num_threads(args.threads)
    whisper, whisper_ref, normaliser = load_whisper(plan, args)
    synth = use_engine(load_pair(plan.pair, args), plan.engine)
    if args.chunk_phonemes is not None:
        synth.backend.chunk_phonemes = args.chunk_phonemes
    notes: list[str] = []
    items = prepare_items(synth, plan.test_set, plan.rows, notes)
    for note in notes:
        print(f"note: {note}")
    systems = evaluation_systems(choose_drafts(args.drafts, synth), plan.betas)
    base = synth.config(**plan.settings).with_(acceptance="ssd")
    teacher = _teacher(plan.pair, args.threads, notes, codec_latent(synth.backend), args.seed)
    reference = EmbeddedReference(synth, items, teacher) if plan.pair.embedded else None
    scoring = Scoring(whisper, "dnsmos" in plan.metrics, reference)
    if plan.engine == "vllm":
        per_text, speeds = render_systems(synth, systems, items, base, args.seed, scoring.clip_scores)
    else:
        per_text, speeds = run_one_by_one(synth, systems, items, base, args.seed, args.repeats, scoring), {}
    buckets = [item.bucket for item in items]
    table = scoring.reference_rows(buckets) + [
        summarise(system, per_text[system.label], per_text["AR"], buckets, plan.metrics, base.adaptive_draft_len,
                  speed_row(speeds[system.label], speeds["AR"], per_text[system.label]) if speeds else None)
        for system in systems]
    report = {
        **_run_description(plan, items, notes),
        "asr": {"model": whisper_ref, "normaliser": normaliser, "language": "en"} if whisper else None,
        "dnsmos": judge.DNSMOS_NAME if "dnsmos" in plan.metrics else None,
        "teacher": teacher_reference.TEACHER_NAME if teacher is not None else None,
        "config": {k: v for k, v in base.__dict__.items() if k != "allowed_token_ids"},
        "systems": table,
        "per_text": per_text,
        "reference_per_text": scoring.reference_per_text(),  # the teacher's, heard by the same judges
        "batches": speeds,
        **_machine_description(synth, args, plan.engine, started),
    }
    if plan.pair.embedded:
        meta = json.loads(((Path(args.voice) if args.voice else DEFAULT_PATH) / "voice.json").read_text())
        report.update(voice=voice_summary(meta), chunk_phonemes=synth.backend.chunk_phonemes,
                      floor_mcd=scoring.reference.floor_mcd)
    return report


def codec_latent(backend) -> str:
    """Which teacher latent the voice's codec reads ("z" for a voice without a latent codec: its round trip is
    skipped)."""
    codec = backend.codec if isinstance(backend, EmbeddedBackend) else None
    return codec.config.latent if isinstance(codec, LatentCodec) else "z"


def _teacher(pair: Pair, threads: int, notes: list[str], latent: str = "z", seed: int | None = None
             ) -> "teacher_reference.TeacherReference | None":
    """The embedded voice's teacher, where it is installed (else a note says so); None for other pairs. Seeded
    with the evaluation's seed, so that its reference rows repeat as the systems' do."""
    if not pair.embedded:
        return None
    if teacher_reference.available():
        return teacher_reference.TeacherReference(threads=threads, latent=latent, seed=seed)
    notes.append(teacher_reference.MISSING_NOTE)
    print(f"note: {notes[-1]}")
    return None


def _run_description(plan: EvalPlan, items: list[EvalItem], notes: list[str]) -> dict:
    """The report's fields that say what was evaluated: its section, the pair, engine, metrics and texts."""
    test_set, pair = plan.test_set, plan.pair
    custom_run = test_set is not None or not pair.embedded
    buckets = [item.bucket for item in items]
    return {
        "section": f"## Evaluation: {pair.label} on {Path(test_set.path).name if test_set else 'the visitor texts'}"
                   if custom_run else SECTION,
        "pair": pair.label,
        "engine": plan.engine,
        "embedded": pair.embedded,
        "metrics": list(plan.metrics),
        **describe_test_set(test_set),
        "ids": [item.id for item in items],
        "texts": [item.text for item in items],
        "buckets": buckets,
        "bucket_names": sorted(dict.fromkeys(buckets), key=BUCKET_ORDER.index),  # shortest first, as the table reads
        "voice_prompts": sum(item.voice_prompt is not None for item in items),
        "notes": notes,
    }


def _machine_description(synth, args: argparse.Namespace, engine: str, started: dict) -> dict:
    """Where and when it ran: the machine, repeats, and the commit and date as it started (`started`: a long run
    must not name a commit made while it ran)."""
    return {
        "machine": machine(synth) + ("; speech LM on vLLM in its own process" if engine == "vllm" else ""),
        "repeats": max(args.repeats, 1),
        **started,
    }


def run_one_by_one(synth, systems: list[DecodingSystem], items: list[EvalItem], base: DecodingConfig, seed: int,
                   repeats: int, scoring: Scoring) -> dict[str, list[dict]]:
    """Our engine: the systems interleaved text by text, each text timed `repeats` times (fastest kept)."""

    def run(system: DecodingSystem, item: EvalItem, seed: int, repeats: int = 1):
        config = system.config(base, seed=seed)
        if config.adaptive_draft_len and system.speculates:  # K from this machine's costs
            costs = calibrated_costs(synth.target, synth.drafts[system.draft])
            config = config.with_(cost_ratio=costs.draft, verify_costs=costs.verify)
        return synthesize_fastest(synth, item.text, repeats, mode=system.mode, config=config, draft=system.draft,
                                  voice_prompt=item.voice_prompt, script=item.script)

    warm = EvalItem("warm-up", "Warm up, please.", "", items[0].voice_prompt)
    warm.script = synth.script(warm.text, warm.voice_prompt)
    for system in systems:  # warm-up: first calls pay for allocation and lazy initialisation
        run(system, warm, seed)

    per_text: dict[str, list[dict]] = {s.label: [] for s in systems}
    for index, item in enumerate(tqdm(items, desc="eval", mininterval=5)):
        ar_generation = None
        for system in systems:
            timed = run(system, item, seed + index, repeats)
            if system.mode == "ar":
                ar_generation = timed.result.generation
            per_text[system.label].append(scoring.score(system, timed, item, index, ar_generation))

    return per_text


def machine(synth) -> str:
    """The CPU (or GPU), the torch threads the decodes ran on (read after them, not the flag) and what served the
    target."""
    threads = torch.get_num_threads()
    device = synth.device
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}"
    return f"{cpu_name()}, torch threads: {threads}, torch {torch.__version__}, {describe_kernels(synth.target)}"
