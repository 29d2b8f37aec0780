"""Stimulus sets on disk: where they live, what a manifest holds, and reading them back intact.

A set lives in `<data dir>/stimuli/<name>/`: `manifest.json` and `clips/<checksum>.wav`.
Clip files are named by their content hash, never by system, so nothing a browser can
see (file names, URLs) tells a rater which system made a clip. The manifest records,
for every clip, the sentence, the system and its full decoding settings, the seed, the
model revision, the duration and the SHA-256 of the file.

Nothing here needs a synthesizer, so a test can run on clips made anywhere; building a set
(rendering its clips and writing the manifest) is `ssd_demo.listening.stimuli`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = "ssd-demo-stimuli"
MANIFEST_VERSION = 1

#: What a set's name may be (it names the set's folder).
SET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
PERSISTENT_ROOT = Path("/data")  # a Hugging Face Space's persistent storage, when enabled


# ----------------------------------------------------------------------------- data directory


def _writable_dir(path: Path) -> bool:
    return path.is_dir() and os.access(path, os.W_OK)


def data_dir() -> Path:
    """Where listening data lives: $SSD_DEMO_DATA_DIR, else a Space's persistent /data, else ./data."""
    configured = os.environ.get("SSD_DEMO_DATA_DIR", "").strip()
    if configured:
        return Path(configured).expanduser().resolve()
    # Only on a Hugging Face Space: elsewhere an unrelated /data must not capture our files.
    if os.environ.get("SPACE_ID") and _writable_dir(PERSISTENT_ROOT):
        return PERSISTENT_ROOT / "ssd_demo"
    return Path("data").resolve()


def storage_warning(environ: Mapping[str, str] | None = None, persistent: Path = PERSISTENT_ROOT) -> str | None:
    """A warning to show when votes would vanish at a restart, else None.

    That is the case on a Space (SPACE_ID set) without writable persistent storage, unless
    SSD_DEMO_DATA_DIR names the data directory explicitly: a Space's own disk is wiped on restart.
    """
    env = os.environ if environ is None else environ
    if env.get("SSD_DEMO_DATA_DIR", "").strip() or not env.get("SPACE_ID"):
        return None
    if _writable_dir(persistent):
        return None
    return (
        "**Warning: votes are not stored persistently.** This Space has no writable persistent storage, "
        "so votes and stimulus sets go to the Space's own disk and are lost when it restarts. "
        "Enable persistent storage (mounted at /data) or set SSD_DEMO_DATA_DIR before running a study."
    )


def stimuli_root(root: Path | None = None) -> Path:
    return (root if root is not None else data_dir()) / "stimuli"



# ----------------------------------------------------------------------------- the set on disk


@dataclass(frozen=True)
class Clip:
    system: str
    path: str  # relative to the set's folder
    sha256: str
    duration_seconds: float
    sample_rate: int
    seed: int
    settings: dict[str, Any]


@dataclass(frozen=True)
class StimulusItem:
    item_id: str
    text: str
    clips: dict[str, Clip]  # by system name


@dataclass(frozen=True)
class StimulusSet:
    name: str
    root: Path  # the set's folder
    manifest_sha256: str
    preset: str
    model_revision: str
    systems: tuple[str, ...]
    items: tuple[StimulusItem, ...]

    def item(self, item_id: str) -> StimulusItem:
        for item in self.items:
            if item.item_id == item_id:
                return item
        raise KeyError(f"stimulus set {self.name!r} has no item {item_id!r}")

    def clip_path(self, relative: str) -> Path:
        path = (self.root / relative).resolve()
        # A manifest must not point outside its own folder.
        if self.root.resolve() not in path.parents:
            raise ValueError(f"clip path {relative!r} leaves the stimulus set folder")
        return path



