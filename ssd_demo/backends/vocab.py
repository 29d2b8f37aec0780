"""The embedded voice's token layout and phoneme schedule, shared by training and inference.

One vocabulary for the target and both drafts: five specials, the phoneme symbols of
`ssd_demo.text`, then the codec's speech tokens. A sequence reads

    [BOS] p_1 ... p_N [SPEECH_START] p_1 s s s [NEXT] p_2 s s [NEXT] ... p_N s s [NEXT] [END]

The prompt states the whole text (p_1..p_N); the speech part repeats each phoneme right before the
frames that say it. The model writes only speech tokens and NEXT ("this phoneme is done"); the
phoneme after each NEXT, and END after the last one, are inserted by the decoder (a forced-token
schedule, `PhonemeSchedule`). So the model always knows which sound it is saying, and no word can
be skipped or made up: alignment comes from the format, not from attention learned on a small
corpus. The model decides every duration, so timing and rhythm are still its own.

With `lookahead` L > 0 each inserted phoneme comes with the L phonemes after it (BOS past the text's end):
with L = 2, "... [NEXT] p_2 p_3 p_4 s s [NEXT] p_3 p_4 p_5 ...", and the prompt ends with p_1 p_2 p_3. Why:
a code of the teacher's prior latent depends on the phoneme's neighbours (its text encoder reads context),
and a small target left to find them in the prompt by counting NEXTs loses its place once its own codes
stray: with the neighbours beside it, it says the words (docs/lab-notebook.md, "codes of the prior latent").
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..errors import ModelLoadError, TextError

#: A phoneme that has lasted this many frames (2.4 s at 50 frames/s) is ended by the decoder, so a
#: model stuck on one sound cannot run to the length limit. Longer than any phoneme or pause eSpeak
#: produces at the rates the voice was trained on.
MAX_PHONEME_FRAMES = 120


@dataclass(frozen=True)
class VocabLayout:
    n_phonemes: int
    n_speech: int
    pad_id: int = 0
    bos_id: int = 1
    speech_start_id: int = 2
    end_of_speech_id: int = 3
    next_phoneme_id: int = 4
    phoneme_offset: int = 5
    lookahead: int = 0  # phonemes inserted after the one being spoken (0 in voices made before it existed)
    #: Speech codes relative to the phoneme being spoken (its own codebook, `speech.latent_codec`): `SymbolCodes`
    symbol_codes: bool = False

    @property
    def speech_offset(self) -> int:
        return self.phoneme_offset + self.n_phonemes

    @property
    def vocab_size(self) -> int:
        return self.speech_offset + self.n_speech

    def phoneme_ids(self, symbols: list[int]) -> list[int]:
        return [self.phoneme_offset + int(s) for s in symbols]

    def spoken(self, ids: list[int], index: int) -> list[int]:
        """What is inserted for phoneme `index` of the token ids `ids`: it and the `lookahead` after it."""
        return [ids[index], *(ids[j] if j < len(ids) else self.bos_id for j in range(index + 1, index + 1 + self.lookahead))]

    def prompt(self, symbols: list[int]) -> list[int]:
        """[BOS] phonemes [SPEECH_START] first phoneme (and its lookahead): everything before the first
        generated token."""
        if not symbols:
            raise TextError("a prompt needs at least one phoneme")
        ids = self.phoneme_ids(symbols)
        return [self.bos_id, *ids, self.speech_start_id, *self.spoken(ids, 0)]

    def stream(self, symbols: list[int], frames: list[list[int]]) -> list[int]:
        """The generated part for training: each phoneme's speech codes, NEXT, the next phoneme...

        `frames[i]` holds the codec codes of phoneme i. The first phoneme is not repeated (it ends the
        prompt); the stream ends with NEXT, END.
        """
        ids = self.phoneme_ids(symbols)
        out: list[int] = []
        for i, codes in enumerate(frames):
            out += self.speech_ids(codes)
            out.append(self.next_phoneme_id)
            out += self.spoken(ids, i + 1) if i + 1 < len(ids) else [self.end_of_speech_id]
        return out

    def speech_ids(self, codes) -> list[int]:
        return [self.speech_offset + int(c) for c in codes]

    def codes(self, token_ids) -> list[int]:
        """Generated ids -> codec indices: speech tokens kept, markers skipped, END stops."""
        out: list[int] = []
        for token in token_ids:
            token = int(token)
            if token == self.end_of_speech_id:
                break
            if self.speech_offset <= token < self.vocab_size:
                out.append(token - self.speech_offset)
        return out

    def first_symbol(self, prompt: list[int]) -> int:
        """The symbol a prompt's speech starts with (the one after SPEECH_START)."""
        return int(prompt[prompt.index(self.speech_start_id) + 1]) - self.phoneme_offset

    def allowed_ids(self) -> list[int]:
        """What the model may sample: speech tokens and NEXT (phonemes and END are inserted)."""
        return list(range(self.speech_offset, self.vocab_size)) + [self.next_phoneme_id]

    def schedule(self, symbols: list[int], max_frames: int = MAX_PHONEME_FRAMES,
                 first_max_frames: int | None = None) -> "PhonemeSchedule":
        ids = self.phoneme_ids(symbols)
        return PhonemeSchedule(tuple(ids), self.next_phoneme_id, self.end_of_speech_id, self.speech_offset, max_frames,
                               tuple(tuple(self.spoken(ids, i)) for i in range(len(ids))),
                               first_max_frames or max_frames)

    def to_dict(self) -> dict:
        data = asdict(self)
        data.update(speech_offset=self.speech_offset, vocab_size=self.vocab_size)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "VocabLayout":
        fields = ("n_phonemes", "n_speech", "pad_id", "bos_id", "speech_start_id", "end_of_speech_id",
                  "next_phoneme_id", "phoneme_offset")
        missing = [k for k in fields if k not in data]
        if missing:
            raise ModelLoadError(f"voice layout lacks {missing}: it was made by an older version; retrain or update it")
        lookahead = int(data.get("lookahead", 0))
        if lookahead < 0:
            raise ModelLoadError(f"voice layout has a negative lookahead ({lookahead})")
        return cls(**{k: int(data[k]) for k in fields}, lookahead=lookahead,
                   symbol_codes=bool(data.get("symbol_codes", False)))


