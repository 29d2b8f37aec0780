"""The registry of model pairs the app, CLI and API can load by name.

A preset is a target, one or more drafts that share its vocabulary, and the backend
that turns text into prompts and tokens into audio. The embedded voice is always
first (it works offline on a CPU); the Llasa pairs come from the Hugging Face Hub.
Only one pair is kept resident at a time, because real pairs take gigabytes: loading
another preset or a custom pair first drops the current one.
"""

from __future__ import annotations

import inspect
import threading
from pathlib import Path
from collections.abc import Callable
from dataclasses import dataclass, field

from .errors import ModelLoadError, UnknownPresetError
from .hub import DEFAULT_REVISION, LoadOptions, download_command, free_models, is_cached, short_name
from .synthesis import Synthesizer

# The backends are imported inside the functions that use them ("deferred" below): they load the
# text front end (eSpeak, scipy.signal: about 0.4 s), which `import ssd_demo` alone does not need.


@dataclass(frozen=True)
class Preset:
    key: str  # stable identifier used by the CLI and the API
    label: str  # shown in the UI
    description: str
    licence: str
    drafts: tuple[str, ...]  # draft names, in the order the UI lists them
    default_draft: str
    # Builds the Synthesizer; receives the device string ("cpu", "cuda", ...) or None for automatic.
    # Loaders may also accept a `progress=` keyword (fraction, message) callback.
    loader: Callable[..., Synthesizer] = field(repr=False, compare=False)
    needs_download: bool = False  # True when weights come from the Hugging Face Hub
    # What the Hub presets are made of, for display and for availability checks.
    repos: tuple[str, ...] = ()  # Hub repo ids: target, draft(s), codec
    revision: str | None = None  # the revision `repos` are loaded at, unless pinned below
    pins: tuple[tuple[str, str], ...] = ()  # (repo, commit) pairs loaded at that commit instead
    sample_rate: int | None = None
    codec: str = ""
    gated: bool = False  # some repos may ask users to accept terms first
    recommended_device: str = "cpu"

    def revision_for(self, repo: str) -> str | None:
        """The revision `repo` is loaded at: its pin if it has one, else `revision`."""
        return dict(self.pins).get(repo, self.revision)

    @property
    def download_hint(self) -> str:
        """Commands that put this preset's models in the local cache."""
        return " && ".join(download_command(repo, self.revision_for(repo)) for repo in self.repos)


_REGISTRY: dict[str, Preset] = {}
_builtins_registered = False
_resident: dict[str, Synthesizer] = {}
_lock = threading.Lock()
#: Held by every job that runs the resident models (a comparison, a sweep, a stimulus set).
#: Gradio's Stop cancels the awaiting task but not the worker thread already running the
#: decoder, and then frees the queue slot; taking this lock keeps the next job out until the
#: cancelled one has really finished, so timings never overlap and no pair is swapped mid-run.
MODEL_JOB_LOCK = threading.Lock()


def register(preset: Preset) -> None:
    _register_builtin()  # built-ins first, so the embedded voice stays at the top of every list
    if preset.default_draft not in preset.drafts:
        raise ValueError(f"preset {preset.key!r}: default draft {preset.default_draft!r} is not one of its drafts")
    _REGISTRY[preset.key] = preset


def list_presets() -> list[Preset]:
    _register_builtin()
    return list(_REGISTRY.values())


def get_preset(key: str) -> Preset:
    _register_builtin()
    try:
        return _REGISTRY[key]
    except KeyError:
        raise UnknownPresetError(f"unknown preset {key!r}; available: {', '.join(_REGISTRY)}") from None


def preset_choices() -> list[tuple[str, str]]:
    """(label, key) pairs in display order, for a dropdown."""
    return [(preset.label, preset.key) for preset in list_presets()]


def preset_availability(key: str) -> tuple[bool, str]:
    """(available without downloading, message for the user). Never touches the network."""
    preset = get_preset(key)
    if not preset.needs_download:
        return True, "ships with the demo"
    missing = [repo for repo in preset.repos if not is_cached(repo, preset.revision_for(repo))]
    if not missing:
        return True, "models found in the local Hugging Face cache"
    return False, (
        f"not downloaded yet: {', '.join(missing)}. Loading will download them when the Hub is reachable; "
        f"offline, fetch them first with `{preset.download_hint}`."
    )


def load_preset(
    key: str, device: str | None = None, progress: Callable[[float, str], None] | None = None
) -> Synthesizer:
    """Load (or reuse) a preset's synthesizer; loading another one first frees the current one."""
    preset = get_preset(key)
    with _lock:
        if key not in _resident:
            _drop_resident()
            kwargs = {"progress": progress} if progress is not None and _accepts_progress(preset.loader) else {}
            _resident[key] = preset.loader(device, **kwargs)
        return _resident[key]


def load_custom_pair(
    target: str,
    draft: str,
    device: str | None = None,
    progress: Callable[[float, str], None] | None = None,
    **options,
) -> Synthesizer:
    """Load a custom target/draft pair (two Hub repo ids or two local folders), one pair resident at a time.

    Supported: Llasa-style pairs (see `ssd_demo.backends.llasa_loading.load_custom_pair`); anything else
    raises a `ssd_demo.errors.ModelLoadError` (a ValueError) that says what is supported. Extra keyword
    options go to `ssd_demo.backends.llasa_loading.load_custom_pair` (revisions, codec_ref, token, offline, ...).
    """
    from .backends.llasa_loading import load_custom_pair as load  # deferred: a backend (see the top)

    key = f"custom:{target.strip()}|{draft.strip()}|{sorted(options.items())}"
    with _lock:
        if key not in _resident:
            _drop_resident()
            _resident[key] = load(target, draft, device=device, progress=progress, **options)
        return _resident[key]


