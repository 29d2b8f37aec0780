"""The app's "Compare" tab: one text, synthesised autoregressively and speculatively, side by side.

A thin Gradio builder around `ssd_demo.app.compare`: the decoding controls are drawn from
`COMPARE_SETTINGS` (one setting per control: component, default, preset update, `/synthesize`
parameter; an API caller who leaves one out has not given it, and the chosen preset fills it), and every handler turns failures into a `gr.Error` through `to_gradio_error`. The page's
button runs the race (`/race`, `race_view`: both decoders streamed as they decode); `/synthesize`
returns every result at once for API callers.
"""

from __future__ import annotations

import inspect

import gradio as gr

from .. import compare
from . import arguments
from . import COMPARE_SETTINGS, SETTINGS_BY_NAME, TOKEN_COLOURS, PresetDefaults
from .settings import control_info, control_range, control_value, control_visible, is_decoding_setting
from ...backends.llasa_codec import DEFAULT_CODEC, DEFAULT_CODEC_REVISION
from ...config import DecodingConfig, SettingSpec
from ...backends.registry import get_preset, list_presets, register_custom_pair
from .. import jobs
from ...engine.cancellation import Cancelled
from .explainers import HOW_IT_WORKS, TOKENS_LEGEND
from .race_js import ENTER_RACES_JS, PRESENTER_JS, RACE_START_JS, STOP_JS
from .speak import SPEAK_CONCURRENCY, SPEAK_CONCURRENCY_ID, SPEAK_START_JS, speak_handler
from .race_view import (AUTO_FACTOR, build_race_chart, build_race_view, build_replay_row, race_handler,
                        slow_motion_handler, warn_if_draft_replaced)
from ...comparison import startup_readiness
from ..errors import to_gradio_error

PRESENTER_EXAMPLES = 3
#: The status line before any race, once the machine is ready.
READY_STATUS = "Ready: type a sentence and start the race."
#: The status line in the page as built, until the page's load event reads the start-up job's state.
CHECKING_STATUS = "Checking whether this machine is ready..."


#: The /synthesize outputs, in order (the /race event ends with the same ones).
OUTPUT_NAMES = ("ar_audio", "spec_audio", "stats", "tokens", "tokens_vs_time", "breakdown", "accepted_length",
                "by_position", "details", "seed_used")

#: /synthesize parameters that are not decoding settings: before the settings, and after them.
LEADING_PARAMETERS = ("text", "preset", "draft")
TRAILING_PARAMETERS = ("voice_audio", "voice_transcript")


def _readiness_line() -> str:
    """What the start-up job (`comparison.startup`) is doing, or "" when none was started."""
    readiness = startup_readiness()
    return readiness.describe() if readiness is not None else ""


def _initial_status() -> str:
    """The status line a page opens with: the start-up job's state, or ready when none was started."""
    return _readiness_line() or READY_STATUS


def _opening_status() -> str:
    """The status line's value in the page as built: the start-up job's state, or a neutral line until each page's
    load event reads it (`_initial_status`). The app builds the page before it starts the job, so "Ready" here would
    be shown, falsely, for the moment before the first read."""
    return _readiness_line() or CHECKING_STATUS


def _readiness_update(shown: str):
    """The timer's tick: the status line follows the start-up job while no race has used it; the timer
    stops once the job is done (or when there is none)."""
    readiness = startup_readiness()
    if readiness is None:
        return gr.skip(), gr.Timer(active=False)
    untouched = not shown or shown.startswith(("Ready", "**Getting ready**"))
    return (readiness.describe() if untouched else gr.skip()), gr.Timer(active=readiness.running)


def stop_run(request: gr.Request) -> None:
    """Stop this session's synthesis: the page's run (Gradio also cancels it) or an API client's own run
    (`client.predict(api_name="/stop")`); the decoders stop within one round."""
    jobs.request_stop(request)


