"""Text as people type it -> words eSpeak NG reads as people would say them.

`clean_text` makes any input safe to read (Unicode NFC, no control characters or terminal escapes, no
letters of scripts the English voice can only name, no emoji); `normalize_text` rewrites what eSpeak would
misread: numbers, dates and money (spelled by `numbers`), abbreviations, acronyms, titles, streets, emphasis
and bullets, and keeps a dot only where a sentence really ends, so that the chunker splits in the right places.
"""

from __future__ import annotations

import re
import unicodedata

from ..errors import TextError
from .numbers import (
    CURRENCY,
    MONTH_NAMES,
    MONTHS,
    SCALES,
    UNIT_NAMES,
    read_clock,
    read_clock_with_seconds,
    read_digit_groups,
    read_dotted_date,
    read_dotted_numbers,
    read_fraction,
    read_iso_date,
    read_local_phone_or_range,
    read_mixed_number,
    read_money,
    read_month_day,
    read_scaled_money,
    read_slash_date,
    read_slash_date_after_preposition,
    read_timestamp,
    read_unit,
    read_year,
    read_year_in_context,
)


#: Longest accepted text, in characters (a few paragraphs; it is spoken chunk by chunk).
MAX_TEXT_CHARS = 3000

#: Digit runs longer than LONG_NUMBER are read digit by digit, as people read codes (eSpeak NG would name
#: them in sextillions, and from about 35 digits on it silently drops the rest); words longer than
#: LONG_WORD letters are read in pieces (eSpeak drops the end of words over about 100 letters).
LONG_NUMBER = 15
LONG_WORD = 40


def _digit_by_digit(match: re.Match) -> str:
    return " ".join(match.group(0))


def _split_long_word(match: re.Match) -> str:
    word = match.group(0)
    return " ".join(word[i : i + LONG_WORD] for i in range(0, len(word), LONG_WORD))


#: Capitalised words that usually open a sentence (pronouns, articles, conjunctions, common adverbs). After an
#: abbreviation's dot, one of these means the sentence ended there ("in the U.S. Then ..."); another capitalised
#: word is more likely a name that belongs to the same sentence ("the U.S. Army", "9 a.m. Tuesday").
_SENTENCE_OPENERS = frozenset("""
    a an the this that these those there then than but and or so yet now later soon after before when while if
    i he she it we they you my our his her their its your what why how who where which whose meanwhile however
    also still today tomorrow yesterday tonight no yes please let lets let's don't do does did is are was were
    will would can could should may might must have has had in on at for from to with by as of not all some
    every each many most one two three four five once here thanks thank everyone nobody someone nothing
""".split())

_NEXT_WORD = re.compile(r"[\"')\]]*(?:$|\s+[\"'(\[]?([A-Z][\w']*))")


def _ends_sentence(text: str, position: int) -> bool:
    """Does a dot at `position` - 1 also end the sentence? Yes at the end of the text or before a word that
    usually opens one."""
    after = _NEXT_WORD.match(text, position)
    return bool(after) and (after.group(1) is None or after.group(1).lower() in _SENTENCE_OPENERS)


def _with_sentence_end(spoken, names_follow: bool = True):
    """A rewrite for an abbreviation whose final dot may also end the sentence ("at 7 p.m. She left", "in the
    U.S."): the dot is kept when the sentence ends there, so that the chunker still sees its end; otherwise it
    goes ("7 p.m. today", "U.S. troops", "the U.S. Army"). Where no name can follow (`names_follow=False`:
    units, "etc."), any capitalised word after the dot starts a new sentence ("5 lbs. See ...")."""
    def rewrite(match: re.Match) -> str:
        words = spoken(match) if callable(spoken) else spoken
        if names_follow:
            ends = _ends_sentence(match.string, match.end())
        else:
            after = _NEXT_WORD.match(match.string, match.end())
            ends = bool(after)
        ends = ends and match.group(0).endswith(".")
        return words + ("." if ends else "")
    return rewrite


def _acronym(match: re.Match) -> str:
    """"U.S." -> "U-S", "w.h.o." -> "W-H-O": letters joined by hyphens, which eSpeak names one by one (run
    together, "WHO" would be read "who", "NYC" "nick" and "AKA" "acka")."""
    return "-".join(match.group(0).replace(".", "").upper())


