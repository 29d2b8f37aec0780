"""What the Compare tab shows of a `Comparison`: the statistics table, the JSON details, the
per-round token view and the four charts. Pure functions of the results."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict

from . import charts
from ...comparison import Comparison
from ...engine.calibration import MEASURED_DRAFT_LENS, best_draft_len, predicted_with
from ...engine.results import GenerationResult
from ...rules.registry import RULES
from ...speech.synthesis import SynthesisResult

def _fmt(value: float, digits: int = 2, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    return f"{value:.{digits}f}{unit}"


def end_to_end_speedup(comparison: Comparison) -> float:
    """Seconds until the last audio per second of audio, AR over speculative (`SynthesisResult.real_time_factor`:
    LM and codec, overlapped where they streamed together): the two runs sample different lengths, so a raw
    wall-time ratio would credit whichever happened to say less."""
    ar_rtf, spec_rtf = comparison.ar.real_time_factor, comparison.spec.real_time_factor
    return ar_rtf / spec_rtf if spec_rtf > 0 and math.isfinite(spec_rtf) and math.isfinite(ar_rtf) else float("nan")


def stats_rows(comparison: Comparison) -> list[tuple[str, str, str]]:
    """(metric, autoregressive, speculative) rows for the side-by-side table."""
    ar, spec, report = comparison.ar, comparison.spec, comparison.report
    a, s = ar.generation.stats, spec.generation.stats
    end_to_end = end_to_end_speedup(comparison)
    return [
        ("Audio duration", _fmt(ar.duration_seconds, 2, " s"), _fmt(spec.duration_seconds, 2, " s")),
        ("Wall time (until the last audio)", _fmt(ar.elapsed_seconds, 3, " s"), _fmt(spec.elapsed_seconds, 3, " s")),
        ("  of which LM", _fmt(ar.lm_seconds, 3, " s"), _fmt(spec.lm_seconds, 3, " s")),
        ("  of which codec", _fmt(ar.codec_seconds, 3, " s"), _fmt(spec.codec_seconds, 3, " s")),
        ("Text chunks (decoded one after another)", str(max(len(ar.chunks), 1)), str(max(len(spec.chunks), 1))),
        ("Tokens sampled", _sampled(a), _sampled(s)),
        ("Tokens / s (LM)", _fmt(lm_tokens_per_second(ar), 1), _fmt(lm_tokens_per_second(spec), 1)),
        ("Real-time factor (lower is faster)", _fmt(ar.real_time_factor, 3), _fmt(spec.real_time_factor, 3)),
        ("Target calls", str(a.target_calls), str(s.target_calls)),
        ("Draft calls", "–", str(s.draft_calls)),
        ("Acceptance rate (accepted / drafted)", "–", _fmt(s.acceptance_rate * 100, 1, " %")),
        ("Mean accepted length per round", "–", f"{s.mean_accepted_length:.2f} of K "
         f"{'≤ ' if comparison.config.adaptive_draft_len else '= '}{s.draft_len}"
         f"{' (adaptive)' if comparison.config.adaptive_draft_len else ''}"),
        ("Tokens per target call", _fmt(a.mean_tokens_per_call, 2), _fmt(s.mean_tokens_per_call, 2)),
        ("Speedup, LM decoding per token (measured)", "1.00×", _fmt(report.measured, 2, "×")),
        ("Speedup, end to end (per second of audio)", "1.00×", _fmt(end_to_end, 2, "×")),
        (f"Predicted speedup, textbook (this run's α and c, verify = 1 step; K = {report.draft_len})", "–",
         _fmt(report.predicted, 2, "×")),
        (f"Predicted speedup, strict (this run's α, c and verify cost; K = {report.draft_len})", "–",
         _fmt(report.predicted_strict, 2, "×")),
        ("α (expected per-token acceptance)", "–", _fmt(report.alpha, 3)),
        ("c (draft step / target step)", "–", _fmt(report.cost_ratio, 3)),
        ("Verify call / target step", "–", _fmt(report.verify_ratio, 2)),
        *_calibration_rows(comparison),
        ("Stopped by", a.finish_reason, s.finish_reason),
    ]


def _calibration(comparison: Comparison) -> dict | None:
    costs = comparison.costs
    if costs is None:
        return None
    best_k, best = best_draft_len(comparison.report.alpha, costs, comparison.config.draft_len)
    return {"cost_ratio": costs.draft, "verify_costs": list(costs.verify), "target_step_seconds": costs.target_step_seconds,
            "verify_origin": [costs.verify_origin(k) for k in range(len(costs.verify))],
            "measured_verify": {str(k): v for k, v in costs.measured_verify},
            "kernels": costs.kernels,
            "best_draft_len": best_k, "predicted_speedup_at_best": best}


#: How the table marks a calibrated verify cost that was not kept as timed (`StepCosts.verify_origin`).
ORIGIN_MARKS = {"measured": "", "raised": "↑", "filled in": "~", "": ""}


def _calibration_rows(comparison: Comparison) -> list[tuple[str, str, str]]:
    """This machine's measured costs (each verify cost marked by where it comes from) and the speedup
    they predict at the acceptance just measured, for the K used and for the K they favour."""
    costs = comparison.costs
    if costs is None:
        return []
    k_max = comparison.config.draft_len
    best_k, best = best_draft_len(comparison.report.alpha, costs, k_max)
    verify = ", ".join(f"{costs.verify[k]:.2f}{ORIGIN_MARKS[costs.verify_origin(k)]}"
                       for k in range(1, min(k_max, len(costs.verify) - 1) + 1))
    used = min(k_max, len(costs.verify) - 1)
    at_used = predicted_with(comparison.report.alpha, costs, used)  # same formula and costs, K as used
    return [
        ("Calibrated here: draft step c; verify of K = 1.. (target steps; ↑ raised, ~ filled in)", "–",
         f"{costs.draft:.3f}; {verify}"),
        *([("Target's matmul kernels here (rows = tokens per call)", costs.kernels, costs.kernels)]
          if costs.kernels else []),
        ("Predicted speedup, calibrated costs (this run's α; 0 = plain AR)", "–",
         f"K = {used}: {at_used:.2f}×; best K = {best_k}: {best:.2f}×"),
    ]


def lm_tokens_per_second(result) -> float:
    """Sampled tokens per LM second, the LM seconds being the table's own "of which LM" row (one source:
    the engine's own rate divides by its loop's wall time, a few milliseconds off it)."""
    lm = result.lm_seconds
    return result.generation.stats.sampled_tokens / lm if lm > 0 else float("nan")


def _sampled(stats) -> str:
    if stats.forced_tokens:
        return f"{stats.sampled_tokens} (+{stats.forced_tokens} inserted)"
    return str(stats.sampled_tokens)


def length_limit_note(comparison: Comparison) -> str | None:
    """A warning when a run stopped at the length limit rather than at its end token (audio may be cut)."""
    cut = [(name, result) for name, result in (("autoregressive", comparison.ar), ("speculative", comparison.spec))
           if result.generation.stats.finish_reason == "length"]
    if not cut:
        return None
    runs = " and ".join(f"the {name} run (limit {_tokens(result.config.max_new_tokens)})" for name, result in cut)
    return (f"**Stopped at the length limit:** {runs} ended before the model finished speaking, so the audio may "
            "be cut off. Shorten the text, or raise the max length if the model's context allows.")


def _tokens(count: int) -> str:
    return f"{count} token" if count == 1 else f"{count} tokens"


def stats_markdown(comparison: Comparison) -> str:
    lines = ["| | Autoregressive | Speculative |", "|---|---:|---:|"]
    lines += [f"| {name} | {ar} | {spec} |" for name, ar, spec in stats_rows(comparison)]
    config = comparison.config
    note = length_limit_note(comparison)
    if note:
        lines += ["", note]
    if comparison.left_out:
        lines += ["", f"**Not spoken:** {comparison.left_out} (the voice speaks English; letters of other "
                      "scripts, Greek words and emoji are left out rather than spelled or read by their names)."]
    if comparison.requested_draft:  # API callers see no pop-up warning: say it where they read
        lines += ["", f"**Draft `{comparison.requested_draft}` is not available for this preset;** "
                      f"`{comparison.draft}` was used."]
    lines.append("")
    lines.append(
        f"Preset `{comparison.preset}`, draft `{comparison.draft}`, rule `{config.acceptance}`, "
        f"K = {config.draft_len}, β = {config.beta:g}{_beta_note(config.acceptance)}, "
        f"temperature {config.temperature:g}, "
        f"top-k {config.top_k}, top-p {config.top_p:g}"
        f"{' (phoneme ends at temperature 1)' if config.untempered_token_ids else ''}, seed {comparison.seed}."
    )
    lines += ["", TABLE_LEGEND + (HEADS_NOTE if comparison.draft == "heads" else "")]
    return "\n".join(lines)


TABLE_LEGEND = (
    "**Reading the table.** *Target calls*: AR makes one per sampled token (plus a prompt call per text chunk), "
    "speculative one per round. *Inserted* tokens are phonemes the decoder inserts itself (free in both, never "
    "rejected). *Acceptance rate* counts every drafted token, also those after the first rejection, which are "
    "discarded untested; *α* is the expected acceptance of the tokens actually tested, which is what the speedup "
    "formula uses. *c* and *verify* are a draft step and a verify call in units of one AR target step. The three "
    "*predicted* speedups are one formula, expected tokens per round (1 − α^(K+1)) / (1 − α) over the round's "
    "cost K·c + verify, with this run's α, and differ only in their costs: *textbook* takes this run's c and a "
    "verify as cheap as one step; *strict* this run's c and verify cost, as timed during the run (a measured "
    "speedup close to it means no time is lost outside the model calls); *calibrated* the costs probed on this "
    "machine before the run on a random prompt (measured once per process: on a busy machine they drift), "
    "for the K used and for the K they favour. *Calibrated here* lists those costs per K: the probe times "
    f"K = {', '.join(map(str, MEASURED_DRAFT_LENS))} and fills in the rest (~); a verify timed cheaper than a "
    "shorter one is raised to it (↑: verifying more tokens never costs less, so the difference is timing noise), which is why several K "
    "can show the same cost where a verify of a few tokens costs about the same as one (small models, CPU). "
    "*Matmul kernels*: which library runs the target's forward (ONNX Runtime's graph, or torch with the kernel "
    "that multiplies its weights for a call of that many tokens: one for an AR step, 5-8 for a verify), in both "
    "decoders, and how that was decided (timed on this machine, set by `SSD_DEMO_MATMUL`, or the only one available)."
)

HEADS_NOTE = (" With **draft heads** there is no draft model: *draft calls* are steps of the heads, small blocks "
              "that roll the target's own last hidden state forward one token at a time.")


def details(comparison: Comparison) -> dict:
    """Machine-readable summary (the API's JSON output)."""
    config = asdict(comparison.config)
    config.pop("allowed_token_ids", None)  # thousands of ids; not useful to a reader

    def run(result: SynthesisResult) -> dict:
        return {
            "stats": asdict(result.generation.stats),
            "tokens": list(result.generation.tokens),
            "duration_seconds": result.duration_seconds,
            "lm_seconds": result.lm_seconds,
            "codec_seconds": result.codec_seconds,
            "total_seconds": result.total_seconds,
            "wall_seconds": result.elapsed_seconds,
            "real_time_factor": result.real_time_factor,
            "sample_rate": result.sample_rate,
            # Per speculative round: tokens drafted, how many the target accepted, and what followed
            # (replacement or bonus). AR has one "round" per token, which says nothing more.
            "rounds": [{"drafted": len(step.drafted), "accepted": step.accepted, "next": step.next_kind}
                       for step in result.generation.steps] if result.generation.stats.mode == "speculative" else [],
            "chunks": [{"text": c.text, "seed": c.seed, "tokens": len(c.generation.tokens),
                        "finish_reason": c.generation.stats.finish_reason,
                        "start_seconds": c.start_sample / result.sample_rate,
                        "end_seconds": c.end_sample / result.sample_rate} for c in result.chunks],
        }

    report = comparison.report
    return {
        "text": comparison.ar.text,
        "not_spoken": comparison.left_out,  # letters of other scripts and emoji the voice left out ("" when none)
        "preset": comparison.preset,
        "draft": comparison.draft,
        "seed": comparison.seed,
        "config": config,
        "autoregressive": run(comparison.ar),
        "speculative": run(comparison.spec),
        "speedup": {
            "measured": report.measured,
            "end_to_end": end_to_end_speedup(comparison) if math.isfinite(end_to_end_speedup(comparison)) else None,
            "predicted": report.predicted,
            "predicted_strict": report.predicted_strict,
            "alpha": report.alpha,
            "cost_ratio": report.cost_ratio,
            "verify_ratio": report.verify_ratio,
        },
        "calibration": _calibration(comparison),
    }


TOKEN_COLOURS = {
    "accepted": "#3aa655",
    "rejected": "#d9534f",
    "replacement": "#e8873a",
    "bonus": "#3b8fd9",
    "discarded": "#9a9a9a",
    "inserted": "#7b6fb0",  # put in by the decoder (the embedded voice's phonemes), never sampled
}


def token_view(
    generation: GenerationResult, label: Callable[[int], str] = str, eos_ids: tuple[int, ...] = ()
) -> list[tuple[str, str | None]]:
    """Every speculative round as highlighted (text, category) pairs, rounds separated by "|".

    accepted: drafted and kept; rejected: the first drafted token the target refused;
    replacement: the token sampled in its place; bonus: the extra token after a fully
    accepted block; discarded: drafted after a rejection (never checked); inserted: put in by
    the decoder's forced-token schedule (the embedded voice's phonemes), never sampled.
    """

    def name(token: int) -> str:
        return "END" if token in eos_ids else label(token)

    spans: list[tuple[str, str | None]] = []
    for index, step in enumerate(generation.steps):
        if index:
            spans.append((" | ", None))
        inserted = _inserted_after(step, step.accepted + 1)
        for position, token in enumerate(step.drafted[: step.accepted]):
            spans.append((name(token), "accepted"))
            spans += [(name(t), "inserted") for t in inserted[position]]
        tail = inserted[step.accepted]
        if step.next_kind == "replacement":
            spans.append((name(step.drafted[step.accepted]), "rejected"))
            spans.append(("→" + name(step.next_token), "replacement"))
            spans += [(name(t), "inserted") for t in tail]
            spans += [(name(token), "discarded") for token in step.drafted[step.accepted + 1 :]]
        elif step.next_kind == "bonus":
            spans.append(("+" + name(step.next_token), "bonus"))
            spans += [(name(t), "inserted") for t in tail]
        else:
            spans += [(name(token), "discarded") for token in step.drafted[step.accepted :]]
            if step.next_token is not None:  # e.g. an autoregressive step
                spans.append((name(step.next_token), None))
                spans += [(name(t), "inserted") for t in tail]
    return spans


def _inserted_after(step, length: int) -> list[list[int]]:
    """For each emitted token of a round, the tokens the decoder inserted right after it (padded to `length`)."""
    groups, index = [], 0
    for count in step.forced_counts:
        groups.append(step.committed[index + 1 : index + 1 + count])
        index += 1 + count
    return groups + [[] for _ in range(length - len(groups))]


def comparison_token_view(comparison: Comparison) -> list[tuple[str, str | None]]:
    return token_view(comparison.spec.generation, comparison.token_label, comparison.config.eos_ids)


def figures(comparison: Comparison) -> dict[str, object]:
    """The four charts, by name."""
    ar, spec = comparison.ar, comparison.spec
    return {
        "accepted_length": charts.accepted_length_figure(spec.generation),
        "tokens_vs_time": charts.tokens_vs_time_figure(ar.generation, spec.generation),
        "timing_breakdown": charts.timing_breakdown_figure(ar, spec),
        "acceptance_by_position": charts.acceptance_by_position_figure(spec.generation),
    }


def _beta_note(acceptance: str) -> str:
    """Said beside β for a rule that does not read it (`RuleSpec.uses_beta`)."""
    return "" if RULES[acceptance].uses_beta else f" (not used by {acceptance})"
