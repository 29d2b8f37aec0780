"""The listening tab as plain objects, no Gradio: settings from the environment, the app that serves the
built-in A/B + MOS study's trials and records its answers, results, exports, stimulus-set building, and
the checks that guard them (results token, Space build guard, public messages without server paths).

`ssd_demo.app.listening.tab` lays it out as a tab; every rule about answers lives in the study system
(`StudyRunner`, `ListeningStore`).
"""

from __future__ import annotations

import hmac
import os
import re
import secrets
import tempfile
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import soundfile as sf

from ...listening.ab_mos import DEFAULT_AB_TRIALS, ListeningSummary, rated_study, set_label, tab_study, tab_summary
from ...listening.errors import InvalidAnswerError, ListeningError
from ...listening.migrations import TAB_STUDY
from ...listening.stimuli import build_small_set
from ...listening.stimulus_sets import (StimulusSet, current_stimulus_set, data_dir, manifest_unchanged,
                                        stimulus_set_by_checksum)
from ...listening.study_results import study_results, write_long_csv
from ...listening.study_sessions import StudyRunner, StudyTrialView
from ...listening.study_store import ListeningStore
from .experimenter_access import (EXPERIMENTER_OFF, _export_dir, _private_file, check_build_allowed,  # noqa: F401
                                  check_results_token, prune_exports, results_token_configured)
from .session_limits import SessionStarts

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
            except OSError:  # a filesystem without hard links: exclusive create instead, 0600 from the start
                try:
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                except FileExistsError:
                    pass
                else:
                    with os.fdopen(fd, "w", encoding="ascii") as out:
                        out.write(Path(temporary).read_text(encoding="ascii"))
        finally:
            os.unlink(temporary)
    secret = path.read_text(encoding="ascii").strip()
    if len(secret) < 32:
        raise ValueError(f"the browser secret file {path.name} is empty or too short; delete it to make a new one")
    return secret


@dataclass
class ListeningSettings:
    data_dir: Path
    db_path: Path
    n_trials: int  # A/B trials per session, about (whole sentences are drawn; `tab_study`)

    @classmethod
    def from_env(cls, data_root: Path | None = None) -> ListeningSettings:
        root = Path(data_root) if data_root is not None else data_dir()
        db = os.environ.get("SSD_DEMO_LISTENING_DB", "").strip()
        trials = os.environ.get("SSD_DEMO_LISTENING_TRIALS", "").strip()
        try:
            n_trials = int(trials) if trials else DEFAULT_AB_TRIALS
        except ValueError:
            raise ValueError(f"SSD_DEMO_LISTENING_TRIALS must be an integer, got {trials!r}") from None
        return cls(data_dir=root, db_path=Path(db) if db else root / "listening.sqlite3", n_trials=n_trials)


# What reading a clip can raise: a missing or unreadable file, a path outside the set, a broken WAV.
CLIP_READ_ERRORS = (OSError, ValueError, sf.SoundFileError)


@dataclass(frozen=True)
class TabTrial:
    """A trial as the tab shows it: the study's view, and each clip's samples in the view's order once the page
    fetched them (`ListeningApp.clips`; a trial is shown without them)."""

    view: StudyTrialView
    audio: tuple[tuple[int, np.ndarray], ...] = ()  # (sample rate, int16 samples): the file's exact level

    @property
    def kind(self) -> str:
        return self.view.kind


