"""The experimenter's page of the study server (`/admin`): live progress per rater, results with and without
exclusions, the MUSHRA box plot, the long CSV and JSON summary, invalidating a rater, creating a study.

Linked from nowhere on the rater page, and every event needs `$SSD_DEMO_RESULTS_TOKEN`: with no token
configured the page says so and does nothing. The logic is in `study_experimenter.py` (no Gradio).
"""

from __future__ import annotations

import gradio as gr

from ...errors import UserError
from .refusals import refused
from .experimenter_access import EXPERIMENTER_OFF, results_token_configured
from .service import public_message
from .study_experimenter import PROGRESS_COLUMNS, StudyExperimenter

REFRESH_SECONDS = 10  # live progress: how often the table refreshes while the page is open


def build_study_admin(service, concurrency_id: str | None = "model") -> None:
    """Lay out the admin page in the current Blocks context (a route of the study server)."""
    admin = StudyExperimenter(service.store, service.settings.data_dir)
    gr.Markdown("## Listening studies: experimenter's view")
    if not results_token_configured():
        gr.Markdown(EXPERIMENTER_OFF, elem_id="study-admin-off")
    with gr.Row():
        token_box = gr.Textbox(label="Results token", type="password", max_lines=1, scale=2,
                               placeholder="the server's SSD_DEMO_RESULTS_TOKEN", elem_id="study-admin-token")
        study_box = gr.Dropdown([], label="Study", allow_custom_value=True, scale=2, elem_id="study-admin-study")
        open_button = gr.Button("Open", variant="primary", scale=1, elem_id="study-admin-open")
    status = gr.Markdown(elem_id="study-admin-status")
    progress = gr.Dataframe(headers=PROGRESS_COLUMNS, label="Progress per rater (refreshes every few seconds)",
                            interactive=False, elem_id="study-admin-progress")
    exclude_box = gr.Checkbox(True, label="Leave out the raters the screening excludes")
    results_text = gr.Markdown(elem_id="study-admin-results")
    results_plot = gr.Plot(label="MUSHRA scores per system")
    with gr.Row():
        export_button = gr.Button("Export ratings (long CSV) and summary (JSON)", elem_id="study-admin-export")
        export_files = gr.File(label="Exports", file_count="multiple", elem_id="study-admin-files")
    with gr.Accordion("Invalidate a rater's session", open=False):
        session_box = gr.Textbox(label="Session id (from the progress table)", max_lines=1)
        reason_box = gr.Textbox(label="Reason (kept with the results)", max_lines=1)
        with gr.Row():
            invalidate_button = gr.Button("Invalidate")
            restore_button = gr.Button("Undo an invalidation (count its ratings again)")
    with gr.Accordion("Create a study (renders its stimuli)", open=False):
        study_file = gr.File(label="Study file (TOML)", file_types=[".toml"], type="filepath")
        with gr.Row():
            tones_box = gr.Checkbox(False, label="Tones instead of speech (no model; to try the flow)")
            overwrite_box = gr.Checkbox(False, label="Create again if it exists (new sessions get the new stimuli)")
            discard_box = gr.Checkbox(False, label="Even if it has answers (kept; results show the current stimuli only)")
        create_button = gr.Button("Create study")
    timer = gr.Timer(REFRESH_SECONDS, active=False)

    def open_study(token, name, exclude):
        try:
            names = admin.studies(token)
            name = name if name in names else (names[0] if names else None)
            if name is None:
                return (gr.Dropdown(choices=[], value=None), "No study created yet: create one below.", [], "",
                        None, gr.Timer(active=False), None)
            rows = admin.progress(token, name)
            _, report = admin.results(token, name, exclude)
        except UserError as error:
            raise refused(error) from None
        return (gr.Dropdown(choices=names, value=name), f"Study **{name}**: {len(rows)} sessions.", rows, report.text,
                report.figure, gr.Timer(active=True), None)

    def refresh(token, name):
        try:
            return admin.progress(token, name)
        except UserError:
            return gr.skip()

    def export(token, name):
        try:
            return [str(path) for path in admin.export(token, name)]
        except UserError as error:
            raise refused(error) from None

    def invalidate(token, name, session_id, reason, exclude):
        try:
            message = admin.invalidate(token, name, session_id, reason)
            rows = admin.progress(token, name)
            _, report = admin.results(token, name, exclude)
        except UserError as error:
            raise refused(error) from None
        return message, rows, report.text, report.figure

    def restore(token, name, session_id, exclude):
        try:
            message = admin.restore(token, name, session_id)
            rows = admin.progress(token, name)
            _, report = admin.results(token, name, exclude)
        except UserError as error:
            raise refused(error) from None
        return message, rows, report.text, report.figure

    def create(token, path, tones, overwrite, discard):
        try:
            return admin.create(token, path, tones=tones, overwrite=overwrite, discard_answers=discard)
        except (UserError, ValueError, OSError) as error:
            raise gr.Error(f"Could not create the study: {public_message(error)}") from None

    outputs = [study_box, status, progress, results_text, results_plot, timer, export_files]
    open_button.click(open_study, [token_box, study_box, exclude_box], outputs, api_name="study_admin_results")
    # Picking another study refreshes everything at once: no header or result of the previous one stays shown.
    study_box.input(open_study, [token_box, study_box, exclude_box], outputs, api_visibility="private")
    exclude_box.change(open_study, [token_box, study_box, exclude_box], outputs, api_visibility="private")
    timer.tick(refresh, [token_box, study_box], [progress], api_visibility="private")
    export_button.click(export, [token_box, study_box], [export_files], api_name="study_admin_export")
    invalidate_button.click(invalidate, [token_box, study_box, session_box, reason_box, exclude_box],
                            [status, progress, results_text, results_plot], api_name="study_admin_invalidate")
    restore_button.click(restore, [token_box, study_box, session_box, exclude_box],
                         [status, progress, results_text, results_plot], api_name="study_admin_restore")
    create_button.click(create, [token_box, study_file, tones_box, overwrite_box, discard_box], [status],
                        api_name="study_admin_create", concurrency_limit=1, concurrency_id=concurrency_id)

