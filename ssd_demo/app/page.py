"""The Gradio page: the app shell around its three tabs.

`build_demo()` returns a queued `gr.Blocks`; `launch_options()` holds what Gradio 6 takes at
launch (theme, CSS). Each tab is a folder of logic modules with no Gradio plus a thin builder:
Compare (`compare/`, built by `compare/tab.py`), Listening test (`listening/service.py` + `listening/tab.py`)
and Benchmark (`measure.sweep` + `benchmark/tab.py`). Every event has an `api_name`, and the main one, `/synthesize`,
has a default for every input but the text.
"""

from __future__ import annotations

import logging
import os

import gradio as gr

from . import compare, jobs
from .benchmark.tab import build_benchmark_tab
from .compare.tab import build_compare_tab
from .compare.race_js import PRESENTER_FROM_URL_JS
from ..backends.registry import list_presets
from ..engine.kernels import kernel_setting

log = logging.getLogger(__name__)

# Gradio counts waiting events of every kind against one limit, so it is large: listening-test votes
# must never be turned away because synthesis jobs are queued. Model jobs are limited per client
# instead (`jobs.admit`), which drains a flood in milliseconds per job.
QUEUE_MAX_SIZE = 1024
MODEL_CONCURRENCY_ID = "model"  # one job at a time touches the resident model pair

CSS = """
.ssd-tokens { max-height: 18rem; overflow-y: auto; }
footer { display: none !important; }
#ssd-headline h1 { margin: 0.2rem 0; }
/* The status line is itself the status: an event shown with show_progress="hidden" (the page's load, the
   readiness timer) still writes its timer ("0.3s") into the line while it runs, only transparent
   (Gradio's `.hide` is opacity 0), so the line's text (innerText, a screen reader) would begin with it. */
#ssd-status [data-testid="status-tracker"].hide { display: none; }
/* Presenter mode (?presenter=1 or the toggle): big numbers, the race only, fits 1280x720. */
body:not(.ssd-presenter) .ssd-presenter-only { display: none !important; }
body.ssd-presenter .ssd-dev { display: none !important; }
body.ssd-presenter #ssd-headline p { margin: 0; }
body.ssd-presenter #ssd-intro { display: none !important; }
body.ssd-presenter #ssd-headline h1 { font-size: 3rem; line-height: 1.1; }
body.ssd-presenter .ssd-lane h3 { font-size: 1.3rem; white-space: nowrap; }
body.ssd-presenter .ssd-lane, body.ssd-presenter #ssd-status { font-size: 1.25rem; }
body.ssd-presenter #ssd-text textarea { font-size: 1.3rem; height: 3.2rem !important; min-height: 0 !important; }
body.ssd-presenter #ssd-headline h1 { margin-bottom: 0.2rem; }
/* ... and, to fit the replay row too: the text box loses its label. */
body.ssd-presenter #ssd-text [data-testid="block-info"] { display: none; }
/* The live voices' component only carries data for the browser's player: nothing to see. */
#ssd-live-audio { display: none !important; }
#ssd-race-chart svg { display: block; }
#ssd-intro h1 { margin-bottom: 0.1rem; }
.ssd-lane h3 { margin: 0 0 0.2rem 0; }
body:not(.ssd-presenter) .ssd-lane p { font-size: 0.9rem; }
"""


#: Largest upload Gradio accepts (a voice prompt: 10 s of 48 kHz stereo WAV is under 2 MB); the clip's
#: length is then checked from its header before it is decoded.
MAX_UPLOAD = "16mb"


def launch_options() -> dict:
    """Keyword arguments for `demo.launch()`: what Gradio 6 no longer takes in `gr.Blocks()`, and the
    upload limit."""
    return {"theme": gr.themes.Soft(), "css": CSS, "max_file_size": MAX_UPLOAD}


def _analytics_enabled() -> bool:
    return os.environ.get("GRADIO_ANALYTICS_ENABLED", "False").strip().lower() in ("1", "true", "yes")


def build_demo(default_preset: str | None = None, load_default: bool = True) -> gr.Blocks:
    """The whole app. `default_preset` (the first registered preset when None) is loaded at build
    time to read its defaults, unless `load_default` is False or loading fails."""
    jobs.distrust_forwarded_headers()  # before launch: uvicorn reads it when the server starts
    kernel_setting()  # a mistyped SSD_DEMO_MATMUL stops the start, not a visitor's first click
    default_preset = default_preset or list_presets()[0].key
    try:
        defaults = compare.preset_defaults(default_preset, load_models=load_default)
        startup_problem = ""
    except Exception as error:  # noqa: BLE001 - the page still starts and explains
        log.warning("could not load preset %s at start-up: %s", default_preset, error)
        defaults = compare.preset_defaults(default_preset, load_models=False)
        startup_problem = f"⚠️ {error}"

    with gr.Blocks(title="Speech speculative decoding", analytics_enabled=_analytics_enabled(),
                   delete_cache=(3600, 3600)) as demo:
        gr.Markdown(
            "# Speech speculative decoding\n"
            "Type a sentence: the target model decodes it **autoregressively** and with **speculative decoding** "
            "(a draft proposes, the target verifies) at the same time, and you hear whichever has audio first.",
            elem_id="ssd-intro",
        )
        with gr.Tabs():
            with gr.Tab("Compare", id="compare"):
                presenter = build_compare_tab(defaults, startup_problem, MODEL_CONCURRENCY_ID)
            _add_listening_tab()
            with gr.Tab("Benchmark", id="benchmark"):
                build_benchmark_tab(MODEL_CONCURRENCY_ID)

        demo.load(None, outputs=[presenter], js=PRESENTER_FROM_URL_JS, api_visibility="private")

    demo.queue(max_size=QUEUE_MAX_SIZE, default_concurrency_limit=1)
    return demo


def _add_listening_tab() -> None:
    """The listening-test tab, when its module is installed; otherwise no tab at all."""
    try:
        from .listening.tab import build_listening_tab  # optional tab: a broken one must not take the app down
    except ImportError:
        return
    except Exception:  # noqa: BLE001
        log.exception("the listening-test tab failed to import; leaving it out")
        return
    with gr.Tab("Listening test", id="listening"):
        build_listening_tab()
