"""The embedded offline voice: a small codec-token TTS shipped in assets/embedded.

The voice was taught by a natural voice (Piper's en_US-joe-medium, a VITS model; `training.teacher`): a token
is the nearest of its k-means centroids of the teacher's latent frames (about 86 a second), and audio comes from
the teacher's decoder cut out of its graph (`speech.latent_codec`). Text is read by the teacher's own phonemizer
(`text.piper_phonemes`) in chunks of at most `CHUNK_SYMBOLS` symbols; audio streams window by window. (The
earlier eSpeak NG voice, k-means codes of log-mels turned back into audio by Griffin-Lim, shipped until
2026-12-05; its folders no longer load: voice.json without "phonemes" is refused with what to do.)
Each chunk's prompt is [BOS] + symbols + [SPEECH_START] + first symbol (with the `lookahead` symbols
after it, two in the shipped voice); the LM writes speech tokens and NEXT markers, and the decoder inserts the
next symbol (likewise with those after it) after each NEXT and END after the last
(`vocab.PhonemeSchedule`), so every phoneme of the text is spoken. Chunks are joined with pauses set by their
punctuation. Target: a 12-layer Llama; drafts: "distilled" (a one-layer model trained with KL to the target),
"layers" (the target's bottom layer + top two layers, the SSD paper's construction) and "heads"
(`draft_heads.DraftHeads` on the target's hidden state: no draft model, one target call per round).
Everything loads offline on a CPU.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from ..config import DecodingConfig
from ..engine.draft_heads import DraftHeads, check_fits
from ..errors import InputError, ModelLoadError, TextError
from ..models.assets import asset_path, where_to_find
from ..models.plain_llama import load_causal_lm
from ..speech.backend import Backend
from ..speech.latent_codec import LatentCodec
from ..speech.streaming import CodecWindows, WindowCodec
from ..speech.synthesis import Synthesizer, TextChunk, VoicePrompt
from .. import text as text_frontend
from ..text.piper_phonemes import PiperPhonemes
from .lead_in import LeadIn, LeadInCut
from .vocab import PhonemeSchedule, SymbolCodes, VocabLayout


def default_path() -> Path:
    """Where the shipped voice lives: assets/embedded at the repository root, or under $SSD_DEMO_ASSETS."""
    return asset_path("embedded")


#: The shipped voice's folder as found at import (`default_path()` reads SSD_DEMO_ASSETS on each call).
DEFAULT_PATH = default_path()
DRAFT_FOLDERS = {"distilled": "draft_distilled", "layers": "draft_layers", "heads": "draft_heads"}
META_NAME = "voice.json"
#: Phoneme symbols per chunk: about 5 s of speech, about 700 tokens (frames, NEXT markers, inserted symbols),
#: well inside the target's 1,280 positions; the corpus was rendered in chunks of this budget.
CHUNK_SYMBOLS = 110
#: A symbol that has lasted this many frames (2.3 s) is ended by the decoder, so a model stuck on one
#: sound cannot run to the length limit. The default for voice.json files that name no cap: voices
#: assembled now carry their corpus's own (`training.dataset.phoneme_caps`, 66 frames = 0.77 s), and one for
#: a chunk's first phoneme, which carries the opening pause (voice.json "max_opening_frames", 21 frames = 0.24 s).
MAX_SYMBOL_FRAMES = 200

# Decoding defaults: see docs/benchmarks.md, "Embedded voice evaluation" (measured on held-out everyday
# sentences with Whisper tiny.en WER and DNSMOS). cost_ratio: c of the distilled draft, for adaptive K.
DEFAULT_CONFIG = DecodingConfig(temperature=0.3, top_k=50, top_p=1.0, draft_len=4, beta=0.2, max_new_tokens=1500,
                                cost_ratio=0.14)


class EmbeddedBackend(Backend):
    """Text <-> token ids <-> audio for the embedded voice."""

    name = "embedded"
    #: The weights' licence.
    LICENCE = ("Apache-2.0 (weights trained by this project on speech rendered by Piper's en_US-joe-medium voice, "
               "dataset CC0; its decoder is the codec's)")
    max_text_chars = text_frontend.MAX_TEXT_CHARS
    #: In-chunk streaming: 0.5 s windows decoded with 0.25 s of context before and 0.1 s after; codes of the
    #: prior latent pass the flow too, whose convolutions see further: 0.37 s before and 0.19 s after (a real
    #: utterance's windows then differ from its whole decode by 53 dB SNR; with the shorter ones, 20 dB).
    #: Windows grow from 0.5 s to 2 s by a quarter of the audio before them: the first audio waits for 0.5 s of
    #: codes, later windows decode their context and lookahead less often (with 0.5 s windows the codec did about
    #: twice a whole decode's work), and streams that share the CPU at 1.25x real time or more still play without
    #: gaps (growing by half, 4 streams at once at 1.2x stalled 12-22 of 32: docs/lab-notebook.md).
    windows = CodecWindows(window=43, context=21, lookahead=9, crossfade=256, max_window=172, growth=0.25)
    prior_windows = CodecWindows(window=43, context=32, lookahead=16, crossfade=256, max_window=172, growth=0.25)

    def __init__(self, layout: VocabLayout, codec: LatentCodec, phonemes: PiperPhonemes,
                 default: DecodingConfig = DEFAULT_CONFIG, max_symbol_frames: int = MAX_SYMBOL_FRAMES,
                 chunk_symbols: int = CHUNK_SYMBOLS, max_opening_frames: int | None = None,
                 lead_in: LeadIn | None = None):
        if layout.n_speech != codec.config.codebook_size:
            raise ModelLoadError(f"vocabulary has {layout.n_speech} speech tokens but the codec {codec.config.codebook_size}")
        if layout.n_phonemes != phonemes.n_symbols:
            raise ModelLoadError(f"vocabulary has {layout.n_phonemes} phoneme symbols but the phonemizer's table "
                                 f"{phonemes.n_symbols}: voice and code do not match")
        if layout.symbol_codes != bool(codec.config.symbols) or (layout.symbol_codes and
                                                                   codec.config.symbols != layout.n_phonemes):
            raise ModelLoadError(f"vocabulary {'has' if layout.symbol_codes else 'has no'} codes relative to the "
                                 f"phoneme but the codec has {codec.config.symbols} symbol codebooks")
        self.layout = layout
        self.codec = codec
        self.phonemes = phonemes
        self.sample_rate = codec.sample_rate
        self.eos_token_id = layout.end_of_speech_id
        self.max_symbol_frames = max_symbol_frames
        self.max_opening_frames = max_opening_frames  # the chunk's first phoneme (None: max_symbol_frames)
        self.chunk_phonemes = chunk_symbols
        self._windows = self.prior_windows if codec.config.latent == "prior" else self.windows
        self.licence = self.LICENCE
        self._default = default
        self._allowed = layout.allowed_ids()
        # A word said alone is spoken after a lead-in whose audio is never heard (`lead_in`): its symbols first.
        self.lead_in = lead_in
        self._lead_prefix = lead_in.prefix(phonemes.ids, phonemes.id_map[" "]) if lead_in else ()
        # Codes relative to the phoneme being said are decoded from the chunk's prompt on (its first symbol), and a
        # lead-in's codes are left out by reading the prompt: either way the codec needs the chunk's prompt.
        self.codec_reads_prompt = layout.symbol_codes or lead_in is not None

    @classmethod
    def from_directory(cls, path: str | Path) -> "EmbeddedBackend":
        path = Path(path)
        meta_path = path / META_NAME
        if not meta_path.exists():
            raise FileNotFoundError(f"no embedded voice in {path} (missing {META_NAME})")
        meta = json.loads(meta_path.read_text())
        layout = VocabLayout.from_dict(meta["vocab"])
        if "phonemes" not in meta:
            raise ModelLoadError(f"{path} holds a voice in the earlier eSpeak NG format (no \"phonemes\" in {META_NAME}), "
                                 "which this version no longer reads: use the shipped voice, or train one "
                                 "(python -m ssd_demo train)")
        # NEXT untempered: `engine.sampling._with_untempered`
        return cls(layout, LatentCodec.load(path / "codec"), PiperPhonemes.from_dict(meta["phonemes"]),
                   DEFAULT_CONFIG.with_(untempered_token_ids=(layout.next_phoneme_id,)),
                   max_symbol_frames=int(meta.get("max_symbol_frames", MAX_SYMBOL_FRAMES)),
                   max_opening_frames=meta.get("max_opening_frames"), lead_in=LeadIn.from_meta(meta.get("lead_in")))

    def allowed_token_ids(self) -> list[int]:
        return list(self._allowed)

    def default_config(self) -> DecodingConfig:
        return self._default

    def split_text(self, text: str) -> list[TextChunk]:
        """Cleaned, normalised text in chunks the voice speaks reliably (TextError if unusable)."""
        chunks = text_frontend.split_text(text_frontend.check_text(text), budget=self.chunk_phonemes,
                                          count=self.phonemes.count)
        if len(chunks) > text_frontend.MAX_CHUNKS:
            raise TextError(f"The text takes {len(chunks)} chunks to speak; the embedded voice speaks at most "
                            f"{text_frontend.MAX_CHUNKS} at a time (numbers and codes take many sounds per character): "
                            "shorten it.")
        return [TextChunk(c.text, c.pause_after_ms) for c in chunks]

    def left_out(self, text: str) -> str:
        """Characters of `text` this voice does not speak (the app tells the visitor)."""
        return text_frontend.left_out(text)

    def prompt_ids(self, text: str, voice_prompt: VoicePrompt | None = None) -> list[int]:
        if voice_prompt is not None:
            raise InputError("the embedded voice has a single speaker and does not take a voice prompt")
        symbols = self.phonemes.ids(text)
        prefix = self._lead_prefix
        # A chunk that itself opens with the lead-in's symbols ("Listen.” Then..." in one chunk: curly quotes do not
        # split sentences) gets the lead-in too, so that a prompt opening with them always means one was added.
        if prefix and (self.lead_in.applies(text) or tuple(symbols[: len(prefix)]) == prefix):
            symbols = [*prefix, *symbols]
        return self.layout.prompt(symbols)

    def forced_tokens(self, prompt: list[int]) -> PhonemeSchedule:
        """The chunk's phoneme schedule, read back from its prompt."""
        end = prompt.index(self.layout.speech_start_id)
        return self.layout.schedule([token - self.layout.phoneme_offset for token in prompt[1:end]],
                                    max_frames=self.max_symbol_frames, first_max_frames=self.max_opening_frames)

    def acoustic_embeddings(self, vocab_size: int) -> torch.Tensor:
        """[vocab_size, latent_dim]: each speech token's codec centroid (centred); zeros elsewhere.

        PCG groups this voice's tokens by these (`Synthesizer.grouping_embeddings`): the centroids say which
        codes sound alike; this small target's input embeddings do not (docs/benchmarks.md).
        """
        centroids = torch.as_tensor(np.asarray(self.codec.codebook), dtype=torch.float32)
        if self.layout.symbol_codes:  # a code's sound depends on its symbol: its mean over the symbols' codebooks
            centroids = centroids.reshape(-1, self.layout.n_speech, centroids.shape[1]).mean(dim=0)
        table = torch.zeros(vocab_size, centroids.shape[1])
        offset = self.layout.speech_offset
        table[offset : offset + centroids.shape[0]] = centroids - centroids.mean(dim=0)
        return table

    def token_label(self, token: int) -> str:
        """How the app's token view names an id: the codec code number, or END for end of speech."""
        token = int(token)
        if token == self.eos_token_id:
            return "END"
        if token == self.layout.next_phoneme_id:
            return "|"
        if self.layout.phoneme_offset <= token < self.layout.speech_offset:
            return "/" + self.phonemes.label(token - self.layout.phoneme_offset) + "/"
        return str(token - self.layout.speech_offset)

    def tokens_to_audio(self, tokens: list[int], prompt_ids: list[int] | None = None) -> np.ndarray:
        to_codes = self._codes(prompt_ids)
        codes = to_codes(tokens)
        if not codes:
            return np.zeros(self.sample_rate // 10, dtype=np.float32)  # 0.1 s of silence
        return self.codec.decode(codes, getattr(to_codes, "context", ()))  # a lead-in's codes: context, cut off

    def window_codec(self, prompt_ids: list[int] | None = None) -> WindowCodec:
        """The codec as streaming decodes it: windows of codes decoded as the tokens come (`WindowFeed`); after a
        lead-in, its codes are the first windows' context, as in `tokens_to_audio`."""
        to_codes = self._codes(prompt_ids)
        return WindowCodec(to_codes, lambda before, part: self.codec.decode(part, before),
                           self.codec.hop_length, self._windows, getattr(to_codes, "context", ()))

    def _codes(self, prompt_ids: list[int] | None):
        """Generated ids -> the codec's rows: the codes themselves, or relative to the symbol being said, from the
        chunk's prompt on (`vocab.SymbolCodes`)."""
        if prompt_ids is None and self.layout.symbol_codes:
            raise InputError("this voice's codes are relative to the phoneme being said: decoding needs the prompt")
        codes = SymbolCodes(self.layout, self.layout.first_symbol(prompt_ids)) if self.layout.symbol_codes \
            else self.layout.codes
        # without the prompt (ids decoded out of any chunk) every code is decoded, a lead-in's too
        if self._lead_prefix and prompt_ids is not None and self._spoken_after_lead_in(prompt_ids):
            return LeadInCut(codes, self.layout.next_phoneme_id, len(self._lead_prefix))
        return codes

    def _spoken_after_lead_in(self, prompt_ids: list[int]) -> bool:
        """Whether the chunk of this prompt is spoken after the lead-in: its symbols start with the lead-in's and go
        on (`prompt_ids` adds the lead-in to every chunk that opens with those symbols itself)."""
        end = prompt_ids.index(self.layout.speech_start_id)
        symbols = tuple(token - self.layout.phoneme_offset for token in prompt_ids[1:end])
        prefix = self._lead_prefix
        return len(symbols) > len(prefix) and symbols[: len(prefix)] == prefix


def available_drafts(path: str | Path | None = None) -> tuple[str, ...]:
    """The drafts a voice folder has, in the order the UI lists them."""
    root = Path(path) if path is not None else default_path()
    return tuple(name for name, folder in DRAFT_FOLDERS.items() if (root / folder).exists())


#: The draft used unless one is chosen, first present wins: the heads accept more than the one-layer draft
#: and cost less per round (docs/benchmarks.md, "Embedded voice evaluation": 19% faster on an Intel Xeon,
#: 10% on an AVX-512 EPYC; on an AVX2-only EPYC the previous heads were within 4% of the distilled draft).
PREFERRED_DRAFTS = ("heads", "distilled", "layers")


def default_draft(path: str | Path | None = None) -> str:
    available = available_drafts(path)
    if not available:
        raise FileNotFoundError(f"the voice folder {Path(path) if path is not None else default_path()} has no draft")
    return next(name for name in PREFERRED_DRAFTS if name in available)


def load_synthesizer(draft: str | None = None, device: str | None = None, path: str | Path | None = None) -> Synthesizer:
    """The embedded voice: target + its drafts ("distilled", "layers", and "heads" where the voice has
    them), float32, offline.

    draft: the default draft (None: `default_draft`); device: "cpu" (default when None), "cuda", ...;
    path: a voice folder (default assets/embedded, or $SSD_DEMO_ASSETS/embedded).
    """
    root = Path(path) if path is not None else default_path()
    if path is None and not root.is_dir():
        raise FileNotFoundError(f"no embedded voice at {root}: {where_to_find('embedded')}")
    missing = [name for name in (META_NAME, "target", "codec") if not (root / name).exists()]
    if missing:  # say what a voice folder is, not just the first file that failed to open
        raise FileNotFoundError(f"{root} is not an embedded voice folder: it has no {', '.join(missing)} (a voice "
                                f"folder holds {META_NAME}, target/, codec/ and at least one draft)")
    available = available_drafts(root)
    draft = draft or default_draft(root)
    if draft not in available:
        raise InputError(f"unknown draft {draft!r}; available: {', '.join(available)}")
    backend = EmbeddedBackend.from_directory(root)
    device = device or "cpu"

    def load(folder: str):
        if folder == DRAFT_FOLDERS["heads"]:
            return DraftHeads.load(root / folder).to(device)
        return load_causal_lm(root / folder, torch.float32, device)  # without transformers where it can

    target = load("target")
    drafts = {name: load(DRAFT_FOLDERS[name]) for name in available}
    if "heads" in drafts:  # a voice whose heads were trained on another target fails here, not mid-run
        check_fits(drafts["heads"], target)
    return Synthesizer(backend, target, drafts, default_draft=draft)


__all__ = ["DEFAULT_CONFIG", "DEFAULT_PATH", "EmbeddedBackend", "default_path", "TextError", "available_drafts", "load_synthesizer"]
