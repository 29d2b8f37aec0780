"""What one click asks for: the Compare tab's controls, their checks, and the `Request` of one click.

`COMPARE_SETTINGS` lists the page's decoding controls in `/synthesize` parameter order. Each is made
from the setting's one definition in `ssd_demo.config.SETTINGS` (type, default, bounds, help, and the
`ControlHint` that says how to draw it and which part of the range the app accepts); the page builds
its components, the preset updates and the `/synthesize` parameters from the list, and `build_config`
turns a `Request` into a `DecodingConfig` with it. Adding a control is one `ControlHint` in the config
and one name here.

Which bound is the API's: the app accepts from the hint's minimum (else the setting's) to the hint's
maximum (else the setting's), the range its controls can show; the library accepts its whole range.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import soundfile

from ...config import MAX_SEED, SETTINGS, DecodingConfig, SettingSpec, resolve_seed
from ...errors import InvalidSettingError, TextError, UserError
from ...presets import Preset
from ...rules import RULES
from ...synthesis import Synthesizer, VoicePrompt


@dataclass(frozen=True)
class Setting:
    """One Compare-tab control.

    name:     the `DecodingConfig` field, the `Request` keyword and the `/synthesize` parameter.
    kind:     how a submitted value is coerced ("int" accepts integral floats: sliders send floats).
    widget:   how the page draws it; `section` and `row` say where (settings sharing a row sit side by side).
    minimum:  the control's lowest drawn value; `floor` the lowest accepted when below it (exclusive with
              `floor_exclusive`).
    maximum:  the control's top and the highest value accepted (exclusive with `top_exclusive`); `grows`
              lets a preset whose default is larger raise it. Values outside are refused, from the page
              and the API alike.
    rule:     shown only while this acceptance rule is chosen.
    describe: the control's help text for its current value (the acceptance rule's own help).
    """

    name: str
    label: str
    kind: Literal["int", "float", "choice", "bool"]
    widget: Literal["slider", "number", "dropdown", "checkbox"]
    section: Literal["speculation", "sampling"]
    info: str = ""
    minimum: float | None = None
    maximum: float | None = None
    step: float | None = None
    grows: bool = False
    floor: float | None = None
    floor_exclusive: bool = False
    top_exclusive: bool = False
    choices: tuple[str, ...] = ()
    row: str | None = None
    rule: str | None = None
    describe: Callable[[object], str] | None = field(default=None, compare=False)
    in_config: bool = True  # False: read by the request itself (randomize_seed), not a DecodingConfig field

    def default(self, config: DecodingConfig) -> object:
        """What the control shows for a preset whose defaults are `config`."""
        if not self.in_config:
            return False
        value = getattr(config, self.name)
        return 0 if self.name == "seed" and value is None else value

    def top(self, config: DecodingConfig) -> float | None:
        """The slider's maximum for this preset."""
        if self.maximum is None or not self.grows:
            return self.maximum
        return max(self.maximum, float(self.default(config)))

    def info_for(self, value: object) -> str:
        return self.describe(value) if self.describe is not None else self.info

    def visible_for(self, acceptance: str) -> bool:
        return self.rule is None or self.rule == acceptance

    def coerce(self, value: object, config: DecodingConfig | None = None) -> object:
        """A submitted value as the config wants it, inside the control's range (`config`: the preset's
        defaults, which may raise a growing maximum); InvalidSettingError names the parameter as API
        callers spell it. The page's components pass values through unchecked, so this is the check."""
        if self.kind in ("int", "float"):
            number = _as_int(self.name, value) if self.kind == "int" else _as_float(self.name, value)
            self._check_range(number, self.top(config) if config is not None else self.maximum)
            return number
        if self.kind == "bool":
            if isinstance(value, (bool, np.bool_)) or value in (0, 1):
                return bool(value)
            raise InvalidSettingError(f"{self.name} must be true or false, got {value!r}")
        return str(value)

    def _check_range(self, number: float, top: float | None) -> None:
        def show(x: float) -> str:  # a huge value is shown short, never as 300 digits
            return str(int(x)) if self.kind == "int" and abs(x) < 1e15 else f"{x:.6g}"

        bottom = self.floor if self.floor is not None else self.minimum
        if bottom is not None and (number <= bottom if self.floor_exclusive else number < bottom):
            relation = "greater than" if self.floor_exclusive else "at least"
            raise InvalidSettingError(f"{self.name} must be {relation} {show(bottom)}, got {show(number)}")
        if top is not None and (number >= top if self.top_exclusive else number > top):
            relation = "less than" if self.top_exclusive else "at most"
            raise InvalidSettingError(f"{self.name} must be {relation} {show(top)}, got {show(number)}")


