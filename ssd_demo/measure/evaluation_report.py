"""The `eval` report as markdown: the systems table, the table by length, and what was measured how.

Columns follow what the run measured: WER (Whisper) and DNSMOS (OVRL, SIG) when scored; target NLL only for
the embedded voice (it needs its plain-LM target), MCD-DTW and the duration ratio only for the embedded voice
with its teacher installed (they need the teacher's rendering of each text).
"""

from __future__ import annotations

from .endings import FRAME_MS, TAIL_MS


def _fmt(value, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return ""
    return f"{value:.{digits}f}"


def _ci(diff, scale: float = 1.0, digits: int = 3) -> str:
    if not diff or diff[0] != diff[0]:
        return ""
    a, b, c = (x * scale for x in diff)
    return f"{a:+.{digits}f} [{b:+.{digits}f}, {c:+.{digits}f}]"


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
        "machine": meta.get("machine"),
        "dataset_build_seconds": meta.get("dataset_build_seconds"),
        "train_sentences": meta.get("train_sentences"),
        # a run that continued an earlier voice (`scripts/assemble_voice.py`): that voice's training, first links first
        "earlier_training": [{"target_steps": link.get("training", {}).get("target", {}).get("steps"),
                              "seconds": link.get("total_training_seconds")} for link in meta.get("earlier_training", [])],
        # utterances added to the corpus's training split (`training.dataset.add_utterances`)
        "supplements": [{"kind": item.get("kind"), "sentences": item.get("sentences")}
                        for item in meta.get("supplements", [])],
    }


def _columns(report: dict) -> list[tuple[str, callable]]:
    """(header, cell of a system row) for each column this report has."""
    metrics, embedded = report.get("metrics", ["wer"]), report.get("embedded", True)
    columns: list[tuple[str, callable]] = [("system", lambda r: r["system"])]
    if "wer" in metrics:
        columns += [("WER %", lambda r: _fmt(_pct(r.get("wer")))),
                    ("WER - AR, points (95% CI)", lambda r: _ci(r.get("wer_vs_ar"), 100, 2)),
                    ("corpus WER %", lambda r: _fmt(_pct(r.get("wer_corpus")))),
                    ("misheard % (texts)", _misheard)]
    if "dnsmos" in metrics:
        columns += [("DNSMOS OVRL", lambda r: _fmt(r.get("dnsmos_ovrl"))),
                    ("OVRL - AR (95% CI)", lambda r: _ci(r.get("dnsmos_ovrl_vs_ar"), 1, 2)),
                    ("DNSMOS SIG", lambda r: _fmt(r.get("dnsmos_sig"))),
                    ("SIG - AR (95% CI)", lambda r: _ci(r.get("dnsmos_sig_vs_ar"), 1, 2))]
    columns += [("cut endings % (clips)", _cut_endings)]
    if embedded and report.get("teacher"):
        columns += [("MCD-DTW dB", lambda r: _fmt(r.get("mcd")))]
    if embedded:
        columns += [("target NLL", lambda r: _fmt(r.get("nll")))]
    if report.get("engine") == "vllm":  # batches: throughput and latency, not one-text timings
        return columns + [
            ("acceptance", lambda r: _fmt(r.get("acceptance"))),
            ("tokens/s", lambda r: _fmt(r.get("tokens_per_second"), 1)),
            ("audio s / s", lambda r: _fmt(r.get("audio_seconds_per_second"))),
            ("throughput vs AR", lambda r: _fmt(r.get("throughput_vs_ar"))),
            ("LM-RTF", lambda r: _fmt(r.get("lm_rtf"), 3)),
            ("latency median / max s", lambda r: f"{_fmt(r.get('latency_median_s'))} / {_fmt(r.get('latency_max_s'))}"),
        ]
    columns += [
        ("acceptance", lambda r: _fmt(r.get("acceptance"))),
        ("alpha", lambda r: _fmt(r.get("alpha"))),
        ("c / v", lambda r: f"{_fmt(r['cost_ratio'])} / {_fmt(r['verify_ratio'])}"
         if r.get("cost_ratio") is not None else ""),
        ("LM speedup", lambda r: _fmt(r.get("lm_speedup"))),
        ("predicted (strict)", lambda r: _fmt(r.get("predicted_strict"))),
        ("LM-RTF", lambda r: _fmt(r.get("lm_rtf"), 3)),
        ("end-to-end speedup", lambda r: _fmt(r.get("e2e_speedup"))),
    ]
    return columns


def _cut_endings(row: dict) -> str:
    share = row.get("cut_endings")
    if share is None or share != share:
        return ""
    return f"{share * 100:.1f} ({row.get('cut_endings_count', 0)})"


def _misheard(row: dict) -> str:
    share = row.get("misheard")
    if share is None or share != share:  # rows scored before it was reported
        return ""
    return f"{share * 100:.1f} ({row.get('misheard_count', 0)})"


def _pct(value):
    return None if value is None else value * 100


