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
from ..backends.embedded import DEFAULT_PATH
from ..engine.calibration import calibrated_costs
from .mcd import mcd_dtw
from ..config import check_setting, given_settings
from ..errors import InputError, InvalidSettingError
from ..engine.results import compare_runs
from ..backends.vllm import use_engine
from .evaluation_batch import check_engine, render_systems, speed_row
from .evaluation_inputs import (EvalItem, choose_drafts, choose_metrics, choose_pair, choose_whisper, describe_test_set,
                                load_pair, prepare_items, read_items)
from .evaluation_report import voice_summary
from .reporting import cpu_name, git_commit, median, paired_difference
from ..engine.static_cache import describe_kernels
from ..speech.synthesis import synthesize_fastest

SECTION = "## Embedded voice evaluation"


@dataclass(frozen=True)
class System:
    label: str
    mode: str  # "ar" | "speculative"
    draft: str | None = None
    beta: float = 0.0


#: The decoding settings eval takes as flags (the voice supplies the rest; --betas lists the drafts' betas).
DECODING_FLAGS = ("draft_len", "temperature", "adaptive_draft_len", "max_new_tokens", "seed")


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


def with_exact(betas: list[float]) -> list[float]:
    """The betas with 0 first when missing: the exact speculative row is the reference at no loss."""
    return betas if 0.0 in betas else [0.0, *betas]


