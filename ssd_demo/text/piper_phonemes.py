"""Text -> the phoneme symbols of a Piper voice (eSpeak NG's IPA, one Unicode code point a symbol).

The embedded voice speaks the phonemes its teacher (a Piper voice) was trained on, read by the same
phonemizer: piper-tts's bundled eSpeak NG (`piper.phonemize_espeak.EspeakPhonemizer`), its code points
decomposed (NFD) so a stress mark or a length mark is a symbol of its own, punctuation kept. Sentences
are joined with a space, as the corpus was rendered. Symbols the voice's table lacks are dropped, as
Piper itself drops them.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from ..errors import TextError

_LOCK = threading.Lock()  # eSpeak NG's library keeps global state: one caller at a time
_PHONEMIZER = None


def _espeak():
    global _PHONEMIZER
    if _PHONEMIZER is None:
        from piper.phonemize_espeak import EspeakPhonemizer  # deferred: loads eSpeak NG's data

        _PHONEMIZER = EspeakPhonemizer()
    return _PHONEMIZER


@dataclass(frozen=True)
class PiperPhonemes:
    """A voice's phonemizer: eSpeak NG voice name and symbol -> id table (from the voice's config)."""

    espeak_voice: str
    id_map: dict[str, int] = field(repr=False)

    @property
    def n_symbols(self) -> int:
        return max(self.id_map.values()) + 1

    def symbols(self, text: str) -> list[str]:
        """The symbols the voice says for `text` (sentences joined by a space)."""
        with _LOCK:
            sentences = _espeak().phonemize(self.espeak_voice, text)
        out: list[str] = []
        for sentence in sentences:
            kept = [s for s in sentence if s in self.id_map]
            if kept:
                if out:
                    out.append(" ")
                out.extend(kept)
        return out

    def ids(self, text: str) -> list[int]:
        """Symbol ids for `text`; TextError when nothing in it can be said."""
        ids = [self.id_map[s] for s in self.symbols(text)]
        if not any(s.strip() for s in self.symbols_of(ids)):
            raise TextError(f"nothing in {text[:40]!r} can be spoken")
        return ids

    def count(self, text: str) -> int:
        """How many symbols `text` takes (the chunk budget's unit)."""
        return len(self.symbols(text))

    def symbols_of(self, ids: list[int]) -> list[str]:
        inverse = self.inverse
        return [inverse.get(int(i), "?") for i in ids]

    def label(self, symbol: int) -> str:
        return self.inverse.get(int(symbol), "?")

    @property
    def inverse(self) -> dict[int, str]:
        return {v: k for k, v in self.id_map.items()}

    @classmethod
    def from_piper_config(cls, config: dict) -> "PiperPhonemes":
        """From a Piper voice config (`*.onnx.json`): its eSpeak voice and phoneme_id_map (first id of each)."""
        table = {symbol: int(ids[0]) for symbol, ids in config["phoneme_id_map"].items()}
        return cls(config["espeak"]["voice"], table)

    def to_dict(self) -> dict:
        return {"espeak_voice": self.espeak_voice, "id_map": self.id_map}

    @classmethod
    def from_dict(cls, data: dict) -> "PiperPhonemes":
        return cls(str(data["espeak_voice"]), {str(k): int(v) for k, v in data["id_map"].items()})
