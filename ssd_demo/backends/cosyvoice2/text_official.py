"""CosyVoice 2's official text normalisation, for reproducing published numbers: the `official` normaliser mode.

What the official front end (`CosyVoiceFrontEnd.text_normalize` with `wetext` installed) does: text holding
`<|` and `|>` (markup) is left whole, as one chunk; otherwise it is stripped, and text holding a Chinese
character takes the official Chinese route (`text_zh.normalize_chinese`). Other text goes through `wetext`'s
normaliser built as the official builds it (language detected: English, or Chinese when the text is digits
only, so "1984" is read "一千九百八十四"), then every run of digits still there is spelt out by `inflect`
("v2" -> "vtwo"), and the paragraph is split by the official rule.

Departures, all where the official would fail: a digit run `inflect` refuses (37 digits or more) is read digit
by digit instead of raising; text `wetext` returns empty ("Read more at example.com/news.", on which the
official raises IndexError) gives no chunks; text `wetext` cannot read at all (two blanks in a row between
words, a paragraph break, a run of symbols: the official raises AssertionError) is read with its whitespace
runs as single spaces, or failing that left as written for `inflect`; and chunks without a word are dropped, as
in the default mode (the official drops only chunks of punctuation and symbols).
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache
from itertools import groupby

from .text_zh import contains_chinese, normalize_chinese


@lru_cache(maxsize=1)
def _inflect():
    import inflect

    return inflect.engine()


@lru_cache(maxsize=1)
def _normalizer():
    from wetext import Normalizer

    return Normalizer()  # as the official builds its English normaliser: the language detected per text


def is_markup(text: str) -> bool:
    """Text the official front end leaves alone (CosyVoice's markup such as `<|endofprompt|>`)."""
    return "<|" in text and "|>" in text


def _spelt(run: str) -> str:
    try:
        return _inflect().number_to_words(run)
    except Exception:  # inflect refuses runs of 37 digits and more (NumOutOfRangeError)
        return " ".join(_inflect().number_to_words(str(unicodedata.digit(ch, 0))) for ch in run)


def official_spell_out_number(text: str) -> str:
    """Every run of characters Python calls digits (`str.isdigit`: "3", "٣", "²") as `inflect` words, run
    together with what touches them ("v2" -> "vtwo", "1955" -> "one thousand, nine hundred and fifty-five")."""
    return "".join(_spelt("".join(run)) if digits else "".join(run)
                   for digits, run in groupby(text, key=str.isdigit))


def _wetext_english(text: str) -> str:
    """`wetext`'s normaliser on `text`; where its grammar finds no reading of the text (two blanks in a row
    between words, "a  b" or a paragraph break; a run of symbols, "€½¾"), on the text with each run of
    whitespace as one space, and failing that the text as written. The official raises AssertionError there."""
    try:
        return _normalizer().normalize(text)
    except AssertionError:  # wetext's token parser, handed the empty tagging of text its grammar does not accept
        pass
    try:
        return _normalizer().normalize(" ".join(text.split()))
    except AssertionError:
        return text


def official_english(text: str) -> str:
    """The official English route (`text_normalize(text, split=False)`) for stripped text without Chinese."""
    return official_spell_out_number(_wetext_english(text))


def official_normalize(text: str) -> str:
    """`text_normalize(text, split=False)` as the official front end computes it."""
    if is_markup(text) or text == "":
        return text
    text = text.strip()
    return normalize_chinese(text) if contains_chinese(text) else official_english(text)


__all__ = ["is_markup", "official_english", "official_normalize", "official_spell_out_number"]
