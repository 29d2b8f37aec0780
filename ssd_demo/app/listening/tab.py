"""The "Listening test" tab: the built-in A/B + MOS study (`ssd_demo.listening.ab_mos`) on the served
stimulus set, blind A/B preference trials then naturalness MOS trials, plus a results view.

Call `build_listening_tab()` inside `with gr.Tab("Listening test"):`. Settings come from
the environment:
    SSD_DEMO_DATA_DIR          data directory (stimulus sets and the vote database)
    SSD_DEMO_LISTENING_DB      database file (default <data dir>/listening.sqlite3)
    SSD_DEMO_STIMULUS_SET      stimulus set to serve (default: the newest one)
    SSD_DEMO_LISTENING_TRIALS  A/B trials per session, about (default 10; whole sentences are drawn,
                               and each drawn sentence's clips are then rated for naturalness)
    SSD_DEMO_RESULTS_TOKEN     results, export and building a set require it; unset, they are off
    SSD_DEMO_BROWSER_SECRET    key that signs the session id kept in the rater's browser (default:
                               a random key kept in a file next to the database; never sent to the browser)
    SSD_DEMO_SESSIONS_PER_ADDRESS  new sessions one network address may start an hour (default 60; 0: no limit)

Every event has an api_name, so the test can be run from `gradio_client` as well as the
browser. The handlers are thin: all checks live in the study system (`StudyRunner`, `ListeningStore`),
whose constraints refuse a bad or repeated answer whatever the client sends. The rater's view carries
the sentence, its clips (as samples, so no file name or URL names a system) and opaque ids. A trial is
shown without its clips: the page fetches them next (`listening_clips(session, trial)`), and a play counts
only for a clip the session fetched, at least 90% of its length earlier, as on the study server. An A/B
trial takes the choice (`listening_submit(session, trial, choice, None, None)`), a MOS trial the score
of its one clip, A (`listening_submit(session, trial, None, score, None)`).

A session keeps the stimulus set it started with, even after another set is served, as long
as that set's files are unchanged on disk. Results show one stimulus set at a time (by
default the served one), since a system name means different audio in different sets.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import gradio as gr

from .service import (CURRENT_SET, EXPERIMENTER_OFF, ListeningApp, ListeningSettings, TabTrial, public_message,
    register_app, results_token_configured)
from .charts import results_figure
from .refusals import refused
from .session_limits import client_address
from ...listening.ab_mos import set_label, summary_dict, summary_markdown
from ...listening.errors import InvalidAnswerError, ListeningError, NotListenedError
from ...listening.stimulus_sets import storage_warning

INSTRUCTIONS = (
    "First, listen to both clips of each sentence to the end, then choose the one that sounds **more natural** "
    "(or *no preference*). Then rate single clips' naturalness from 1 (bad) to 5 (excellent). "
    "The controls unlock once their clips have played to the end; a vote cannot be changed once submitted."
)
STORAGE_KEY = "ssd-demo-listening-session"  # localStorage key of the signed session id
NO_CHOICE = "Choose A, B or no preference before submitting."
NO_SCORE = "Rate the clip's naturalness from 1 to 5 before submitting."
CHOICES = [("A", "A"), ("B", "B"), ("No preference", "none")]
SCORES = ["1", "2", "3", "4", "5"]
def build_listening_tab(data_root: Path | None = None, concurrency_id: str | None = "model") -> None:
    """Lay out the listening test in the current Blocks context and wire its events.

    `concurrency_id`: the app's concurrency group for jobs that use the model; building a
    stimulus set renders with the model, so it queues behind synthesis instead of running beside it.
    """
    try:
        app = ListeningApp(ListeningSettings.from_env(data_root))
    except (OSError, sqlite3.Error, RuntimeError, ValueError) as error:
        # An unusable data directory or database must not take the rest of the app down.
        gr.Markdown(f"## Blind listening test\nThe listening test is unavailable: {public_message(error)}")
        return
    register_app(app)
    # A folder given by the caller is as explicit as SSD_DEMO_DATA_DIR.
    warning = None if data_root is not None else storage_warning()

    gr.Markdown("## Blind listening test\n" + INSTRUCTIONS)
    if warning:
        gr.Markdown(warning, elem_id="listening-storage-warning")
    session_box = gr.Textbox(visible=False, label="session id")
    trial_box = gr.Textbox(visible=False, label="trial id")
    with gr.Column(visible=True) as start_column:
        rater_box = gr.Textbox(label="Rater id (optional)", placeholder="leave empty to stay anonymous", max_lines=1)
        start_button = gr.Button("Start listening test", variant="primary", elem_id="listening-start")
    with gr.Column(visible=False) as trial_column:
        progress_text = gr.Markdown(elem_id="listening-progress")
        sentence_text = gr.Markdown()
        with gr.Row():
            with gr.Column():
                # buttons=[]: no download or share button, so a rater cannot save or pass on a clip.
                audio_a = gr.Audio(label="Clip A", type="numpy", format="wav", interactive=False, buttons=[],
                                   elem_id="listening-audio-a")
                score_a_radio = gr.Radio(SCORES, interactive=False, elem_id="listening-score-a", visible=False,
                                         label="Naturalness of clip A (1 = bad, 5 = excellent; after playing it)")
            with gr.Column() as clip_b_column:  # hidden in MOS trials, which have one clip
                audio_b = gr.Audio(label="Clip B", type="numpy", format="wav", interactive=False, buttons=[],
                                   elem_id="listening-audio-b")
                # Kept for the endpoint's signature (session, trial, choice, score A, score B); a MOS trial's
                # one clip is A.
                score_b_radio = gr.Radio(SCORES, interactive=False, elem_id="listening-score-b", visible=False,
                                         label="Naturalness of B")
        choice_radio = gr.Radio(CHOICES, interactive=False, elem_id="listening-choice",
                                label="Which clip sounds more natural? (after playing both to the end)")
        submit_button = gr.Button("Submit vote", variant="primary", elem_id="listening-submit")
        # The rater's own mistakes (no choice, a clip not heard) are told here, never as an error
        # overlay: Gradio covers every output of a failed event with one, which blocks the trial.
        status_text = gr.Markdown(elem_id="listening-status")
    done = gr.Markdown(elem_id="listening-done")
    # The session id survives a page reload in the browser's storage, so a reload resumes the
    # session instead of starting a new one (which would show the rater the same sentences again).
    # Kept in the page's localStorage by plain JavaScript: a gr.BrowserState inside a tab that is not
    # shown when the page loads is not read on load, so a reload started over at the start screen.
    saved_session = gr.Textbox(visible=False, label="saved session")
    # A trial is shown without its clips; the page then asks for them (`listening_clips`), which the server
    # records as fetched: a play counts only for a clip the session fetched. `loaded`: the trial whose clips
    # the page holds, so that a refused submission (the same trial) does not load them again.
    loaded = gr.State("")
    clips_button = gr.Button(visible=False)  # carries the API endpoint `listening_clips` for scripted raters

    trial_outputs = [
        session_box,
        trial_box,
        progress_text,
        sentence_text,
        audio_a,
        audio_b,
        choice_radio,
        score_a_radio,
        score_b_radio,
        start_column,
        trial_column,
        clip_b_column,  # a layout block: API clients get no value for it, so the values' order is unchanged
        done,
        saved_session,
        status_text,
    ]
    keep = tuple(gr.skip() for _ in trial_outputs[:-1])  # every trial output but the status line unchanged

    def show(trial: TabTrial | None, session_id: str) -> tuple:
        if trial is None:
            finished = f"**Thank you!** All {app.progress(session_id)[1]} trials are done; your votes are saved."
            code = app.completion_code(session_id)
            if code:
                finished += f"\n\nYour completion code: **`{code}`** (enter it where the study asked you to)."
            return (
                session_id,
                "",
                "",
                "",
                None,
                None,
                None,
                None,
                None,
                gr.Column(visible=True),  # another session may follow (a new rater on this browser)
                gr.Column(visible=False),
                gr.Column(visible=True),
                finished,
                app.saved_token(session_id),  # kept, so a reload shows the closing message and completion code again
                "",
            )
        view, ab = trial.view, trial.kind == "ab"
        return (
            view.session_id,
            view.trial_id,
            f"**{view.progress_label}**",
            f"Sentence: *{view.text}*",
            None,  # the clips come next, fetched (`listening_clips`)
            None,
            gr.Radio(value=None, visible=ab, interactive=ab and {"A", "B"} <= view.played),
            gr.Radio(value=None, visible=not ab, interactive=not ab and "A" in view.played),
            gr.Radio(value=None, visible=False, interactive=False),
            gr.Column(visible=False),
            gr.Column(visible=True),
            gr.Column(visible=ab),
            "",
            app.saved_token(view.session_id),
            "",
        )

    def start(rater_id: str | None, request: gr.Request = None) -> tuple:
        try:
            view = app.start(rater_id, client_address(request))
        except ListeningError as error:
            raise refused(error) from None
        return show(view, view.view.session_id if view else "")

    def submit(session_id: str, trial_id: str, choice: str | None, score_a: str | None, score_b: str | None) -> tuple:
        if not choice and not score_a and not score_b:
            return (*keep, NO_CHOICE if _trial_kind(session_id, trial_id) == "ab" else NO_SCORE)
        try:
            view = app.submit(session_id, trial_id, choice, score_a, score_b)
        except (NotListenedError, InvalidAnswerError) as error:
            return (*keep, public_message(error))
        except ListeningError as error:
            raise refused(error) from None
        return show(view, session_id)

    def _trial_kind(session_id: str, trial_id: str) -> str | None:
        try:
            return app.store.get_study_trial(session_id, trial_id).kind
        except ListeningError:
            return None

    def played(clip: str):
        """The handler for a clip played to the end: record it, and unlock the MOS trial's score, or the A/B
        trial's choice once both clips are heard."""

        def handler(session_id: str, trial_id: str) -> dict:
            if not session_id or not trial_id:
                return {}
            try:
                kind, heard = app.record_play(session_id, trial_id, clip)
            except ListeningError as error:
                return {status_text: public_message(error)}
            if kind == "mos":
                return {score_a_radio: gr.Radio(interactive=True), status_text: ""}
            other = "B" if clip == "A" else "A"
            if other in heard:
                return {choice_radio: gr.Radio(interactive=True), status_text: ""}
            return {status_text: f"Now play clip {other} to the end."}

        return handler

    def clips(session_id: str, trial_id: str) -> tuple:
        """The shown trial's clips (A, and B in an A/B trial), recorded as fetched by the session."""
        try:
            audio = app.clips(session_id, trial_id).audio
        except ListeningError as error:
            raise refused(error) from None
        return audio[0], audio[1] if len(audio) > 1 else None

    def load_clips(session_id: str, trial_id: str, holding: str) -> tuple:
        """After a trial is shown: its clips, unless the page holds them already (a refused submission)."""
        if trial_id == holding:
            return gr.skip(), gr.skip(), gr.skip()
        if not session_id or not trial_id:
            return None, None, ""
        return (*clips(session_id, trial_id), trial_id)  # a clip that cannot be read is the error shown

    def resume(saved: str | None) -> tuple | dict:
        """On page load: continue the session this browser was in (its signed id from localStorage)."""
        session_id = app.session_from_token(saved)
        if session_id is None:
            return gr.skip()
        try:
            view = app.resume(session_id)
        except ListeningError:
            return gr.skip()  # unknown or replaced session: the rater simply starts a new one
        return show(view, session_id)  # a finished session shows its closing message and completion code again

    clip_io = ([session_box, trial_box, loaded], [audio_a, audio_b, loaded])
    clips_button.click(clips, [session_box, trial_box], [audio_a, audio_b], api_name="listening_clips",
                       concurrency_limit=16)
    root = gr.context.Context.root_block
    if root is not None:
        root.load(resume, [saved_session], trial_outputs, api_name="listening_resume", concurrency_limit=16,
                  js=f"() => {{ try {{ return localStorage.getItem({STORAGE_KEY!r}) || ''; }} catch (e) {{ return ''; }} }}"
                  ).then(load_clips, *clip_io, api_visibility="private", concurrency_limit=16)

    # trigger_mode="once": clicks while a submission is in flight are dropped; the store's
    # UNIQUE(trial_id) makes a second submission harmless anyway.
    remember = f"(token) => {{ try {{ if (token) localStorage.setItem({STORAGE_KEY!r}, token); }} catch (e) {{}} }}"
    start_button.click(
        start, [rater_box], trial_outputs, api_name="listening_start", trigger_mode="once", concurrency_limit=16
    ).then(None, [saved_session], None, js=remember, api_visibility="private").then(
        load_clips, *clip_io, api_visibility="private", concurrency_limit=16)
    for clip, audio in (("A", audio_a), ("B", audio_b)):
        # `stop` fires when the player reaches the end of the clip (`pause` fires on any stop).
        audio.stop(played(clip), [session_box, trial_box], [score_a_radio, choice_radio, status_text],
                   api_name=f"listening_played_{clip.lower()}", concurrency_limit=16)
    submit_button.click(
        submit,
        [session_box, trial_box, choice_radio, score_a_radio, score_b_radio],
        trial_outputs,
        api_name="listening_submit",
        trigger_mode="once",
        concurrency_limit=16,
    ).then(None, [saved_session], None, js=remember, api_visibility="private").then(
        load_clips, *clip_io, api_visibility="private", concurrency_limit=16)

    with gr.Accordion("Results (for the experimenter)", open=False):
        if not results_token_configured():
            gr.Markdown(EXPERIMENTER_OFF, elem_id="listening-experimenter-off")
        token_box = gr.Textbox(
            label="Results token", type="password", max_lines=1, placeholder="the server's SSD_DEMO_RESULTS_TOKEN"
        )
        results_set = gr.Dropdown(
            [("Currently served set", CURRENT_SET)],  # the sets with votes are listed only after the token is checked
            value=CURRENT_SET,
            label="Stimulus set (results are per set: a system name means different audio in each)",
            allow_custom_value=True,  # API callers may name a set as "name" or "name:sha256"
        )
        with gr.Row():
            results_button = gr.Button("Show results")
            export_button = gr.Button("Export votes (CSV)")
            build_button = gr.Button("Build a small stimulus set")
        results_text = gr.Markdown()
        results_plot = gr.Plot(label="Preference and MOS")
        results_json = gr.JSON(label="Summary (JSON)", visible=False)
        export_file = gr.File(label="Raw votes")
        build_status = gr.Markdown()

    def results(token: str | None, selected: str | None = CURRENT_SET) -> tuple:
        try:
            summary, key = app.results(token, selected)
        except ListeningError as error:
            raise refused(error) from None
        text = summary_markdown(summary)
        if key is not None and summary.empty:
            text = f"Stimulus set **{set_label(*key)}**: " + text
        if warning:
            text = warning + "\n\n" + text
        return text, results_figure(summary), summary_dict(summary), gr.Dropdown(choices=app.results_choices())

    def export(token: str | None) -> str:
        try:
            return str(app.export_votes(token))
        except ListeningError as error:
            raise refused(error) from None

    def build(token: str | None) -> str:
        try:
            stimulus_set = app.build_set(token)
        except (ListeningError, ValueError, OSError) as error:
            raise gr.Error(f"Could not build a stimulus set: {public_message(error)}") from None
        return (
            f"Serving stimulus set **{stimulus_set.name}** to new sessions: {len(stimulus_set.items)} sentences x "
            f"{len(stimulus_set.systems)} systems. Sessions already running keep their set."
        )

    results_button.click(
        results,
        [token_box, results_set],
        [results_text, results_plot, results_json, results_set],
        api_name="listening_results",
    )
    export_button.click(export, [token_box], [export_file], api_name="listening_export")
    build_button.click(
        build,
        [token_box],
        [build_status],
        api_name="listening_build_set",
        concurrency_limit=1,
        concurrency_id=concurrency_id,
    )