_MONTH_ABBREVIATIONS = {month[:3]: month for month in MONTHS} | {"Sept": "September"}
_WEEKDAYS = {"Mon": "Monday", "Tue": "Tuesday", "Tues": "Tuesday", "Wed": "Wednesday", "Thu": "Thursday",
             "Thur": "Thursday", "Thurs": "Thursday", "Fri": "Friday", "Sat": "Saturday", "Sun": "Sunday"}
#: Titles before a name ("Prof. Lee"): the dot never ends the sentence there.
_TITLES = {"Mrs": "Missus", "Mr": "Mister", "Ms": "Miz", "Dr": "Doctor", "Prof": "Professor", "Gov": "Governor",
           "Sen": "Senator", "Rep": "Representative", "Gen": "General", "Capt": "Captain", "Lt": "Lieutenant",
           "Sgt": "Sergeant", "Rev": "Reverend", "Hon": "Honorable"}
#: Abbreviations after a name or a number that may also end the sentence ("Smith Jr. said", "Acme Inc.").
_AFTER_WORDS = {"Jr": "Junior", "Sr": "Senior", "Inc": "Inc", "Ltd": "Limited", "Corp": "Corporation",
                "approx": "approximately", "Ph.D": "P-H-D", "PhD": "P-H-D"}
#: Abbreviations before a number ("Fig. 3", "pp. 12").
_BEFORE_NUMBERS = {"No": "number", "no": "number", "Fig": "Figure", "fig": "figure", "p": "page", "pp": "pages",
                   "Vol": "Volume", "vol": "volume", "ch": "chapter", "Ch": "Chapter", "ca": "circa", "Ca": "Circa", "Nr": "number"}
_STREETS = {"St": "Street", "Ave": "Avenue", "Rd": "Road", "Dr": "Drive", "Blvd": "Boulevard", "Ln": "Lane"}


#: What follows the first half of a year `read_year` has split ("November 19 99", "July 17 76", "May 19 oh 5",
#: "June 18 hundred"): that "19" is not a day of the month.
_YEAR_REST = r" (?:\d\d|oh \d|hundred)\b"


def _alternatives(words) -> str:
    return "|".join(sorted(map(re.escape, words), key=len, reverse=True))


