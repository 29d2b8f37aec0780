"""The two clips of a click as named 16-bit WAV files, one fresh directory per request.

The request folders live under one cache folder that a public Space must not let grow without
bound: each new folder prunes the others by age, then by count and total size (oldest first).
Folders are private to the server user (0700) and the clips too (0600); Gradio runs as the same
user, so it still reads them.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile

from ...comparison import Comparison

AUDIO_ROOT_NAME = "ssd_demo_audio"
AUDIO_MAX_AGE_SECONDS = 3600
AUDIO_MAX_FOLDERS = 200  # request folders kept, the new one included
AUDIO_MAX_BYTES = 500 * 1024 * 1024  # total size of the folders kept besides the new one
_FALLBACK_ROOT: list[Path] = []  # this process's own cache folder, when the shared one is not ours


def to_int16(audio: np.ndarray) -> np.ndarray:
    """float [-1, 1] -> int16 with one fixed gain, so two clips keep their relative loudness."""
    audio = np.nan_to_num(np.asarray(audio, dtype=np.float32), nan=0.0, posinf=1.0, neginf=-1.0)
    return np.round(np.clip(audio, -1.0, 1.0) * 32767.0).astype(np.int16)


def write_wav(path: Path, audio: np.ndarray, sample_rate: int) -> Path:
    """A 16-bit WAV readable only by the server user (0600 from its creation on)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        os.fchmod(handle.fileno(), 0o600)  # a file that already existed keeps its mode otherwise
        soundfile.write(handle, to_int16(audio), sample_rate, subtype="PCM_16", format="WAV")
    return path


def _slug(value: object) -> str:
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return "".join(c if c.isalnum() or c in "-." else "-" for c in text)


def audio_directory(root: Path | None = None) -> Path:
    """A fresh private directory per request (so concurrent users never share files); the older
    ones are pruned by `prune_audio_folders`."""
    root = _private_root(root)
    fresh = Path(tempfile.mkdtemp(dir=root))  # mode 0700
    prune_audio_folders(root, keep=fresh)
    return fresh


def _private_root(root: Path | None) -> Path:
    """The cache folder, 0700. The shared default (`<tmp>/ssd_demo_audio`) is used only if it is
    this user's own real folder; otherwise this process takes a private one of its own."""
    if root is not None:
        root = Path(root)
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        return root
    if _FALLBACK_ROOT:
        return _FALLBACK_ROOT[0]
    root = Path(tempfile.gettempdir()) / AUDIO_ROOT_NAME
    try:
        root.mkdir(mode=0o700, exist_ok=True)
        info = os.lstat(root)
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid():
            if stat.S_IMODE(info.st_mode) != 0o700:
                os.chmod(root, 0o700)  # made by an older version with the default mode
            return root
    except OSError:
        pass
    _FALLBACK_ROOT.append(Path(tempfile.mkdtemp(prefix=AUDIO_ROOT_NAME + "-")))
    return _FALLBACK_ROOT[0]


def prune_audio_folders(root: Path, keep: Path | None = None) -> list[Path]:
    """Remove request folders under `root` older than AUDIO_MAX_AGE_SECONDS; then, newest first, keep
    at most AUDIO_MAX_FOLDERS folders (`keep` counted) holding at most AUDIO_MAX_BYTES besides `keep`,
    removing the rest (the oldest). `keep`, the folder just made, is never removed. Returns the removed."""
    cutoff = time.time() - AUDIO_MAX_AGE_SECONDS
    folders = []
    for folder in Path(root).iterdir():
        if keep is not None and folder == keep:
            continue
        try:
            info = folder.lstat()
            if stat.S_ISDIR(info.st_mode):
                folders.append((info.st_mtime, folder))
        except OSError:
            pass  # another request pruned it first
    folders.sort(key=lambda entry: entry[0], reverse=True)
    removed, kept, total, full = [], 1 if keep is not None else 0, 0, False
    for mtime, folder in folders:
        if not full:
            size = _folder_bytes(folder)
            full = mtime < cutoff or kept >= AUDIO_MAX_FOLDERS or total + size > AUDIO_MAX_BYTES
        if not full:
            kept, total = kept + 1, total + size
            continue
        shutil.rmtree(folder, ignore_errors=True)  # this one and every older one
        removed.append(folder)
    return removed


def _folder_bytes(folder: Path) -> int:
    total = 0
    for directory, _, names in os.walk(folder):  # links are not followed
        for name in names:
            try:
                info = os.lstat(os.path.join(directory, name))
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                total += info.st_size
    return total


def write_audio_files(comparison: Comparison, directory: Path | None = None) -> tuple[Path, Path]:
    """Both clips as 16-bit WAVs whose names say what they are."""
    directory = directory or audio_directory()
    config = comparison.config
    stem = f"{_slug(comparison.preset)}_seed{comparison.seed}"
    ar_path = directory / f"{stem}_autoregressive.wav"
    spec_path = directory / (
        f"{stem}_speculative_{_slug(comparison.draft)}_{_slug(config.acceptance)}"
        f"_K{config.draft_len}_beta{_slug(float(config.beta))}.wav"
    )
    write_wav(ar_path, comparison.ar.audio, comparison.ar.sample_rate)
    write_wav(spec_path, comparison.spec.audio, comparison.spec.sample_rate)
    return ar_path, spec_path
