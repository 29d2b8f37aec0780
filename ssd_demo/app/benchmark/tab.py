"""The app's "Benchmark" tab: a small speed-fidelity sweep run live on the embedded voice.

A thin builder around `sweep.quick_sweep` (the same code as `python -m ssd_demo sweep --quick`);
the committed full map from docs/benchmarks.md is shown next to it for reference.
"""

from __future__ import annotations

from pathlib import Path

import gradio as gr

from ...measure import sweep
from ...backends.embedded import available_drafts
from ...backends.registry import MODEL_JOB_LOCK
from ..errors import to_gradio_error

DOCS_CHART = Path(__file__).resolve().parents[3] / "docs" / "sweep_pareto.png"


def run_quick_sweep(sentences: int, draft: str, seed: int, progress: gr.Progress | None = None):
    """Handler: (chart, table rows, note); every failure becomes a gr.Error with a clear message."""
    progress = progress or gr.Progress()
    try:
        with MODEL_JOB_LOCK:
            result = sweep.quick_sweep(int(sentences), draft, int(seed), progress)
    except Exception as error:  # noqa: BLE001 - a message, never a traceback
        raise to_gradio_error(error) from None
    return result.figure, result.rows, result.note


def build_benchmark_tab(concurrency_id: str | None = None) -> None:
    """Lay out the tab inside the caller's `with gr.Tab(...)` block."""
    gr.Markdown(
        "Runs a small sweep live: every acceptance rule (SSD over beta, PCG over group size, top-k, "
        "fixed and adaptive K) on held-out sentences of the embedded voice, each next to plain AR. "
        "Points on the dashed frontier are the settings worth using. A sweep takes a minute or two on a CPU."
    )
    with gr.Row():
        sentences = gr.Slider(1, sweep.QUICK_MAX_SENTENCES, value=2, step=1, label="Held-out sentences")
        draft = gr.Dropdown(list(available_drafts()), value="distilled", label="Draft")
        seed = gr.Number(0, precision=0, label="Seed")
    run = gr.Button("Run sweep", variant="primary")
    note = gr.Markdown()
    chart = gr.Plot(label="Speed against fidelity (this run)")
    table = gr.Dataframe(headers=sweep.QUICK_TABLE_HEADERS, label="Sweep results", interactive=False)
    if DOCS_CHART.exists():
        with gr.Accordion("Full sweep recorded in docs/benchmarks.md", open=False):
            gr.Image(str(DOCS_CHART), label="Full sweep", show_label=False)
    run.click(run_quick_sweep, [sentences, draft, seed], [chart, table, note], api_name="benchmark_sweep",
              concurrency_limit=1, concurrency_id=concurrency_id)