def control_for(spec: SettingSpec, describe: Callable[[object], str] | None = None) -> Setting:
    """The Compare-tab control of a setting, from its one definition: the hint's range where it narrows the
    setting's (the app's bounds), the setting's own bounds elsewhere."""
    hint = spec.control
    if hint is None:
        raise ValueError(f"{spec.name} has no control hint")  # a programming error: the list below names it
    accepted_min = hint.minimum if hint.minimum is not None else spec.minimum
    drawn_min = hint.slider_minimum if hint.slider_minimum is not None else accepted_min
    return Setting(
        spec.name, hint.label, spec.kind, hint.widget, hint.section,
        info=hint.info if hint.info is not None else spec.help,
        minimum=drawn_min, maximum=hint.maximum if hint.maximum is not None else spec.maximum, step=hint.step,
        grows=hint.grows, floor=accepted_min if accepted_min != drawn_min else None,
        floor_exclusive=hint.minimum is None and spec.min_exclusive,
        top_exclusive=hint.maximum is None and spec.max_exclusive,
        choices=spec.choices, row=hint.row, rule=hint.rule, describe=describe,
    )


def _rule_help(name: object) -> str:
    spec = RULES.get(str(name))
    return spec.help if spec is not None else ""


#: The app's own control: not a decoding setting, but the `/synthesize` parameter that asks for a fresh seed.
RANDOMIZE_SEED = Setting("randomize_seed", "Randomise seed", "bool", "checkbox", "sampling", row="seed",
                         in_config=False)

#: The Compare tab's controls in `/synthesize` parameter order (new ones go at the end, so
#: positional API callers keep working up to the voice prompt).
COMPARE_SETTINGS: tuple[Setting, ...] = (
    control_for(SETTINGS["draft_len"]),
    control_for(SETTINGS["beta"]),
    control_for(SETTINGS["acceptance"], describe=_rule_help),
    control_for(SETTINGS["topk_tolerance"]),
    control_for(SETTINGS["pcg_theta"]),
    control_for(SETTINGS["temperature"]),
    control_for(SETTINGS["top_k"]),
    control_for(SETTINGS["top_p"]),
    control_for(SETTINGS["seed"]),
    RANDOMIZE_SEED,
    control_for(SETTINGS["max_new_tokens"]),
    control_for(SETTINGS["adaptive_draft_len"]),
)

SETTINGS_BY_NAME: Mapping[str, Setting] = {s.name: s for s in COMPARE_SETTINGS}


