"""English text -> phoneme symbols -> ids, for the embedded voice.

eSpeak NG (through `phonemizer`, with the library and data bundled by the
`espeakng-loader` wheel, so no system package is needed) expands numbers,
abbreviations and unknown words and writes IPA with stress marks. Each IPA
character becomes one token; punctuation and word boundaries are kept because
they shape the prosody (pauses, question intonation).

Limits: text must be 1 to `MAX_TEXT_CHARS` (100) characters, i.e. one short
sentence; the voice was trained on sentences of up to about 80 characters and longer text is
refused with a message rather than rendered badly.
"""

from __future__ import annotations

import functools
import re
import threading

from .synthesis import TextError

#: Longest accepted text, in characters (about 6 seconds of speech; the training sentences are shorter).
MAX_TEXT_CHARS = 100

#: Punctuation kept as tokens (eSpeak preserves it; it drives pauses and intonation).
PUNCTUATION = " ,.!?;:-\"'()"

#: IPA symbols eSpeak NG writes for English, plus plain letters it uses for a few sounds.
IPA_SYMBOLS = (
    "abcdefhijklmnopqrstuvwxyz"
    "æçðøŋœɐɑɒɔɕɖəɘɚɛɜɝɞɟɡɢɣɤɥɦɨɪɫɬɭɮɯɰɱɲɳɴɵɶɸɹɺɻɽɾʀʁʂʃʈʉʊʋʌʍʎʏʐʑʒʔʕʝʰʲʷˀˈˌːˑ̩̃ᵻθχβ"
)

#: The phoneme inventory, in id order. Fixed in code so that ids never depend on a corpus.
SYMBOLS: tuple[str, ...] = tuple(dict.fromkeys(PUNCTUATION + IPA_SYMBOLS))
SYMBOL_TO_INDEX = {symbol: index for index, symbol in enumerate(SYMBOLS)}

_lock = threading.Lock()  # the eSpeak library is not re-entrant

# phonemizer splits text at punctuation before eSpeak reads it, so "1.5" would become "one. five"
# while eSpeak itself says "one point five". Spelling such tokens out first keeps the phonemes
# and the rendered training audio in agreement.
_REWRITES: tuple[tuple[re.Pattern, object], ...] = (
    (re.compile(r"\$(\d+)\.(\d\d)\b"), r"\1 dollars \2"),
    (re.compile(r"\$(\d+)"), r"\1 dollars"),
    (re.compile(r"£(\d+)\.(\d\d)\b"), r"\1 pounds \2"),
    (re.compile(r"£(\d+)"), r"\1 pounds"),
    (re.compile(r"€(\d+)"), r"\1 euros"),
    (re.compile(r"(?<=\d),(?=\d{3}\b)"), ""),
    (re.compile(r"(\d+)\.(\d+)"), lambda m: f"{m.group(1)} point {' '.join(m.group(2))}"),
    (re.compile(r"\b(\d{1,2}):(\d\d)\b"),
     lambda m: m.group(1) if m.group(2) == "00" else f"{m.group(1)} oh {m.group(2)[1]}" if m.group(2)[0] == "0"
     else f"{m.group(1)} {m.group(2)}"),
    (re.compile(r"\b([aApP])\.[mM]\.?"), r"\1 m"),
    (re.compile(r"\bMrs\."), "Missus"),
    (re.compile(r"\bMr\."), "Mister"),
    (re.compile(r"\bDr\."), "Doctor"),
)


def normalize_text(text: str) -> str:
    """Collapse whitespace and spell out money, decimals, times and abbreviations with inner dots."""
    text = " ".join(text.split())
    for pattern, replacement in _REWRITES:
        text = pattern.sub(replacement, text)
    return text


@functools.lru_cache(maxsize=1)
def _backend():
    import espeakng_loader
    from phonemizer.backend import EspeakBackend
    from phonemizer.backend.espeak.wrapper import EspeakWrapper

    # Use the library and voice data bundled in the wheel, never a system install.
    EspeakWrapper.set_library(espeakng_loader.get_library_path())
    EspeakWrapper.set_data_path(espeakng_loader.get_data_path())
    return EspeakBackend("en-us", preserve_punctuation=True, with_stress=True)


def check_text(text: str) -> str:
    """Validate and normalise (see `normalize_text`); raises TextError for text that cannot be spoken."""
    if not isinstance(text, str):
        raise TextError(f"text must be a string, got {type(text).__name__}")
    cleaned = " ".join(text.split())
    if not cleaned:
        raise TextError("text is empty: type a sentence to synthesise")
    if len(cleaned) > MAX_TEXT_CHARS:
        raise TextError(
            f"text is {len(cleaned)} characters long; the embedded voice speaks at most "
            f"{MAX_TEXT_CHARS} characters (one short sentence) at a time"
        )
    return normalize_text(cleaned)


def phonemize_many(texts: list[str]) -> list[str]:
    """IPA strings for many texts (no validation; used to build the training corpus).

    One call per text: phonemizer's punctuation handling can shift the lines of a batched
    call against its inputs (seen with "1.5" and ":"), which would pair text with the wrong audio.
    """
    with _lock:
        backend = _backend()
        # Join every line returned: eSpeak may still split one text into several clauses.
        return [" ".join(backend.phonemize([normalize_text(t)], strip=True, njobs=1)) for t in texts]


def phonemize(text: str) -> str:
    """IPA for one validated text."""
    return phonemize_many([check_text(text)])[0]


def symbols_to_ids(phonemes: str) -> list[int]:
    """Phoneme string -> symbol indices (0-based; the backend offsets them into the LM vocabulary).

    Symbols outside the inventory are dropped (rare diacritics). Raises TextError when
    nothing pronounceable is left (only punctuation, emoji, ...).
    """
    ids = [SYMBOL_TO_INDEX[ch] for ch in phonemes if ch in SYMBOL_TO_INDEX]
    if not any(SYMBOLS[i] not in PUNCTUATION for i in ids):
        raise TextError("nothing pronounceable in the text: it needs at least one word")
    # Collapse runs of spaces left by dropped symbols; strip edge spaces.
    out: list[int] = []
    space = SYMBOL_TO_INDEX[" "]
    for index in ids:
        if index == space and (not out or out[-1] == space):
            continue
        out.append(index)
    while out and out[-1] == space:
        out.pop()
    return out


def text_to_ids(text: str) -> list[int]:
    """English text -> phoneme symbol indices; raises TextError for unusable text."""
    return symbols_to_ids(phonemize(text))
