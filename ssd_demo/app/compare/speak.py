"""The Compare tab's "Just speak it": a visitor's text spoken once, by the room's shared voice.

A race decodes a text twice, one race at a time; a room of phones that only wants to hear its sentences would wait
behind every race. This event hands the text to `comparison.speaking.SharedVoice`, where every visitor's text decodes
together, as many at once as `SPEAK_CONCURRENCY`, each client limited as a race is (`jobs.admit`). Its audio goes to
the race's own player in the browser (`race_js.PLAYER_JS`) as one lane, piece by piece as the codec decodes it, and
its status line says how many voices were speaking at once and in which mode. `speak_handler` returns the event's
generator; `SpokenAudio` is what the player is sent.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator

import gradio as gr

from .. import jobs
from ...comparison.speaking import Speech, shared_voice
from ...engine.cancellation import Cancelled
from ...speech.streaming import AudioPiece
from ..errors import to_gradio_error
from .race import piece_pcm_base64

#: Texts spoken at once: every visitor's decodes in one running batch (`engine.batching.MAX_ROWS` rows).
SPEAK_CONCURRENCY = 16
SPEAK_CONCURRENCY_ID = "speak"
#: The player's lane for a spoken text (the race's are "autoregressive" and "speculative").
SPEAK_LANE = "voice"
MODE_WORDS = {"ar": "autoregressive, in the shared batch", "speculative": "speculative, decoded on its own"}
STOPPED = "**Stopped.**"
#: The button starts the page's player in the click's own handler (a browser lets audio start only there), with the
#: click-to-sound clock the race uses; the page's race and speak buttons are disabled at once (one at a time per page:
#: the player plays one of them).
SPEAK_START_JS = """() => {
  for (const button of document.querySelectorAll('#ssd-run, .ssd-example, #ssd-speak')) { button.disabled = true; }
  window.ssdClick = performance.now();
  window.ssdPlayer && window.ssdPlayer.start();
  return [];
}"""


class SpokenAudio:
    """What one spoken text sends the page's player: its pieces numbered from 0 as 16-bit PCM, as the race's lanes
    are (`race_view.LiveAudio`), in one lane. A payload carries the pieces taken since the one before it and those
    of the one before that again (two updates that reach the page at once show only the last)."""

    def __init__(self, sample_rate: int) -> None:
        self.number = int(time.time() * 1000)  # the player starts over on a new number
        self.rate, self.sent = sample_rate, 0
        self.fresh: list[dict] = []
        self.previous: list[dict] = []

    def piece(self, piece: AudioPiece) -> None:
        if len(piece.audio):
            self.fresh.append({"lane": SPEAK_LANE, "index": self.sent, "pcm": piece_pcm_base64(piece)})
            self.sent += 1

    def payload(self, done: bool = False, stopped: bool = False) -> str:
        pieces, self.previous, self.fresh = self.previous + self.fresh, self.fresh, []
        lane = {"pieces": self.sent, "stopped": stopped, "tokens": 0, "done": done or stopped}
        return json.dumps({"race": self.number, "rate": self.rate, "lanes": {SPEAK_LANE: lane}, "pieces": pieces,
                           "replayed": False})


def company(speech: Speech) -> str:
    """The most other voices that shared the machine with this one so far."""
    others = speech.together - 1
    return "the only voice on this machine" if not others else \
        f"with up to {others} other voice{'s' if others > 1 else ''} at once"


def speaking_status(speech: Speech, first_audio: float | None) -> str:
    heard = "decoding" if first_audio is None else f"first audio after {first_audio:.2f} s"
    return f"**Speaking:** {heard} ({company(speech)}; {MODE_WORDS[speech.mode]})"


def spoken_status(speech: Speech, first_audio: float | None, seconds: float) -> str:
    result = speech.result
    audio = f"{result.duration_seconds:.1f} s of speech" if result is not None else "the speech"
    first = f", first audio after {first_audio:.2f} s" if first_audio is not None else ""
    return (f"**Decoded:** {audio} in {seconds:.2f} s{first} ({company(speech)}; {MODE_WORDS[speech.mode]}). "
            "Race both decoders to hear what speculative decoding changes.")


def speak_handler() -> Callable:
    """The event's generator: (text, preset) -> updates of (status line, the player's value)."""

    def speak(text: str, preset: str, request: gr.Request) -> Iterator[tuple]:
        try:
            jobs.admit(request, SPEAK_CONCURRENCY_ID)
            voice = shared_voice(preset)
            speech = voice.speak(text, should_stop=jobs.stop_check(request))
        except Exception as error:  # noqa: BLE001 - every refusal is the status line's one message
            yield f"**Not spoken:** {to_gradio_error(error).message}", gr.skip()
            return
        audio = SpokenAudio(voice.synthesizer.backend.sample_rate)
        started, first = time.perf_counter(), None
        yield speaking_status(speech, None), gr.skip()
        try:
            for piece in speech:
                first = time.perf_counter() - started if first is None else first
                audio.piece(piece)
                yield speaking_status(speech, first), audio.payload()
        except Cancelled:
            yield STOPPED, audio.payload(stopped=True)
            return
        except Exception as error:  # noqa: BLE001
            yield f"**Not spoken:** {to_gradio_error(error).message}", audio.payload(stopped=True)
            return
        finally:
            speech.close()
        yield spoken_status(speech, first, time.perf_counter() - started), audio.payload(done=True)

    return speak


__all__ = ["SPEAK_CONCURRENCY", "SPEAK_CONCURRENCY_ID", "SPEAK_START_JS", "SpokenAudio", "speak_handler"]
