"""The Gradio page: layout and thin handlers around `ssd_demo.app_logic`.

`build_demo()` returns a queued `gr.Blocks`; `launch_options()` holds what
Gradio 6 takes at launch (theme, CSS). Every event has an `api_name`, and the main
one, `/synthesize`, has a default for every input but the text.
"""

from __future__ import annotations

import logging
import os

import gradio as gr

from . import app_logic
from .benchmark_tab import build_benchmark_tab
from .app_logic import TOKEN_COLOURS, Request
from .rules import RULE_NAMES, RULES
from .hub import DEFAULT_CODEC, DEFAULT_CODEC_REVISION
from .presets import get_preset, list_presets
from .errors import UserError

log = logging.getLogger(__name__)

# Gradio counts waiting events of every kind against one limit: listening-test votes must not be
# turned away because synthesis jobs are queued, and votes drain in milliseconds.
QUEUE_MAX_SIZE = 64
MODEL_CONCURRENCY_ID = "model"  # one job at a time touches the resident model pair

HOW_IT_WORKS = """
**Speculative decoding** (Leviathan et al. 2023; Chen et al. 2023) makes an autoregressive model
faster without retraining it. Each round, a small **draft** model proposes *K* speech tokens one
by one; the large **target** model then scores all of them in **one** forward pass. Drafted tokens
are kept left to right while they pass an acceptance test; at the first failure the target samples
a **replacement** from the leftover probability mass, and if all *K* pass it adds a **bonus** token
for free. Every round therefore yields between 1 and *K*+1 tokens for a single target call.

Write **q** for the target's distribution and **p** for the draft's (both after temperature, top-k
and top-p, so the test uses exactly what was sampled). With the exact rule (β = 0) a drafted token *x*
is accepted with probability min(1, q(x)/p(x)), and the output has exactly the target's distribution. **Speech speculative decoding** (SSD; Lin et al.,
*Accelerating Autoregressive Speech Synthesis Inference With Speech Speculative Decoding*,
Interspeech 2025, [arXiv 2505.15380](https://arxiv.org/abs/2505.15380)) adds a tolerance **β**:
accept if r < min(1, q/p) + β. Speech tokens are redundant (many codes sound alike), so a larger
β accepts more drafted tokens, i.e. more speed, at the cost of drifting from the target's
distribution (the paper: 1.4× on the LM at β = 0.4, with WER rising from 3.67 % to 5.70 % and naturalness MOS unchanged). The expected speedup is
(1 − α^(K+1)) / ((1 − α)(K·c + 1)), where α is the per-token acceptance and c the cost of a draft
step relative to a target step: a draft only helps when α > c.

Other rules: **topk** accepts a drafted token that is among the target's top-k; **pcg** accepts at
the level of groups of acoustically similar tokens (arXiv 2511.13732).
"""

RULE_HELP = {name: spec.help for name, spec in RULES.items()}

CSS = """
.ssd-tokens { max-height: 18rem; overflow-y: auto; }
footer { display: none !important; }
"""


def launch_options() -> dict:
    """Keyword arguments for `demo.launch()` that Gradio 6 no longer takes in `gr.Blocks()`."""
    return {"theme": gr.themes.Soft(), "css": CSS}


def _analytics_enabled() -> bool:
    return os.environ.get("GRADIO_ANALYTICS_ENABLED", "False").strip().lower() in ("1", "true", "yes")


def _user_error(error: Exception) -> gr.Error:
    """Exceptions -> one readable message; the traceback stays in the server log."""
    if isinstance(error, UserError):
        # A wrapped cause (a loader's own exception) keeps its traceback in the log.
        log.warning("request refused: %s", error, exc_info=error.__cause__ is not None)
        return gr.Error(str(error), title=error.title)
    message = str(error.args[0]) if error.args else ""
    if isinstance(error, (ValueError, NotImplementedError)):
        # Most are the user's to fix (an unknown draft, an unsupported option), but an internal
        # ValueError can hide here too: show the message and keep the traceback in the log.
        log.warning("request refused: %s", error, exc_info=True)
        return gr.Error(message or type(error).__name__, title="Cannot run these settings")
    log.exception("synthesis failed")
    return gr.Error(f"Synthesis failed ({type(error).__name__}: {error}). Try other settings.", title="Error")


def _rule_visibility(acceptance: str) -> tuple[dict, dict, dict]:
    return (
        gr.update(visible=acceptance == "topk"),
        gr.update(visible=acceptance == "pcg"),
        gr.update(info=RULE_HELP.get(acceptance, "")),
    )


