"""What one comparison asks for: the `Request`, and its checks (text, seed, settings, draft, voice prompt).

A `Request` names its decoding settings as `ssd_demo.config.SETTINGS` does (plus `randomize_seed`); one
left out or None is not given, and the chosen preset's default fills it (`build_config`, `request_seed`),
so a caller who names a preset and nothing else gets that preset's settings. Every given value goes
through the one validator, `SettingSpec.accept`: within the setting's whole range, or, for a request
from the web app (`within_controls`), within the part of it the app's control accepts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ..config import RANDOMIZE_SEED as RANDOMIZE_SEED_SETTING
from ..config import TEXT_NORMALIZER as TEXT_NORMALIZER_SETTING
from ..config import SETTINGS, DecodingConfig, SettingSpec, resolve_seed
from ..errors import TextError, UserError
from ..backends.registry import Preset
from ..speech.synthesis import Synthesizer, VoicePrompt

#: Not a decoding setting: asks for a fresh random seed instead of the given (or the preset's) one.
RANDOMIZE_SEED = RANDOMIZE_SEED_SETTING.name

#: Not a decoding setting either: how the text is read (CosyVoice 2's normaliser mode).
TEXT_NORMALIZER = TEXT_NORMALIZER_SETTING.name

#: What a request may name: every decoding setting, `randomize_seed` and `text_normalizer`.
REQUEST_SPECS: Mapping[str, SettingSpec] = {**SETTINGS, RANDOMIZE_SEED: RANDOMIZE_SEED_SETTING,
                                            TEXT_NORMALIZER: TEXT_NORMALIZER_SETTING}
REQUEST_SETTINGS: tuple[str, ...] = tuple(REQUEST_SPECS)


@runtime_checkable
class VoiceSource(Protocol):
    """A voice prompt not read yet (e.g. an uploaded file): read only once the preset is known to take
    voice prompts, so that it can be checked against the backend's own limits first."""

    def read_for(self, synthesizer: Synthesizer) -> VoicePrompt: ...


@dataclass(frozen=True, init=False)
class Request:
    """Everything one comparison asks for.

    `settings` holds the decoding settings given, by name (`REQUEST_SETTINGS`); one left out or None is
    not given and takes the chosen preset's default (`Synthesizer.config()`). `within_controls`: each
    value must also lie within the range the web app's control accepts (`ControlHint`), as for the app's
    own requests. Written as keywords: `Request(text="Hi.", preset="embedded", beta=0.2, seed=7)`.
    """

    text: str
    preset: str
    draft: str | None  # None or unknown: the preset's default draft
    voice_prompt: VoicePrompt | VoiceSource | None  # a clip to imitate (backends that clone voices)
    owner: str | None  # the browser session: whose custom pairs this request may use
    settings: Mapping[str, object]
    within_controls: bool

    def __init__(self, text: str, preset: str = "embedded", draft: str | None = None,
                 voice_prompt: VoicePrompt | VoiceSource | None = None, owner: str | None = None, *,
                 within_controls: bool = False, **settings: object) -> None:
        unknown = sorted(set(settings) - set(REQUEST_SETTINGS))
        if unknown:
            raise TypeError(f"unknown setting(s) {unknown}; the settings are {', '.join(REQUEST_SETTINGS)}")
        object.__setattr__(self, "text", text)
        object.__setattr__(self, "preset", preset)
        object.__setattr__(self, "draft", draft)
        object.__setattr__(self, "voice_prompt", voice_prompt)
        object.__setattr__(self, "owner", owner)
        object.__setattr__(self, "settings", {k: v for k, v in settings.items() if v is not None})
        object.__setattr__(self, "within_controls", bool(within_controls))

    def get(self, name: str) -> object | None:
        """The value given for `name` as submitted, or None when it was not given."""
        return self.settings.get(name)

    def accepted(self, name: str, defaults: DecodingConfig | None = None) -> object | None:
        """The value given for `name`, validated (`SettingSpec.accept`), or None when it was not given;
        `defaults`: the preset's config (a growing control's maximum reads it)."""
        value = self.settings.get(name)
        return None if value is None else REQUEST_SPECS[name].accept(value, self.within_controls, defaults)


def resolve_voice_prompt(synthesizer: Synthesizer, voice: VoicePrompt | VoiceSource | None) -> VoicePrompt | None:
    """The voice prompt to decode with: refused before reading when the preset speaks in its own voice."""
    if voice is None:
        return None
    if not synthesizer.backend.supports_voice_prompt:
        raise UserError("This preset speaks in its own voice and takes no voice prompt: remove the clip, or choose "
                        "a preset that clones voices (Llasa, CosyVoice 2).")
    if isinstance(voice, VoicePrompt):
        return voice
    return voice.read_for(synthesizer)


def request_seed(synthesizer: Synthesizer, request: Request) -> int:
    """The seed this request runs with: its own, else the preset's, else a random one."""
    randomize = bool(request.accepted(RANDOMIZE_SEED))
    seed = None if randomize else request.accepted("seed")
    return resolve_seed(seed if seed is not None else synthesizer.config().seed, randomize)


def build_config(synthesizer: Synthesizer, request: Request, seed: int) -> DecodingConfig:
    """The chosen preset's defaults, with the settings the request gives on top (each validated once,
    `SettingSpec.accept`); a setting not given keeps the preset's default. InvalidSettingError for a bad value."""
    defaults = synthesizer.config()
    given = {name: request.accepted(name, defaults) for name in request.settings
             if name not in (RANDOMIZE_SEED, TEXT_NORMALIZER, "seed")}
    return synthesizer.config(**given, seed=seed)


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
    for chunk in synthesizer.backend.split_text(text):
        synthesizer.backend.prompt_ids(chunk.text)
    return text
