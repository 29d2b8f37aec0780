"""CosyVoice 2's Chinese text front end: what the official front end does to text holding a Chinese character.

Any text with a character of the CJK Unified Ideographs block (U+4E00-U+9FFF) takes the Chinese route, whatever
else it holds ("我有3个apple" too). In order: strip; `wetext`'s Chinese normaliser (numbers, dates, times,
money, percentages, phone numbers as characters: "3.5%" -> "百分之三点五"); newlines removed; spaces removed
except between two ASCII characters ("hello world" keeps its space, "你 好" loses it); "²" and "³" as
"平方" and "立方"; every "." as "。" and " - " as "，"; the brackets （）【】 and backticks removed and "——" as
a space; trailing commas and enumeration commas as one "。". The chunks are then cut at Chinese and Western
sentence ends (。？！；：、.?!;) and measured in characters, not tokens.

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


def tidy_chinese(text: str) -> str:
    """The official steps after the normaliser (see the module's docstring), in their order."""
    text = drop_blanks(text.replace("\n", ""))
    text = text.replace("²", "平方").replace("³", "立方")
    text = text.replace(".", "。").replace(" - ", "，")
    text = text.translate(_BRACKETS).replace("——", " ")
    return re.sub(r"[，,、]+$", "。", text)


def normalize_chinese(text: str) -> str:
    """Text holding Chinese as the official front end reads it (`text_normalize(text, split=False)`)."""
    return tidy_chinese(wetext_chinese(text.strip()))


__all__ = ["CHINESE_FINAL", "CHINESE_SENTENCE_ENDS", "contains_chinese", "drop_blanks", "normalize_chinese",
           "tidy_chinese", "wetext_chinese"]