def setting_component(setting: SettingSpec, config: DecodingConfig) -> gr.Component:
    """The control for one setting, showing the preset's default."""
    hint, value = setting.control, control_value(setting, config)
    low, high = control_range(setting, config)
    common = {"label": hint.label, "info": control_info(setting, value) or None,
              "visible": control_visible(setting, config.acceptance)}
    if hint.widget == "slider":
        return gr.Slider(low, high, value=value, step=hint.step, **common)
    if hint.widget == "number":
        return gr.Number(value=value, precision=0 if setting.kind == "int" else None, minimum=low, maximum=high,
                         **common)
    if hint.widget == "dropdown":
        return gr.Dropdown(choices=list(setting.choices), value=value, **common)
    return gr.Checkbox(value=value, **common)


def setting_update(setting: SettingSpec, config: DecodingConfig) -> dict:
    """What a preset change sets the control to."""
    value = control_value(setting, config)
    if setting.control.widget == "slider" and setting.control.grows:
        return gr.update(value=value, maximum=control_range(setting, config)[1])
    return gr.update(value=value)


def setting_controls(section: str, config: DecodingConfig) -> dict[str, gr.Component]:
    """The section's controls in table order; consecutive settings that share a `row` sit side by side."""
    controls: dict[str, gr.Component] = {}
    settings = [s for s in COMPARE_SETTINGS if s.control.section == section]
    index = 0
    while index < len(settings):
        group = [settings[index]]
        row = settings[index].control.row
        while row and index + 1 < len(settings) and settings[index + 1].control.row == row:
            index += 1
            group.append(settings[index])
        index += 1
        if len(group) == 1:
            controls[group[0].name] = setting_component(group[0], config)
        else:
            with gr.Row():
                for setting in group:
                    controls[setting.name] = setting_component(setting, config)
    return controls


def api_twins(controls: dict[str, gr.Component], config: DecodingConfig) -> dict[str, gr.Component]:
    """Hidden twins of the draft and setting controls: the API endpoints' inputs. Gradio publishes an input's
    initial value as the API default; a twin's is None (not given), so the preset a caller names fills it."""
    twins: dict[str, gr.Component] = {}
    with gr.Column(visible=False):
        for name, control in controls.items():
            twin = (setting_component(SETTINGS_BY_NAME[name], config) if name in SETTINGS_BY_NAME
                    else gr.Dropdown(choices=control.choices, allow_custom_value=True))
            twin.value = None  # after construction: a slider or checkbox would otherwise take a value of its own
            twins[name] = twin
    return twins


def synthesize_signature(defaults: PresetDefaults) -> inspect.Signature:
    """The `/synthesize` parameters: text, preset (the page's default), draft and every setting (None: not
    given, so the chosen preset's own default applies, whichever preset the caller names), the voice prompt,
    then Gradio's progress tracker. Built from the table so a new setting is a new parameter."""
    P = inspect.Parameter
    parameters = [P("text", P.POSITIONAL_OR_KEYWORD, annotation=str),
                  P("preset", P.POSITIONAL_OR_KEYWORD, default=defaults.key, annotation=str),
                  P("draft", P.POSITIONAL_OR_KEYWORD, default=None, annotation=str | None)]
    kinds = {"int": int, "float": float, "choice": str, "bool": bool}
    parameters += [P(s.name, P.POSITIONAL_OR_KEYWORD, default=None, annotation=kinds[s.kind] | None)
                   for s in COMPARE_SETTINGS]
    parameters += [P("voice_audio", P.POSITIONAL_OR_KEYWORD, default=None),
                   P("voice_transcript", P.POSITIONAL_OR_KEYWORD, default="", annotation=str),
                   P("request", P.POSITIONAL_OR_KEYWORD, default=None, annotation=gr.Request),
                   P("progress", P.POSITIONAL_OR_KEYWORD, default=gr.Progress())]
    return inspect.Signature(parameters)


