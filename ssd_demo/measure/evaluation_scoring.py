"""How `eval` scores a system's outputs, and sums a system's per-text rows into its row of the table.

`Scoring` holds a run's instruments: Whisper (WER), DNSMOS, and for the embedded voice its `EmbeddedReference`
(target NLL; the teacher's rendering of each text, for MCD-DTW and the duration ratio, and its codec round
trip). `summarise` turns one system's per-text rows into its table row (means for error rates, medians
otherwise, paired differences from AR).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..engine.kv import cached_lm
from ..engine.results import compare_runs
from ..speech.latent_codec import LatentCodec
from ..speech.system import DecodingSystem
from . import judge, teacher_reference
from .endings import cut_share, ending
from .evaluation_inputs import EvalItem
from .mcd import mcd_dtw
from .reporting import median, paired_difference


def target_nll(target, prompt: list[int], tokens: list[int], allowed: list[int]) -> tuple[float, int]:
    """Sum of -log q(token) over the sampled tokens (temperature 1, allowed vocabulary) and their count.

    Tokens outside `allowed` were inserted by the decoder, not sampled, and are left out.
    """
    if not tokens:
        return 0.0, 0
    lm = cached_lm(target, len(prompt) + len(tokens))  # the decoders' own forward, whatever the model's kind
    try:
        with torch.no_grad():
            logits = lm.forward(prompt + tokens)[len(prompt) - 1 : -1].float()
    finally:
        lm.close()
    allowed_t = torch.tensor(allowed, device=logits.device)
    mask = torch.full_like(logits, float("-inf"))
    mask[:, allowed_t] = 0
    logp = torch.log_softmax(logits + mask, dim=-1)
    token_t = torch.tensor(tokens, device=logits.device)
    sampled = torch.isin(token_t, allowed_t)
    picked = logp.gather(1, token_t[:, None])[:, 0][sampled]
    return float(-picked.sum()), int(sampled.sum())


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
            if isinstance(backend.codec, LatentCodec):  # a codec of the teacher's latent space
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

    def score(self, system: DecodingSystem, timed, item: EvalItem, index: int, ar_generation) -> dict:
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
        """WER and/or DNSMOS of one clip, whichever this run scores, and how it ends (`measure.endings`: always,
        from the audio alone)."""
        end = ending(audio, sample_rate)
        row = {"tail_level": end.tail_level, "cut_ending": end.cut}
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
        per_text = self.reference_per_text()
        rows = [{"system": label, **_quality_summary(scores, buckets)} for label, scores in per_text.items()]
        if len(rows) > 1:
            rows[1]["mcd"] = median(self.reference.floor_mcd)
        return rows

    def reference_per_text(self) -> dict[str, list[dict]]:
        """{label: each text's scores} of the teacher's rendering and its codec round trip (empty without them)."""
        ref = self.reference
        if ref is None or not ref.audio:
            return {}
        per_text = {f"teacher ({teacher_reference.TEACHER_NAME})": ref.teacher_scores}
        if ref.round_trips:
            per_text["codec round trip of the teacher"] = ref.round_trip_scores
        return per_text


def _quality_summary(rows: list[dict], buckets: list[str]) -> dict:
    """The WER, DNSMOS and cut-ending columns of a set of per-text rows (those it has)."""
    summary = _endings_summary(rows)
    if rows and "wer" in rows[0]:
        summary.update(_wer_summary(rows, buckets))
    if rows and "dnsmos_ovrl" in rows[0]:
        summary.update(_dnsmos_summary(rows, buckets))
    return summary


def summarise(system: DecodingSystem, rows: list[dict], ar_rows: list[dict], buckets: list[str], metrics: tuple[str, ...],
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
    row.update(_endings_summary(rows))
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


def speed_summary(system: DecodingSystem, rows: list[dict], ar_rows: list[dict]) -> dict:
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


def _endings_summary(rows: list[dict]) -> dict:
    """The share (and count) of clips whose ending is cut at full loudness (none for rows scored before it)."""
    if not rows or "cut_ending" not in rows[0]:
        return {}
    flags = [x["cut_ending"] for x in rows]
    return {"cut_endings": cut_share(flags), "cut_endings_count": sum(flags)}


def _wer_summary(rows: list[dict], buckets: list[str]) -> dict:
    """Mean WER over texts (as the Seed-TTS evaluation averages), by bucket, corpus WER (errors / words), and the
    share of texts misheard at all. Why the last: on a one-word text an inserted word counts as much as a wrong one
    ("Fantastic!" heard as "That's fantastic" scores 100 %, as two words more score 300 %), so a few texts heard as
    several rule the mean of a short set; whether each text was heard right is the steadier reading there."""
    wer = [x["wer"] for x in rows]
    words = sum(x["reference_words"] for x in rows)
    misheard = sum(x["word_errors"] > 0 for x in rows)
    return {"wer": _mean(wer), "wer_by_bucket": _by_bucket(wer, buckets),
            "wer_corpus": sum(x["word_errors"] for x in rows) / words if words else float("nan"),
            "misheard": misheard / len(rows) if rows else float("nan"), "misheard_count": misheard}


def _dnsmos_summary(rows: list[dict], buckets: list[str]) -> dict:
    """DNSMOS OVRL and SIG: means over texts, overall and by bucket."""
    summary = {}
    for key in ("dnsmos_ovrl", "dnsmos_sig"):
        values = [x[key] for x in rows]
        summary.update({key: _mean(values), f"{key}_by_bucket": _by_bucket(values, buckets)})
    return summary


def _mean(values: list[float]) -> float:
    values = [v for v in values if v == v]
    return sum(values) / len(values) if values else float("nan")


def _by_bucket(values: list[float], buckets: list[str], reduce=_mean) -> dict[str, float]:
    return {b: reduce([v for v, vb in zip(values, buckets) if vb == b]) for b in dict.fromkeys(buckets)}
