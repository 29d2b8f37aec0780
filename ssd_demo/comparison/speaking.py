"""One voice for a room: visitors who only want to hear their text, spoken together.

A race decodes one text twice, in worker processes, one race at a time; a room of phones that only wants to hear
its sentences would wait behind every race. `SharedVoice` speaks many texts at once with the preset's default
settings: every autoregressive chunk decodes in one running batch over the voice's target
(`speech.chunk_generator.BatchingEngines`), and each text's codec windows are decoded as its codes come
(`Synthesizer.stream`), so a voice joining the room starts within one batch step and its first audio waits for one
codec window. Each text decodes in mode "auto": speculative while speculation pays for the number of voices
speaking then (measured once, in the background, when the first text is spoken; until then speculative only
alone), else in the batch. A seeded text gives the same tokens alone or among others.

The shared voice is its own copy of the preset's models (`shared_voice`), so a race decoding in this process
and the batch never share a model's state; only presets whose target the batch runs, small enough to load once
more, have one (`why_no_shared_voice` says why not). No Gradio here.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from ..engine.batched_forward import batches
from ..engine.batching import MAX_ROWS
from ..engine.cancellation import StopCheck
from ..errors import InputError
from ..backends.registry import get_preset, list_presets
from ..speech.chunk_generator import BatchingEngines
from ..speech.streaming import AudioPiece
from ..speech.synthesis import SynthesisResult, Synthesizer
from .lanes import MAX_RACE_PARAMETERS
from .models import preferred_device
from .request import check_text


class Speech:
    """One text being spoken: iterate for its `AudioPiece`s as they are decoded. `mode` is how it decodes ("ar":
    in the batch, or "speculative": on its own, decided as it starts), `together` the most texts speaking at once
    while it was (itself included; as of its last piece); `result` is the whole `SynthesisResult` once the last piece came. `close()` stops it (the listener
    left) and gives its place back; so does the end of the iteration."""

    def __init__(self, voice: "SharedVoice", text: str, mode: str, together: int, seed: int | None,
                 should_stop: StopCheck | None) -> None:
        self.mode, self.together = mode, together
        self._voice = voice
        self._stream = voice.synthesizer.stream(text, mode, voice.synthesizer.config(seed=seed),
                                                should_stop=should_stop)
        self._left = False
        self.result: SynthesisResult | None = None

    def __iter__(self) -> Iterator[AudioPiece]:
        try:
            for piece in self._stream:
                self.together = max(self.together, self._voice.speaking)
                yield piece
            self.result = self._stream.result
        finally:
            self.close()

    def close(self) -> None:
        if not self._left:
            self._left = True
            self._stream.close()
            self._voice._leave()


class SharedVoice:
    """A synthesizer whose texts decode together (see the module's docstring). `synthesizer` is handed over: its
    chunk generator becomes a `BatchingEngines` of `max_rows` rows. `measure`: measure where speculation pays when
    the first text is spoken (else speculative only alone)."""

    def __init__(self, synthesizer: Synthesizer, max_rows: int = MAX_ROWS, measure: bool = True) -> None:
        if not batches(synthesizer.target):
            raise InputError("this voice's target does not run in the batch: it cannot speak to a room at once")
        synthesizer.chunk_generator = BatchingEngines(max_rows=max_rows)
        self.synthesizer = synthesizer
        self._speaking = 0
        self._lock = threading.Lock()
        self._measure = measure
        self._measuring: threading.Thread | None = None

    @property
    def speaking(self) -> int:
        """Texts being spoken now."""
        with self._lock:
            return self._speaking

    def speak(self, text: object, seed: int | None = None, should_stop: StopCheck | None = None) -> Speech:
        """Start speaking `text` (checked here: a `UserError` says what is wrong) with the voice's defaults and
        `seed` (None: a fresh one), in the mode that pays with the texts speaking now and this one."""
        text = check_text(self.synthesizer, text)
        self._measure_in_background()
        with self._lock:
            self._speaking += 1
            together = self._speaking
        try:
            mode = "speculative" if self.synthesizer.speculation_pays(together) else "ar"
            return Speech(self, text, mode, together, seed, should_stop)
        except BaseException:
            self._leave()
            raise

    def get_ready(self) -> None:
        """Warm up and measure where speculation pays now, as the first text would start doing in the background
        (the app's start-up job calls this, so that the first visitors neither wait for it nor share the CPU
        with it)."""
        self._measure_in_background(force=True)
        assert self._measuring is not None
        self._measuring.join()

    def _leave(self) -> None:
        with self._lock:
            self._speaking -= 1

    def _measure_in_background(self, force: bool = False) -> None:
        """Where speculation pays on this machine, measured once (a few seconds, beside the first texts)."""
        with self._lock:
            if self._measuring is not None or not (self._measure or force):
                return
            # Not a daemon: an interpreter that ends while the thread is inside ONNX Runtime aborts the process.
            self._measuring = threading.Thread(target=self.synthesizer.measure_speculation, name="shared-voice-costs")
        self._measuring.start()


_voices: dict[str, SharedVoice] = {}
_refused: dict[str, str] = {}  # preset -> why its models cannot speak to a room (found when first loaded)
_voices_lock = threading.Lock()


def speaking_now() -> int:
    """Texts the shared voices are speaking now (a race timed meanwhile shares the CPU with them: it says so)."""
    with _voices_lock:
        voices = list(_voices.values())
    return sum(voice.speaking for voice in voices)


def why_no_shared_voice(preset_key: str) -> str:
    """"" when `preset_key` can speak to a room at once (`shared_voice`), else why not, for the page."""
    try:
        preset = get_preset(preset_key)
    except KeyError:  # a custom pair is one session's, and races only
        return (f"unknown preset {preset_key!r}: the voices that speak to many listeners at once are "
                f"{', '.join(room_voices())}")
    if preset.needs_download or preset.owner is not None:  # a Hub model: too large to load once more on a Space
        return (f"{preset.label} speaks in races only; the embedded voice speaks to many listeners at once "
                "(choose it in Model preset)")
    return ""


def room_voices() -> list[str]:
    """The presets that may have a shared voice: the shipped ones that need no download."""
    return [preset.key for preset in list_presets() if not preset.needs_download and preset.owner is None]


def shared_voice(preset_key: str) -> SharedVoice:
    """The preset's shared voice, loaded (its own copy of the models) on first use and kept; an `InputError` names
    why a preset has none."""
    reason = why_no_shared_voice(preset_key)
    if reason:
        raise InputError(reason)
    with _voices_lock:
        if preset_key in _refused:
            raise InputError(_refused[preset_key])
        voice = _voices.get(preset_key)
        if voice is None:
            synthesizer = get_preset(preset_key).loader(preferred_device())
            try:
                if sum(p.numel() for p in synthesizer.target.parameters()) > MAX_RACE_PARAMETERS:
                    raise InputError(f"{preset_key}'s target is too large to load once more for the room")
                voice = _voices[preset_key] = SharedVoice(synthesizer)  # InputError where the batch cannot run it
            except InputError as error:  # said once, not found out again by loading the models for every text
                _refused[preset_key] = str(error)
                raise
        return voice


__all__ = ["SharedVoice", "Speech", "room_voices", "shared_voice", "speaking_now", "why_no_shared_voice"]