def register_custom_pair(target: str, draft: str, codec: str | None = None) -> Preset:
    """Make a user's target/draft pair (two Hub repo ids or local folders) selectable like a preset.

    Nothing is loaded or downloaded here; the pair is checked and loaded on first use, with the
    same pre-flight checks as `load_custom_pair`.
    """
    from .backends.llasa_loading import DEFAULT_CODEC  # deferred: a backend (see the top)
    from .backends.llasa_loading import load_custom_pair as load

    target, draft = (target or "").strip(), (draft or "").strip()
    if not target or not draft:
        raise ModelLoadError("a custom pair needs both a target and a draft (Hub repo ids or local folders)")
    codec = (codec or "").strip() or DEFAULT_CODEC
    draft_name = short_name(draft)

    def loader(device: str | None, progress: Callable[[float, str], None] | None = None) -> Synthesizer:
        synthesizer = load(target, draft, device=device, progress=progress, codec_ref=codec)
        synthesizer.drafts = {draft_name: next(iter(synthesizer.drafts.values()))}
        synthesizer.draft_name = draft_name
        return synthesizer

    preset = Preset(
        key=f"custom:{target}|{draft}|{codec}",
        label=f"Custom: {short_name(draft)} -> {short_name(target)}",
        description=(f"Target `{target}`, draft `{draft}`, codec `{codec}` (Llasa-shaped pairs: same speech "
                     "vocabulary and special tokens; checked before loading)."),
        licence="see the models' own cards",
        drafts=(draft_name,),
        default_draft=draft_name,
        loader=loader,
        needs_download=not (Path(target).is_dir() and Path(draft).is_dir()),
    )
    register(preset)
    return preset


def unload() -> None:
    """Drop the resident pair and return its memory."""
    with _lock:
        _drop_resident()


def _drop_resident() -> None:
    if _resident:
        _resident.clear()
        free_models()


def _accepts_progress(loader: Callable) -> bool:
    try:
        return "progress" in inspect.signature(loader).parameters
    except (TypeError, ValueError):
        return False


# -- built-in presets --------------------------------------------------------------------

LLASA_1B = "HKUSTAudio/Llasa-1B"
LLASA_3B = "HKUSTAudio/Llasa-3B"
LLASA_8B = "HKUSTAudio/Llasa-8B"


def _llasa_loader(target: str, draft: str) -> Callable[..., Synthesizer]:
    def load(device: str | None, progress: Callable[[float, str], None] | None = None) -> Synthesizer:
        # deferred: a backend (see the top)
        from .backends.llasa_loading import DEFAULT_CODEC, DEFAULT_CODEC_REVISION, load_llasa_pair

        return load_llasa_pair(
            target,
            draft,
            target_revision=DEFAULT_REVISION,
            draft_revision=DEFAULT_REVISION,
            codec_ref=DEFAULT_CODEC,
            codec_revision=DEFAULT_CODEC_REVISION,
            draft_name="Llasa-1B",
            options=LoadOptions(device=device),
            progress=progress,
        )

    return load


def _register_builtin() -> None:
    global _builtins_registered
    if _builtins_registered:
        return
    _builtins_registered = True

    def load_embedded(device: str | None) -> Synthesizer:
        from .backends.embedded import load_synthesizer  # deferred: a backend (see the top)

        return load_synthesizer(device=device)

    register(
        Preset(
            key="embedded",
            label="Embedded voice (offline, CPU)",
            description=(
                "A small codec-token TTS trained on eSpeak NG speech, shipped with the demo: "
                "a 12-layer target and two drafts (SSD-style layer subset, distilled)."
            ),
            licence="Apache-2.0 (weights trained by this project on eSpeak NG output)",
            drafts=("distilled", "layers"),
            default_draft="distilled",
            loader=load_embedded,
        )
    )
    _register_llasa()


def _register_llasa() -> None:
    # deferred: the backends (see the top); this runs when the presets are first listed
    from .backends.llasa import LICENCE
    from .backends.llasa_loading import DEFAULT_CODEC, DEFAULT_CODEC_REVISION

    common = dict(
        licence=LICENCE,
        drafts=("Llasa-1B",),
        default_draft="Llasa-1B",
        needs_download=True,
        revision=DEFAULT_REVISION,
        pins=((DEFAULT_CODEC, DEFAULT_CODEC_REVISION),),
        sample_rate=16_000,
        codec=DEFAULT_CODEC,
        gated=True,  # not verified for every size; gated repos ask for HF_TOKEN (hub.resolve says so)
        recommended_device="cuda",
    )
    for key, target, size, memory in (
        ("llasa-1b-3b", LLASA_3B, "3B", "about 15 GB"),
        ("llasa-1b-8b", LLASA_8B, "8B", "about 28 GB"),
    ):
        register(
            Preset(
                key=key,
                label=f"Llasa-1B -> Llasa-{size} (Hugging Face Hub, GPU)",
                description=(
                    f"Llasa-{size} speaks, Llasa-1B drafts: Llama-based TTS models that share one vocabulary of "
                    "65,536 XCodec2 speech tokens (16 kHz), so the 1B model drafts with no training. "
                    "Voice cloning from a short clip and its transcript. Sampling: temperature 0.8, top-p 1. "
                    f"Downloads {LLASA_1B}, {target} and {DEFAULT_CODEC} (commit {DEFAULT_CODEC_REVISION[:7]}); "
                    f"needs {memory} of GPU memory "
                    "(bfloat16 LMs, float32 codec, with headroom)."
                ),
                loader=_llasa_loader(target, LLASA_1B),
                repos=(target, LLASA_1B, DEFAULT_CODEC),
                **common,
            )
        )
