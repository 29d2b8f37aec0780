"""The "Listening test" tab: blind A/B preference and naturalness MOS, plus a results view.

Call `build_listening_tab()` inside `with gr.Tab("Listening test"):`. Settings come from
the environment:
    SSD_DEMO_DATA_DIR          data directory (stimulus sets and the vote database)
    SSD_DEMO_LISTENING_DB      database file (default <data dir>/listening.sqlite3)
    SSD_DEMO_STIMULUS_SET      stimulus set to serve (default: the newest one)
    SSD_DEMO_LISTENING_TRIALS  trials per session (default 10)
    SSD_DEMO_RESULTS_TOKEN     when set, results, export and building a set require it; on a
                               Space (SPACE_ID set), building a set is refused without it
    SSD_DEMO_BROWSER_SECRET    key that signs the rater's saved session in the browser (default:
                               a random key kept in a file next to the database)

Every event has an api_name, so the test can be run from `gradio_client` as well as the
browser. The handlers are thin: all checks live in `ListeningStore`, whose constraints
refuse a bad or repeated vote whatever the client sends. The rater's view carries the
sentence, two clips (as samples, so no file name or URL names a system) and opaque ids.

A session keeps the stimulus set it started with, even after another set is served, as long
as that set's files are unchanged on disk. Results show one stimulus set at a time (by
default the served one), since a system name means different audio in different sets.
"""

from __future__ import annotations

import hmac
import os
import re
import secrets
import sqlite3
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import gradio as gr

from .charts import results_figure
from .export import prune_exports, write_votes_csv
from .sessions import DEFAULT_TRIALS, ListeningTest, TrialView
from .stats import set_label, summarize, summary_dict, summary_markdown
from .stimuli import (
    StimulusSet,
    build_small_set,
    current_stimulus_set,
    data_dir,
    manifest_unchanged,
    stimulus_set_by_checksum,
    storage_warning,
)
from .store import ListeningError, ListeningStore

INSTRUCTIONS = (
    "Listen to both clips of each sentence, then choose the one that sounds **more natural** "
    "(or *no preference*). You may also rate each clip's naturalness from 1 (bad) to 5 (excellent). "
    "Clips are presented in random order; a vote cannot be changed once submitted."
)
CHOICES = [("A", "A"), ("B", "B"), ("No preference", "none")]
SCORES = ["1", "2", "3", "4", "5"]
CURRENT_SET = "current"  # the results selector's value for "the set now served"
EXPORTS_KEPT = 5  # CSV exports kept in the export folder; older ones are deleted
SECRET_ENV = "SSD_DEMO_BROWSER_SECRET"
SetKey = tuple[str, str | None]  # (stimulus set name, manifest sha256)

# An absolute POSIX path in a message, e.g. "/srv/app/data/stimuli/x/manifest.json"; group 1 is its last part.
_ABSOLUTE_PATH = re.compile(r"(?<![\w.~-])/(?:[^\s'\"/:]+/)*([^\s'\"/:]*)")


def public_message(error: BaseException | str) -> str:
    """An error's text with every absolute path cut to its file name: raters must not see server folders."""
    return _ABSOLUTE_PATH.sub(lambda match: match.group(1) or "/", str(error))


def browser_secret(db_path: Path) -> str:
    """The key that signs the session id kept in the rater's browser.

    $SSD_DEMO_BROWSER_SECRET if set; else a random key stored once in a file next to the
    database, so a page reload after a server restart still resumes the session (Gradio's
    default key is random per process).
    """
    configured = os.environ.get(SECRET_ENV, "").strip()
    if configured:
        return configured
    path = Path(db_path).with_suffix(".browser_secret")
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        # Write a private temporary file, then link it into place: two processes starting at
        # once agree on one key, and nobody reads a half-written file.
        handle, temporary = tempfile.mkstemp(prefix=".browser_secret-", dir=path.parent)
        try:
            with os.fdopen(handle, "w", encoding="ascii") as out:
                out.write(secrets.token_hex(32) + "\n")
            try:
                os.link(temporary, path)
            except FileExistsError:
                pass  # another process won the race; use its key
            except OSError:  # a filesystem without hard links: exclusive create instead
                try:
                    with open(path, "x", encoding="ascii") as out:
                        out.write(Path(temporary).read_text(encoding="ascii"))
                    path.chmod(0o600)
                except FileExistsError:
                    pass
        finally:
            os.unlink(temporary)
    secret = path.read_text(encoding="ascii").strip()
    if len(secret) < 32:
        raise ValueError(f"the browser secret file {path.name} is empty or too short; delete it to make a new one")
    return secret


