"""eSpeak NG through its C library: speech and timed phonemes in one call, no system package.

The `espeakng-loader` wheel bundles libespeak-ng and its voice data. We call the library with
ctypes rather than through `phonemizer` (which splits text at punctuation before eSpeak reads it
and copies the library into a temporary folder per process) because one synthesis call gives
both the audio and a phoneme event per sound with its start time in milliseconds. The embedded
voice is trained on exactly those phonemes and durations, and at inference the same call (audio
discarded) gives the phonemes, so training and inference can never disagree about them.

The library keeps global state and is not re-entrant: every call holds one process-wide lock.
"""

from __future__ import annotations

import ctypes
import functools
import math
import threading
from dataclasses import dataclass

import numpy as np
from ..errors import InputError

SAMPLE_RATE = 16_000
DEFAULT_VOICE = "en-us"

# speak_lib.h constants
_AUDIO_OUTPUT_SYNCHRONOUS = 2
_INITIALIZE_PHONEME_EVENTS = 0x0001
_INITIALIZE_PHONEME_IPA = 0x0002
_CHARS_UTF8 = 1
_EVENT_LIST_TERMINATED = 0
_EVENT_WORD = 1
_EVENT_PHONEME = 7
_PARAM_RATE = 1
_PARAM_PITCH = 3
_PARAM_RANGE = 4


class _EventId(ctypes.Union):
    _fields_ = [("number", ctypes.c_int), ("name", ctypes.c_char_p), ("string", ctypes.c_char * 8)]


class _Event(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int),
        ("unique_identifier", ctypes.c_uint),
        ("text_position", ctypes.c_int),
        ("length", ctypes.c_int),
        ("audio_position", ctypes.c_int),
        ("sample", ctypes.c_int),
        ("user_data", ctypes.c_void_p),
        ("id", _EventId),
    ]


_Callback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.POINTER(_Event))


@dataclass(frozen=True)
class PhonemeEvent:
    """One sound as eSpeak NG plans it: IPA (stress marks included; "" for a pause), start in ms,
    and the 1-based character position in the text it belongs to."""

    ipa: str
    start_ms: int
    text_position: int


@dataclass
class Rendering:
    audio: np.ndarray  # float32 mono at SAMPLE_RATE
    events: list[PhonemeEvent]
    duration_ms: int  # length of the audio eSpeak produced (events are relative to its start)


class _Library:
    def __init__(self) -> None:
        import espeakng_loader  # deferred: only the embedded voice and training need eSpeak

        self.lib = ctypes.CDLL(espeakng_loader.get_library_path())
        data = espeakng_loader.get_data_path().encode()
        self.rate = self.lib.espeak_Initialize(
            _AUDIO_OUTPUT_SYNCHRONOUS, 0, data, _INITIALIZE_PHONEME_EVENTS | _INITIALIZE_PHONEME_IPA
        )
        if self.rate <= 0:
            raise RuntimeError("eSpeak NG failed to initialise (bundled data not found)")
        self.lock = threading.Lock()
        self._chunks: list[np.ndarray] = []
        self._events: list[PhonemeEvent] = []
        self._keep_audio = True
        self._samples = 0
        self._callback = _Callback(self._on_synth)  # keep a reference: the library holds a raw pointer
        self.lib.espeak_SetSynthCallback(self._callback)

    def _on_synth(self, wav, n_samples, events) -> int:
        if n_samples > 0:
            self._samples += n_samples
            if self._keep_audio:
                self._chunks.append(np.ctypeslib.as_array(wav, shape=(n_samples,)).copy())
        i = 0
        while events[i].type != _EVENT_LIST_TERMINATED:
            event = events[i]
            if event.type == _EVENT_PHONEME:
                ipa = event.id.string.decode("utf-8", errors="replace")
                self._events.append(PhonemeEvent(ipa, int(event.audio_position), int(event.text_position)))
            i += 1
        return 0

    def synthesize(self, text: str, voice: str, rate_wpm: int, pitch: int, keep_audio: bool) -> Rendering:
        data = text.encode("utf-8")
        with self.lock:
            if self.lib.espeak_SetVoiceByName(voice.encode()) != 0:
                raise InputError(f"eSpeak NG has no voice {voice!r}")
            self.lib.espeak_SetParameter(_PARAM_RATE, int(rate_wpm), 0)
            self.lib.espeak_SetParameter(_PARAM_PITCH, int(pitch), 0)
            self._chunks, self._events, self._keep_audio, self._samples = [], [], keep_audio, 0
            self.lib.espeak_Synth(ctypes.c_char_p(data), len(data) + 1, 0, 0, 0, _CHARS_UTF8, None, None)
            self.lib.espeak_Synchronize()
            chunks, events, samples = self._chunks, self._events, self._samples
            self._chunks, self._events = [], []
        raw = np.concatenate(chunks).astype(np.float32) / 32768.0 if chunks else np.zeros(0, np.float32)
        return Rendering(_resample(raw, self.rate), events, int(round(samples * 1000 / self.rate)))


def _resample(audio: np.ndarray, rate: int) -> np.ndarray:
    if rate == SAMPLE_RATE or audio.size == 0:
        return audio
    gcd = math.gcd(rate, SAMPLE_RATE)
    # deferred: scipy.signal takes 0.3-0.5 s to import, and reading text never resamples audio
    from scipy.signal import resample_poly  # exact rational ratio, far cheaper than a sinc resampler

    return resample_poly(audio, SAMPLE_RATE // gcd, rate // gcd).astype(np.float32)


@functools.lru_cache(maxsize=1)
def _library() -> _Library:
    return _Library()


def synthesize(text: str, voice: str = DEFAULT_VOICE, rate_wpm: int = 175, pitch: int = 50) -> Rendering:
    """Speech at 16 kHz and the timed phoneme events of `text` (default voice: en-us, 175 wpm)."""
    return _library().synthesize(text, voice, rate_wpm, pitch, keep_audio=True)


def phoneme_events(text: str, voice: str = DEFAULT_VOICE, rate_wpm: int = 175, pitch: int = 50) -> list[PhonemeEvent]:
    """The timed phoneme events only (the audio is generated by eSpeak and discarded)."""
    return _library().synthesize(text, voice, rate_wpm, pitch, keep_audio=False).events


__all__ = ["DEFAULT_VOICE", "PhonemeEvent", "Rendering", "SAMPLE_RATE", "phoneme_events", "synthesize"]
