"""The "Listening test" tab: blind A/B preference and naturalness MOS, plus a results view.

Call `build_listening_tab()` inside `with gr.Tab("Listening test"):`. Settings come from
the environment:
    SSD_DEMO_DATA_DIR          data directory (stimulus sets and the vote database)
    SSD_DEMO_LISTENING_DB      database file (default <data dir>/listening.sqlite3)
    SSD_DEMO_STIMULUS_SET      stimulus set to serve (default: the newest one)
    SSD_DEMO_LISTENING_TRIALS  trials per session (default 10)
    SSD_DEMO_RESULTS_TOKEN     when set, results, export and building a set require it

Every event has an api_name, so the test can be run from `gradio_client` as well as the
browser. The handlers are thin: all checks live in `ListeningStore`, whose constraints
refuse a bad or repeated vote whatever the client sends. The rater's view carries the
sentence, two clips (as samples, so no file name or URL names a system) and opaque ids.
"""

from __future__ import annotations

import hmac
import os
import sqlite3
import tempfile
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import gradio as gr

from .charts import results_figure
from .export import write_votes_csv
from .sessions import DEFAULT_TRIALS, ListeningTest, TrialView
from .stats import summarize, summary_dict, summary_markdown
from .stimuli import StimulusSet, build_small_set, current_stimulus_set, data_dir
from .store import ListeningError, ListeningStore

INSTRUCTIONS = (
    "Listen to both clips of each sentence, then choose the one that sounds **more natural** "
    "(or *no preference*). You may also rate each clip's naturalness from 1 (bad) to 5 (excellent). "
    "Clips are presented in random order; a vote cannot be changed once submitted."
)
CHOICES = [("A", "A"), ("B", "B"), ("No preference", "none")]
SCORES = ["1", "2", "3", "4", "5"]


@dataclass
class ListeningSettings:
    data_dir: Path
    db_path: Path
    n_trials: int

    @classmethod
    def from_env(cls, data_root: Path | None = None) -> ListeningSettings:
        root = Path(data_root) if data_root is not None else data_dir()
        db = os.environ.get("SSD_DEMO_LISTENING_DB", "").strip()
        trials = os.environ.get("SSD_DEMO_LISTENING_TRIALS", "").strip()
        try:
            n_trials = int(trials) if trials else DEFAULT_TRIALS
        except ValueError:
            raise ValueError(f"SSD_DEMO_LISTENING_TRIALS must be an integer, got {trials!r}") from None
        return cls(data_dir=root, db_path=Path(db) if db else root / "listening.sqlite3", n_trials=n_trials)


class ListeningApp:
    """The tab's server side: a store, the served stimulus set, and the operations the events call."""

    def __init__(self, settings: ListeningSettings):
        self.settings = settings
        self.store = ListeningStore(settings.db_path)
        self._test: ListeningTest | None = None
        self._lock = threading.Lock()

    def close(self) -> None:
        self.store.close()

    def test(self) -> ListeningTest:
        with self._lock:
            if self._test is None:
                try:
                    stimulus_set = current_stimulus_set(self.settings.data_dir)
                except (ValueError, FileNotFoundError) as error:  # a damaged or half-copied set
                    raise ListeningError(f"The stimulus set cannot be served: {error}") from None
                if stimulus_set is None:
                    raise ListeningError(
                        "No stimulus set yet. Render one with `python -m ssd_demo stimuli --name NAME`, "
                        "or use 'Build a small stimulus set' below."
                    )
                self._test = ListeningTest(self.store, stimulus_set)
            return self._test

    def use_set(self, stimulus_set: StimulusSet) -> None:
        with self._lock:
            self._test = ListeningTest(self.store, stimulus_set)

    def start(self, rater_id: str | None) -> TrialView | None:
        test = self.test()
        session = test.start_session(rater_id=rater_id, n_trials=min(self.settings.n_trials, _max_trials(test)))
        return test.next_view(session.session_id)

    def submit(self, session_id: str, trial_id: str, choice: str, score_a, score_b) -> TrialView | None:
        return self.test().submit(session_id, trial_id, choice, score_a, score_b)

    def progress(self, session_id: str) -> tuple[int, int]:
        return self.store.progress(session_id)