def _as_float(name: str, value) -> float:
    if isinstance(value, bool):
        raise InvalidSettingError(f"{name} must be a number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InvalidSettingError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise InvalidSettingError(f"{name} must be a finite number, got {value!r}")
    return number


def _as_int(name: str, value) -> int:
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


@dataclass(frozen=True, init=False)
class Request:
    """Everything the user chose on the page (one click = one request).

    `settings` holds the Compare controls by name (`COMPARE_SETTINGS`); one left out or None takes
    the preset's default (`Synthesizer.config()`). Written as keywords:
    `Request(text="Hi.", preset="embedded", beta=0.2, seed=7)`.
    """

    text: str
    preset: str
    draft: str | None  # None or unknown: the preset's default draft
    voice_prompt: VoicePrompt | VoiceUpload | None  # a clip to imitate (backends that clone voices)
    owner: str | None  # the browser session: whose custom pairs this request may use
    settings: Mapping[str, object]

    def __init__(self, text: str, preset: str = "embedded", draft: str | None = None,
                 voice_prompt: VoicePrompt | VoiceUpload | None = None, owner: str | None = None,
                 **settings: object) -> None:
        unknown = sorted(set(settings) - set(SETTINGS_BY_NAME))
        if unknown:
            raise TypeError(f"unknown setting(s) {unknown}; the Compare settings are {', '.join(SETTINGS_BY_NAME)}")
        object.__setattr__(self, "text", text)
        object.__setattr__(self, "preset", preset)
        object.__setattr__(self, "draft", draft)
        object.__setattr__(self, "voice_prompt", voice_prompt)
        object.__setattr__(self, "owner", owner)
        object.__setattr__(self, "settings", {k: v for k, v in settings.items() if v is not None})

    def get(self, name: str) -> object | None:
        return self.settings.get(name)


#: A voice-prompt upload longer than this is refused from its header, before any decoding (backends
#: have their own, shorter limits; Llasa takes 0.5-10 s).
MAX_UPLOAD_SECONDS = 30.0


@dataclass(frozen=True)
class VoiceUpload:
    """A voice-prompt file as uploaded (a path Gradio saved) and its transcript; read only once the
    preset is known to take voice prompts, and only after its header passes the length check."""

    path: str
    transcript: str


def voice_upload(path: str | None, transcript: str | None) -> VoiceUpload | None:
    """The page's upload + transcript -> a VoiceUpload (None when no clip); checks they come together."""
    if not path:
        if transcript and transcript.strip():
            raise UserError("A voice-prompt transcript was given without a clip: upload the clip it belongs to.")
        return None
    if not transcript or not transcript.strip():
        raise UserError("A voice prompt needs its transcript: type exactly what is said in the clip.")
    return VoiceUpload(path=str(path), transcript=transcript.strip())


def read_voice_upload(upload: VoiceUpload, max_seconds: float = MAX_UPLOAD_SECONDS) -> VoicePrompt:
    """Read the clip, refusing one that is not audio or is too long from its header alone."""
    try:
        info = soundfile.info(upload.path)
    except (RuntimeError, OSError, ValueError):  # soundfile's LibsndfileError is a RuntimeError
        raise UserError("The voice prompt is not an audio file this app can read: upload a WAV, FLAC, OGG or MP3 "
                        "clip.") from None
    seconds = info.frames / info.samplerate if info.samplerate > 0 else float("inf")
    if not seconds <= max_seconds:
        raise UserError(f"The voice prompt is {seconds:.1f} s long; upload a clip of at most {max_seconds:g} s "
                        "(a few seconds of clear speech is best).")
    samples, rate = soundfile.read(upload.path, dtype="float32", always_2d=False)
    return voice_prompt_from_upload((rate, samples), upload.transcript)


def voice_prompt_from_upload(audio, transcript: str | None) -> VoicePrompt | None:
    """(sample_rate, samples) + its transcript -> a VoicePrompt (None when no clip)."""
    if audio is None:
        if transcript and transcript.strip():
            raise UserError("A voice-prompt transcript was given without a clip: upload the clip it belongs to.")
        return None
    rate, samples = audio
    if not transcript or not transcript.strip():
        raise UserError("A voice prompt needs its transcript: type exactly what is said in the clip.")
    samples = np.asarray(samples)
    if np.issubdtype(samples.dtype, np.integer):  # scale before averaging channels turns ints into floats
        samples = samples.astype(np.float32) / float(np.iinfo(samples.dtype).max + 1)
    if samples.ndim == 2:
        samples = samples.mean(axis=1)
    return VoicePrompt(audio=samples.astype(np.float32), sample_rate=int(rate), transcript=transcript.strip())


def resolve_voice_prompt(synthesizer: Synthesizer, voice: VoicePrompt | VoiceUpload | None) -> VoicePrompt | None:
    """The voice prompt to decode with: refused before reading when the preset speaks in its own voice."""
    if voice is None:
        return None
    if not getattr(synthesizer.backend, "supports_voice_prompt", False):
        raise UserError("This preset speaks in its own voice and takes no voice prompt: remove the clip, or choose "
                        "a preset that clones voices (Llasa, CosyVoice 2).")
    if isinstance(voice, VoiceUpload):
        limit = float(getattr(synthesizer.backend, "max_prompt_seconds", MAX_UPLOAD_SECONDS))
        return read_voice_upload(voice, max_seconds=min(limit, MAX_UPLOAD_SECONDS))
    return voice


def request_seed(synthesizer: Synthesizer, request: Request) -> int:
    """The seed this request runs with: its own, else the preset's, else a random one."""
    randomize = SETTINGS_BY_NAME["randomize_seed"].coerce(request.get("randomize_seed") or False)
    seed = request.get("seed")
    if seed is not None and not randomize:
        seed = SETTINGS_BY_NAME["seed"].coerce(seed)
    return resolve_seed(seed if seed is not None else synthesizer.config().seed, randomize)


def build_config(synthesizer: Synthesizer, request: Request, seed: int) -> DecodingConfig:
    """The preset's defaults with the user's choices on top; InvalidSettingError for bad values."""
    defaults = synthesizer.config()
    changes: dict[str, object] = {
        name: SETTINGS_BY_NAME[name].coerce(value, defaults)
        for name, value in request.settings.items()
        if SETTINGS_BY_NAME[name].in_config and name != "seed"
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