class ListeningApp:
    """The tab's server side: a store, the built-in study on the served stimulus set, and the operations
    the events call."""

    def __init__(self, settings: ListeningSettings):
        self.settings = settings
        self.store = ListeningStore(settings.db_path)
        self.browser_secret = browser_secret(settings.db_path)
        self._runner: StudyRunner | None = None
        self._by_set: dict[SetKey, StudyRunner] = {}  # every set a session here has used
        self._lock = threading.Lock()
        self.starts = SessionStarts()  # new sessions per network address, as the study server counts them

    def close(self) -> None:
        self.store.close()

    def _new_runner(self, stimulus_set: StimulusSet) -> StudyRunner:
        return StudyRunner(self.store, tab_study(stimulus_set, self.settings.n_trials), stimulus_set)

    def runner(self) -> StudyRunner:
        """The study on the served set (loaded again if its folder was rebuilt on disk)."""
        with self._lock:
            if self._runner is not None and not manifest_unchanged(self._runner.stimulus_set):
                self._by_set.pop(_key(self._runner.stimulus_set), None)
                self._runner = None
            if self._runner is None:
                try:
                    stimulus_set = current_stimulus_set(self.settings.data_dir)
                except (ValueError, FileNotFoundError) as error:  # a damaged or half-copied set
                    raise ListeningError(f"The stimulus set cannot be served: {error}") from None
                if stimulus_set is None:
                    raise ListeningError(
                        "No stimulus set yet. Render one with `python -m ssd_demo stimuli --name NAME`, "
                        "or use 'Build a small stimulus set' below."
                    )
                key = _key(stimulus_set)
                self._runner = self._by_set.get(key) or self._by_set.setdefault(key, self._new_runner(stimulus_set))
            return self._runner

    def use_set(self, stimulus_set: StimulusSet) -> None:
        """Serve `stimulus_set` to new sessions; sessions already running keep theirs."""
        runner = self._new_runner(stimulus_set)
        with self._lock:
            self._runner = self._by_set.setdefault(_key(stimulus_set), runner)

    def served_key(self) -> SetKey | None:
        """The served set's (name, sha256), or None when no set can be served."""
        try:
            return _key(self.runner().stimulus_set)
        except ListeningError:
            return None

    def session_runner(self, session_id: str) -> StudyRunner:
        """The study on the set this session started with, which may no longer be the served one."""
        session = self.store.get_session(session_id)
        if session.study != TAB_STUDY:
            raise ListeningError("This session belongs to another study: start a new session.")
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
        runner = self._new_runner(stimulus_set)
        with self._lock:
            return self._by_set.setdefault(key, runner)

    def start(self, rater_id: str | None, address: str | None = None) -> TabTrial | None:
        """Start a session (a rater id with an open one gets it back); `address` (the client's) may start a
        bounded number of new sessions an hour (`session_limits`)."""
        runner = self.runner()
        session = self.starts.start(self.store, TAB_STUDY, rater_id, address,
                                    lambda: runner.start_session(rater_id=rater_id))
        return self._shown(runner, runner.next_view(session.session_id))

    def submit(self, session_id: str, trial_id: str, choice: str | None, score_a, score_b) -> TabTrial | None:
        """Store the trial's answer (an A/B trial's choice, a MOS trial's score) and return the next trial."""
        runner = self.session_runner(session_id)
        trial = self.store.get_study_trial(session_id, trial_id)
        view = runner.submit(session_id, trial_id, tab_answer(trial.kind, choice, score_a, score_b))
        return self._shown(runner, view)

    def record_play(self, session_id: str, trial_id: str, clip: str) -> tuple[str, frozenset[str]]:
        """Record that a clip played to the end; (the trial's kind, its clips played so far)."""
        runner = self.session_runner(session_id)
        heard = runner.record_play(session_id, trial_id, clip)
        return self.store.get_study_trial(session_id, trial_id).kind, heard

    def completion_code(self, session_id: str) -> str | None:
        return self.store.completion_code(session_id)

    def saved_token(self, session_id: str) -> str:
        """What the rater's browser keeps to resume a session: its id, signed with the server's key."""
        signature = hmac.new(self.browser_secret.encode(), session_id.encode(), "sha256").hexdigest()[:32]
        return f"{session_id}.{signature}"

    def session_from_token(self, token: str | None) -> str | None:
        """The session id in a token made by `saved_token`, or None when it is missing or forged."""
        session_id, _, _ = (token or "").partition(".")
        if session_id and hmac.compare_digest(self.saved_token(session_id), token or ""):
            return session_id
        return None

    def resume(self, session_id: str) -> TabTrial | None:
        runner = self.session_runner(session_id)
        return self._shown(runner, runner.next_view(session_id))

    def clips(self, session_id: str, trial_id: str) -> TabTrial:
        """The trial's clips, handed to the session now and recorded as fetched: a play counts only for a clip
        its session fetched, at least 90% of the clip's length earlier (the study server's rule), so a client
        cannot report plays of audio it never asked for."""
        runner = self.session_runner(session_id)
        trial = self.store.get_study_trial(session_id, trial_id)
        view = runner.fetch_clip(session_id, trial_id, *(c.label for c in trial.conditions))
        return TabTrial(view, tuple(_read_clip(runner.stimulus_set, c.clip) for c in view.conditions))

    def _shown(self, runner: StudyRunner, view: StudyTrialView | None) -> TabTrial | None:
        # A trial is shown without its clips: the page fetches them next (`clips`).
        return None if view is None else TabTrial(view)

    def results_key(self, selected: str | None) -> SetKey | None:
        """The set the results show: `selected` ("name:sha256" or "name"), else the served set,
        else the most recently voted one; None when there is nothing to show."""
        selected = (selected or "").strip()
        voted = self.store.study_versions(TAB_STUDY)
        if selected and selected != CURRENT_SET:
            name, _, sha = selected.partition(":")
            if not any(n == name and (not sha or s == sha) and count for n, s, count in voted):
                raise ListeningError(f"No votes on stimulus set {selected!r}.")
            return (name, sha or None)
        served = self.served_key()
        if served is not None:
            return served
        voted = [v for v in voted if v[2]]
        return (voted[0][0], voted[0][1]) if voted else None

    def results_choices(self) -> list[tuple[str, str]]:
        """The results selector's options: the served set, then every set with answers."""
        choices = [("Currently served set", CURRENT_SET)]
        for name, sha, n in self.store.study_versions(TAB_STUDY):
            if n:
                choices.append((f"{set_label(name, sha)}: {n} answers", f"{name}:{sha}"))
        return choices

    def progress(self, session_id: str) -> tuple[int, int]:
        return self.store.study_progress(session_id)

    def results(self, token: str | None, selected: str | None = CURRENT_SET,
                exclude: bool = True) -> tuple[ListeningSummary, SetKey | None]:
        """(summary of the chosen set's votes, its key); the results token is checked first."""
        check_results_token(token)
        key = self.results_key(selected)
        if key is None:
            return tab_summary(self.store, "", "", exclude), None
        return tab_summary(self.store, *key, exclude=exclude), key

    def export_votes(self, token: str | None) -> Path:
        """Every rating of every set in the studies' long CSV (its stimulus_version column tells the sets apart)."""
        check_results_token(token)
        rows = self.store.study_ratings(TAB_STUDY)
        results = study_results(self.store, rated_study(rows))
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
        path = write_long_csv(results, _private_file(_export_dir() / f"listening_votes_{stamp}.csv"))
        prune_exports(_export_dir(), keep=EXPORTS_KEPT)
        return path

    def build_set(self, token: str | None) -> StimulusSet:
        """Render a small stimulus set with the embedded voice and serve it to new sessions."""
        check_results_token(token)
        check_build_allowed()
        stimulus_set = build_small_set(self.settings.data_dir)
        self.use_set(stimulus_set)
        return stimulus_set


