"""The app's "Benchmark" tab: a small speed-fidelity sweep run live on the embedded voice.

The same code as `python -m ssd_demo sweep --quick`; the committed full map from
docs/benchmarks.md is shown next to it for reference.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import gradio as gr

from . import sweep

DOCS_CHART = Path(__file__).resolve().parents[1] / "docs" / "sweep_pareto.png"
TABLE_HEADERS = ["setting", "LM speedup", "acceptance", "tokens/target call", "MCD-DTW dB", "NLL", "Pareto"]


def run_quick_sweep(sentences: int, draft: str, seed: int, progress: gr.Progress | None = None):
    """Handler: (chart, table rows, note). Raises gr.Error with a clear message on failure."""
    from .presets import MODEL_JOB_LOCK

    progress = progress or gr.Progress()
    with MODEL_JOB_LOCK:
        return _sweep(int(sentences), draft, int(seed), progress)


def _sweep(sentences: int, draft: str, seed: int, progress):
    from .presets import load_preset

    if not 1 <= int(sentences) <= 8:
        raise gr.Error("Choose between 1 and 8 sentences.")
    try:
        progress(0.0, desc="Loading the embedded voice")
        synth = load_preset("embedded")
        texts = sweep.held_out_sentences(int(sentences))
    except (FileNotFoundError, ValueError, OSError) as error:
        raise gr.Error(f"The embedded voice could not be loaded: {error}") from None
    if draft not in synth.drafts:
        raise gr.Error(f"Unknown draft {draft!r}; available: {', '.join(synth.drafts)}")
    if synth.device.type == "cpu":
        import torch

        from .app_logic import cpu_threads_for

        torch.set_num_threads(cpu_threads_for(synth))  # as for the Compare tab: small models, one thread
    if shutil.which("espeak-ng"):
        from .training.render import render

        progress(0.02, desc="Rendering eSpeak NG references")
        references = [render(t) for t in texts]
        note = "Fidelity: MCD-DTW against eSpeak NG's rendering of each sentence (lower is better)."
    else:
        references = [None] * len(texts)
        note = ("eSpeak NG is not installed here, so fidelity is the target's NLL per token "
                "(lower = more typical for the target); install `espeak-ng` for MCD-DTW.")
    settings = sweep.default_settings(synth, quick=True)
    result = sweep.run_sweep(synth, texts, references, settings, seed=int(seed), draft=draft,
                             progress=lambda f, m: progress(0.05 + 0.95 * f, desc=m))
    points = result.points
    rows = [[p.label, round(p.lm_speedup, 2), round(p.acceptance, 2), round(p.tokens_per_call, 2),
             round(p.mcd, 2) if p.mcd == p.mcd else None, round(p.nll, 3), "yes" if p.pareto else ""]
            for p in points]
    return sweep.pareto_figure(points, result.ar_mcd if result.ar_mcd == result.ar_mcd else None), rows, note


def build_benchmark_tab(concurrency_id: str | None = None) -> None:
    """Lay out the tab inside the caller's `with gr.Tab(...)` block."""
    gr.Markdown(
        "Runs a small sweep live: every acceptance rule (SSD over beta, PCG over group size, top-k, "
        "fixed and adaptive K) on held-out sentences of the embedded voice, each next to plain AR. "
        "Points on the dashed frontier are the settings worth using. A sweep takes a minute or two on a CPU."
    )
    with gr.Row():
        sentences = gr.Slider(1, 8, value=2, step=1, label="Held-out sentences")
        draft = gr.Dropdown(["distilled", "layers"], value="distilled", label="Draft")
        seed = gr.Number(0, precision=0, label="Seed")
    run = gr.Button("Run sweep", variant="primary")
    note = gr.Markdown()
    chart = gr.Plot(label="Speed against fidelity (this run)")
    table = gr.Dataframe(headers=TABLE_HEADERS, label="Sweep results", interactive=False)
    if DOCS_CHART.exists():
        with gr.Accordion("Full sweep recorded in docs/benchmarks.md", open=False):
            gr.Image(str(DOCS_CHART), label="Full sweep", show_label=False)
    run.click(run_quick_sweep, [sentences, draft, seed], [chart, table, note], api_name="benchmark_sweep",
              concurrency_limit=1, concurrency_id=concurrency_id)
