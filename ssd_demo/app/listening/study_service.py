"""The rater's study page as plain objects, no Gradio: which studies a server serves, the session a
rater's browser resumes (its id signed with the server's key), the trial views sent to the page as
JSON-ready dicts that carry opaque labels, never a system name, and each condition's audio (`clip`).

Clips are not on any file route: the page asks for each condition's audio through `clip` (the player's
`study_clip` server function), which records the fetch in the store before it sends the WAV as base64.
The store counts a play only for a clip its session fetched, at least 90% of the clip's length earlier, so
a script that never downloads a clip cannot report hearing it.

Blinding: the stimulus set names clips by their content hash, so the same audio under two labels (MUSHRA's
hidden and labelled reference, ABX's X and its twin) would be the same file. Every condition of every trial
is therefore served as its own copy, made once under a name that is an HMAC of (session, trial, label) under
the server's secret and carrying that HMAC in a JUNK chunk of a varying length, so neither its size nor its
bytes' hash matches another condition's. Its samples carry their own dither too (independent triangular
noise of one least significant bit, seeded by the HMAC: about -90 dBFS, inaudible), so that not even the
audio data of two copies of one clip match: comparing files or hashes finds nothing. A script that decodes
the samples and subtracts them still finds the hidden reference and ABX's X (copies of one clip differ by a
sample value or two, other clips by thousands): no inaudible change can stop that, so timing, attention checks
and screening are the guard against scripts. No per-condition duration is sent; the length is of course the
same for the same clip.

Every rule about answers and plays lives in the library (`StudyRunner`, `ListeningStore`): the server
refuses a play of a clip the session never fetched, and a rating for a clip with no completed play,
whatever the page sends. A rater's own mistake comes back as `{"refused": message}` for the page to show
next to its control, never as an exception.
"""

from __future__ import annotations

import atexit
import base64
import hmac
import io
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile

from ...listening.errors import ListeningError, UnknownStudyError
from ...listening.stimulus_sets import SET_NAME, data_dir
from ...listening.study_store import ListeningStore
from ...listening.study_sessions import StudyRegistry, StudyRunner, StudyTrialView, database_path
from .service import browser_secret, public_message
from .session_limits import SessionStarts

STUDY_ENV = "SSD_DEMO_STUDY"
COPY_SECONDS = 3600  # how long a condition's copy stays in the service's folder
#: The copies' folder is kept under this many bytes: the oldest copies go first (a copy is made again, the
#: same, when its trial is shown again), so a flood of sessions cannot fill the disk.
MAX_COPY_BYTES = 256 * 1024 * 1024


def served_studies(argv: Sequence[str] | None = None, environ: dict | None = None) -> tuple[str, ...]:
    """The studies to serve on a rater-only page: each `--study NAME` (or `--study=NAME`) on the command
    line, else `$SSD_DEMO_STUDY` (names separated by commas); () serves the full demo."""
    argv = list(sys.argv[1:] if argv is None else argv)
    names: list[str] = []
    for index, arg in enumerate(argv):
        if arg == "--study" and index + 1 < len(argv):
            names.append(argv[index + 1])
        elif arg.startswith("--study="):
            names.append(arg.split("=", 1)[1])
    if not names:
        names = (os.environ if environ is None else environ).get(STUDY_ENV, "").split(",")
    names = [name.strip() for name in names if name.strip()]
    for name in names:
        if not SET_NAME.match(name):
            raise ValueError(f"--study / {STUDY_ENV}: {name!r} is not a study name (letters, digits, '.', '_', '-')")
    return tuple(dict.fromkeys(names))


@dataclass
class StudySettings:
    names: tuple[str, ...]  # the studies raters may open on this server
    data_dir: Path
    db_path: Path

    @classmethod
    def from_env(cls, names: Sequence[str], data_root: Path | None = None) -> StudySettings:
        root = Path(data_root) if data_root is not None else data_dir()
        return cls(names=tuple(names), data_dir=root, db_path=database_path(root))


