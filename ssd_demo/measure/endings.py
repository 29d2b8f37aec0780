"""Endings cut at full loudness: a clip whose sound stops while still loud, where speech fades out.

A voice that ends a word before its natural fade (the embedded voice's end of speech comes with the phoneme-end
marker on the text's last symbol) stops mid-vowel: "No." ending at full loudness after 0.3 s where its teacher
speaks 0.5 s and fades. The measure, from the audio alone:

- the clip in frames of `FRAME_MS`, each frame's RMS; the loudest frame's RMS is the reference;
- the sound ends with the last frame above `SILENCE_SHARE` of that reference (what follows is silence or the
  decoder's faint noise floor, and does not count as sound);
- the ending is the last `TAIL_MS` of sound; it is *cut* when its RMS is above `CUT_SHARE` (a third) of the
  loudest frame's.

A natural ending decays over tens of milliseconds, so its last 30 ms of sound are far below a third of the peak
(the teacher's endings: 2-5 %); a tone, a vowel or a fricative stopped at full level keeps its level to the end.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FRAME_MS = 10
TAIL_MS = 30
#: Sound ends with the last frame above this share of the loudest frame's RMS (-40 dB).
SILENCE_SHARE = 0.01
#: An ending whose last `TAIL_MS` of sound are louder than this share of the loudest frame's RMS is cut.
CUT_SHARE = 1 / 3


@dataclass(frozen=True)
class Ending:
    """How a clip ends: the RMS of its last `TAIL_MS` of sound over its loudest frame's, and whether it is cut."""

    tail_level: float
    sound_seconds: float  # where the sound ends (silence after it not counted)

    @property
    def cut(self) -> bool:
        return self.tail_level > CUT_SHARE


def ending(audio: np.ndarray, sample_rate: int) -> Ending:
    """How `audio` ends (see the module); a silent or empty clip has no ending to cut (level 0)."""
    samples = np.asarray(audio, dtype=np.float64).reshape(-1)
    frame = max(1, int(round(sample_rate * FRAME_MS / 1000)))
    count = -(-len(samples) // frame)  # the last, partial frame counts: a clip may stop mid-frame
    if count == 0:
        return Ending(0.0, 0.0)
    padded = np.zeros(count * frame)
    padded[: len(samples)] = samples
    sizes = np.full(count, frame)
    sizes[-1] = len(samples) - frame * (count - 1)
    rms = np.sqrt((padded.reshape(count, frame) ** 2).sum(axis=1) / sizes)
    loudest = float(rms.max())
    if loudest <= 0:
        return Ending(0.0, 0.0)
    end = min(len(samples), (int(np.flatnonzero(rms > SILENCE_SHARE * loudest)[-1]) + 1) * frame)
    tail = samples[max(0, end - int(round(sample_rate * TAIL_MS / 1000))) : end]
    return Ending(float(np.sqrt(np.mean(tail ** 2)) / loudest), end / sample_rate)


def cut_share(flags: list[bool]) -> float:
    """The share of clips whose ending is cut (nan for none)."""
    return sum(bool(f) for f in flags) / len(flags) if flags else float("nan")
