"""What one click asks for: the Compare tab's controls, and voice-prompt uploads.

`COMPARE_SETTINGS` lists the page's decoding controls in `/synthesize` parameter order: the settings'
own definitions (`ssd_demo.config.SETTINGS`: type, default, bounds, help, and the `ControlHint` that
says how to draw it and which part of the range the app accepts). The page builds its components, the
preset updates and the `/synthesize` parameters from the list; a click is the library's
`ssd_demo.comparison.Request` with `within_controls=True`, whose settings the one validator
(`SettingSpec.accept`) checks within the controls' ranges. Adding a control is one `ControlHint` in the
config and one name here. A voice prompt arrives as a `VoiceUpload`, read once the preset is known to
take one.

Which bound is the API's: the app accepts from the hint's minimum (else the setting's) to the hint's
maximum (else the setting's), the range its controls can show; the library accepts its whole range.
The functions below only say how a control looks (its default, drawn range, help, visibility).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import soundfile

from ...comparison import Request  # noqa: F401 - a click's request, named here for the app's modules
from ...config import (MAX_SEED, RANDOMIZE_SEED, SETTINGS, TEXT_NORMALIZER, DecodingConfig, SettingSpec,  # noqa: F401
                        resolve_seed)
from ...errors import UserError
from ...rules import RULES
from ...speech.synthesis import Synthesizer, VoicePrompt

#: The Compare tab's controls in `/synthesize` parameter order (new ones go at the end, so
#: positional API callers keep working up to the voice prompt).
COMPARE_SETTINGS: tuple[SettingSpec, ...] = (
    *(SETTINGS[name] for name in ("draft_len", "beta", "acceptance", "topk_tolerance", "pcg_theta", "temperature",
                                  "top_k", "top_p", "seed")),
    RANDOMIZE_SEED,
    SETTINGS["max_new_tokens"],
    SETTINGS["adaptive_draft_len"],
    TEXT_NORMALIZER,
)

SETTINGS_BY_NAME: Mapping[str, SettingSpec] = {s.name: s for s in COMPARE_SETTINGS}


def is_decoding_setting(setting: SettingSpec) -> bool:
    """A `DecodingConfig` field (which a preset sets), not a request's own switch (randomize_seed, text_normalizer)."""
    return setting.name in SETTINGS


def control_value(setting: SettingSpec, config: DecodingConfig) -> object:
    """What the control shows for a preset whose defaults are `config` (a seed of None shows as 0)."""
    if not is_decoding_setting(setting):
        return setting.default
    value = getattr(config, setting.name)
    return 0 if setting.name == "seed" and value is None else value


def control_range(setting: SettingSpec, config: DecodingConfig) -> tuple[float | None, float | None]:
    """The control's drawn (minimum, maximum) for this preset: the range it accepts, a slider drawn from
    its `slider_minimum` when that is higher."""
    low, high, _, _ = setting.bounds(controls=True, defaults=config)
    hint = setting.control
    if hint is not None and hint.slider_minimum is not None:
        low = hint.slider_minimum
    return low, high


def control_info(setting: SettingSpec, value: object) -> str:
    """The control's help for its current value: the acceptance rule's own help, else the hint's text."""
    if setting.name == "acceptance":
        spec = RULES.get(str(value))
        return spec.help if spec is not None else ""
    hint = setting.control
    return hint.info if hint is not None and hint.info is not None else setting.help


def control_visible(setting: SettingSpec, acceptance: str) -> bool:
    """Shown while `acceptance` is the chosen rule (a rule's own parameter), or always."""
    rule = setting.control.rule if setting.control is not None else None
    return rule is None or rule == acceptance


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
        limit = synthesizer.backend.max_prompt_seconds or MAX_UPLOAD_SECONDS  # None: the upload cap alone
        return read_voice_upload(self, max_seconds=min(float(limit), MAX_UPLOAD_SECONDS))


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