def build_demo(default_preset: str | None = None, load_default: bool = True) -> gr.Blocks:
    """The whole app. `default_preset` (the first registered preset when None) is loaded at build
    time to read its defaults, unless `load_default` is False or loading fails."""
    presets = list_presets()
    default_preset = default_preset or presets[0].key
    try:
        defaults = app_logic.preset_defaults(default_preset, load_models=load_default)
        startup_problem = ""
    except Exception as error:  # noqa: BLE001 - the page still starts and explains
        log.warning("could not load preset %s at start-up: %s", default_preset, error)
        defaults = app_logic.preset_defaults(default_preset, load_models=False)
        startup_problem = f"⚠️ {error}"
    config = defaults.config

    with gr.Blocks(
        title="Speech speculative decoding",
        analytics_enabled=_analytics_enabled(),
        delete_cache=(3600, 3600),
    ) as demo:
        gr.Markdown(
            "# Speech speculative decoding\n"
            "Type a sentence and hear the target model decode it **autoregressively** and with "
            "**speculative decoding** (a draft proposes, the target verifies), side by side, "
            "with what was accepted in every round and where the time went."
        )
        with gr.Tabs():
            with gr.Tab("Compare", id="compare"):
                with gr.Accordion("How it works", open=False):
                    gr.Markdown(HOW_IT_WORKS)
                with gr.Row():
                    with gr.Column(scale=3):
                        text = gr.Textbox(
                            label=f"Text (up to {defaults.max_text_chars} characters)",
                            placeholder="Type an English sentence…",
                            lines=3,
                            max_length=defaults.max_text_chars,
                            elem_id="ssd-text",
                        )
                        gr.Examples(examples=[[t] for t in app_logic.example_texts()], inputs=[text],
                                    cache_examples=False)
                        with gr.Row():
                            run = gr.Button("Synthesise with both decoders", variant="primary", elem_id="ssd-run")
                            stop = gr.Button("Stop", variant="stop")
                        gr.Markdown(app_logic.device_note() + (f"  \n{startup_problem}" if startup_problem else ""))
                    with gr.Column(scale=2):
                        preset = gr.Dropdown(
                            choices=[(p.label, p.key) for p in presets],
                            value=defaults.key,
                            label="Model preset",
                        )
                        preset_info = gr.Markdown(app_logic.preset_markdown(get_preset(defaults.key)),
                                                  label="Preset")
                        with gr.Accordion("Custom pair (two Hub repo ids or local folders)", open=False):
                            custom_target = gr.Textbox(label="Target", placeholder="HKUSTAudio/Llasa-3B or /path/to/model")
                            custom_draft = gr.Textbox(label="Draft", placeholder="HKUSTAudio/Llasa-1B")
                            custom_codec = gr.Textbox(
                                label="Codec (optional)", placeholder=DEFAULT_CODEC,
                                info=f"default: {DEFAULT_CODEC} at commit {DEFAULT_CODEC_REVISION[:7]}",
                            )
                            add_pair = gr.Button("Add pair to the presets", size="sm")
                        with gr.Accordion("Voice prompt (voice cloning, Llasa presets)", open=False):
                            voice_audio = gr.Audio(label="Clip to imitate (0.5-10 s)", sources=["upload", "microphone"],
                                                   type="numpy")
                            voice_transcript = gr.Textbox(label="Transcript of the clip", value="", lines=2)
                        draft = gr.Dropdown(
                            choices=list(defaults.drafts),
                            value=defaults.default_draft,
                            label="Draft model",
                            info="the small model that proposes tokens",
                            allow_custom_value=True,  # choices change with the preset; checked server-side
                        )
                        with gr.Row():
                            draft_len = gr.Slider(1, 16, value=config.draft_len, step=1, label="Draft length K",
                                                  info="tokens proposed per round")
                            beta = gr.Slider(0.0, 1.0, value=config.beta, step=0.05, label="Tolerance β",
                                             info="0 = exact; larger = faster, less faithful")
                        acceptance = gr.Dropdown(
                            choices=list(RULE_NAMES),
                            value=config.acceptance,
                            label="Acceptance rule",
                            info=RULE_HELP.get(config.acceptance, ""),
                        )
                        topk_tolerance = gr.Slider(1, 64, value=config.topk_tolerance, step=1,
                                                   label="top-k tolerance (topk rule)",
                                                   visible=config.acceptance == "topk")
                        pcg_theta = gr.Slider(0.0, 1.0, value=config.pcg_theta, step=0.01,
                                              label="group similarity θ (pcg rule)",
                                              info="tokens whose embeddings have cosine > θ count as one",
                                              visible=config.acceptance == "pcg")
                        with gr.Accordion("Sampling", open=False):
                            temperature = gr.Slider(0.0, 2.0, value=config.temperature, step=0.05,
                                                    label="Temperature", info="0 = greedy")
                            with gr.Row():
                                top_k = gr.Number(value=config.top_k, precision=0, minimum=0,
                                                  label="Top-k", info="0 = off")
                                top_p = gr.Slider(0.05, 1.0, value=config.top_p, step=0.05,
                                                  label="Top-p", info="1 = off")
                            max_new_tokens = gr.Slider(8, max(2048, config.max_new_tokens),
                                                       value=config.max_new_tokens, step=8,
                                                       label="Max length (tokens per chunk)",
                                                       info="long text is spoken in chunks; each may use this many")
                            with gr.Row():
                                seed = gr.Number(value=config.seed if config.seed is not None else 0,
                                                 precision=0, minimum=0, label="Seed")
                                randomize_seed = gr.Checkbox(value=False, label="Randomise seed")

                with gr.Row():
                    ar_audio = gr.Audio(label="Autoregressive (target alone)", type="filepath",
                                        interactive=False, buttons=["download"], elem_id="ssd-ar-audio")
                    spec_audio = gr.Audio(label="Speculative (draft + target)", type="filepath",
                                          interactive=False, buttons=["download"], elem_id="ssd-spec-audio")
                with gr.Row():
                    with gr.Column(scale=3):
                        stats = gr.Markdown(label="Statistics", elem_id="ssd-stats")
                    with gr.Column(scale=1, min_width=140):
                        seed_used = gr.Number(label="Seed used", precision=0, interactive=False)
                gr.Markdown(
                    "**Every speculative round** (rounds separated by `|`): drafted tokens the target "
                    "*accepted*, the first *rejected* one with the target's *replacement* (→), drafted "
                    "tokens *discarded* after it, and the *bonus* token (+) after a fully accepted block. "
                    "On the embedded voice, numbers are codec codes, `|` ends a phoneme and /ə/ is the next "
                    "phoneme, *inserted* by the decoder (never sampled, so never rejected)."
                )
                tokens = gr.HighlightedText(
                    label="Speculative rounds",
                    color_map=TOKEN_COLOURS,
                    show_legend=True,
                    combine_adjacent=False,
                    elem_classes=["ssd-tokens"],
                    elem_id="ssd-tokens",
                )
                with gr.Row():
                    tokens_vs_time = gr.Plot(label="Tokens vs wall time", show_label=False, format="png", elem_id="ssd-plot-time")
                    breakdown = gr.Plot(label="Timing breakdown", show_label=False, format="png", elem_id="ssd-plot-breakdown")
                with gr.Row():
                    accepted_length = gr.Plot(label="Accepted length per round", show_label=False, format="png",
                                              elem_id="ssd-plot-accepted")
                    by_position = gr.Plot(label="Acceptance by position", show_label=False, format="png", elem_id="ssd-plot-position")
                with gr.Accordion("All numbers (JSON)", open=False):
                    details = gr.JSON(label="Details")

            _add_listening_tab()
            with gr.Tab("Benchmark", id="benchmark"):
                build_benchmark_tab(MODEL_CONCURRENCY_ID)

        inputs = [text, preset, draft, draft_len, beta, acceptance, topk_tolerance, pcg_theta,
                  temperature, top_k, top_p, seed, randomize_seed, max_new_tokens, voice_audio, voice_transcript]
        outputs = [ar_audio, spec_audio, stats, tokens, tokens_vs_time, breakdown, accepted_length,
                   by_position, details, seed_used]

        def synthesize(
            text: str,
            preset: str = defaults.key,
            draft: str = defaults.default_draft,
            draft_len: int = config.draft_len,
            beta: float = config.beta,
            acceptance: str = config.acceptance,
            topk_tolerance: int = config.topk_tolerance,
            pcg_theta: float = config.pcg_theta,
            temperature: float = config.temperature,
            top_k: int = config.top_k,
            top_p: float = config.top_p,
            seed: int = config.seed or 0,
            randomize_seed: bool = False,
            max_new_tokens: int = config.max_new_tokens,
            voice_audio=None,
            voice_transcript: str = "",
            progress=gr.Progress(),
        ):
            """Synthesise `text` autoregressively and speculatively; return both WAVs, stats and charts."""
            try:
                request = Request(text=text, preset=preset, draft=draft, draft_len=draft_len, beta=beta,
                                  acceptance=acceptance, topk_tolerance=topk_tolerance, pcg_theta=pcg_theta,
                                  temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                                  randomize_seed=randomize_seed, max_new_tokens=max_new_tokens,
                                  voice_prompt=app_logic.voice_prompt_from_upload(voice_audio, voice_transcript))
                comparison = app_logic.compare(request, progress)
                progress(0.9, desc="Writing audio and drawing charts")
                ar_path, spec_path = app_logic.write_audio_files(comparison)
                view = app_logic.comparison_token_view(comparison)
                figures = app_logic.figures(comparison)
            except Exception as error:  # noqa: BLE001 - every failure becomes a message, never a traceback
                raise _user_error(error) from None
            if comparison.draft != (draft or comparison.draft):
                gr.Warning(f"Draft '{draft}' is not available for this preset; used '{comparison.draft}'.")
            return (
                str(ar_path),
                str(spec_path),
                app_logic.stats_markdown(comparison),
                view,
                figures["tokens_vs_time"],
                figures["timing_breakdown"],
                figures["accepted_length"],
                figures["acceptance_by_position"],
                app_logic.details(comparison),
                comparison.seed,
            )

        def select_preset(preset_key: str, progress=gr.Progress()):
            """Load a preset and reset the controls to its drafts and defaults."""
            try:
                progress(0.0, desc="Loading the model")
                chosen = app_logic.preset_defaults(preset_key, progress=progress)
            except Exception as error:  # noqa: BLE001
                raise _user_error(error) from None
            c = chosen.config
            return (
                app_logic.preset_markdown(get_preset(chosen.key)),
                gr.update(choices=list(chosen.drafts), value=chosen.default_draft),
                gr.update(label=f"Text (up to {chosen.max_text_chars} characters)", max_length=chosen.max_text_chars),
                c.draft_len, c.beta, c.acceptance, c.topk_tolerance, c.pcg_theta, c.temperature, c.top_k,
                c.top_p, gr.update(value=c.max_new_tokens, maximum=max(2048, c.max_new_tokens)),
                c.seed if c.seed is not None else 0,
            )

        def rule_options(acceptance: str):
            """Show the parameter of the chosen acceptance rule."""
            return _rule_visibility(acceptance)

        run_event = run.click(
            synthesize,
            inputs=inputs,
            outputs=outputs,
            api_name="synthesize",
            concurrency_limit=1,
            concurrency_id=MODEL_CONCURRENCY_ID,
        )
        stop.click(None, cancels=[run_event], api_name="stop", queue=False)
        preset.input(
            select_preset,
            inputs=[preset],
            outputs=[preset_info, draft, text, draft_len, beta, acceptance, topk_tolerance, pcg_theta,
                     temperature, top_k, top_p, max_new_tokens, seed],
            api_name="select_preset",
            concurrency_limit=1,
            concurrency_id=MODEL_CONCURRENCY_ID,
        )
        def add_custom_pair(target: str, draft_ref: str, codec: str):
            """Register a custom target/draft pair as a preset and select it (loaded on first use)."""
            from .presets import register_custom_pair

            try:
                added = register_custom_pair(target, draft_ref, codec)
            except Exception as error:  # noqa: BLE001
                raise _user_error(error) from None
            return (
                gr.update(choices=[(p.label, p.key) for p in list_presets()], value=added.key),
                app_logic.preset_markdown(added),
                gr.update(choices=list(added.drafts), value=added.default_draft),
            )

        add_pair.click(add_custom_pair, inputs=[custom_target, custom_draft, custom_codec],
                       outputs=[preset, preset_info, draft], api_name="add_custom_pair", queue=False)
        acceptance.change(rule_options, inputs=[acceptance], outputs=[topk_tolerance, pcg_theta, acceptance],
                          api_name="rule_options", queue=False)

    demo.queue(max_size=QUEUE_MAX_SIZE, default_concurrency_limit=1)
    return demo


def _add_listening_tab() -> None:
    """The listening-test tab, when its module is installed; otherwise no tab at all."""
    try:
        from .listening.ui import build_listening_tab
    except ImportError:
        return
    except Exception:  # noqa: BLE001 - a broken optional tab must not take the demo down
        log.exception("the listening-test tab failed to import; leaving it out")
        return
    with gr.Tab("Listening test", id="listening"):
        build_listening_tab()
