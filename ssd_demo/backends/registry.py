"""The registry of model pairs the app, CLI and API can load by name.

A preset is a target, one or more drafts that share its vocabulary, and the backend
that turns text into prompts and tokens into audio. The embedded voice is always
first (it works offline on a CPU); the Llasa pairs come from the Hugging Face Hub.
Only one pair is kept resident at a time, because real pairs take gigabytes: loading
another preset or a custom pair first drops the current one.
"""

from __future__ import annotations

import inspect
import secrets
import threading
import time
from pathlib import Path
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import ModelLoadError, UnknownPresetError
from ..models.policy import check_hub_allowed, check_hub_only, local_models_allowed, max_download_bytes, valid_repo_id
from ..models.hub import LoadOptions, is_cached, short_name
from .preset import Preset
from .vllm import environment_engine

if TYPE_CHECKING:  # the models' code loads with the presets (deferred below), not with this module (a command's flags)
    from ..speech.synthesis import Synthesizer

# The backends are imported inside the functions that use them ("deferred" below): they load the
# text front end (eSpeak, scipy.signal: about 0.4 s), which `import ssd_demo` alone does not need.


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


def list_presets(owner: str | None = None) -> list[Preset]:
    """Every preset `owner` may use: the shared ones and its own custom pairs."""
    _register_builtin()
    return [p for p in _REGISTRY.values() if p.owner is None or p.owner == owner]


def get_preset(key: str, owner: str | None = None) -> Preset:
    """The preset `key`; another session's custom pair is as unknown as a key never registered."""
    _register_builtin()
    preset = _REGISTRY.get(key)
    if preset is None or (preset.owner is not None and preset.owner != owner):
        available = ", ".join(p.key for p in list_presets(owner))
        raise UnknownPresetError(f"unknown preset {key!r}; available: {available}") from None
    return preset


def preset_choices(owner: str | None = None) -> list[tuple[str, str]]:
    """(label, key) pairs in display order, for a dropdown."""
    return [(preset.label, preset.key) for preset in list_presets(owner)]


def preset_availability(key: str, owner: str | None = None) -> tuple[bool, str]:
    """(available without downloading, message for the user). Never touches the network."""
    preset = get_preset(key, owner)
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
    key: str, device: str | None = None, progress: Callable[[float, str], None] | None = None,
    owner: str | None = None,
) -> Synthesizer:
    """Load (or reuse) a preset's synthesizer; loading another one first frees the current one
    (after the new one's pre-flight checks passed)."""
    preset = get_preset(key, owner)
    with _lock:
        if key not in _resident:
            if preset.preflight is not None:
                preset.preflight()
            _drop_resident()
            kwargs = {"progress": progress} if progress is not None and _accepts_progress(preset.loader) else {}
            _resident[key] = environment_engine(preset.loader(device, **kwargs))  # SSD_DEMO_ENGINE=vllm
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
    from .llasa_loading import load_custom_pair as load  # deferred: a backend (see the top)

    key = f"custom:{target.strip()}|{draft.strip()}|{sorted(options.items())}"
    with _lock:
        if key not in _resident:
            _drop_resident()
            _resident[key] = environment_engine(load(target, draft, device=device, progress=progress, **options))
        return _resident[key]


#: Custom pairs kept per session (a fourth replaces that session's oldest) and in all (when full, new ones
#: are refused: one visitor must not push out another's); pairs older than CUSTOM_PAIR_HOURS are forgotten.
MAX_CUSTOM_PER_OWNER = 3
MAX_CUSTOM_PAIRS = 64
CUSTOM_PAIR_HOURS = 2.0
MAX_REF_CHARS = 200
_ADDED: dict[str, tuple[float, tuple]] = {}  # custom key -> (when added, (owner, target, draft, codec))