class SymbolCodes:
    """Generated ids -> rows of a symbol-relative codebook (`symbol * n_speech + code`), id by id: a stream's
    pieces may be given one call at a time. The symbol is the prompt's first, then the first phoneme inserted after
    each NEXT (its lookahead after it is skipped); END stops."""

    def __init__(self, layout: VocabLayout, first_symbol: int) -> None:
        self.layout, self.symbol = layout, first_symbol
        self.expecting = False  # after NEXT: the next phoneme id is the symbol now spoken
        self.ended = False

    def __call__(self, token_ids) -> list[int]:
        layout, out = self.layout, []
        for token in token_ids:
            token = int(token)
            if self.ended or token == layout.end_of_speech_id:
                self.ended = True
                break
            if token == layout.next_phoneme_id:
                self.expecting = True
            elif layout.phoneme_offset <= token < layout.speech_offset and self.expecting:
                self.symbol, self.expecting = token - layout.phoneme_offset, False
            elif layout.speech_offset <= token < layout.vocab_size:
                out.append(self.symbol * layout.n_speech + token - layout.speech_offset)
        return out


@dataclass(frozen=True)
class PhonemeSchedule:
    """The forced-token schedule of one chunk (see `ssd_demo.engine.run_state.ForcedTokens`).

    State: (index of the phoneme being spoken, frames spoken for it). After NEXT the next phoneme (with its
    lookahead) is inserted, or END after the last; a phoneme reaching `max_frames` frames gets NEXT inserted too,
    the chunk's first one at `first_max_frames` (it carries the opening pause, where a stuck target holds silence).
    """

    phonemes: tuple[int, ...]
    next_id: int
    end_id: int
    speech_offset: int
    max_frames: int
    inserted: tuple[tuple[int, ...], ...]  # per phoneme: what follows NEXT (it and its lookahead)
    first_max_frames: int | None = None  # the first phoneme's own cap (None: max_frames)

    def initial_state(self) -> tuple[int, int]:
        return (0, 0)

    def _next(self, index: int) -> tuple[tuple[int, int], tuple[int, ...]]:
        if index + 1 < len(self.phonemes):
            return (index + 1, 0), self.inserted[index + 1]
        return (len(self.phonemes), 0), (self.end_id,)

    def advance(self, state: tuple[int, int], token: int) -> tuple[tuple[int, int], tuple[int, ...]]:
        index, frames = state
        if token == self.next_id:
            return self._next(index)
        if token >= self.speech_offset:
            cap = self.first_max_frames if index == 0 and self.first_max_frames else self.max_frames
            if frames + 1 >= cap:
                new_state, forced = self._next(index)
                return new_state, (self.next_id, *forced)
            return (index, frames + 1), ()
        return state, ()