def run_evaluation(args: argparse.Namespace) -> dict:
    settings = given_settings(vars(args), DECODING_FLAGS)  # checked before any model loads
    betas = with_exact(parse_betas(args.betas))
    pair = choose_pair(args)
    metrics = choose_metrics(args.metrics, pair)
    test_set, rows = read_items(args)
    engine = check_engine(args, pair)
    if args.chunk_phonemes is not None and (not pair.embedded or args.chunk_phonemes < 10):
        raise InputError("--chunk-phonemes is the embedded voice's chunk budget, at least 10; got "
                         f"{args.chunk_phonemes}"
                         + ("" if pair.embedded else f" for {pair.label}"))
    torch.set_num_threads(args.threads)
    whisper_ref = choose_whisper(args.whisper, pair)
    normaliser = args.normaliser or default_normaliser(whisper_ref)
    # Whisper before the pair: a checkpoint missing from the cache fails in seconds, not after a large load.
    whisper = load_scorer(whisper_ref, args.device, normaliser) if "wer" in metrics else None
    for item_id, text, _ in rows if whisper else ():
        if not whisper.words(text):
            raise InputError(f"text {item_id!r} has no words left after {normaliser} normalisation: WER cannot "
                             "score it")
    synth = use_engine(load_pair(pair, args), engine)
    backend = synth.backend
    if args.chunk_phonemes is not None:
        backend.chunk_phonemes = args.chunk_phonemes
    notes: list[str] = []
    items = prepare_items(synth, test_set, rows, notes)
    for note in notes:
        print(f"note: {note}")
    drafts = choose_drafts(args.drafts, synth)
    base = synth.config(**settings).with_(acceptance="ssd")
    systems = [System("AR", "ar")] + [
        System(f"SSD {d} beta={b:g}", "speculative", d, b) for d in drafts for b in betas
    ]
    teacher = None
    if pair.embedded:
        if teacher_reference.available():
            teacher = teacher_reference.TeacherReference(threads=args.threads)
        else:
            notes.append(teacher_reference.MISSING_NOTE)
            print(f"note: {notes[-1]}")
    scoring = Scoring(whisper, "dnsmos" in metrics, EmbeddedReference(synth, items, teacher) if pair.embedded else None)

    if engine == "vllm":
        per_text, speeds = render_systems(synth, systems, items, base, args.seed, scoring.clip_scores)
    else:
        per_text, speeds = run_one_by_one(synth, systems, items, base, args.seed, max(args.repeats, 1), scoring), {}
    buckets = [item.bucket for item in items]
    table = scoring.reference_rows(buckets) + [
        summarise(system, per_text[system.label], per_text["AR"], buckets, metrics, base.adaptive_draft_len,
                  speed_row(speeds[system.label], speeds["AR"], per_text[system.label]) if speeds else None)
        for system in systems]
    custom_run = test_set is not None or not pair.embedded
    report = {
        "section": f"## Evaluation: {pair.label} on {Path(test_set.path).name if test_set else 'the visitor texts'}"
                   if custom_run else SECTION,
        "pair": pair.label,
        "engine": engine,
        "embedded": pair.embedded,
        "metrics": list(metrics),
        **describe_test_set(test_set),
        "ids": [item.id for item in items],
        "texts": [item.text for item in items],
        "buckets": buckets,
        "bucket_names": list(dict.fromkeys(buckets)),
        "voice_prompts": sum(item.voice_prompt is not None for item in items),
        "notes": notes,
        "asr": {"model": whisper_ref, "normaliser": normaliser, "language": "en"} if whisper else None,
        "dnsmos": judge.DNSMOS_NAME if "dnsmos" in metrics else None,
        "teacher": teacher_reference.TEACHER_NAME if teacher is not None else None,
        "config": {k: v for k, v in base.__dict__.items() if k != "allowed_token_ids"},
        "systems": table,
        "per_text": per_text,
        "batches": speeds,
        "machine": machine(synth, args.threads) + ("; speech LM on vLLM in its own process" if engine == "vllm" else ""),
        "repeats": max(args.repeats, 1),
        "commit": git_commit(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    if pair.embedded:
        meta = json.loads(((Path(args.voice) if args.voice else DEFAULT_PATH) / "voice.json").read_text())
        report.update(voice=voice_summary(meta), chunk_phonemes=backend.chunk_phonemes,
                      floor_mcd=scoring.reference.floor_mcd)
    return report


def run_one_by_one(synth, systems: list[System], items: list[EvalItem], base, seed: int, repeats: int,
                   scoring: "Scoring") -> dict[str, list[dict]]:
    """Our engine: the systems interleaved text by text, each text timed `repeats` times (fastest kept)."""

    def run(system: System, item: EvalItem, seed: int, repeats: int = 1):
        config = base.with_(beta=system.beta, seed=seed)
        if config.adaptive_draft_len and system.mode == "speculative":  # K from this machine's costs
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


class EmbeddedReference:
    """The embedded voice's own columns: target NLL, and against the teacher's rendering of each text (when the
    teacher is installed) the duration ratio and MCD-DTW; the teacher's audio and its codec round trip."""

    def __init__(self, synth, items: list[EvalItem], teacher: "teacher_reference.TeacherReference | None"):
        backend = synth.backend
        self.synth = synth
        self.allowed = backend.allowed_token_ids()
        self.texts = [item.text for item in items]
        self.rate = backend.sample_rate
        self.audio: list = []  # the teacher's rendering of each text, at the voice's rate
        self.round_trips: list = []  # its latents through the voice's codec
        if teacher is not None:
            rendered = [teacher.render(text) for text in self.texts]
            self.audio = [teacher_reference.resample(r.audio, teacher_reference.SAMPLE_RATE, self.rate)
                          for r in rendered]
            if hasattr(backend.codec, "encode_latents"):  # a codec of the teacher's latent space
                self.round_trips = [teacher_reference.resample(teacher_reference.codec_round_trip(backend.codec, r),
                                                               backend.codec.sample_rate, self.rate) for r in rendered]
        self.floor_mcd = [mcd_dtw(rt, r, self.rate) for rt, r in zip(self.round_trips, self.audio)]
        self.teacher_scores: list[dict] = []
        self.round_trip_scores: list[dict] = []

    def scores(self, result, index: int) -> dict:
        nll_sum, nll_count = 0.0, 0
        for chunk in result.chunks:
            total, count = target_nll(self.synth.target, self.synth.backend.prompt_ids(chunk.text),
                                      chunk.generation.tokens, self.allowed)
            nll_sum, nll_count = nll_sum + total, nll_count + count
        row = {"nll": nll_sum / nll_count if nll_count else float("nan")}
        if self.audio:
            reference = self.audio[index]
            row["mcd"] = mcd_dtw(result.audio, reference, self.rate) if len(result.audio) > 400 else float("nan")
            row["duration_ratio"] = result.duration_seconds / (len(reference) / self.rate)
        return row


@dataclass
class Scoring:
    """The instruments of a run: Whisper, DNSMOS, the embedded voice's teacher reference."""

    whisper: object | None  # asr.WhisperScorer or asr.JudgeScorer
    dnsmos: bool
    reference: EmbeddedReference | None

    def __post_init__(self) -> None:
        ref = self.reference
        if ref is None:
            return
        ref.teacher_scores = [self.clip_scores(a, ref.rate, t) for a, t in zip(ref.audio, ref.texts)]
        ref.round_trip_scores = [self.clip_scores(a, ref.rate, t) for a, t in zip(ref.round_trips, ref.texts)]

    def score(self, system: System, timed, item: EvalItem, index: int, ar_generation) -> dict:
        result = timed.result
        stats = result.generation.stats
        # the strict formula with this text's own alpha, K and measured costs: how close the loop comes to its calls
        speedup = compare_runs(ar_generation, result.generation) if system.mode == "speculative" else None
        row = {
            "id": item.id,
            "bucket": item.bucket,
            "tokens": stats.sampled_tokens,
            "chunks": len(result.chunks),
            "finish": stats.finish_reason,
            "audio_s": result.duration_seconds,
            "lm_s": result.lm_seconds,
            "lm_s_per_token": timed.lm_seconds_per_token,
            "total_s_per_token": timed.total_seconds / max(stats.sampled_tokens, 1),
            "acceptance": stats.acceptance_rate,
            "alpha": stats.alpha,
            "accepted_length": stats.mean_accepted_length,
            "predicted_strict": speedup.predicted_strict if speedup else None,
            "cost_ratio": speedup.cost_ratio if speedup else None,
            "verify_ratio": speedup.verify_ratio if speedup else None,
        }
        row.update(self.clip_scores(result.audio, result.sample_rate, item.text))
        if self.reference:
            row.update(self.reference.scores(result, index))
        return row

    def clip_scores(self, audio, sample_rate: int, text: str) -> dict:
        """WER and/or DNSMOS of one clip, whichever this run scores."""
        row = {}
        if self.whisper:
            scored = self.whisper.score(audio, sample_rate, text)
            row.update(wer=scored.wer, word_errors=round(scored.wer * len(scored.reference_words)),
                       reference_words=len(scored.reference_words), transcript=scored.transcript)
        if self.dnsmos:
            quality = judge.dnsmos(audio, sample_rate)
            row.update(dnsmos_ovrl=quality["ovrl"], dnsmos_sig=quality["sig"], dnsmos_bak=quality["bak"])
        return row

    def reference_rows(self, buckets: list[str]) -> list[dict]:
        """The teacher's own rendering and its codec round trip, scored as the systems are (none without it)."""
        ref = self.reference
        if ref is None or not ref.audio:
            return []
        rows = [{"system": f"teacher ({teacher_reference.TEACHER_NAME})", **_quality_summary(ref.teacher_scores, buckets)}]
        if ref.round_trips:
            rows.append({"system": "codec round trip of the teacher", "mcd": median(ref.floor_mcd),
                         **_quality_summary(ref.round_trip_scores, buckets)})
        return rows


def _quality_summary(rows: list[dict], buckets: list[str]) -> dict:
    """The WER and DNSMOS columns of a set of per-text rows (those it has)."""
    summary = {}
    if rows and "wer" in rows[0]:
        summary.update(_wer_summary(rows, buckets))
    if rows and "dnsmos_ovrl" in rows[0]:
        summary.update(_dnsmos_summary(rows, buckets))
    return summary


def summarise(system: System, rows: list[dict], ar_rows: list[dict], buckets: list[str], metrics: tuple[str, ...],
              adaptive: bool, batched: dict | None = None) -> dict:
    """One system's row of the table from its per-text rows (means for error rates, medians otherwise);
    `batched`: the speed columns of a vLLM batch (`evaluation_batch.speed_row`) in place of per-text timings."""
    speculative = system.mode == "speculative"
    row = {"system": system.label, **batched} if batched else speed_summary(system, rows, ar_rows)
    if "wer" in metrics:
        row.update(_wer_summary(rows, buckets))
        if speculative:
            row["wer_vs_ar"] = paired_difference([x["wer"] for x in rows], [x["wer"] for x in ar_rows])
    if "dnsmos" in metrics:
        row.update(_dnsmos_summary(rows, buckets))
        if speculative:
            for key in ("dnsmos_ovrl", "dnsmos_sig"):
                row[f"{key}_vs_ar"] = paired_difference([x[key] for x in rows], [x[key] for x in ar_rows])
    if "nll" in rows[0]:  # the embedded voice
        row["nll"] = median([x["nll"] for x in rows])
    if "mcd" in rows[0]:  # the embedded voice, against the teacher's rendering
        row.update(mcd=median([x["mcd"] for x in rows]),
                   duration_by_bucket=_by_bucket([x["duration_ratio"] for x in rows], buckets, median))
    if speculative and not batched:
        row["cost_ratio"] = median([x["cost_ratio"] for x in rows])
        row["verify_ratio"] = median([x["verify_ratio"] for x in rows])
        # with adaptive K the rounds' K varies, and the formula's one K would not describe them
        row["predicted_strict"] = None if adaptive else median([x["predicted_strict"] for x in rows])
    return row


def speed_summary(system: System, rows: list[dict], ar_rows: list[dict]) -> dict:
    """Our engine's speed columns: per-token speedups over AR from one-text-at-a-time timings."""
    ar_lm = median([r["lm_s_per_token"] for r in ar_rows])
    ar_total = median([r["total_s_per_token"] for r in ar_rows])
    speculative = system.mode == "speculative"
    audio = sum(r["audio_s"] for r in rows)
    return {
        "system": system.label,
        "acceptance": median([x["acceptance"] for x in rows]) if speculative else None,
        "alpha": median([x["alpha"] for x in rows]) if speculative else None,
        "lm_speedup": ar_lm / median([x["lm_s_per_token"] for x in rows]),
        "e2e_speedup": ar_total / median([x["total_s_per_token"] for x in rows]),
        # the literal ratio of times on the same texts (the speedup above is per token, robust to length)
        "lm_time_ratio": sum(r["lm_s"] for r in ar_rows) / max(sum(r["lm_s"] for r in rows), 1e-12),
        "lm_rtf": sum(r["lm_s"] for r in rows) / audio if audio > 0 else float("nan"),
        "audio_s": median([x["audio_s"] for x in rows]),
        "eos_rate": sum(x["finish"] == "eos" for x in rows) / len(rows),
    }


def _wer_summary(rows: list[dict], buckets: list[str]) -> dict:
    """Mean WER over texts (as the Seed-TTS evaluation averages), by bucket, and corpus WER (errors / words)."""
    wer = [x["wer"] for x in rows]
    words = sum(x["reference_words"] for x in rows)
    return {"wer": _mean(wer), "wer_by_bucket": _by_bucket(wer, buckets),
            "wer_corpus": sum(x["word_errors"] for x in rows) / words if words else float("nan")}


def _dnsmos_summary(rows: list[dict], buckets: list[str]) -> dict:
    """DNSMOS OVRL and SIG: means over texts, overall and by bucket."""
    summary = {}
    for key in ("dnsmos_ovrl", "dnsmos_sig"):
        values = [x[key] for x in rows]
        summary.update({key: _mean(values), f"{key}_by_bucket": _by_bucket(values, buckets)})
    return summary


def machine(synth, threads: int) -> str:
    device = synth.device
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}"
    return f"{cpu_name()}, torch threads: {threads}, torch {torch.__version__}, {describe_kernels(synth.target)}"


def _mean(values: list[float]) -> float:
    values = [v for v in values if v == v]
    return sum(values) / len(values) if values else float("nan")


def _by_bucket(values: list[float], buckets: list[str], reduce=_mean) -> dict[str, float]:
    return {b: reduce([v for v, vb in zip(values, buckets) if vb == b]) for b in dict.fromkeys(buckets)}