def build_compare_tab(defaults: PresetDefaults, startup_problem: str, concurrency_id: str) -> gr.Checkbox:
    """Lay out the tab inside the caller's `with gr.Tab(...)` block and wire its events; returns the
    presenter-mode toggle (the page sets it from the URL)."""
    presets = list_presets()
    config = defaults.config
    with gr.Row():
        with gr.Column(scale=3):
            # Enter races, Shift+Enter starts a new line (`ENTER_RACES_JS`).
            text = gr.Textbox(label=f"Text (up to {defaults.max_text_chars} characters; Enter races, Shift+Enter: "
                                    "new line)",
                              placeholder="Type an English sentence…", lines=1, max_lines=3,
                              elem_id="ssd-text")  # no max_length: the browser would cut a paste silently;
                              # the server refuses a longer text with a message, and the text stays here
            with gr.Row(elem_classes=["ssd-presenter-only"]):  # one click: the sentence, then the race
                example_buttons = [(gr.Button(t, size="sm", elem_classes=["ssd-example"]), t)
                                   for t in compare.example_texts()[:PRESENTER_EXAMPLES]]
            with gr.Row(equal_height=True):
                run = gr.Button("Race both decoders", variant="primary", elem_id="ssd-run", scale=3)
                stop = gr.Button("Stop", variant="stop", elem_id="ssd-stop", scale=1, min_width=100)
                # One voice, shared with everyone speaking now (`speak`): what a room of phones wants.
                speak_button = gr.Button("Just speak it", variant="secondary", elem_id="ssd-speak", scale=1,
                                         min_width=130, elem_classes=["ssd-dev"])
                presenter = gr.Checkbox(label="Presenter mode", value=False, elem_id="ssd-presenter-toggle",
                                        scale=1, min_width=170, container=False)
            # /synthesize (every output at once) stays for API callers; the page's button runs the race.
            synthesize_button = gr.Button("Synthesise (all results at once)", visible=False)
            race_api_button = gr.Button("Race both decoders (API)", visible=False)
            status = gr.Markdown(_opening_status(), elem_id="ssd-status")
            # While the machine gets ready in the background (`comparison.startup`), the status line says so.
            readiness_timer = gr.Timer(1.0, active=True)
            headline = gr.Markdown(elem_id="ssd-headline")
            # The race right under its button: both lanes, the chart and the live voices fit a 1280x720 screen.
            race_view = build_race_view(status, headline)
            with gr.Column(elem_classes=["ssd-dev"]):
                gr.Examples(examples=[[t] for t in compare.example_texts()], inputs=[text], cache_examples=False)
            gr.Markdown(compare.device_note() + (f"  \n{startup_problem}" if startup_problem else ""),
                        elem_classes=["ssd-dev"])
        with gr.Column(scale=2):
            build_race_chart(race_view)  # beside the race, in both modes
            with gr.Column(elem_classes=["ssd-dev"]):
                with gr.Accordion("How it works", open=False):
                    gr.Markdown(HOW_IT_WORKS)
                # Custom pairs are added per session, so the choices differ between visitors; the key is
                # checked server-side (an unknown or another session's key gets a clear "unknown preset").
                preset = gr.Dropdown(choices=[(p.label, p.key) for p in presets], value=defaults.key,
                                     label="Model preset", allow_custom_value=True)
                preset_info = gr.Markdown(compare.preset_markdown(get_preset(defaults.key)), label="Preset")
                with gr.Accordion("Custom pair (two Hub repo ids or local folders)", open=False):
                    custom_target = gr.Textbox(label="Target", placeholder="HKUSTAudio/Llasa-3B or /path/to/model")
                    custom_draft = gr.Textbox(label="Draft", placeholder="HKUSTAudio/Llasa-1B")
                    custom_codec = gr.Textbox(label="Codec (optional)", placeholder=DEFAULT_CODEC,
                                              info=f"default: {DEFAULT_CODEC} at commit {DEFAULT_CODEC_REVISION[:7]}")
                    add_pair = gr.Button("Add pair to the presets", size="sm")
                with gr.Accordion("Voice prompt (voice cloning, Llasa presets)", open=False):
                    # A path, not samples: the clip is read only after its header passes the length check.
                    voice_audio = gr.Audio(label="Clip to imitate (0.5-10 s)", sources=["upload", "microphone"],
                                           type="filepath", format=None)
                    voice_transcript = gr.Textbox(label="Transcript of the clip", value="", lines=2)
                draft = gr.Dropdown(choices=list(defaults.drafts), value=defaults.default_draft, label="Draft model",
                                    info="the small model that proposes tokens",
                                    allow_custom_value=True)  # choices change with the preset; checked server-side
                controls = setting_controls("speculation", config)
                with gr.Accordion("Sampling", open=False):
                    controls |= setting_controls("sampling", config)

    build_replay_row(race_view)
    with gr.Row(elem_classes=["ssd-dev"]):
        ar_audio = gr.Audio(label="Autoregressive (target alone)", type="filepath", interactive=False,
                            buttons=["download"], elem_id="ssd-ar-audio")
        spec_audio = gr.Audio(label="Speculative (draft + target)", type="filepath", interactive=False,
                              buttons=["download"], elem_id="ssd-spec-audio")
    with gr.Row(elem_classes=["ssd-dev"]):
        with gr.Column(scale=3):
            stats = gr.Markdown(label="Statistics", elem_id="ssd-stats")
        with gr.Column(scale=1, min_width=140):
            seed_used = gr.Number(label="Seed used", precision=0, interactive=False)
    gr.Markdown(TOKENS_LEGEND, elem_classes=["ssd-dev"])
    tokens = gr.HighlightedText(label="Speculative rounds", color_map=TOKEN_COLOURS, show_legend=True,
                                combine_adjacent=False, elem_classes=["ssd-tokens", "ssd-dev"], elem_id="ssd-tokens")
    with gr.Row(elem_classes=["ssd-dev"]):
        tokens_vs_time = gr.Plot(label="Tokens vs wall time", show_label=False, format="png", elem_id="ssd-plot-time")
        breakdown = gr.Plot(label="Timing breakdown", show_label=False, format="png", elem_id="ssd-plot-breakdown")
    with gr.Row(elem_classes=["ssd-dev"]):
        accepted_length = gr.Plot(label="Accepted length per round", show_label=False, format="png",
                                  elem_id="ssd-plot-accepted")
        by_position = gr.Plot(label="Acceptance by position", show_label=False, format="png",
                              elem_id="ssd-plot-position")
    with gr.Accordion("All numbers (JSON)", open=False, elem_classes=["ssd-dev"]):
        details = gr.JSON(label="Details")

    setting_inputs = [controls[s.name] for s in COMPARE_SETTINGS]
    inputs = [text, preset, draft, *setting_inputs, voice_audio, voice_transcript]
    twins = api_twins({"draft": draft, **{s.name: controls[s.name] for s in COMPARE_SETTINGS}}, config)
    api_inputs = [text, preset, twins["draft"], *[twins[s.name] for s in COMPARE_SETTINGS], voice_audio, voice_transcript]
    outputs = [ar_audio, spec_audio, stats, tokens, tokens_vs_time, breakdown, accepted_length, by_position,
               details, seed_used]
    signature = synthesize_signature(defaults)

    def synthesize(*args, **kwargs):
        """Synthesise `text` autoregressively and speculatively; return both WAVs, stats and charts."""
        values = signature.bind(*args, **kwargs)
        values.apply_defaults()
        chosen = values.arguments
        try:
            request = arguments.admitted_request(chosen, concurrency_id)
            progress = chosen["progress"]
            with jobs.timed_job():
                comparison = compare.compare(request, progress, should_stop=jobs.stop_check(chosen["request"]))
            progress(0.9, desc="Writing audio and drawing charts")
            ar_path, spec_path = compare.write_audio_files(comparison)
            view = compare.comparison_token_view(comparison)
            figures = compare.figures(comparison)
        except Cancelled:
            return tuple(gr.skip() for _ in outputs)  # stopped: nobody is waiting for an answer
        except Exception as error:  # noqa: BLE001 - every failure becomes a message, never a traceback
            raise to_gradio_error(error) from None
        warn_if_draft_replaced(comparison)
        return (str(ar_path), str(spec_path), compare.stats_markdown(comparison), view,
                figures["tokens_vs_time"], figures["timing_breakdown"], figures["accepted_length"],
                figures["acceptance_by_position"], compare.details(comparison), comparison.seed)

    synthesize.__signature__ = signature  # Gradio reads the API's parameters and defaults from it
    synthesize.__annotations__ = {"request": gr.Request}  # ... and finds the request parameter by its type

    race_api = race_handler(race_view, dict(zip(OUTPUT_NAMES, outputs)), signature, concurrency_id)
    race_run = race_handler(race_view, dict(zip(OUTPUT_NAMES, outputs)), signature, concurrency_id,
                            raise_refusals=False)

    def select_preset(preset_key: str, request: gr.Request, progress=gr.Progress()):
        """Load a preset and reset the controls to its drafts and defaults."""
        try:
            jobs.admit(request, concurrency_id)
            progress(0.0, desc="Loading the model")
            chosen = compare.preset_defaults(preset_key, progress=progress, owner=arguments.owner_of(request))
        except Exception as error:  # noqa: BLE001
            raise to_gradio_error(error) from None
        return (
            compare.preset_markdown(get_preset(chosen.key, arguments.owner_of(request))),
            gr.update(choices=list(chosen.drafts), value=chosen.default_draft),
            gr.update(label=f"Text (up to {chosen.max_text_chars} characters)"),
            *[setting_update(s, chosen.config) for s in COMPARE_SETTINGS if is_decoding_setting(s)],
        )

    rule_dependent = [s for s in COMPARE_SETTINGS if s.control.rule is not None]
    acceptance_setting = SETTINGS_BY_NAME["acceptance"]

    def rule_options(acceptance: str):
        """Show the parameter of the chosen acceptance rule."""
        return (*[gr.update(visible=control_visible(s, acceptance)) for s in rule_dependent],
                gr.update(info=control_info(acceptance_setting, acceptance)))

    def add_custom_pair(target: str, draft_ref: str, codec: str, request: gr.Request):
        """Add a custom target/draft pair to this session's presets and select it (checked and loaded on
        first use; other visitors never see it)."""
        owner = arguments.owner_of(request)
        try:
            added = register_custom_pair(target, draft_ref, codec, owner=owner)
        except Exception as error:  # noqa: BLE001
            raise to_gradio_error(error) from None
        return (gr.update(choices=[(p.label, p.key) for p in list_presets(owner)], value=added.key),
                compare.preset_markdown(added), gr.update(choices=list(added.drafts), value=added.default_draft))

    # preprocess=False: values reach the handler as sent, and the one validator (`SettingSpec.accept`) checks
    # each by name ("beta must be between 0 and 1 ..., got 5") where Gradio's own checks say "Value 5 is
    # greater than maximum value 1.0" or fail inside Gradio on "abc". Uploads are still validated and moved
    # to Gradio's cache first. The API endpoints read the hidden twins (`api_twins`): a setting left out is None.
    run_event = synthesize_button.click(synthesize, inputs=api_inputs, outputs=outputs, api_name="synthesize",
                                        concurrency_limit=1, concurrency_id=concurrency_id, preprocess=False)
    # The race reports progress in one place (the status line), not with a spinner on every output.
    race_options = dict(inputs=inputs, outputs=[*race_view.outputs, *outputs], concurrency_limit=1, concurrency_id=concurrency_id,
                        preprocess=False, show_progress="minimal", show_progress_on=[race_view.status])
    # One race at a time per page: the buttons that start one are disabled until it ends, however it ends
    # (done, refused, failed or stopped: `.then` follows each of them).
    starters = [run, speak_button, *(button for button, _ in example_buttons)]
    private = dict(queue=False, api_visibility="private")

    def locked(*values):
        return (*values, *(gr.update(interactive=False) for _ in starters))

    def unlocked():
        """The race ended: its buttons work again."""
        return tuple(gr.update(interactive=True) for _ in starters)

    # The page's race says why it did not run in its status line and ends there; `/race` (for API clients,
    # on a hidden button like /synthesize) raises the error as well.
    race_api_button.click(race_api, api_name="race", **(race_options | {"inputs": api_inputs}))
    ended = dict(outputs=starters, **private)
    # The replays at the speaker's factor, when one is typed (the race renders them at the automatic one).
    rerender = slow_motion_handler(race_view, ar_audio, spec_audio, details)
    replay_inputs = dict(inputs=[ar_audio, spec_audio, details, race_view.factor],
                         outputs=[race_view.replay_ar, race_view.replay_spec, race_view.replay_note], **private)

    def after_race(chain):
        chain.then(race_run, api_visibility="private", **race_options).then(unlocked, **ended) \
            .then(lambda *values: rerender(*values) if values[-1] != AUTO_FACTOR else (gr.skip(),) * 3,
                  **replay_inputs)

    after_race(run.click(locked, outputs=starters, js=RACE_START_JS, **private))
    for button, sentence in example_buttons:
        after_race(button.click(lambda sentence=sentence: locked(sentence), outputs=[text, *starters],
                                js=RACE_START_JS, **private))
    race_view.factor.input(rerender, **replay_inputs)
    # "Just speak it" (one text, the shared voice) locks the same buttons: the page's player plays one of them.
    speak_button.click(locked, outputs=starters, js=SPEAK_START_JS, **private).then(
        speak_handler(), inputs=[text, preset], outputs=[race_view.status, race_view.live_audio], api_name="speak",
        concurrency_limit=SPEAK_CONCURRENCY, concurrency_id=SPEAK_CONCURRENCY_ID, show_progress="minimal",
        show_progress_on=[race_view.status]).then(unlocked, **ended)
    # Read on every page load (the value above is build time's); no progress timer on the line (page.CSS).
    quiet = {**private, "show_progress": "hidden"}
    gr.on(triggers=None, fn=_initial_status, outputs=[status], **quiet)
    readiness_timer.tick(_readiness_update, inputs=[status], outputs=[status, readiness_timer], **quiet)
    presenter.change(None, inputs=[presenter], js=PRESENTER_JS, api_visibility="private")
    gr.on(triggers=None, fn=None, js=ENTER_RACES_JS, api_visibility="private")
    # A real (empty) function, so that /stop exists in the API. A race notices within one round and ends
    # with its own final frame ("Stopped"), so Gradio does not cancel it (a cancelled event sends nothing
    # more); /synthesize has nothing to show for a stop and is cancelled.
    stop.click(stop_run, cancels=[run_event], api_name="stop", queue=False, js=STOP_JS)
    preset.input(select_preset, inputs=[preset],
                 outputs=[preset_info, draft, text, *[controls[s.name] for s in COMPARE_SETTINGS if is_decoding_setting(s)]],
                 api_name="select_preset", concurrency_limit=1, concurrency_id=concurrency_id)
    add_pair.click(add_custom_pair, inputs=[custom_target, custom_draft, custom_codec],
                   outputs=[preset, preset_info, draft], api_name="add_custom_pair", queue=False)
    controls["acceptance"].change(rule_options, inputs=[controls["acceptance"]],
                                  outputs=[*[controls[s.name] for s in rule_dependent], controls["acceptance"]],
                                  api_name="rule_options", queue=False)
    return presenter