def markdown(report: dict, command: str) -> str:
    embedded = report.get("embedded", True)
    metrics = report.get("metrics", ["wer"])
    columns = _columns(report)
    sampling = (f"temperature {report['config']['temperature']}, top-k {report['config']['top_k']}, "
                f"top-p {report['config']['top_p']}, "
                + (f"ids {list(report['config']['untempered_token_ids'])} at temperature 1 (the phoneme-end marker), "
                   if report["config"].get("untempered_token_ids") else "")
                + (f"K chosen each round in 0..{report['config']['draft_len']} (adaptive, with this machine's measured "
                   "costs)" if report["config"].get("adaptive_draft_len") else f"K = {report['config']['draft_len']}")
                + f"; seed {report['config'].get('seed') or 0} (text i: seed + i; the teacher's references from the "
                "same seed); SSD at beta = 0 is exact speculative sampling.")
    lines = [
        report.get("section", "## Embedded voice evaluation"),
        "",
        f"Command: `{command}`",
        "",
        f"- Run: commit {report['commit']}, {report['date']}; machine: {report['machine']}.",
        *(f"- {line}" for line in _what_was_measured(report)),
        f"- Sampling: {sampling}",
        "",
        "| " + " | ".join(header for header, _ in columns) + " |",
        "|" + "---|" * len(columns),
    ]
    for row in report["systems"]:
        lines.append("| " + " | ".join(cell(row) for _, cell in columns) + " |")
    lines += _by_length(report, metrics, embedded and bool(report.get("teacher")))
    lines += _instruments(report, metrics)
    if report.get("notes"):
        lines += [""] + [f"Note: {note}" for note in report["notes"]]
    lines.append("")
    return "\n".join(lines)


def _what_was_measured(report: dict) -> list[str]:
    """The header's lines after the run's: the texts, the reference, the judges, what the columns mean."""
    metrics = report.get("metrics", ["wer"])
    if report.get("test_set"):
        texts = (f"{len(report['texts'])} items of the test set `{report['test_set']}` "
                 f"({report['test_set_format']} format)")
    else:
        texts = (f"{len(report['texts'])} texts a visitor would type (`ssd_demo/measure/visitor_texts.py`, never "
                 "trained on)")
    chunks = (f"; text spoken in chunks of at most {report.get('chunk_phonemes')} phonemes"
              if report.get("embedded", True) and report.get("engine") != "vllm" else "")
    lines = [f"Pair: {report.get('pair', 'the embedded voice')}; {texts}{chunks}."]
    if report.get("engine") != "vllm" and report.get("embedded", True) and report.get("teacher"):
        lines.append(f"Reference: the teacher's own rendering ({report['teacher']}): the teacher row scores it, the "
                     "codec round trip row its latents through the voice's codec (what perfect tokens would sound "
                     "like).")
    lines += [part + "." for part in _intelligibility_parts(report, metrics)]
    if report.get("engine") == "vllm":
        return lines + ["Engine: " + _BATCHED]
    return lines + [
        f"Columns: those not described above are medians; times are the fastest of {report.get('repeats', 1)} "
        "identical runs; "
        "speedups per sampled token; LM-RTF = LM seconds / audio seconds over all texts; c / v = a draft step / a "
        "verify call in AR target steps, and `predicted (strict)` = (1 - alpha^(K+1)) / ((1 - alpha)(K c + v)) per "
        "text, medians."]


_BATCHED = ("speech LM on the vLLM engine: each system's texts submitted at once (continuous batching; one batch "
            "per voice prompt), so a text's time is shared with the others and there is no per-text speedup. "
            "tokens/s and audio s / s = all tokens and all seconds of audio over the batch's LM time (the codec's "
            "time apart); throughput vs AR = tokens/s over AR's; LM-RTF = LM seconds / audio seconds; latency = "
            "each text's time from the batch's submission to its last token, median and max; acceptance = "
            "accepted / drafted over the batch.")


def _intelligibility_parts(report: dict, metrics: list[str]) -> list[str]:
    parts = []
    if "wer" in metrics:
        asr = report.get("asr", {})
        model = asr.get("model")
        heard = "Whisper tiny.en (faster-whisper, int8, from the package index)" if model == "tiny.en" else f"`{model}`"
        parts.append(f"WER: word error rate heard by {heard} ({asr.get('normaliser')} normalisation; "
                     "mean over texts, and corpus WER = all errors / all reference words); misheard: the share "
                     "(and number) of texts with any word error, steadier than the mean on short texts, where a "
                     "word heard as several counts two or three times")
    if "dnsmos" in metrics:
        parts.append("DNSMOS: DNSMOS P.835's overall (OVRL) and speech (SIG) quality, 1-5, higher is better "
                     "(mean over texts)")
    parts.append(f"cut endings: the share (and number) of clips whose sound stops at full loudness, its last "
                 f"{TAIL_MS} ms of sound above a third of the loudest {FRAME_MS} ms frame's RMS (`measure.endings`; "
                 "sound ends at the last frame above 1 % of it)")
    return parts