# A dot inside these is not a sentence end; spelling them out first keeps the chunker honest and
# gives eSpeak plain words to read. Order matters: each rule sees the text the earlier ones left.
_REWRITES: tuple[tuple[re.Pattern, object], ...] = (
    # *emphasis* as typed in chat (eSpeak would say "asterisk"); "2*3" is a product, "* milk" a bullet
    (re.compile(r"(?<![\w*])\*+([^*\s](?:[^*]*[^*\s])?)\*+(?![\w*])"), r"\1"),
    (re.compile(r"(?<=\d) ?[*×] ?(?=\d)"), " times "),
    (re.compile(r"(?:^|(?<= ))[*•#]+(?= )"), ""),
    (re.compile(r"(?<![\w#])#(?=\d)"), "number "),
    # "Jan. 5", "Dec 25", "Mar 3rd", "Sept 2024": a month, before the year rules look for month names (a dot there is not a
    # sentence end)
    (re.compile(rf"\b({_alternatives(_MONTH_ABBREVIATIONS)})\.?(?= (?:\d{{1,2}}(?:st|nd|rd|th)?|\d{{4}})\b(?![:.,]\d))"),
     lambda m: _MONTH_ABBREVIATIONS[m.group(1)]),
    (re.compile(r"\b(\d{4}-\d\d-\d\d)T(\d\d:\d\d(?::\d\d)?)(?:\.\d+)?(Z|[+-]\d\d:?\d\d)?\b"), read_timestamp),
    # years as people say them ("1999-2005" -> "19 99 to 2005", "in 1999" -> "in 19 99", "the 1990s"), before
    # thousands separators go ("1,999" stays a quantity)
    (re.compile(r"(?<![\d.,:/$£€¥-])(1[1-9]\d\d|20\d\d)(s?)[-–](1[1-9]\d\d|20\d\d)(s?)(?![\d-])"),
     lambda m: f"{read_year(m.group(1))}{m.group(2)} to {read_year(m.group(3))}{m.group(4)}"),
    (re.compile(r"(?<![\d.,:/$£€¥-])(1[1-9]\d\d)(s|'s)?(?![\d.,:/-]?\d| ?%|[A-Za-z])"), read_year_in_context),
    (re.compile(r"(?<=\d),(?=\d{3}\b)"), ""),  # thousands separators: "$1,200.50" is one amount
    # money: "$10-20" -> "10 to 20 dollars", "20$" -> "$20", "$5M" -> "5 million dollars", "$ 5", "$.99"
    (re.compile(rf"({CURRENCY}) ?(\d+(?:\.\d+)?) ?[-–] ?{CURRENCY}? ?(\d+(?:\.\d+)?)(?![\d.]*\d)"),
     r"\2 to \1\3"),
    (re.compile(rf"(?<![\w$£€¥.])(\d+(?:\.\d+)?) ?({CURRENCY})(?![\w$£€¥])"), r"\2\1"),
    (re.compile(rf"({CURRENCY}) ?(\d+(?:\.\d+)?) ?(thousand|million|billion|trillion|[kKmMbBtT]|bn)\b"),
     read_scaled_money),
    (re.compile(rf"({CURRENCY}) ?(\d+)?(?:\.(\d+))?(?<=\d)(?![\w.,]*[A-Za-z])"), read_money),
    # phone numbers, digit by digit (a toll-free 800 whole): 1-800-555-1234, +44 20 7946 0958, (555) 123-4567,
    # 555-123-4567, 555-0199
    (re.compile(r"(?<![\d-])1[-. ]\d{3}[-. ]\d{3}[-. ]\d{4}(?![\d-]|\.\d)"), read_digit_groups),
    (re.compile(r"\+\d{1,3}(?:[ -]\(?\d{1,4}\)?){2,5}(?![\d-]|\.\d)"), read_digit_groups),
    (re.compile(r"(?<![\d-])(?:\(\d{3}\) ?|\d{3}[-.])\d{3}[-.]\d{4}(?![\d-]|\.\d)"), read_digit_groups),
    (re.compile(r"(?<![\w.,:/-])(\d{3})-(\d{4})(?![\w-]|[.,:/]\d)"), read_local_phone_or_range),
    (re.compile(rf"\d{{{LONG_NUMBER + 1},}}"), _digit_by_digit),
    # dates: 3/14/2025, 3/14/25, on 3/4, 2025-03-14, 14.03.2025
    (re.compile(r"(?<![\d/.-])(\d{1,2})/(\d{1,2})/(\d{4}|\d{2})(?![\d/])"), read_slash_date),
    (re.compile(r"\b([Oo]n|[Bb]y|[Uu]ntil|[Tt]ill|[Ss]ince|[Ff]rom|[Bb]efore|[Aa]fter|[Dd]ue) (\d{1,2})/(\d{1,2})"
                r"(?![\d/])"), read_slash_date_after_preposition),
    (re.compile(r"(?<![\d/.-])(\d{4})-(\d{2})-(\d{2})(?![\d-])"), read_iso_date),
    (re.compile(r"(?<![\d.])(\d{1,2})\.(\d{1,2})\.(\d{4})(?!\d|\.\d)"), read_dotted_date),
    (re.compile(r"(?<![\d.])\d+(?:\.\d+){2,}(?![\d]|\.\d)"), read_dotted_numbers),  # versions, addresses
    (re.compile(r"(?<![\d.,/])(\d+) (\d)/(\d{1,2})(?![\d/])"), read_mixed_number),
    (re.compile(r"(?<![\d/.])(\d{1,3})/(\d{1,3})(?![\d/])"), read_fraction),
    # "3-4 times", "52-48", "pp. 12-15": a hyphen between numbers is "to", not "dash"
    (re.compile(r"(?<![\w.,:/-])(\d+(?:\.\d+)?) ?[-–] ?(\d+(?:\.\d+)?)(?![\w-]|[.,:/]\d)"), r"\1 to \2"),
    (re.compile(rf"(?<![\w.])(\d+(?:\.\d+)?) ?({UNIT_NAMES})(?![\w/])\.?"),
     _with_sentence_end(read_unit, names_follow=False)),
    (re.compile(r"(?<![\w.])(\d+(?:\.\d+)?) ?(bn|[MB])\b(?= [a-z])"),
     lambda m: f"{m.group(1)} {SCALES[m.group(2).lower()]}"),  # "1.5B parameters"
    (re.compile(r"\b(\d{1,2})\.([0-5]\d)(?= ?[aApP]\.?[mM]\b)"), r"\1:\2"),  # "6.30 pm" is a time
    (re.compile(r"(\d+)\.(\d+)"), lambda m: f"{m.group(1)} point {' '.join(m.group(2))}"),
    (re.compile(r"(?<=\d) ?([aApP])[mM]\b"), lambda m: f" {m.group(1).upper()}M"),  # "7pm", "6 30 pm"
    (re.compile(r"\b(\d{1,2}):(\d\d):(\d\d)(?!\d)"), read_clock_with_seconds),
    (re.compile(r"\b(\d{1,2}):(\d\d)(?!\d|:\d)"), lambda m: read_clock(m.group(1), m.group(2))),  # "7:30pm" too
    # eSpeak says "AM" as letters
    (re.compile(r"\b([aApP])\.[mM]\.?(?![A-Za-z])"), _with_sentence_end(lambda m: f"{m.group(1).upper()}M")),
    # "on Elm St." / "Mulholland Dr." is a street (a name before it, mid-sentence); "St. Louis" a saint
    (re.compile(rf"(?:(?<=[a-z0-9,] )|(?<=\d[A-Z] ))([A-Z][a-z]*|\d+(?:st|nd|rd|th)) ({_alternatives(_STREETS)})\."),
     _with_sentence_end(lambda m: f"{m.group(1)} {_STREETS[m.group(2)]}")),
    (re.compile(rf"\b({_alternatives(_TITLES)})\.(?= [A-Z])"), lambda m: _TITLES[m.group(1)]),
    (re.compile(rf"\b({_alternatives(_AFTER_WORDS)})\.?(?![\w.]|\.\w)"),
     _with_sentence_end(lambda m: _AFTER_WORDS[m.group(1)])),
    (re.compile(r"\bSt\.(?= [A-Z])"), "Saint"),
    (re.compile(rf"\b({_alternatives(_WEEKDAYS)})\.?(?=,? (?:\d|{MONTH_NAMES}))"), lambda m: _WEEKDAYS[m.group(1)]),
    (re.compile(rf"\b(?P<month>{MONTH_NAMES}) (?P<day>\d{{1,2}})(?![\d:]|\.\d| ?(?:st|nd|rd|th)\b|{_YEAR_REST})"),
     read_month_day),
    (re.compile(rf"(?<![\w.,])(?P<day>\d{{1,2}}) (?P<month>{MONTH_NAMES})\b"), read_month_day),
    (re.compile(r"\b[Ee]\.g\.", ), "for example"),
    (re.compile(r"\b[Ii]\.e\.", ), "that is"),
    (re.compile(r"\betc\."), _with_sentence_end("et cetera", names_follow=False)),
    (re.compile(r"\bvs\."), "versus"),
    (re.compile(rf"\b({_alternatives(_BEFORE_NUMBERS)})\.(?= ?\d)"), lambda m: _BEFORE_NUMBERS[m.group(1)] + " "),
    # a middle initial ("John D. Rockefeller") is not a sentence end
    (re.compile(r"\b([A-Z][a-z]+) ([A-Z])\. (?=[A-Z][a-z])"),
     lambda m: m.group(0) if _ends_sentence(m.string, m.end() - 1) else f"{m.group(1)} {m.group(2)} "),
    (re.compile(r"(?<![\w.])(?:[A-Za-z]\.){2,}(?![A-Za-z])"), _with_sentence_end(_acronym)),  # U.S., N.Y.C.
    (re.compile(rf"[^\W_]{{{LONG_WORD + 1},}}"), _split_long_word),
)