def _max_trials(test: ListeningTest) -> int:
    return sum(len(item.clips) * (len(item.clips) - 1) // 2 for item in test.stimulus_set.items)


def check_results_token(token: str | None) -> None:
    """Refuse unless SSD_DEMO_RESULTS_TOKEN is unset or `token` matches it (constant-time compare)."""
    expected = os.environ.get("SSD_DEMO_RESULTS_TOKEN", "")
    if expected and not hmac.compare_digest((token or "").encode(), expected.encode()):
        raise ListeningError("Results are protected: enter the results token.")


_APPS: list[ListeningApp] = []
_EXPORTS: list[Path] = []


def _export_dir() -> Path:
    """One private temporary folder per process for CSV exports (Gradio serves a copy from its cache)."""
    if not _EXPORTS:
        _EXPORTS.append(Path(tempfile.mkdtemp(prefix="listening-export-")))
    return _EXPORTS[0]


def close_listening_apps() -> None:
    """Close every tab's database connections (for a clean shutdown or a restart in one process)."""
    while _APPS:
        _APPS.pop().close()


def build_listening_tab(data_root: Path | None = None) -> None:
    """Lay out the listening test in the current Blocks context and wire its events."""
    try:
        app = ListeningApp(ListeningSettings.from_env(data_root))
    except (OSError, sqlite3.Error, RuntimeError, ValueError) as error:
        # An unusable data directory or database must not take the rest of the app down.
        gr.Markdown(f"## Blind listening test\nThe listening test is unavailable: {error}")
        return
    _APPS.append(app)

    gr.Markdown("## Blind listening test\n" + INSTRUCTIONS)
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
                audio_a = gr.Audio(label="Clip A", type="numpy", format="wav", interactive=False)
                score_a_radio = gr.Radio(
                    SCORES, label="Naturalness of A (optional, 1 = bad, 5 = excellent)", elem_id="listening-score-a"
                )
            with gr.Column():
                audio_b = gr.Audio(label="Clip B", type="numpy", format="wav", interactive=False)
                score_b_radio = gr.Radio(
                    SCORES, label="Naturalness of B (optional, 1 = bad, 5 = excellent)", elem_id="listening-score-b"
                )
        choice_radio = gr.Radio(CHOICES, label="Which clip sounds more natural?", elem_id="listening-choice")
        submit_button = gr.Button("Submit vote", variant="primary", elem_id="listening-submit")
    done = gr.Markdown(elem_id="listening-done")
    # The session id survives a page reload in the browser's storage, so a reload resumes the
    # session instead of starting a new one (which would show the rater the same sentences again).
    saved_session = gr.BrowserState("", storage_key="ssd-demo-listening-session")

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
        done,
        saved_session,
    ]

    def show(view: TrialView | None, session_id: str) -> tuple:
        if view is None:
            finished = f"**Thank you!** All {app.progress(session_id)[1]} trials are done; your votes are saved."
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
                gr.Column(visible=False),
                gr.Column(visible=False),
                finished,
                "",
            )
        return (
            view.session_id,
            view.trial_id,
            f"**{view.progress_label}**",
            f"Sentence: *{view.text}*",
            view.audio_a,
            view.audio_b,
            None,
            None,
            None,
            gr.Column(visible=False),
            gr.Column(visible=True),
            "",
            view.session_id,
        )

    def start(rater_id: str | None) -> tuple:
        try:
            view = app.start(rater_id)
        except ListeningError as error:
            raise gr.Error(str(error)) from None
        return show(view, view.session_id if view else "")

    def submit(session_id: str, trial_id: str, choice: str | None, score_a: str | None, score_b: str | None) -> tuple:
        if choice is None:
            raise gr.Error("Choose A, B or no preference before submitting.")
        try:
            view = app.submit(session_id, trial_id, choice, score_a, score_b)
        except ListeningError as error:
            raise gr.Error(str(error)) from None
        return show(view, session_id)

    def resume(saved: str | None) -> tuple | dict:
        """On page load: continue the session this browser was in, if it is still open."""
        if not saved:
            return gr.skip()
        try:
            view = app.test().next_view(saved)
        except ListeningError:
            return gr.skip()  # unknown or replaced session: the rater simply starts a new one
        return show(view, saved) if view is not None else gr.skip()

    root = gr.context.Context.root_block
    if root is not None:
        root.load(resume, [saved_session], trial_outputs, api_name="listening_resume", concurrency_limit=16)

    # trigger_mode="once": clicks while a submission is in flight are dropped; the store's
    # UNIQUE(trial_id) makes a second submission harmless anyway.
    start_button.click(
        start, [rater_box], trial_outputs, api_name="listening_start", trigger_mode="once", concurrency_limit=16
    )
    submit_button.click(
        submit,
        [session_box, trial_box, choice_radio, score_a_radio, score_b_radio],
        trial_outputs,
        api_name="listening_submit",
        trigger_mode="once",
        concurrency_limit=16,
    )

    with gr.Accordion("Results (for the experimenter)", open=False):
        token_box = gr.Textbox(
            label="Results token", type="password", max_lines=1, placeholder="needed when the app sets one"
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

    def results(token: str | None) -> tuple:
        try:
            check_results_token(token)
        except ListeningError as error:
            raise gr.Error(str(error)) from None
        summary = summarize(app.store.votes())
        return summary_markdown(summary), results_figure(summary), summary_dict(summary)

    def export(token: str | None) -> str:
        try:
            check_results_token(token)
        except ListeningError as error:
            raise gr.Error(str(error)) from None
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
        return str(write_votes_csv(app.store.votes(), _export_dir() / f"listening_votes_{stamp}.csv"))

    def build(token: str | None) -> str:
        try:
            check_results_token(token)
            stimulus_set = build_small_set(app.settings.data_dir)
        except (ListeningError, ValueError, FileNotFoundError) as error:
            raise gr.Error(f"Could not build a stimulus set: {error}") from None
        app.use_set(stimulus_set)
        return f"Serving stimulus set **{stimulus_set.name}**: {len(stimulus_set.items)} sentences x {len(stimulus_set.systems)} systems."

    results_button.click(results, [token_box], [results_text, results_plot, results_json], api_name="listening_results")
    export_button.click(export, [token_box], [export_file], api_name="listening_export")
    build_button.click(build, [token_box], [build_status], api_name="listening_build_set", concurrency_limit=1)
