"""What one click asks for: the Compare tab's controls, their checks, the click's `Request`, and uploads.

`COMPARE_SETTINGS` lists the page's decoding controls in `/synthesize` parameter order. Each is made
from the setting's one definition in `ssd_demo.config.SETTINGS` (type, default, bounds, help, and the
`ControlHint` that says how to draw it and which part of the range the app accepts); the page builds
its components, the preset updates and the `/synthesize` parameters from the list, and the app's
`Request` (a `ssd_demo.comparison.Request` of these controls) has the library's `build_config` coerce
each value with them. Adding a control is one `ControlHint` in the config and one name here. A voice
prompt arrives as a `VoiceUpload`, read once the preset is known to take one.

Which bound is the API's: the app accepts from the hint's minimum (else the setting's) to the hint's
maximum (else the setting's), the range its controls can show; the library accepts its whole range.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import soundfile

from ... import comparison
from ...comparison.request import as_float, as_int
from ...config import MAX_SEED, SETTINGS, DecodingConfig, SettingSpec, resolve_seed  # noqa: F401 - re-exported
from ...errors import InvalidSettingError, UserError
from ...rules import RULES
from ...speech.synthesis import Synthesizer, VoicePrompt


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
            number = as_int(self.name, value) if self.kind == "int" else as_float(self.name, value)
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


def coerce_control(name: str, value: object, defaults: DecodingConfig | None = None) -> object:
    """The app's coercion of a request's settings: each control's own range (`Setting.coerce`)."""
    return SETTINGS_BY_NAME[name].coerce(value, defaults)


class Request(comparison.Request):
    """What one click asks for: a `ssd_demo.comparison.Request` of the Compare controls only
    (`COMPARE_SETTINGS`), each checked within the range its control accepts (`coerce_control`).
    Written as keywords: `Request(text="Hi.", preset="embedded", beta=0.2, seed=7)`; the voice prompt
    may be a `VoiceUpload`, read once the preset is known to take one."""

    def __init__(self, text: str, preset: str = "embedded", draft: str | None = None,
                 voice_prompt: VoicePrompt | VoiceUpload | None = None, owner: str | None = None,
                 **settings: object) -> None:
        unknown = sorted(set(settings) - set(SETTINGS_BY_NAME))
        if unknown:
            raise TypeError(f"unknown setting(s) {unknown}; the Compare settings are {', '.join(SETTINGS_BY_NAME)}")
        super().__init__(text, preset, draft, voice_prompt, owner, coercion=coerce_control, **settings)


#: A voice-prompt upload longer than this is refused from its header, before any decoding (backends
#: have their own, shorter limits; Llasa takes 0.5-10 s).
MAX_UPLOAD_SECONDS = 30.0


@dataclass(frozen=True)
class VoiceUpload:
    """A voice-prompt file as uploaded (a path Gradio saved) and its transcript; read only once the
    preset is known to take voice prompts, and only after its header passes the length check."""

    path: str
    transcript: str

    def read_for(self, synthesizer: Synthesizer) -> VoicePrompt:
        """The clip as a VoicePrompt, refused from its header when longer than the backend takes."""
        limit = float(getattr(synthesizer.backend, "max_prompt_seconds", MAX_UPLOAD_SECONDS))
        return read_voice_upload(self, max_seconds=min(limit, MAX_UPLOAD_SECONDS))


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
