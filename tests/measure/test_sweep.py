"""The speed-fidelity sweep: threshold choice, Pareto marking, a run on the toy voice, the chart."""

import numpy as np
import pytest
import torch

from ssd_demo.measure.mcd import mcd_dtw
from ssd_demo.rules import build_groups
from ssd_demo.measure.reporting import GENERATED_END, write_section
from ssd_demo.measure.sweep import SweepPoint, mark_pareto, run_sweep
from ssd_demo.measure.sweep_grid import grid_setting, theta_for_group_size
from ssd_demo.measure.sweep_report import at_matched_fidelity, markdown, pareto_figure
from support.toy_backend import build_toy_synthesizer


def test_theta_gives_the_requested_mean_group_size():
    embeddings = torch.randn(1500, 32, generator=torch.Generator().manual_seed(0))
    for size in (2.0, 8.0, 32.0):
        theta = theta_for_group_size(embeddings, size)
        groups = build_groups(embeddings, theta)
        assert abs(float(groups.sizes.mean()) - size) / size < 0.25


def point(label, speed, mcd):
    return SweepPoint(label, "ssd", "beta", 0.0, speed, 0.5, 1.5, mcd, 1.0)


def test_pareto_frontier():
    points = [point("slow-good", 1.0, 5.0), point("fast-bad", 2.0, 7.0), point("dominated", 0.9, 6.0),
              point("fast-good", 1.8, 5.0)]
    mark_pareto(points)
    assert [p.label for p in points if p.pareto] == ["fast-bad", "fast-good"]


def test_fastest_setting_per_rule_at_matched_fidelity():
    reference = SweepPoint("ssd beta=0.2", "ssd", "beta", 0.2, 1.5, 0.5, 2.0, 40.0, 0.4)
    points = [
        reference,
        SweepPoint("ssd beta=0.5", "ssd", "beta", 0.5, 2.0, 0.6, 2.5, 44.0, 1.0),     # faster but 10% worse
        SweepPoint("pcg small", "pcg", "group size", 4, 1.6, 0.5, 2.1, 39.0, 0.3),
        SweepPoint("pcg large", "pcg", "group size", 16, 1.8, 0.6, 2.4, 40.39, 0.5),  # within 1%
        SweepPoint("pcg huge", "pcg", "group size", 32, 2.2, 0.7, 2.8, 40.5, 0.9),    # 1.25% worse
        SweepPoint("topk k=5", "topk", "k", 5, 2.5, 0.8, 3.0, 50.0, 1.2),
    ]
    best = at_matched_fidelity(points, reference)
    assert {rule: p.label for rule, p in best.items()} == {"ssd": "ssd beta=0.2", "pcg": "pcg large"}
    table = markdown(points, {"mcd": 39.0, "nll": 0.3, "wer": 0.05, "dnsmos": 3.1}, "cmd",
                     {"commit": "x", "date": "d", "machine": "m", "sentences": 2}, "ssd beta=0.2")
    assert "| pcg | pcg large | 1.80x | 1.20x |" in table and "topk k=5 | 2.50x | 1" not in table.split("Fastest")[1]
    assert "| WER % | DNSMOS OVRL |" in table and "WER 5.0 %, DNSMOS OVRL 3.10" in table and "PER" not in table


def test_matched_fidelity_table_gives_the_paired_difference_and_its_interval():
    reference = SweepPoint("ssd beta=0.2", "ssd", "beta", 0.2, 1.5, 0.5, 2.0, 40.0, 0.4, mcds=[30.0, 40.0, 50.0, 60.0])
    # Sentence by sentence 0.5 dB worse: no spread in the difference, so the interval is a point.
    close = SweepPoint("pcg", "pcg", "group size", 8, 1.6, 0.5, 2.1, 40.3, 0.4, mcds=[30.5, 40.5, 50.5, 60.5])
    table = markdown([reference, close], {"mcd": 39.0, "nll": 0.3}, "cmd",
                     {"commit": "x", "date": "d", "machine": "m", "sentences": 4}, "ssd beta=0.2")
    assert "| +0.50 [+0.50, +0.50] |" in table


def test_paired_difference_removes_sentence_spread_and_skips_missing_values():
    from ssd_demo.measure.reporting import paired_difference

    rng = np.random.default_rng(0)
    base = rng.normal(40, 10, 200)  # sentences differ by ~10 dB
    mean, low, high = paired_difference(base + 1.0 + rng.normal(0, 0.5, 200), base)
    assert low < 1.0 < high and high - low < 0.3  # the 10 dB spread does not widen the interval
    assert paired_difference([1.0, float("nan"), 3.0], [0.0, 5.0, 1.0])[0] == pytest.approx(1.5)
    assert np.isnan(paired_difference([float("nan")], [1.0])[0])


