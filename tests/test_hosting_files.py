"""Files a public Space leaves on its disk: bounded audio cache, private modes, no stray copies."""

from __future__ import annotations

from support.paths import REPOSITORY

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ssd_demo.app.compare import audio_files
from ssd_demo.app.listening import experimenter_access
from ssd_demo.app.listening import service as listening_app
from ssd_demo.app.listening.service import browser_secret
from ssd_demo.listening.study_store import ListeningStore

ROOT = REPOSITORY


@pytest.fixture
def usual_umask():
    """The common default umask, under which files created without a mode come out 0644."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def request_folder(root: Path, name: str, age_seconds: float, size: int = 0) -> Path:
    folder = root / name
    folder.mkdir()
    if size:
        (folder / "clip.wav").write_bytes(b"\0" * size)
    stamp = time.time() - age_seconds
    os.utime(folder, (stamp, stamp))
    return folder


# -- the per-request audio cache


def test_audio_cache_keeps_at_most_the_folder_limit_newest_first(tmp_path, monkeypatch):
    monkeypatch.setattr(audio_files, "AUDIO_MAX_FOLDERS", 5)
    old = [request_folder(tmp_path, f"r{i:02d}", age_seconds=100 - i) for i in range(8)]  # r00 oldest
    fresh = audio_files.audio_directory(tmp_path)
    left = sorted(p.name for p in tmp_path.iterdir())
    assert len(left) == 5 and fresh.name in left
    assert left == sorted([fresh.name] + [p.name for p in old[-4:]])  # the four newest of the old ones


def test_audio_cache_is_bounded_in_bytes_oldest_removed_first(tmp_path, monkeypatch):
    monkeypatch.setattr(audio_files, "AUDIO_MAX_BYTES", 2500)
    for i in range(6):
        request_folder(tmp_path, f"r{i}", age_seconds=60 - i, size=1000)  # r5 newest
    request_folder(tmp_path, "r_small_but_oldest", age_seconds=120, size=10)
    fresh = audio_files.audio_directory(tmp_path)
    # Newest first: r5 and r4 fit in 2500 bytes, r3 does not; it and everything older go,
    # even the small oldest one ("oldest removed first", never a newer one before an older one).
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([fresh.name, "r4", "r5"])


def test_audio_cache_still_prunes_by_age(tmp_path):
    request_folder(tmp_path, "stale", age_seconds=audio_files.AUDIO_MAX_AGE_SECONDS + 60)
    recent = request_folder(tmp_path, "recent", age_seconds=10)
    fresh = audio_files.audio_directory(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([fresh.name, recent.name])


def test_audio_cache_never_removes_the_folder_just_made(tmp_path, monkeypatch):
    monkeypatch.setattr(audio_files, "AUDIO_MAX_FOLDERS", 1)
    monkeypatch.setattr(audio_files, "AUDIO_MAX_BYTES", 0)
    request_folder(tmp_path, "earlier", age_seconds=1, size=100)
    fresh = audio_files.audio_directory(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [fresh.name]
    again = audio_files.audio_directory(tmp_path)  # the new one replaces it, never the other way
    assert [p.name for p in tmp_path.iterdir()] == [again.name]


def test_audio_cache_ignores_links_and_plain_files(tmp_path, monkeypatch):
    monkeypatch.setattr(audio_files, "AUDIO_MAX_FOLDERS", 1)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("keep")
    root = tmp_path / "root"
    root.mkdir()
    (root / "link").symlink_to(outside, target_is_directory=True)
    (root / "note.txt").write_text("x")
    audio_files.audio_directory(root)
    assert (outside / "precious.txt").exists() and (root / "note.txt").exists()


def test_audio_folders_and_clips_are_private(tmp_path, monkeypatch, usual_umask):
    monkeypatch.setattr(audio_files.tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(audio_files, "_FALLBACK_ROOT", [])
    fresh = audio_files.audio_directory()
    root = tmp_path / audio_files.AUDIO_ROOT_NAME
    assert fresh.parent == root
    assert mode(root) == 0o700 and mode(fresh) == 0o700
    clip = audio_files.write_wav(fresh / "a.wav", np.zeros(160, np.float32), 16000)
    assert mode(clip) == 0o600
    clip.chmod(0o644)  # a file that already exists is made private too when written again
    audio_files.write_wav(clip, np.zeros(160, np.float32), 16000)
    assert mode(clip) == 0o600


def test_a_cache_root_left_open_by_an_older_version_is_made_private(tmp_path, monkeypatch):
    monkeypatch.setattr(audio_files.tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(audio_files, "_FALLBACK_ROOT", [])
    root = tmp_path / audio_files.AUDIO_ROOT_NAME
    root.mkdir(mode=0o755)
    root.chmod(0o755)
    assert audio_files.audio_directory().parent == root and mode(root) == 0o700


def test_a_shared_cache_root_that_is_a_link_is_not_used(tmp_path, monkeypatch):
    monkeypatch.setattr(audio_files.tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(audio_files, "_FALLBACK_ROOT", [])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / audio_files.AUDIO_ROOT_NAME).symlink_to(elsewhere, target_is_directory=True)
    fresh = audio_files.audio_directory()
    assert fresh.parent != tmp_path / audio_files.AUDIO_ROOT_NAME and not any(elsewhere.iterdir())
    assert mode(fresh.parent) == 0o700 and audio_files.audio_directory().parent == fresh.parent


# -- the listening test's database, browser secret and exports


def test_listening_database_and_its_side_files_are_private(tmp_path, usual_umask):
    path = tmp_path / "listening.sqlite3"
    with ListeningStore(path, app_version="t") as store:
        assert store.journal_mode() == "wal"
        side = [Path(f"{path}{suffix}") for suffix in ("-wal", "-shm")]
        assert all(p.exists() for p in side)
        assert {p.name: mode(p) for p in [path, *side]} == {p.name: 0o600 for p in [path, *side]}


def test_an_existing_database_keeps_its_mode(tmp_path, usual_umask):
    path = tmp_path / "listening.sqlite3"
    ListeningStore(path, app_version="t").close()
    path.chmod(0o640)  # the operator's choice
    with ListeningStore(path, app_version="t") as store:
        assert store.study_answer_count("ab-mos") == 0
    assert mode(path) == 0o640


def test_browser_secret_without_hard_links_is_private_from_creation(tmp_path, monkeypatch, usual_umask):
    monkeypatch.delenv(listening_app.SECRET_ENV, raising=False)

    def no_links(*_):
        raise PermissionError("no hard links here")

    monkeypatch.setattr(listening_app.os, "link", no_links)
    monkeypatch.setattr(Path, "chmod", lambda self, mode: None)  # no mending afterwards
    secret = browser_secret(tmp_path / "listening.sqlite3")
    path = tmp_path / "listening.browser_secret"
    assert len(secret) == 64 and mode(path) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_vote_exports_are_private(tmp_path, monkeypatch, usual_umask):
    monkeypatch.setenv("SSD_DEMO_RESULTS_TOKEN", "experimenter-token")  # the export is the experimenter's
    monkeypatch.setattr(experimenter_access, "_EXPORTS", [])  # a fresh export folder for this test
    settings = listening_app.ListeningSettings(data_dir=tmp_path, db_path=tmp_path / "l.sqlite3", n_trials=2)
    app = listening_app.ListeningApp(settings)
    try:
        path = app.export_votes("experimenter-token")
        assert mode(path.parent) == 0o700 and mode(path) == 0o600
        assert path.read_text(encoding="utf-8").startswith("study,rater,session,")
    finally:
        app.close()
        for exported in path.parent.iterdir():
            exported.unlink()
        path.parent.rmdir()


# -- eSpeak NG


def test_espeak_leaves_no_copy_of_its_library_in_the_temp_folder(tmp_path):
    """The library is loaded in place from the wheel: nothing is copied into the temp folder."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    code = (
        "import espeakng_loader, os\n"
        "from ssd_demo.text import espeak\n"
        "rendering = espeak.synthesize('Hello there, 1.5 times.')\n"
        "assert rendering.audio.size and rendering.events\n"
        "assert espeak._library().lib._name == espeakng_loader.get_library_path()\n"
        "if os.path.exists('/proc/self/maps'):  # Linux: the one mapping of the library is the wheel's file\n"
        "    maps = [line.split()[-1] for line in open('/proc/self/maps') if 'espeak' in line]\n"
        "    assert maps and set(maps) == {os.path.realpath(espeakng_loader.get_library_path())}, maps\n"
        "print(sorted(os.listdir(os.environ['TMPDIR'])))\n"
    )
    env = {**os.environ, "TMPDIR": str(temp), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert not [p for p in temp.rglob("*") if "espeak" in p.name.lower()]
    assert "espeak" not in done.stdout.lower()  # nothing while it ran either