def _by_length(report: dict, metrics: list[str], embedded: bool) -> list[str]:
    buckets = report.get("bucket_names") or list(report["systems"][0].get("wer_by_bucket", {}))
    if not buckets:
        return []
    shown = [m for m in ("wer", "dnsmos") if m in metrics]
    what = " / ".join({"wer": "WER %", "dnsmos": "DNSMOS OVRL"}[m] for m in shown)
    lines = ["", f"By length ({what}{' / duration ratio output : teacher' if embedded else ''}):", "",
             "| system | " + " | ".join(buckets) + " |", "|---|" + "---|" * len(buckets)]
    for row in report["systems"]:
        cells = []
        for bucket in buckets:
            values = [_fmt(_pct(row.get("wer_by_bucket", {}).get(bucket))) if m == "wer" else
                      _fmt(row.get("dnsmos_ovrl_by_bucket", {}).get(bucket)) for m in shown]
            durations = row.get("duration_by_bucket", {})
            if embedded and bucket in durations:
                values.append(_fmt(durations[bucket]))
            elif embedded and _is_reference(row):  # the teacher's own timing, which the ratio divides by
                values.append("1")
            cells.append(" / ".join(values))
        lines.append(f"| {row['system']} | " + " | ".join(cells) + " |")
    return lines


def transcripts(report: dict) -> str:
    """What the judge heard, for eval.md only (the docs keep the tables): every text some system (or the teacher)
    got a word wrong in, worst first, with each one's transcript, the teacher's first, so that a word the judge
    mishears even from the teacher is told from one the voice says wrong; the count of texts all got right. Empty
    without WER."""
    every = {**report.get("reference_per_text", {}), **report.get("per_text", {})}
    labels = [label for label, rows in every.items() if rows and "transcript" in rows[0]]
    if not labels:
        return ""
    by_text = list(zip(report["ids"], report["texts"], *(every[label] for label in labels)))
    wrong = [entry for entry in by_text if any(row.get("wer") for row in entry[2:])]
    wrong.sort(key=lambda entry: -max(row.get("wer") or 0.0 for row in entry[2:]))
    right = len(by_text) - len(wrong)
    lines = ["", "## What the judge heard", "",
             f"{right} of {len(by_text)} texts {'was' if right == 1 else 'were'} heard without a word wrong from "
             f"every system{' and the teacher' if report.get('reference_per_text') else ''}; the other "
             f"{len(wrong)}, worst first (WER %, then the transcript):"]
    for item_id, text, *rows in wrong:
        lines += ["", f"**{item_id}**: {text}", ""]
        lines += [f"- {label} ({_fmt(_pct(row.get('wer')), 1)}): {row.get('transcript') or '(nothing heard)'}"
                  for label, row in zip(labels, rows)]
    return "\n".join(lines) + "\n"


def _is_reference(row: dict) -> bool:
    """The teacher's rendering or its codec round trip (same durations: the round trip decodes its latents)."""
    return row["system"].startswith(("teacher (", "codec round trip of the teacher"))


def _instruments(report: dict, metrics: list[str]) -> list[str]:
    lines = []
    voice = report.get("voice")
    if voice and voice.get("parameters"):
        lines += ["", _voice_line(voice)]
    return lines


def _voice_line(voice: dict) -> str:
    params, ce, secs, steps = voice["parameters"], voice["test_ce"], voice["training_seconds"], voice["steps"]
    accept = voice.get("expected_acceptance", {})

    def held_out(name: str) -> str:
        if ce.get(name) is not None:
            return f"held-out cross-entropy {ce[name]:.2f} nats/token"
        if name in accept:
            return "held-out expected acceptance (temperature 1) " + " / ".join(f"{a:.2f}" for a in accept[name]) \
                + " after 1.." + str(len(accept[name])) + " steps"
        return "no held-out score"

    def size(name: str) -> str:  # a voice exported from an unfinished run may lack some of these
        parts = [f"{params[name] / 1e6:.1f} M parameters" if params.get(name) is not None else None,
                 f"{steps[name]} steps" if steps.get(name) is not None else None,
                 f"{secs[name] / 60:.1f} min" if secs.get(name) is not None else None]
        return "".join(f"{part}, " for part in parts if part)

    line = "Voice: " + "; ".join(f"{name} {size(name)}" + held_out(name) for name in params)
    # A voice.json records what its recipe measured: older exports lack the machine, newer ones the data stage.
    total, machine = voice.get("total_training_seconds"), voice.get("machine")
    if total is not None:
        line += (f". Training stages add up to {total / 60:.0f} min" + (f" ({machine})" if machine else "")
                 + " (summed; the draft stages are independent and may run side by side)")
    if voice.get("dataset_build_seconds") is not None:
        line += (f", plus {voice['dataset_build_seconds']:.0f} s to render and tokenise "
                 f"{voice['train_sentences']} training sentences")
    for item in voice.get("supplements") or []:
        line += f"; its training data held {item['sentences']:,} {item['kind']} besides the corpus's sentences"
    earlier = voice.get("earlier_training") or []
    if earlier:
        line += ("; continued from an earlier voice trained "
                 + ", then ".join(f"{link['target_steps']} target steps ({(link['seconds'] or 0) / 60:.0f} min)"
                                  for link in earlier))
    return line + "."