def load_stimulus_set(path: Path | str, verify: bool = True) -> StimulusSet:
    """Read a set's manifest; with `verify`, check that every clip exists and matches its checksum."""
    path = Path(path)
    manifest_path = path if path.is_file() else path / MANIFEST_NAME
    if not manifest_path.is_file():
        raise FileNotFoundError(f"no stimulus manifest at {manifest_path}")
    raw = manifest_path.read_bytes()
    try:
        manifest = json.loads(raw)
        if manifest.get("format") != MANIFEST_FORMAT:
            raise ValueError(f"not a stimulus manifest (format {manifest.get('format')!r})")
        if manifest.get("format_version") != MANIFEST_VERSION:
            raise ValueError(f"unsupported manifest version {manifest.get('format_version')!r}")
        root = manifest_path.parent
        systems = tuple(s["name"] for s in manifest["systems"])
        items = []
        for entry in manifest["items"]:
            clips = {}
            for c in entry["clips"]:
                clip = Clip(
                    system=str(c["system"]),
                    path=str(c["path"]),
                    sha256=str(c["sha256"]),
                    duration_seconds=float(c["duration_seconds"]),
                    sample_rate=int(c["sample_rate"]),
                    seed=int(c["seed"]),
                    settings=dict(c.get("settings", {})),
                )
                if clip.system not in systems and _variant_of(clip.system) not in systems:
                    raise ValueError(f"item {entry['item_id']!r} has a clip of unlisted system {clip.system!r}")
                clips[clip.system] = clip
            items.append(StimulusItem(item_id=str(entry["item_id"]), text=str(entry["text"]), clips=clips))
        stimulus_set = StimulusSet(
            name=str(manifest["name"]),
            root=root,
            manifest_sha256=hashlib.sha256(raw).hexdigest(),
            preset=str(manifest.get("preset", "")),
            model_revision=str(manifest.get("model_revision", "unknown")),
            systems=systems,
            items=tuple(items),
        )
    except (KeyError, TypeError, AttributeError, json.JSONDecodeError) as error:
        raise ValueError(f"malformed stimulus manifest {manifest_path}: {error!r}") from None
    if verify:
        for item in stimulus_set.items:
            for clip in item.clips.values():
                clip_file = stimulus_set.clip_path(clip.path)
                if not clip_file.is_file():
                    raise FileNotFoundError(f"stimulus set {stimulus_set.name!r}: missing clip {clip.path}")
                if hashlib.sha256(clip_file.read_bytes()).hexdigest() != clip.sha256:
                    raise ValueError(
                        f"stimulus set {stimulus_set.name!r}: clip {clip.path} does not match its checksum"
                    )
    return stimulus_set


def _variant_of(system: str) -> str:
    """The listed system a clip renders one target of: `attention spoken KIND target=T` is one of the spoken
    check `attention spoken KIND`'s clips (`attention.check_system`); any other name is its own system."""
    head, _, target = system.rpartition(" target=")
    return head if head.startswith("attention spoken ") and target else system


def list_stimulus_sets(root: Path | None = None) -> list[Path]:
    """Set folders under the data directory, newest first."""
    base = stimuli_root(root)
    if not base.is_dir():
        return []
    found = [p.parent for p in base.glob(f"*/{MANIFEST_NAME}") if not p.parent.name.startswith(".")]
    return sorted(found, key=lambda p: (p / MANIFEST_NAME).stat().st_mtime, reverse=True)


def current_stimulus_set(root: Path | None = None) -> StimulusSet | None:
    """The set a listening test uses: $SSD_DEMO_STIMULUS_SET by name, else the newest one; None if there is none."""
    wanted = os.environ.get("SSD_DEMO_STIMULUS_SET", "").strip()
    if wanted:
        return load_stimulus_set(stimuli_root(root) / wanted)
    sets = list_stimulus_sets(root)
    return load_stimulus_set(sets[0]) if sets else None


def manifest_unchanged(stimulus_set: StimulusSet) -> bool:
    """Whether the set's manifest on disk is still the one it was loaded from (not rebuilt or removed)."""
    try:
        raw = (stimulus_set.root / MANIFEST_NAME).read_bytes()
    except OSError:
        return False
    return hashlib.sha256(raw).hexdigest() == stimulus_set.manifest_sha256


def stimulus_set_by_checksum(root: Path | None, name: str, manifest_sha256: str) -> StimulusSet | None:
    """Set `name` under the data directory if it still exists, intact, with this manifest checksum; else None."""
    if not SET_NAME.match(name):
        return None
    try:
        stimulus_set = load_stimulus_set(stimuli_root(root) / name)
    except (OSError, ValueError):  # gone, half-copied or damaged: not the set the session used
        return None
    return stimulus_set if stimulus_set.manifest_sha256 == manifest_sha256 else None


def read_clip(stimulus_set: StimulusSet, relative: str) -> tuple[int, np.ndarray]:
    """(sample rate, int16 samples): integer samples so that players get the file's exact level."""
    audio, sample_rate = sf.read(stimulus_set.clip_path(relative), dtype="int16", always_2d=False)
    return int(sample_rate), audio