class StudyService:
    """The rater page's server side: the registry of studies and the operations the page calls."""

    def __init__(self, settings: StudySettings):
        self.settings = settings
        self.store = ListeningStore(settings.db_path)
        self.registry = StudyRegistry(self.store, settings.data_dir)
        self.secret = browser_secret(settings.db_path)
        self._copies = Path(tempfile.mkdtemp(prefix="study-clips-"))
        self._pruned_at = time.monotonic()
        self._copy_bytes = 0  # written since the folder was last measured
        self.starts = SessionStarts()  # new sessions per network address
        # Ctrl-C and a normal exit run this; `app.py` turns SIGTERM into a normal exit too.
        atexit.register(shutil.rmtree, self._copies, True)

    def close(self) -> None:
        self.store.close()
        shutil.rmtree(self._copies, ignore_errors=True)

    # -- tokens kept in the rater's browser

    def token(self, session_id: str) -> str:
        signature = hmac.new(self.secret.encode(), session_id.encode(), "sha256").hexdigest()[:32]
        return f"{session_id}.{signature}"

    def clip_key(self, session_id: str, trial_id: str, label: str) -> str:
        """An unpredictable name for one condition of one trial: same on a reload, distinct for every label."""
        message = f"clip\0{session_id}\0{trial_id}\0{label}".encode()
        return hmac.new(self.secret.encode(), message, "sha256").hexdigest()[:32]

    def blinded_clip(self, view: StudyTrialView, label: str) -> Path:
        """This condition's own copy of its clip (made once), under its HMAC name and with it in a JUNK chunk."""
        key = self.clip_key(view.session_id, view.trial_id, label)
        path = self._copies / f"{key}.wav"
        if not path.exists():
            self._prune_copies()
            # The chunk's length varies too (up to 4 KiB, random but never the same for two labels of a trial),
            # so equal clips do not have equal file sizes either.
            index = [c.label for c in view.conditions].index(label)
            padding = 2 * (index % 32 + 32 * (int(key[:4], 16) % 64))
            dithered = dithered_wav(view.condition(label).clip, seed=int(key[:16], 16))
            write_tagged_wav(dithered, path, key.encode() + b"\0" * padding)
            self._copy_bytes += path.stat().st_size
            if self._copy_bytes > MAX_COPY_BYTES // 8:
                self._bound_copies()
        return path

    def _clip_bytes(self, view: StudyTrialView, label: str) -> bytes:
        try:
            return self.blinded_clip(view, label).read_bytes()
        except FileNotFoundError:  # pruned by another request between making and reading: made again, the same
            return self.blinded_clip(view, label).read_bytes()

    def _bound_copies(self) -> None:
        """Keep the copies' folder under MAX_COPY_BYTES, oldest copies out first."""
        self._copy_bytes = 0
        files = []
        for entry in os.scandir(self._copies):
            try:
                files.append((entry.stat().st_mtime, entry.stat().st_size, entry.path))
            except OSError:
                pass  # removed by another request meanwhile
        total = sum(size for _, size, _ in files)
        for _, size, path in sorted(files):
            if total <= MAX_COPY_BYTES * 3 // 4:
                break
            try:
                os.unlink(path)
                total -= size
            except OSError:
                pass

    def _prune_copies(self) -> None:
        """Drop copies made over COPY_SECONDS ago (at most once a minute): a copy is made again, identical,
        when its clip is fetched again."""
        now = time.monotonic()
        if now - self._pruned_at < 60:
            return
        self._pruned_at = now
        cutoff = time.time() - COPY_SECONDS
        for old in self._copies.glob("*.wav"):
            try:
                if old.stat().st_mtime < cutoff:
                    old.unlink()
            except OSError:
                pass  # made or removed by another request meanwhile

    def session_from_token(self, token: str | None) -> str | None:
        session_id, _, _ = (token or "").partition(".")
        if session_id and hmac.compare_digest(self.token(session_id), token or ""):
            return session_id
        return None

    # -- what the page calls

    def runner(self, study: str | None) -> StudyRunner:
        """The runner of a served study; with one study served, an empty name means that one."""
        name = (study or "").strip()
        if not name and len(self.settings.names) == 1:
            name = self.settings.names[0]
        if name not in self.settings.names:
            raise UnknownStudyError("This link names no study that is open: check the link you were given.")
        return self.registry.runner(name)

    def open(self, study: str | None, token: str | None) -> dict:
        """On page load: the session this browser was in (a reload resumes it), else the start screen."""
        session_id = self.session_from_token(token)
        if session_id is not None:
            try:
                session = self.store.get_session(session_id)
                runner = self.runner(study or session.study)
                if session.study == runner.study.name:
                    return self._next(runner, session_id)
            except ListeningError:
                pass  # an unknown or replaced session, or another study: the rater starts a new one
        try:
            runner = self.runner(study)
        except ListeningError as error:
            return {"state": "closed", "message": public_message(error)}
        return {"state": "start", **self._study_header(runner)}

    def start(self, study: str | None, rater_id: str | None, address: str | None = None) -> dict:
        """Start (or, for a rater id with an open session, resume) a session; `address` (the client's) may
        start a bounded number of new sessions an hour (`session_limits`)."""
        try:
            runner = self.runner(study)
            session = self.starts.start(self.store, runner.study.name, rater_id, address,
                                        lambda: runner.start_session(rater_id=rater_id or None))
            return self._next(runner, session.session_id)
        except ListeningError as error:
            return {"state": "start", "refused": public_message(error)}

    def played(self, session_id: str, trial_id: str, label: str) -> dict:
        """A clip played to the end: {"played": labels} once the server counts it, else {"refused": why}."""
        try:
            runner = self.registry.runner_for_session(session_id)
            return {"played": sorted(runner.record_play(session_id, trial_id, label))}
        except ListeningError as error:
            return {"refused": public_message(error)}

    def clip(self, session_id: str, trial_id: str, label: str) -> dict:
        """A condition's audio for the page, its fetch recorded first: {"label": label, "wav": base64 of the
        session's own copy}, else {"refused": why}."""
        try:
            runner = self.registry.runner_for_session(session_id)
            view = runner.fetch_clip(session_id, trial_id, label)
            data = self._clip_bytes(view, label)
        except ListeningError as error:
            return {"refused": public_message(error)}
        return {"label": label, "wav": base64.b64encode(data).decode("ascii")}

    def submit(self, session_id: str, trial_id: str, answer: object) -> dict:
        """Store an answer; the next trial (or the end), or {"refused": why} with the trial left as it was."""
        try:
            runner = self.registry.runner_for_session(session_id)
            runner.submit(session_id, trial_id, answer)
            return self._next(runner, session_id)
        except ListeningError as error:
            return {"refused": public_message(error)}

    # -- views

    def _study_header(self, runner: StudyRunner) -> dict:
        return {"study": runner.study.name, "title": runner.study.title, "instructions": runner.study.instructions}

    def _next(self, runner: StudyRunner, session_id: str) -> dict:
        view = runner.next_view(session_id)
        header = {**self._study_header(runner), "session": session_id, "token": self.token(session_id)}
        if view is None:
            _, total = runner.progress(session_id)
            return {**header, "state": "done", "total": total, "code": runner.completion_code(session_id)}
        return {**header, "state": "trial", **self.trial_payload(view)}

    def trial_payload(self, view: StudyTrialView) -> dict:
        return {
            "trial": view.trial_id, "kind": view.kind, "number": view.number, "total": view.total,
            "text": view.text, "instructions": view.instructions, "played": sorted(view.played),
            "scale": list(view.scale) if view.scale else None, "choices": list(view.choices),
            # No clip here: the page fetches each through `clip`, which is what lets its plays count.
            "conditions": [{"label": c.label, "rated": c.rated, "must_play": c.must_play} for c in view.conditions],
        }


