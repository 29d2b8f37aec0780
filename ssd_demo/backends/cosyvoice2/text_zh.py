"""CosyVoice 2's Chinese text front end: what the official front end does to text holding a Chinese character.

Any text with a character of the CJK Unified Ideographs block (U+4E00-U+9FFF) takes the Chinese route, whatever
else it holds ("我有3个apple" too). In order: strip; `wetext`'s Chinese normaliser (numbers, dates, times,
money, percentages, phone numbers as characters: "3.5%" -> "百分之三点五"); newlines removed; spaces removed
except between two ASCII characters ("hello world" keeps its space, "你 好" loses it); "²" and "³" as
"平方" and "立方"; every "." as "。" and " - " as "，"; the brackets （）【】 and backticks removed and "——" as
a space; trailing commas and enumeration commas as one "。". The chunks are then cut at Chinese and Western
sentence ends (。？！；：、.?!;) and measured in characters, not tokens.

The default mode (`read_chinese`) departs from it in two places, one before `wetext` and one after: a price's
trailing zeros are its format, not digits said ("¥88.50" "八十八点五元", where `wetext` says "八十八点五零元"; a
thousands comma goes too, which `wetext` misreads: "¥1,288.50" "一元,两百八十八点五零"); and a space the text
has between a Chinese character and a Latin letter stays ("我 before 你"), where the official keeps a space only
between two ASCII characters ("我before你"): that removal is meant for spaces between Chinese characters, and
without the space Qwen's pre-tokenizer (which splits at spaces, digits and punctuation, not between scripts) takes
"我before你" as one piece, where " before" is the English word it knows.

`wetext`'s wheel ships its grammars (FST files inside the package): nothing is fetched at run time. It is
imported on the first Chinese text only, since loading its grammars takes about a second.
"""

from __future__ import annotations

import re
from functools import lru_cache

#: The official test for Chinese text: one character of the CJK Unified Ideographs block.
_CHINESE = re.compile("[\u4e00-\u9fff]")
#: Where Chinese text is cut into sentences, and the end added to a text that has none.
CHINESE_SENTENCE_ENDS = "。？！；：、.?!;"
CHINESE_FINAL = "。"

_ASCII_NOT_SPACE = "[\x00-\x1f\x21-\x7f]"
_LONE_BLANK = re.compile(rf" (?!{_ASCII_NOT_SPACE})|(?<!{_ASCII_NOT_SPACE}) ")
_BRACKETS = str.maketrans({"（": None, "）": None, "【": None, "】": None, "`": None})


def contains_chinese(text: str) -> bool:
    return _CHINESE.search(text) is not None


@lru_cache(maxsize=1)
def _normalizer():
    from wetext import Normalizer

    return Normalizer(lang="zh", operator="tn", remove_erhua=False)


def wetext_chinese(text: str) -> str:
    """`wetext`'s Chinese text normaliser, as the official front end builds it (erhua kept)."""
    return _normalizer().normalize(text)


def drop_blanks(text: str) -> str:
    """Spaces kept only between two ASCII characters that are not spaces ("GPT 4" keeps it; "你 好", "a  b" lose
    theirs)."""
    return _LONE_BLANK.sub("", text)


#: A run of spaces between a Chinese character and a Latin letter, either way round.
_LATIN_BOUNDARY = re.compile(r"(?<=[\u4e00-\u9fff]) +(?=[A-Za-z])|(?<=[A-Za-z]) +(?=[\u4e00-\u9fff])")


def drop_blanks_but_at_latin(text: str) -> str:
    """`drop_blanks`, but one space kept where the text has one between Chinese and a Latin letter ("我 before 你"
    stays; "你 好" loses its space)."""
    return " ".join(drop_blanks(part) for part in _LATIN_BOUNDARY.split(text))


def tidy_chinese(text: str, keep_latin_spaces: bool = False) -> str:
    """The official steps after the normaliser (see the module's docstring), in their order; with
    `keep_latin_spaces`, the default mode's space between Chinese and a Latin word."""
    text = text.replace("\n", "")
    text = drop_blanks_but_at_latin(text) if keep_latin_spaces else drop_blanks(text)
    text = text.replace("²", "平方").replace("³", "立方")
    text = text.replace(".", "。").replace(" - ", "，")
    text = text.translate(_BRACKETS).replace("——", " ")
    return re.sub(r"[，,、]+$", "。", text)


def normalize_chinese(text: str) -> str:
    """Text holding Chinese as the official front end reads it (`text_normalize(text, split=False)`)."""
    return tidy_chinese(wetext_chinese(text.strip()))


_AMOUNT = r"(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?"
#: A price: a currency sign before it ("¥88.50", "$5.00", and "¥88.50元" with both sign and word), or a currency
#: word after it ("88.50元", "3.20亿元", "12.50块").
_PRICE_SIGN = re.compile(rf"(?<![\d.,])([¥￥$€£]) ?{_AMOUNT}(?![\d.,]\d)( ?元)?")
_PRICE_WORD = re.compile(rf"(?<![\d.,]){_AMOUNT}(?![\d.,]\d)(?= ?[万亿]?(?:元|块|美元|欧元|英镑|日元|港元|港币))")


def _amount(whole: str, decimals: str | None) -> str:
    """"1,288.50" -> "1288.5", "88.00" -> "88": no thousands comma, no trailing zeros."""
    decimals = (decimals or "").rstrip("0")
    return whole.replace(",", "") + (f".{decimals}" if decimals else "")


def _price_after_sign(match: re.Match) -> str:
    sign, whole, decimals, yuan = match.groups()
    if yuan and sign in "¥￥":  # "¥88.50元" says 元 twice, and wetext reads it "八元八点五零元"
        return _amount(whole, decimals) + "元"
    return sign + _amount(whole, decimals) + (yuan or "")


def tidy_prices(text: str) -> str:
    """Prices as `wetext` reads them naturally: "¥88.50" -> "¥88.5" (八十八点五元), "¥1,288.00" -> "¥1288"."""
    text = _PRICE_SIGN.sub(_price_after_sign, text)
    return _PRICE_WORD.sub(lambda m: _amount(m.group(1), m.group(2)), text)


def read_chinese(text: str) -> str:
    """Text holding Chinese as the default mode reads it: the official way (`normalize_chinese`), but for prices
    (`tidy_prices`) and a space kept between Chinese and a Latin word (see the module's docstring)."""
    return tidy_chinese(wetext_chinese(tidy_prices(text.strip())), keep_latin_spaces=True)


__all__ = ["CHINESE_FINAL", "CHINESE_SENTENCE_ENDS", "contains_chinese", "drop_blanks", "drop_blanks_but_at_latin",
           "normalize_chinese", "read_chinese", "tidy_chinese", "tidy_prices", "wetext_chinese"]