def test_sweep_runs_on_a_voice_and_draws_the_map(monkeypatch):
    from ssd_demo.measure import judge

    # the judges' plumbing (the judges themselves: test_judge.py): Whisper "hears" the first text only
    heard = {"hello there": "Hello there!", "good morning all": "good morning"}
    monkeypatch.setattr(judge, "transcribe", lambda audio, rate: "")
    monkeypatch.setattr(judge, "dnsmos", lambda audio, rate: {"ovrl": 3.0, "sig": 3.5, "bak": 4.0})
    synth = build_toy_synthesizer(max_new_tokens=24)
    settings = [
        grid_setting("ssd beta=0", "ssd", "beta", 0.0, acceptance="ssd", beta=0.0),
        grid_setting("ssd beta=1", "ssd", "beta", 1.0, acceptance="ssd", beta=1.0),
        grid_setting("pcg", "pcg", "group size", 4.0, acceptance="pcg", pcg_theta=0.2),
        grid_setting("topk k=3", "topk", "k", 3, acceptance="topk", topk_tolerance=3),
        grid_setting("adaptive", "exact-adaptive", "K max", 6, acceptance="exact", draft_len=6, adaptive_draft_len=True),
    ]
    texts = ["hello there", "good morning all"]
    references = [synth.synthesize(t, mode="ar").audio for t in texts]
    seen = []
    real_word_errors = judge.word_errors
    monkeypatch.setattr(judge, "word_errors", lambda text, hypothesis: real_word_errors(text, heard[text]))
    result = run_sweep(synth, texts, references, settings, progress=lambda f, m: seen.append(f),
                       repeats=2, judges=("wer", "dnsmos"))
    points = result.points
    # AR's fidelity comes from the sweep's own AR runs: the same seeds give the same audio.
    ar_audio = [synth.synthesize(t, mode="ar", config=synth.config(seed=i)).audio for i, t in enumerate(texts)]
    assert result.ar_mcd == pytest.approx(float(np.median([mcd_dtw(a, r) for a, r in zip(ar_audio, references)])))
    assert np.isfinite(result.ar_nll)
    assert [p.label for p in points] == [s.label for s in settings]
    assert seen == sorted(seen) and 0 < seen[-1] <= 1
    by_label = {p.label: p for p in points}
    assert by_label["ssd beta=1"].acceptance == 1.0
    assert by_label["ssd beta=1"].acceptance >= by_label["ssd beta=0"].acceptance
    assert all(p.lm_speedup > 0 and np.isfinite(p.mcd) and np.isfinite(p.nll) for p in points)
    # WER: 0 for the first text, 1/3 for the second (one word of three missed); mean over sentences
    assert all(p.wers == pytest.approx([0.0, 1 / 3]) and p.wer == pytest.approx(1 / 6) for p in points)
    assert result.ar_wer == pytest.approx(1 / 6) and result.ar_dnsmos == 3.0
    assert all(p.dnsmos == 3.0 and p.dnsmoses == [3.0, 3.0] for p in points)
    for p in points:  # a frontier point is dominated by no other point; every other point by some point
        dominated = any(q.lm_speedup >= p.lm_speedup and q.mcd <= p.mcd and (q.lm_speedup, q.mcd) != (p.lm_speedup, p.mcd)
                        for q in points)
        assert p.pareto == (not dominated)
    figure = pareto_figure(points, ar_mcd=1.0)
    labels = [line.get_label() for line in figure.axes[0].get_lines()]
    assert {"ssd", "pcg", "topk", "exact-adaptive", "Pareto frontier", "AR"} <= set(labels)
    assert figure.axes[0].get_xlabel().startswith("LM speedup")


def test_points_of_several_drafts_are_told_apart_on_the_map_and_in_the_matched_table():
    def point(draft, rule, speed, mcd):
        return SweepPoint(label=f"{draft}: {rule}", rule=rule, parameter="", value=0, lm_speedup=speed, acceptance=0.5,
                          tokens_per_call=2, mcd=mcd, nll=0.3, draft=draft)

    points = [point("distilled", "ssd", 1.5, 10.0), point("heads", "ssd", 1.8, 10.0), point("heads", "exact-K", 1.6, 9.0)]
    best = at_matched_fidelity(points, points[0])
    assert set(best) == {"distilled: ssd", "heads: ssd", "heads: exact-K"}
    labels = {line.get_label() for line in pareto_figure(points).axes[0].get_lines()}
    assert {"distilled: ssd", "heads: ssd", "heads: exact-K"} <= labels


def test_write_section_replaces_only_its_generated_part(tmp_path):
    doc = tmp_path / "bench.md"
    doc.write_text("# Benchmarks\n\n## Engine\nkeep me\n\n## Speed-fidelity map\nold\n\n## Later\nkeep too\n")
    write_section(doc, "## Speed-fidelity map", "## Speed-fidelity map\nnew table\n")
    text = doc.read_text()
    assert "keep me" in text and "keep too" in text and "new table" in text and "old" not in text
    # A reading written below the generated part survives the next regeneration.
    doc.write_text(text.replace(GENERATED_END + "\n", GENERATED_END + "\n\nA hand-written reading.\n"))
    write_section(doc, "## Speed-fidelity map", "## Speed-fidelity map\nnewer table\n")
    text = doc.read_text()
    assert "newer table" in text and "new table" not in text and "A hand-written reading." in text
    assert text.index("A hand-written reading.") < text.index("## Later") and text.count(GENERATED_END) == 1
    write_section(doc, "## Appended", "## Appended\nrows\n")
    assert doc.read_text().rstrip().endswith(GENERATED_END)
