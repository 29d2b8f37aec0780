"""What one comparison asks for: the `Request`, and its checks (text, seed, settings, draft, voice prompt).

A `Request` names its decoding settings as `ssd_demo.config.SETTINGS` does (plus `randomize_seed`); one
left out or None takes the preset's default. Each submitted value is turned into what the config wants
by the request's `coercion`: by default the library's whole range (`coerce_setting`); a front end with
narrower controls passes its own (the web app's `Setting.coerce`), and its bounds are the ones enforced.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from ..config import SETTINGS, DecodingConfig, resolve_seed
from ..errors import InvalidSettingError, TextError, UserError
from ..backends.registry import Preset
from ..speech.synthesis import Synthesizer, VoicePrompt

#: Not a decoding setting: asks for a fresh random seed instead of the given (or the preset's) one.
RANDOMIZE_SEED = "randomize_seed"

#: The settings a request may name: every decoding setting, and `randomize_seed`.
REQUEST_SETTINGS: tuple[str, ...] = (*SETTINGS, RANDOMIZE_SEED)

#: coercion(name, value, defaults) -> the value as the config wants it, or InvalidSettingError; `defaults`
#: is the preset's config when known (a control whose maximum grows with the preset's default reads it).
Coercion = Callable[[str, object, "DecodingConfig | None"], object]


def as_float(name: str, value) -> float:
    """A submitted number as a finite float; InvalidSettingError naming `name` otherwise."""
    if isinstance(value, bool):
        raise InvalidSettingError(f"{name} must be a number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InvalidSettingError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise InvalidSettingError(f"{name} must be a finite number, got {value!r}")
    return number


def as_int(name: str, value) -> int:
    """Sliders and number boxes may deliver floats; integral floats are fine, others are not."""
    if isinstance(value, bool):
        raise InvalidSettingError(f"{name} must be a whole number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise InvalidSettingError(f"{name} must be a whole number, got {value!r}") from None
    if not number.is_integer():
        raise InvalidSettingError(f"{name} must be a whole number, got {value!r}")
    return int(number)


def as_bool(name: str, value) -> bool:
    if isinstance(value, (bool, np.bool_)) or value in (0, 1):
        return bool(value)
    raise InvalidSettingError(f"{name} must be true or false, got {value!r}")


def coerce_setting(name: str, value: object, defaults: DecodingConfig | None = None) -> object:
    """The library's coercion: the value as its setting's kind, within the setting's whole range."""
    if name == RANDOMIZE_SEED:
        return as_bool(name, value)
    spec = SETTINGS[name]
    if spec.kind == "int":
        value = as_int(name, value)
    elif spec.kind == "float":
        value = as_float(name, value)
    elif spec.kind == "bool":
        value = as_bool(name, value)
    else:
        value = str(value)
    spec.check(value)
    return value


@runtime_checkable
class VoiceSource(Protocol):
    """A voice prompt not read yet (e.g. an uploaded file): read only once the preset is known to take
    voice prompts, so that it can be checked against the backend's own limits first."""

    def read_for(self, synthesizer: Synthesizer) -> VoicePrompt: ...


@dataclass(frozen=True, init=False)
class Request:
    """Everything one comparison asks for.

    `settings` holds decoding settings by name (`REQUEST_SETTINGS`); one left out or None takes the
    preset's default (`Synthesizer.config()`). Written as keywords:
    `Request(text="Hi.", preset="embedded", beta=0.2, seed=7)`.
    """

    text: str
    preset: str
    draft: str | None  # None or unknown: the preset's default draft
    voice_prompt: VoicePrompt | VoiceSource | None  # a clip to imitate (backends that clone voices)
    owner: str | None  # the browser session: whose custom pairs this request may use
    settings: Mapping[str, object]
    coercion: Coercion = field(compare=False, repr=False)

    def __init__(self, text: str, preset: str = "embedded", draft: str | None = None,
                 voice_prompt: VoicePrompt | VoiceSource | None = None, owner: str | None = None, *,
                 coercion: Coercion | None = None, **settings: object) -> None:
        unknown = sorted(set(settings) - set(REQUEST_SETTINGS))
        if unknown:
            raise TypeError(f"unknown setting(s) {unknown}; the settings are {', '.join(REQUEST_SETTINGS)}")
        object.__setattr__(self, "text", text)
        object.__setattr__(self, "preset", preset)
        object.__setattr__(self, "draft", draft)
        object.__setattr__(self, "voice_prompt", voice_prompt)
        object.__setattr__(self, "owner", owner)
        object.__setattr__(self, "settings", {k: v for k, v in settings.items() if v is not None})
        object.__setattr__(self, "coercion", coercion or coerce_setting)

    def get(self, name: str) -> object | None:
        return self.settings.get(name)

    def coerce(self, name: str, value: object, defaults: DecodingConfig | None = None) -> object:
        return self.coercion(name, value, defaults)


def resolve_voice_prompt(synthesizer: Synthesizer, voice: VoicePrompt | VoiceSource | None) -> VoicePrompt | None:
    """The voice prompt to decode with: refused before reading when the preset speaks in its own voice."""
    if voice is None:
        return None
    if not getattr(synthesizer.backend, "supports_voice_prompt", False):
        raise UserError("This preset speaks in its own voice and takes no voice prompt: remove the clip, or choose "
                        "a preset that clones voices (Llasa, CosyVoice 2).")
    if isinstance(voice, VoicePrompt):
        return voice
    return voice.read_for(synthesizer)


def request_seed(synthesizer: Synthesizer, request: Request) -> int:
    """The seed this request runs with: its own, else the preset's, else a random one."""
    randomize = request.coerce(RANDOMIZE_SEED, request.get(RANDOMIZE_SEED) or False)
    seed = request.get("seed")
    if seed is not None and not randomize:
        seed = request.coerce("seed", seed)
    return resolve_seed(seed if seed is not None else synthesizer.config().seed, randomize)


def build_config(synthesizer: Synthesizer, request: Request, seed: int) -> DecodingConfig:
    """The preset's defaults with the request's choices on top; InvalidSettingError for bad values."""
    defaults = synthesizer.config()
    changes: dict[str, object] = {
        name: request.coerce(name, value, defaults)
        for name, value in request.settings.items()
        if name not in (RANDOMIZE_SEED, "seed")
    }
    return synthesizer.config(**changes, seed=seed)


def resolve_draft(preset: Preset, synthesizer: Synthesizer, draft: str | None) -> str:
    """The requested draft if the preset has it, else the preset's default."""
    if draft and draft in synthesizer.drafts:
        return draft
    return preset.default_draft if preset.default_draft in synthesizer.drafts else synthesizer.draft_name


def check_text(synthesizer: Synthesizer, text: str | None) -> str:
    """Reject empty or over-long text before any model runs (TextError with a readable message)."""
    if text is not None and not isinstance(text, str):
        raise TextError(f"The text must be a string, got {type(text).__name__}.")
    text = (text or "").strip()
    if not text:
        raise TextError("Please type some text to synthesise.")
    limit = synthesizer.backend.max_text_chars
    if len(text) > limit:
        raise TextError(f"The text is {len(text)} characters long; this voice accepts at most {limit}.")
    # The backend's own checks (characters it cannot read, ...) before any model runs; a backend that
    # speaks long text in chunks checks the text as it will split it.
    split = getattr(synthesizer.backend, "split_text", None)
    for chunk in split(text) if split is not None else [text]:
        synthesizer.backend.prompt_ids(getattr(chunk, "text", chunk))
    return text
