"""The embedded voice's token layout, shared by training and inference.

One vocabulary for the target and both drafts: four specials, then the phoneme symbols
of `ssd_demo.text`, then the codec's speech tokens. A prompt is
[BOS] + phonemes + [SPEECH_START]; the model then writes speech tokens and END_OF_SPEECH.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class VocabLayout:
    n_phonemes: int
    n_speech: int
    pad_id: int = 0
    bos_id: int = 1
    speech_start_id: int = 2
    end_of_speech_id: int = 3
    phoneme_offset: int = 4

    @property
    def speech_offset(self) -> int:
        return self.phoneme_offset + self.n_phonemes

    @property
    def vocab_size(self) -> int:
        return self.speech_offset + self.n_speech

    def prompt(self, phoneme_indices: list[int]) -> list[int]:
        return [self.bos_id] + [self.phoneme_offset + i for i in phoneme_indices] + [self.speech_start_id]

    def speech_ids(self, codes) -> list[int]:
        return [self.speech_offset + int(c) for c in codes]

    def codes(self, token_ids) -> list[int]:
        """Speech token ids -> codec indices; the end token and anything after it is dropped."""
        out: list[int] = []
        for token in token_ids:
            token = int(token)
            if token == self.end_of_speech_id:
                break
            if self.speech_offset <= token < self.vocab_size:
                out.append(token - self.speech_offset)
        return out

    def allowed_ids(self) -> list[int]:
        return list(range(self.speech_offset, self.vocab_size)) + [self.end_of_speech_id]

    def to_dict(self) -> dict:
        data = asdict(self)
        data.update(speech_offset=self.speech_offset, vocab_size=self.vocab_size)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "VocabLayout":
        fields = ("n_phonemes", "n_speech", "pad_id", "bos_id", "speech_start_id", "end_of_speech_id", "phoneme_offset")
        return cls(**{k: int(data[k]) for k in fields})