def register_custom_pair(target: str, draft: str, codec: str | None = None, owner: str | None = None) -> Preset:
    """Make a user's target/draft pair (two Hub repo ids or local folders) selectable like a preset.

    `owner` (the app passes the browser session) scopes it: only that owner lists or loads it, by an
    opaque key that names no path. Nothing is loaded or downloaded here; the references are checked
    against what the operator allows (`ssd_demo.models.policy`: local folders, Hub allow-list) without
    touching the file system when local folders are off, and the pair's pre-flight checks run on first
    use, before the resident pair is dropped.
    """
    from .llasa_loading import DEFAULT_CODEC  # deferred: a backend (see the top)
    from .llasa_loading import load_custom_pair as load
    from .llasa_loading import plan_llasa_pair

    refs = [(what, (ref or "").strip()) for what, ref in (("target", target), ("draft", draft), ("codec", codec))]
    if not refs[0][1] or not refs[1][1]:
        raise ModelLoadError("a custom pair needs both a target and a draft (Hub repo ids or local folders)")
    refs[2] = ("codec", refs[2][1] or DEFAULT_CODEC)
    local_ok = local_models_allowed()
    for what, ref in refs:
        if len(ref) > MAX_REF_CHARS:
            raise ModelLoadError(f"the {what} reference is {len(ref)} characters long; at most {MAX_REF_CHARS}")
        if any(ord(c) < 32 or ord(c) == 127 for c in ref):
            raise ModelLoadError(f"the {what} reference contains control characters (a line break?)")
        if not local_ok:
            check_hub_only(ref)
        check_hub_allowed(ref)
    (_, target), (_, draft), (_, codec) = refs
    refs_key = (owner, target, draft, codec)
    same = [key for key, (_, added) in _ADDED.items() if added == refs_key and key in _REGISTRY]
    if same:  # added before: the same preset, not a second key
        return _REGISTRY[same[0]]
    draft_name = short_name(draft)
    options = LoadOptions(allow_local=local_ok)

    def preflight() -> None:
        plan_llasa_pair(target, draft, codec_ref=codec, options=options, download_limit=max_download_bytes())

    def loader(device: str | None, progress: Callable[[float, str], None] | None = None) -> Synthesizer:
        synthesizer = load(target, draft, device=device, progress=progress, codec_ref=codec, allow_local=local_ok)
        synthesizer.drafts = {draft_name: next(iter(synthesizer.drafts.values()))}
        synthesizer.draft_name = draft_name
        return synthesizer

    preset = Preset(
        key=f"custom-{secrets.token_hex(6)}",
        label=f"Custom: {short_name(draft)} -> {short_name(target)}",
        description=(f"Target `{target}`, draft `{draft}`, codec `{codec}` (Llasa-shaped pairs: same speech "
                     "vocabulary and special tokens; checked before loading)."),
        licence="see the models' own cards",
        drafts=(draft_name,),
        default_draft=draft_name,
        loader=loader,
        # Only Hub repositories download; a local folder that is missing is reported as missing.
        needs_download=any(valid_repo_id(ref) and not (local_ok and Path(ref).is_dir()) for ref in (target, draft)),
        owner=owner,
        preflight=preflight,
    )
    _make_room_for_custom(owner)
    register(preset)
    _ADDED[preset.key] = (time.monotonic(), refs_key)
    return preset


def _make_room_for_custom(owner: str | None) -> None:
    """Forget expired custom pairs and this owner's oldest beyond its share; refuse when the server is full
    (a pair that is resident stays loaded until another preset replaces it)."""
    now = time.monotonic()
    for key in [k for k, (added, _) in _ADDED.items() if now - added > CUSTOM_PAIR_HOURS * 3600]:
        _REGISTRY.pop(key, None)
        _ADDED.pop(key, None)
    # Custom pairs are the ones in _ADDED (built-in presets may have pre-flight checks too).
    mine = [key for key in _ADDED if key in _REGISTRY and _REGISTRY[key].owner == owner]
    for key in mine[: max(len(mine) - MAX_CUSTOM_PER_OWNER + 1, 0)]:
        _REGISTRY.pop(key, None)
        _ADDED.pop(key, None)
    if sum(1 for key in _ADDED if key in _REGISTRY) >= MAX_CUSTOM_PAIRS:
        raise ModelLoadError(f"this server already holds {MAX_CUSTOM_PAIRS} custom pairs from its visitors; "
                             "try again later, or use a preset")


def unload() -> None:
    """Drop the resident pair and return its memory."""
    with _lock:
        _drop_resident()


def _drop_resident() -> None:
    if _resident:
        for synthesizer in _resident.values():  # a voice on vLLM: its engine processes end with it
            getattr(synthesizer, "close", lambda: None)()
        _resident.clear()
        from ..models.weights import free_models

        free_models()


def _accepts_progress(loader: Callable) -> bool:
    try:
        return "progress" in inspect.signature(loader).parameters
    except (TypeError, ValueError):
        return False


def _register_builtin() -> None:
    global _builtins_registered
    if _builtins_registered:
        return
    _builtins_registered = True
    from .builtin_presets import builtin_presets  # deferred: the backends (see the top)

    for preset in builtin_presets():
        register(preset)
