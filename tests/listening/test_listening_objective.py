"""Objective metrics beside a study's listening results: per-clip figures from a judge (a stand-in here, so that
the arithmetic is checked exactly), cached beside the stimuli, summarised per system and set against the
listeners' per-item means with Spearman's rho."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from scipy import stats as scipy_stats

from ssd_demo.listening.objective import (CACHE_FILE, ClipMetrics, agreements, clip_metrics, objective_lines,
                                          system_metrics)
from ssd_demo.listening.stimuli import tone_renderer
from ssd_demo.listening.study_setup import create_study

STUDY = """
name = "objective"
systems = ["SSD beta=0.3 K=4"]
items_per_rater = 3
sentences = ["One two three.", "Four five.", "Six seven eight nine."]
[mos]
"""


def test_clips_are_judged_once_and_read_back(tmp_path):
    (tmp_path / "objective.toml").write_text(STUDY)
    _, stimulus_set = create_study(tmp_path / "objective.toml", root=tmp_path / "data", render=tone_renderer(seconds=0.05))
    calls = []

    def judge(audio, rate, text):
        assert audio.dtype == np.float32 and 0 < np.abs(audio).max() <= 1.0  # samples as a judge reads them
        calls.append(text)
        return SimpleNamespace(errors=len(calls) % 2, words=len(text.split()), ovrl=3.0 + len(calls) / 10, sig=3.5)

    clips = clip_metrics(stimulus_set, judge)
    assert len(clips) == len(calls) == sum(len(item.clips) for item in stimulus_set.items)
    assert (stimulus_set.root / CACHE_FILE).is_file()
    assert clip_metrics(stimulus_set, judge) == clips and len(calls) == len(clips)  # read back, not judged again
    by_system = {s.system: s for s in system_metrics(clips)}
    for system, summary in by_system.items():
        mine = [c for c in clips if c.system == system]
        assert summary.wer == pytest.approx(sum(c.errors for c in mine) / sum(c.words for c in mine))
        assert summary.ovrl == pytest.approx(sum(c.ovrl for c in mine) / len(mine)) and summary.clips == len(mine)


def test_listeners_and_metrics_are_compared_per_kind_with_spearman():
    clips = [ClipMetrics(f"i{n}", system, errors, 10, ovrl, 3.0, 1.0)
             for n, (system, errors, ovrl) in enumerate([("A", 0, 4.0), ("A", 1, 3.5), ("B", 3, 2.5), ("B", 5, 2.0),
                                                         ("A", 2, 3.9)])]
    per_item = {c.item_id: {f"mos {c.system}": score} for c, score in zip(clips, [4.8, 4.1, 2.2, 1.5, 3.0])}
    per_item["i0"]["mushra A"] = 90.0  # one MUSHRA pair only: too few for a correlation
    found = {(a.kind, a.metric): a for a in agreements(clips, per_item)}
    scores = [4.8, 4.1, 2.2, 1.5, 3.0]
    expected = scipy_stats.spearmanr(scores, [c.errors / c.words for c in clips])
    assert found[("mos", "WER")].rho == pytest.approx(expected.statistic) and found[("mos", "WER")].pairs == 5
    assert found[("mos", "WER")].rho < 0 < found[("mos", "DNSMOS OVRL")].rho  # better heard, fewer errors
    assert found[("mos", "DNSMOS SIG")].rho is None  # no spread in SIG
    assert found[("mushra", "WER")].rho is None and found[("mushra", "WER")].pairs == 1
    text = "\n".join(objective_lines(system_metrics(clips, ["B", "A"]), list(found.values())))
    assert text.index("  B ") < text.index("  A ") and "rho -" in text
