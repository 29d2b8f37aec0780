"""The app's Benchmark tab handler: a live quick sweep, with clear errors."""

import gradio as gr
import pytest

from ssd_demo.app.benchmark import tab as benchmark_tab
from ssd_demo.backends import registry as presets
from ssd_demo.measure import sweep
from support.toy_backend import build_toy_synthesizer


def test_quick_sweep_returns_chart_rows_and_note(monkeypatch):
    from ssd_demo.measure import judge, teacher_reference

    monkeypatch.setattr(judge, "dnsmos", lambda audio, rate: {"ovrl": 2.0, "sig": 2.5, "bak": 3.0})  # test_judge.py
    monkeypatch.setattr(teacher_reference, "available", lambda: False)  # the teacher's references: test_sweep.py
    synth = build_toy_synthesizer(max_new_tokens=16)
    synth.drafts["distilled"] = next(iter(synth.drafts.values()))
    monkeypatch.setattr(presets, "load_preset", lambda key, device=None: synth)
    monkeypatch.setattr(sweep, "held_out_sentences", lambda n: ["hello there", "one two three"][:n])
    messages = []
    figure, rows, note = benchmark_tab.run_quick_sweep(2, "distilled", 0, progress=lambda f, desc="": messages.append(f))
    labels = [row[0] for row in rows]
    assert any(label.startswith("ssd") for label in labels) and any(label.startswith("pcg") for label in labels)
    assert any("adaptive" in label for label in labels)
    assert all(row[1] > 0 for row in rows) and any(row[-1] == "yes" for row in rows)
    assert all(row[sweep.QUICK_TABLE_HEADERS.index("DNSMOS OVRL")] == 2.0 for row in rows)
    assert all(row[sweep.QUICK_TABLE_HEADERS.index("MCD-DTW dB")] is None for row in rows)  # no teacher: NLL axis
    assert figure.axes[0].get_title() and "not installed" in note and "DNSMOS" in note
    assert messages and max(messages) <= 1.0


def test_quick_sweep_rejects_bad_input(monkeypatch):
    synth = build_toy_synthesizer(max_new_tokens=16)
    monkeypatch.setattr(presets, "load_preset", lambda key, device=None: synth)
    with pytest.raises(gr.Error, match="between 1 and 8"):
        benchmark_tab.run_quick_sweep(0, "distilled", 0, progress=lambda *a, **k: None)
    with pytest.raises(gr.Error, match="Unknown draft"):
        benchmark_tab.run_quick_sweep(1, "no-such-draft", 0, progress=lambda *a, **k: None)