#: Terminal escape sequences (colours, cursor moves) pasted from a console: removed whole, so that
#: "[31m" is not read aloud once the ESC itself has gone with the other control characters.
_TERMINAL_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")


def clean_text(text: str) -> str:
    """NFC, terminal escapes dropped, control characters to spaces, whitespace collapsed; TextError for
    unusable text."""
    if not isinstance(text, str):
        raise TextError(f"The text must be a string, got {type(text).__name__}.")
    if len(text) > MAX_TEXT_CHARS:  # counted as typed (the count a visitor can check), before any cleaning
        raise TextError(f"The text is {len(text)} characters long; the embedded voice reads at most {MAX_TEXT_CHARS} "
                        "characters at a time.")
    text = unicodedata.normalize("NFC", text)
    text = _TERMINAL_ESCAPE.sub(" ", text)
    text = "".join(" " if unicodedata.category(ch).startswith("C") else ch for ch in text)
    text = " ".join(text.split())
    if not text:
        raise TextError("The text is empty: type a sentence to synthesise.")
    if not any(ch.isdigit() or ("LATIN" in unicodedata.name(ch, "") and ch.isalpha()) for ch in text):
        raise TextError("The embedded voice speaks English: the text has no Latin letters or digits to read.")
    return " ".join("".join(" " if dropped else ch for ch, dropped in _marked(text)).split())