def dithered_wav(source: Path, seed: int) -> bytes:
    """The clip as 16-bit WAV bytes with triangular dither of one least significant bit added (values -1, 0, +1;
    seeded, so that a copy made again is the same copy)."""
    audio, rate = soundfile.read(str(source), dtype="int16", always_2d=False)
    rng = np.random.default_rng(seed)
    noise = rng.integers(0, 2, audio.shape, dtype=np.int32) - rng.integers(0, 2, audio.shape, dtype=np.int32)
    buffer = io.BytesIO()
    soundfile.write(buffer, np.clip(audio.astype(np.int32) + noise, -32768, 32767).astype(np.int16), rate,
                    format="WAV", subtype="PCM_16")
    return buffer.getvalue()


def write_tagged_wav(source: Path | bytes, destination: Path, tag: bytes) -> None:
    """Write a RIFF/WAVE file (a path or its bytes) with `tag` in a JUNK chunk before its first chunk (players
    skip JUNK chunks), so that copies of the same audio differ in their bytes; the samples are untouched."""
    data = source if isinstance(source, bytes) else Path(source).read_bytes()
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise ValueError(f"{'the clip' if isinstance(source, bytes) else source} is not a WAV file")
    tag = tag + b"\0" * (len(tag) % 2)  # chunks have an even size
    body = data[12:]
    chunk = b"JUNK" + len(tag).to_bytes(4, "little") + tag
    size = 4 + len(chunk) + len(body)
    handle, temporary = tempfile.mkstemp(suffix=".part", dir=destination.parent)  # two requests may race
    with os.fdopen(handle, "wb") as out:
        out.write(b"RIFF" + size.to_bytes(4, "little") + b"WAVE" + chunk + body)
    os.replace(temporary, destination)
