"""Objective metrics beside a study's listening results, as papers report them: per clip of the stimulus set,
the word errors of an ASR judge against the clip's text, DNSMOS P.835 (OVRL, SIG) and the duration; per
system their summary; and, per kind of rating, how the listeners' per-item means agree with each metric
(Spearman's rank correlation over every (item, system) with both), so a reader sees whether listeners and
metrics tell the same story.

The judge is `ssd_demo.measure.judge` (Whisper tiny.en through faster-whisper and DNSMOS, both offline and
on the CPU; the embedded voice's own judges); another can be handed in. Judging takes about a second a clip, so
the figures are kept beside the stimulus set (`objective.json`, keyed by each clip's SHA-256) and a second
report reads them back.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from .stimulus_sets import StimulusSet, read_clip

#: The file beside a stimulus set's manifest that keeps its clips' judged figures.
CACHE_FILE = "objective-v2.json"  # v2: clips judged as float samples (v1 read int16 as floats)
#: What the default judge is, for the report.
JUDGE_NAME = "Whisper tiny.en (faster-whisper) WER, DNSMOS P.835"


@dataclass(frozen=True)
class ClipMetrics:
    item_id: str
    system: str
    errors: int  # word errors against the item's text (after Whisper's English normaliser)
    words: int
    ovrl: float
    sig: float
    duration_seconds: float


@dataclass(frozen=True)
class SystemMetrics:
    system: str
    clips: int
    wer: float  # errors over words, pooled over the clips
    ovrl: float  # means over the clips
    sig: float
    duration_seconds: float


@dataclass(frozen=True)
class Agreement:
    """Listeners' per-item means of one kind against one metric (Spearman over (item, system) pairs)."""

    kind: str
    metric: str
    pairs: int
    rho: float | None  # None: fewer than three pairs or no spread
    p_value: float | None


Judge = Callable[[np.ndarray, int, str], object]  # (audio, rate, text) -> .errors, .words, .ovrl, .sig


def _default_judge(audio: np.ndarray, rate: int, text: str):
    from ..measure.judge import judge  # deferred: loads the ASR and DNSMOS runtimes

    return judge(audio, rate, text)


def clip_metrics(stimulus_set: StimulusSet, judge: Judge | None = None, progress=None) -> list[ClipMetrics]:
    """Every clip of the set judged (or read back from the set's cache when its checksum is there)."""
    cache_path = stimulus_set.root / CACHE_FILE
    cache = json.loads(cache_path.read_text()) if cache_path.is_file() else {}
    judge = judge or _default_judge
    found = []
    for item in stimulus_set.items:
        for system, clip in item.clips.items():
            if clip.sha256 not in cache:
                rate, samples = read_clip(stimulus_set, clip.path)  # int16, as served; judges take floats in [-1, 1]
                audio = samples.astype(np.float32) / 32768.0
                judged = judge(audio, rate, clip.settings.get("instruction") or item.text)  # a spoken check: its words
                cache[clip.sha256] = {"errors": judged.errors, "words": judged.words, "ovrl": judged.ovrl,
                                      "sig": judged.sig}
                if progress is not None:
                    progress(f"judged {item.item_id} {system}")
            figures = cache[clip.sha256]
            found.append(ClipMetrics(item.item_id, system, figures["errors"], figures["words"], figures["ovrl"],
                                     figures["sig"], clip.duration_seconds))
    try:
        cache_path.write_text(json.dumps(cache, indent=1) + "\n")
    except OSError:  # a read-only stimulus folder: judged again next time
        pass
    return found


def system_metrics(clips: Sequence[ClipMetrics], order: Sequence[str] = ()) -> list[SystemMetrics]:
    by_system: dict[str, list[ClipMetrics]] = defaultdict(list)
    for clip in clips:
        by_system[clip.system].append(clip)
    ranked = sorted(by_system, key=lambda s: (list(order).index(s) if s in order else len(order), s))
    return [SystemMetrics(system, len(rows), sum(r.errors for r in rows) / max(sum(r.words for r in rows), 1),
                          statistics.fmean(r.ovrl for r in rows), statistics.fmean(r.sig for r in rows),
                          statistics.fmean(r.duration_seconds for r in rows)) for system, rows in
            ((s, by_system[s]) for s in ranked)]


def agreements(clips: Sequence[ClipMetrics], per_item: Mapping[str, Mapping[str, float]]) -> list[Agreement]:
    """Spearman's rho between the listeners' mean score of each (item, system) (`StudyStatistics.per_item`:
    {item: {"kind system": mean}}) and each metric of that clip, per kind of rating (MUSHRA, MOS)."""
    metric_of = {"WER": lambda c: c.errors / c.words if c.words else 0.0, "DNSMOS OVRL": lambda c: c.ovrl,
                 "DNSMOS SIG": lambda c: c.sig}
    by_key = {(c.item_id, c.system): c for c in clips}
    kinds = sorted({column.split(" ", 1)[0] for columns in per_item.values() for column in columns})
    found = []
    for kind in kinds:
        pairs = [(score, by_key[(item, column.split(" ", 1)[1])]) for item, columns in per_item.items()
                 for column, score in columns.items()
                 if column.startswith(kind + " ") and (item, column.split(" ", 1)[1]) in by_key]
        for metric, value in metric_of.items():
            scores, values = [p[0] for p in pairs], [value(p[1]) for p in pairs]
            if len(pairs) < 3 or len(set(scores)) < 2 or len(set(values)) < 2:
                found.append(Agreement(kind, metric, len(pairs), None, None))
                continue
            from scipy import stats as scipy_stats  # deferred: importing it costs about 0.5 s of the app's start-up

            result = scipy_stats.spearmanr(scores, values)
            found.append(Agreement(kind, metric, len(pairs), float(result.statistic), float(result.pvalue)))
    return found


def objective_lines(systems: Sequence[SystemMetrics], agreement: Sequence[Agreement], judge: str = JUDGE_NAME) -> list[str]:
    """The report's section: per system, then how listeners and metrics agree."""
    lines = [f"Objective metrics per system ({judge}; WER pooled over the clips, means over them)"]
    lines += [f"  {s.system:32} WER {s.wer:6.1%}  OVRL {s.ovrl:4.2f}  SIG {s.sig:4.2f}  "
              f"{s.duration_seconds:5.2f} s  clips {s.clips}" for s in systems]
    if agreement:
        lines += ["Listeners vs metrics (Spearman rho over items x systems; WER should fall as scores rise)"]
        lines += [f"  {a.kind:6} vs {a.metric:12} " + ("-" if a.rho is None else f"rho {a.rho:+.2f}, p {a.p_value:.3g}")
                  + f" ({a.pairs} pairs)" for a in agreement]
    return lines


def objective_summary(systems: Sequence[SystemMetrics], agreement: Sequence[Agreement], judge: str = JUDGE_NAME) -> dict:
    """The same for the summary JSON."""
    return {"judge": judge, "systems": [asdict(s) for s in systems], "agreement": [asdict(a) for a in agreement]}