def tab_answer(kind: str, choice: str | None, score_a: object, score_b: object) -> dict:
    """The study answer the tab's controls give: an A/B trial's choice, a MOS trial's score (its clip is A).
    A value meant for the other kind of trial is refused, never dropped."""
    given = [score for score in (score_a, score_b) if score not in (None, "")]
    if kind == "ab":
        if given:
            raise InvalidAnswerError("This trial asks which clip sounds more natural; the clips' naturalness is "
                                     "rated in trials of its own. Send the choice alone.")
        return {"choice": choice}
    if kind == "mos":
        if choice not in (None, "") or score_b not in (None, ""):
            raise InvalidAnswerError("This trial rates one clip: send its score (1 to 5) alone.")
        return {"score": score_a}
    raise InvalidAnswerError(f"The listening tab does not serve {kind} trials.")


def _read_clip(stimulus_set: StimulusSet, path: Path) -> tuple[int, np.ndarray]:
    try:
        audio, sample_rate = sf.read(path, dtype="int16", always_2d=False)
    except CLIP_READ_ERRORS:
        # The file name only: a rater's message must not show the server's folders.
        raise ListeningError(f"clip {Path(path).name} of stimulus set {stimulus_set.name!r} cannot be read; "
                             "please tell the experimenter.") from None
    return int(sample_rate), audio


def _key(stimulus_set: StimulusSet) -> SetKey:
    return (stimulus_set.name, stimulus_set.manifest_sha256)


_APPS: list[ListeningApp] = []
def register_app(app: ListeningApp) -> None:
    """Keep a tab's app so that `close_listening_apps` can close its database connections."""
    _APPS.append(app)


def close_listening_apps() -> None:
    """Close every tab's database connections (for a clean shutdown or a restart in one process)."""
    while _APPS:
        _APPS.pop().close()