def _marked(text: str):
    """(character, left out?) pairs: a letter of another script or an emoji, and the marks on it (vowel signs,
    accents, emoji variation selectors)."""
    letters = _letters_kept(text)
    dropping = False
    for index, ch in enumerate(text):
        if unicodedata.category(ch).startswith("M"):
            yield ch, dropping  # a combining mark goes with the letter it sits on
            continue
        dropping = not letters[index]
        yield ch, dropping


#: Scripts whose letters eSpeak NG's English voice reads well enough to keep: Latin, and Greek letters standing
#: alone, which it names ("alpha", "pi", "mu"). A Greek word it spells letter by letter ("epsilon lambda
#: lambda ..."), and Cyrillic it spells with Russian letter names ("em o es ka va a" for Москва): left out.
READABLE_SCRIPTS = ("LATIN",)
NAMED_ALONE_SCRIPTS = ("GREEK",)


#: Pictograph blocks (emoji, their skin tones and flags, dingbats, miscellaneous symbols).
EMOJI_BLOCKS = ((0x2600, 0x27BF), (0x2B00, 0x2BFF), (0x1F000, 0x1FAFF))


def _letters_kept(text: str) -> list[bool]:
    """Per character: kept (True) or left out. A letter of another script (CJK, kana, Arabic, Hebrew, Thai,
    Cyrillic, ...): eSpeak's English voice would say "Chinese letter" or "Hebrew shin" for it, spell it, or
    switch language mid-sentence. Judged on its compatibility form, so that "µ" (Greek mu), "ℓ" or bold maths
    letters count as what they look like; modifier letters ("ʻ" in Hawaiʻi, "ʼ") are punctuation-like and stay.
    Emoji go too: eSpeak reads 😀 as "grinning face" and 🍕 as "pizza", in the middle of the sentence."""
    kinds = [_script_kind(ch) for ch in text]
    kept = []
    for index, kind in enumerate(kinds):
        if kind == "alone":  # a Greek letter is kept when no other Greek letter touches it (marks skipped)
            kind = "keep" if not (_touches(kinds, index, -1) or _touches(kinds, index, 1)) else "drop"
        kept.append(kind != "drop")
    return kept


def _touches(kinds: list[str], index: int, step: int) -> bool:
    index += step
    while 0 <= index < len(kinds) and kinds[index] == "mark":
        index += step
    return 0 <= index < len(kinds) and kinds[index] == "alone"


def _script_kind(ch: str) -> str:
    """"keep", "drop", "alone" (kept when standing alone) or "mark" (goes with the letter before it)."""
    category = unicodedata.category(ch)
    if category.startswith("M"):
        return "mark"
    if category in ("So", "Sk") and any(low <= ord(ch) <= high for low, high in EMOJI_BLOCKS):
        return "drop"
    if not ch.isalpha() or category == "Lm":
        return "keep"
    name = unicodedata.name(unicodedata.normalize("NFKC", ch)[0], "")
    return "keep" if name.startswith(READABLE_SCRIPTS) else "alone" if name.startswith(NAMED_ALONE_SCRIPTS) else "drop"


def left_out(text: str) -> str:
    """What `clean_text` leaves out of `text`, as the user wrote it: each run of left-out letters and emoji (with
    their marks) once, in order, separated by spaces ("" when none): "привет пока" for "Say привет and пока"."""
    runs, current = [], ""
    for ch, dropped in _marked(unicodedata.normalize("NFC", text)):
        if dropped:
            current += ch
        elif current:
            runs.append(current)
            current = ""
    return " ".join(dict.fromkeys(runs + ([current] if current else [])))


def normalize_text(text: str) -> str:
    """Collapse whitespace and spell out money, decimals, times, dates and abbreviations with inner dots."""
    text = " ".join(text.split())
    for pattern, replacement in _REWRITES:
        text = pattern.sub(replacement, text)
    return " ".join(text.split())  # a dropped bullet or "*" leaves two spaces


def check_text(text: str) -> str:
    """`clean_text` then `normalize_text`: what the voice will actually read."""
    return normalize_text(clean_text(text))