def check_build_allowed(environ: Mapping[str, str] | None = None) -> None:
    """Refuse to build stimulus sets on a Space without a results token: anyone could keep the model busy."""
    env = os.environ if environ is None else environ
    if env.get("SPACE_ID") and not env.get("SSD_DEMO_RESULTS_TOKEN", ""):
        raise ListeningError(
            "Building stimulus sets is disabled on this Space because no results token is configured: "
            "set the SSD_DEMO_RESULTS_TOKEN secret in the Space settings, restart, and enter the token here."
        )


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
        self.browser_secret = browser_secret(settings.db_path)
        self._test: ListeningTest | None = None
        self._by_set: dict[SetKey, ListeningTest] = {}  # every set a session here has used
        self._lock = threading.Lock()

    def close(self) -> None:
        self.store.close()

    def test(self) -> ListeningTest:
        """The test of the served set (loaded again if its folder was rebuilt on disk)."""
        with self._lock:
            if self._test is not None and not manifest_unchanged(self._test.stimulus_set):
                self._by_set.pop(_key(self._test.stimulus_set), None)
                self._test = None
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
                self._test = self._by_set.setdefault(_key(stimulus_set), ListeningTest(self.store, stimulus_set))
            return self._test

    def use_set(self, stimulus_set: StimulusSet) -> None:
        """Serve `stimulus_set` to new sessions; sessions already running keep theirs."""
        with self._lock:
            self._test = self._by_set.setdefault(_key(stimulus_set), ListeningTest(self.store, stimulus_set))

    def served_key(self) -> SetKey | None:
        """The served set's (name, sha256), or None when no set can be served."""
        try:
            return _key(self.test().stimulus_set)
        except ListeningError:
            return None

    def session_test(self, session_id: str) -> ListeningTest:
        """The test of the set this session started with, which may no longer be the served one."""
        session = self.store.get_session(session_id)
        key = (session.stimulus_set, session.stimulus_set_sha256)
        self.served_key()  # loads the served set on first use, so it is found below without a second load
        with self._lock:
            found = self._by_set.get(key)
            if found is not None and not manifest_unchanged(found.stimulus_set):
                del self._by_set[key]  # rebuilt under the same name: other audio, so not this session's set
                found = None
        if found is not None:
            return found
        stimulus_set = stimulus_set_by_checksum(self.settings.data_dir, *key)
        if stimulus_set is None:
            raise ListeningError(
                f"The stimulus set changed: set {session.stimulus_set!r} that this session started with was "
                "replaced or removed. Your votes so far are saved. Reload the page and start a new session."
            )
        with self._lock:
            return self._by_set.setdefault(key, ListeningTest(self.store, stimulus_set))

    def start(self, rater_id: str | None) -> TrialView | None:
        test = self.test()
        session = test.start_session(rater_id=rater_id, n_trials=min(self.settings.n_trials, _max_trials(test)))
        return test.next_view(session.session_id)

    def submit(self, session_id: str, trial_id: str, choice: str, score_a, score_b) -> TrialView | None:
        return self.session_test(session_id).submit(session_id, trial_id, choice, score_a, score_b)

    def resume(self, session_id: str) -> TrialView | None:
        return self.session_test(session_id).next_view(session_id)

    def results_key(self, selected: str | None) -> SetKey | None:
        """The set the results show: `selected` ("name:sha256" or "name"), else the served set,
        else the most recently voted one; None when there is nothing to show."""
        selected = (selected or "").strip()
        if selected and selected != CURRENT_SET:
            name, _, sha = selected.partition(":")
            voted = self.store.voted_sets()
            if not any(n == name and (not sha or s == sha) for n, s, _ in voted):
                raise ListeningError(f"No votes on stimulus set {selected!r}.")
            return (name, sha or None)
        served = self.served_key()
        if served is not None:
            return served
        voted = self.store.voted_sets()
        return (voted[0][0], voted[0][1]) if voted else None

    def results_choices(self) -> list[tuple[str, str]]:
        """The results selector's options: the served set, then every set with votes."""
        choices = [("Currently served set", CURRENT_SET)]
        for name, sha, n in self.store.voted_sets():
            choices.append((f"{set_label(name, sha)}: {n} votes", f"{name}:{sha}" if sha else name))
        return choices

    def progress(self, session_id: str) -> tuple[int, int]:
        return self.store.progress(session_id)


def _key(stimulus_set: StimulusSet) -> SetKey:
    return (stimulus_set.name, stimulus_set.manifest_sha256)


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
    _APPS.append(app)
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
    saved_session = gr.BrowserState("", storage_key="ssd-demo-listening-session", secret=app.browser_secret)

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
            raise gr.Error(public_message(error)) from None
        return show(view, view.session_id if view else "")

    def submit(session_id: str, trial_id: str, choice: str | None, score_a: str | None, score_b: str | None) -> tuple:
        if choice is None:
            raise gr.Error("Choose A, B or no preference before submitting.")
        try:
            view = app.submit(session_id, trial_id, choice, score_a, score_b)
        except ListeningError as error:
            raise gr.Error(public_message(error)) from None
        return show(view, session_id)

    def resume(saved: str | None) -> tuple | dict:
        """On page load: continue the session this browser was in, if it is still open."""
        if not saved:
            return gr.skip()
        try:
            view = app.resume(saved)
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
        results_set = gr.Dropdown(
            app.results_choices(),
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
            check_results_token(token)
            key = app.results_key(selected)
        except ListeningError as error:
            raise gr.Error(public_message(error)) from None
        votes = app.store.votes_for_set(*key) if key is not None else []
        summary = summarize(votes)
        text = summary_markdown(summary)
        if key is not None and summary.empty:
            text = f"Stimulus set **{set_label(*key)}**: " + text
        if warning:
            text = warning + "\n\n" + text
        return text, results_figure(summary), summary_dict(summary), gr.Dropdown(choices=app.results_choices())

    def export(token: str | None) -> str:
        try:
            check_results_token(token)
        except ListeningError as error:
            raise gr.Error(public_message(error)) from None
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
        # Every vote of every set; the stimulus_set and stimulus_set_sha256 columns tell them apart.
        path = write_votes_csv(app.store.votes(), _export_dir() / f"listening_votes_{stamp}.csv")
        prune_exports(_export_dir(), keep=EXPORTS_KEPT)
        return str(path)

    def build(token: str | None) -> str:
        try:
            check_results_token(token)
            check_build_allowed()
            stimulus_set = build_small_set(app.settings.data_dir)
        except (ListeningError, ValueError, OSError) as error:
            raise gr.Error(f"Could not build a stimulus set: {public_message(error)}") from None
        app.use_set(stimulus_set)
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
