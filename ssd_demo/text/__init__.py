"""English text -> clean text -> chunks -> timed phoneme tokens, for the embedded voice.

1. `clean_text`: Unicode NFC, control characters (NUL included) become spaces, whitespace collapses;
   text with no Latin letter or digit is refused (the voice speaks English only); letters of scripts
   the English voice can only name ("Chinese letter") and emoji are left out, and `left_out` says which.
2. `normalize_text`: money, decimals, clock times, dates, years, phone numbers, ranges, units and abbreviations
   are spelled out as people say them, so that eSpeak reads words (not "dash" or "asterisk") and a dot inside
   "12.50" or "Dr." is never read as the end of a sentence.
3. `split_text`: sentences, then phrases at , ; : and dashes, then balanced word groups, until
   every chunk fits a phoneme budget. Joining the chunk texts with single spaces gives back the
   normalised text exactly: nothing is dropped.
4. `phonemes`: eSpeak NG's phoneme events (`ssd_demo.text.espeak`) mapped onto the fixed inventory
   `SYMBOLS` below: one token per sound (stress marks part of the vowel), and one pause token per
   pause, labelled with the punctuation that caused it. Training uses the same events with their
   start times (`phoneme_track`), so training and inference read phonemes the same way.
"""

from __future__ import annotations

import calendar
import re
import unicodedata
from dataclasses import dataclass

from . import espeak
from ..errors import TextError


#: Longest accepted text, in characters (a few paragraphs; it is spoken chunk by chunk).
MAX_TEXT_CHARS = 3000

#: Default chunk budget in phoneme tokens (pauses included); see docs/benchmarks.md for how it was chosen.
CHUNK_PHONEMES = 90

#: Most chunks one text may take: 3,000 characters of prose take about 70, but spelled-out digits take
#: several phonemes per character, and the character limit alone would no longer bound the work.
MAX_CHUNKS = 120

PAUSE = "_"
PAUSE_MARKS = ",.?!;:"
PAUSES = (PAUSE,) + tuple(PAUSE + mark for mark in PAUSE_MARKS)

CONSONANTS = (
    "b", "d", "f", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "x", "z",
    "ç", "ð", "ŋ", "ɡ", "ɬ", "ɹ", "ɾ", "ʃ", "ʒ", "ʔ", "θ", "dʒ", "tʃ",
)
#: Vowels and syllabic consonants: each also appears with primary (ˈ) and secondary (ˌ) stress.
VOWELS = (
    "a", "e", "i", "o", "æ", "ɐ", "ɑ", "ɔ", "ə", "ɚ", "ɛ", "ɜ", "ɪ", "ʊ", "ʌ", "ᵻ",
    "iː", "uː", "ɑː", "ɔː", "ɜː", "aɪ", "aʊ", "eɪ", "oʊ", "ɔɪ", "iə", "ɛɹ", "ɪɹ", "ʊɹ", "ɑːɹ", "ɔːɹ",
    "aɪɚ", "aɪə", "əl", "n̩", "ɑ̃",
)
STRESS = ("", "ˈ", "ˌ")

#: The phoneme inventory, in id order. Fixed in code so that ids never depend on a corpus.
SYMBOLS: tuple[str, ...] = PAUSES + CONSONANTS + tuple(mark + vowel for vowel in VOWELS for mark in STRESS)
SYMBOL_TO_INDEX = {symbol: index for index, symbol in enumerate(SYMBOLS)}

#: Stress-free phoneme classes (what the phoneme recognizer hears and PER counts); pauses excluded.
BASE_PHONEMES: tuple[str, ...] = CONSONANTS + VOWELS
BASE_TO_INDEX = {symbol: index for index, symbol in enumerate(BASE_PHONEMES)}

_CURRENCIES = {"$": ("dollar", "dollars"), "£": ("pound", "pounds"), "€": ("euro", "euros"), "¥": ("yen", "yen")}
_CURRENCY = "[$£€¥]"
_SCALES = {"k": "thousand", "m": "million", "b": "billion", "bn": "billion", "t": "trillion"}


def _money(match: re.Match) -> str:
    """"$1" -> "1 dollar", "€3.50" -> "3 euros 50" (cents as a number, as people say them), "$0.99" / "$.99" ->
    "99 cents", "$1.05" -> "1 dollar and 5 cents", "$2.5" -> "2.5 dollars", "¥500" -> "500 yen"."""
    symbol, whole, decimals = match.group(1), match.group(2) or "0", match.group(3)
    cents = decimals is None or len(decimals) == 2
    one, many = ("penny", "pence") if symbol == "£" else ("cent", "cents")
    if whole == "0" and cents and decimals and decimals != "00":
        return f"{int(decimals)} {one if int(decimals) == 1 else many}"
    unit = _CURRENCIES[symbol][0 if whole == "1" and cents else 1]
    if not cents:
        return f"{whole}.{decimals} {unit}"
    if not decimals or decimals == "00":
        return f"{whole} {unit}"
    if decimals[0] == "0":  # "1 dollar 05" would be read "1 dollar zero 5"
        return f"{whole} {unit} and {int(decimals)} {one if int(decimals) == 1 else many}"
    return f"{whole} {unit} {decimals}"


def _scaled_money(match: re.Match) -> str:
    """"$5M" / "$5 million" -> "5 million dollars", "€1.5bn" -> "1.5 billion euros"."""
    scale = match.group(3)
    scale = _SCALES.get(scale.lower(), scale.lower())
    return f"{match.group(2)} {scale} {_CURRENCIES[match.group(1)][1]}"


_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")
_MONTH_NAMES = "|".join(_MONTHS)


def _ordinal(day: int) -> str:
    suffix = "th" if 10 <= day % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return f"{day}{suffix}"


def _year(year: str) -> str:
    """As people say a year: "1999" -> "19 99" (eSpeak would say "nineteen hundred ninety nine"), "1905" ->
    "19 oh 5", "1800" -> "18 hundred"; 2000-2099 and two-digit years are left to eSpeak ("two thousand twenty
    five")."""
    if len(year) != 4 or year[:2] == "20" or year[0] == "0":
        return year
    if year[2:] == "00":
        return f"{year[:2]} hundred"
    return f"{year[:2]} {year[2:]}" if year[2] != "0" else f"{year[:2]} oh {year[3]}"


def _full_year(year: str) -> str:
    """A two-digit year as written in a date: "25" -> "2025", "87" -> "1987" (the POSIX rule: 69-99 are 19xx)."""
    if len(year) != 2:
        return year
    return ("19" if int(year) >= 69 else "20") + year


#: Words after which a number of 1100-1999 is a year ("in 1999", "since 1850", "the 1999 election"); elsewhere
#: it is a quantity ("1250 people", "1999 euros").
_YEAR_BEFORE = re.compile(
    r"(?:\b(?i:in|since|from|by|until|till|before|after|during|around|about|circa|ca\.|of|year|born|built|founded|"
    r"between|early|late|mid|the|summer|spring|autumn|fall|winter|" + _MONTH_NAMES + r")|\b(?:"
    + _MONTH_NAMES + r") \d{1,2}(?:st|nd|rd|th)?,?|\(|1[1-9]\d\d (?i:to|and|or|until|till|through)) $")


def _year_in_context(match: re.Match) -> str:
    """"in 1999" -> "in 19 99", "the 1990s" -> "the 19 90s", "(1850)" -> "(18 50)"; "1250 people" stays a number."""
    year, suffix = match.group(1), match.group(2)
    before = match.string[max(0, match.start() - 30) : match.start()]
    if suffix or _YEAR_BEFORE.search(before) or match.string.startswith(")", match.end()):
        return _year(year) + (suffix.replace("'", "") if suffix else "")
    return match.group(0)


def _date(month: str, day: str, year: str | None, fallback: str) -> str:
    """A real calendar date in words, or `fallback` (the text as written) for "2/30/2025" or "13/13/2025"; no
    year: any day that some year has ("on 2/29")."""
    m, d = int(month), int(day)
    full_year = int(_full_year(year)) if year else 2024
    if not (1 <= m <= 12 and 1 <= d <= calendar.monthrange(full_year, m)[1]):
        return fallback
    return f"{_MONTHS[m - 1]} {_ordinal(d)}" + (f", {_year(_full_year(year))}" if year else "")


def _slash_date(match: re.Match) -> str:
    """"3/14/2025" -> "March 14th, 2025", "3/14/25" too. Month first, as in the US, unless only day-first makes a
    date ("14/3/2025"); "4/5/2025" is read as April 5th (the order cannot be told from the digits)."""
    first, second, year = match.groups()
    if int(first) > 12 >= int(second):
        first, second = second, first
    return _date(first, second, year, match.group(0))


def _slash_date_after_preposition(match: re.Match) -> str:
    """"on 3/4" -> "on March 4th" (after "on", "by", "until", ... a slash pair is a date, not a fraction)."""
    word, first, second = match.groups()
    return f"{word} " + _date(first, second, None, f"{first}/{second}")


def _dotted_date(match: re.Match) -> str:
    """"14.03.2025" -> "March 14th, 2025": day first, as where dots are written, unless only month-first fits."""
    first, second, year = match.groups()
    if int(second) > 12 >= int(first):
        first, second = second, first
    return _date(second, first, year, match.group(0))


def _iso_date(match: re.Match) -> str:
    """"2025-03-14" -> "March 14th, 2025"."""
    year, month, day = match.groups()
    return _date(month, day, year, match.group(0))


def _month_day(match: re.Match) -> str:
    """"January 5" -> "January 5th", "5 January" -> "5th January": a day of the month is an ordinal."""
    month, day = match.group("month"), int(match.group("day"))
    if not 1 <= day <= 31:
        return match.group(0)
    return f"{month} {_ordinal(day)}" if match.group(0).startswith(month) else f"{_ordinal(day)} {month}"


def _clock(hours: str, minutes: str) -> str:
    """"9:05" -> "9 oh 5", "10:00" -> "10", "7:45" -> "7 45", "06:45" -> "6 45", "00:00" -> "midnight"."""
    hours = str(int(hours))
    if minutes == "00":
        return "midnight" if hours == "0" else hours
    return f"{hours} oh {minutes[1]}" if minutes[0] == "0" else f"{hours} {minutes}"


def _clock_with_seconds(match: re.Match) -> str:
    """"10:00:30" -> "10 and 30 seconds" (not "10" followed by ":30")."""
    hours, minutes, seconds = match.groups()
    spoken = _clock(hours, minutes)
    if seconds == "00":
        return spoken
    return f"{spoken} and {int(seconds)} second{'' if int(seconds) == 1 else 's'}"


def _timestamp(match: re.Match) -> str:
    """"2025-03-14T10:30:00Z" -> "2025-03-14 at 10:30:00 UTC" (the date and clock rules then read both parts)."""
    date, clock, zone = match.groups()
    return f"{date} at {clock}" + (" U-T-C" if zone == "Z" else "")


_DENOMINATORS = {2: ("half", "halves"), 3: ("third", "thirds"), 4: ("quarter", "quarters"), 5: ("fifth", "fifths"),
                 6: ("sixth", "sixths"), 8: ("eighth", "eighths"), 10: ("tenth", "tenths")}


def _fraction(match: re.Match) -> str:
    """"1/2" -> "1 half", "3/4" -> "3 quarters"; other pairs as two numbers ("24/7" -> "24 7", "50/50")."""
    top, bottom = int(match.group(1)), int(match.group(2))
    if bottom in _DENOMINATORS and 0 < top < bottom:
        return f"{top} {_DENOMINATORS[bottom][top > 1]}"
    return f"{match.group(1)} {match.group(2)}"


def _mixed_number(match: re.Match) -> str:
    """"1 1/2" -> "1 and a half", "2 3/4" -> "2 and 3 quarters"."""
    whole, top, bottom = match.group(1), int(match.group(2)), int(match.group(3))
    if bottom not in _DENOMINATORS or not 0 < top < bottom:
        return match.group(0)
    return f"{whole} and {'a' if top == 1 else top} {_DENOMINATORS[bottom][top > 1]}"


def _digit_groups(match: re.Match) -> str:
    """A phone number digit by digit, a pause per group: "555-123-4567" -> "5 5 5, 1 2 3, 4 5 6 7", "+44 20 7946
    0958" -> "plus 4 4, 2 0, 7 9 4 6, 0 9 5 8"."""
    groups = re.findall(r"\d+", match.group(0))
    return ("plus " if match.group(0).startswith("+") else "") + ", ".join(" ".join(group) for group in groups)


def _local_phone_or_range(match: re.Match) -> str:
    """"555-0199" is a phone number; "100-2000", both round, a range ("100 to 2000")."""
    first, second = match.groups()
    if first.endswith("0") and second.endswith("0"):
        return f"{first} to {second}"
    return _digit_groups(match)


def _dotted_numbers(match: re.Match) -> str:
    """"3.11.4" -> "3 point 11 point 4" (a version); "192.168.1.1" -> "192 dot 168 dot 1 dot 1" (an address)."""
    parts = match.group(0).split(".")
    address = len(parts) == 4 and all(int(part) <= 255 for part in parts)
    return (" dot " if address else " point ").join(parts)


_UNITS = {
    "km": ("kilometer", "kilometers"), "kg": ("kilogram", "kilograms"), "cm": ("centimeter", "centimeters"),
    "mm": ("millimeter", "millimeters"), "ml": ("milliliter", "milliliters"), "mg": ("milligram", "milligrams"),
    "mph": ("mile per hour", "miles per hour"), "km/h": ("kilometer per hour", "kilometers per hour"),
    "kph": ("kilometer per hour", "kilometers per hour"), "lb": ("pound", "pounds"), "lbs": ("pound", "pounds"),
    "oz": ("ounce", "ounces"), "ft": ("foot", "feet"), "tsp": ("teaspoon", "teaspoons"),
    "tbsp": ("tablespoon", "tablespoons"), "KB": ("kilobyte", "kilobytes"), "MB": ("megabyte", "megabytes"),
    "GB": ("gigabyte", "gigabytes"), "TB": ("terabyte", "terabytes"), "MHz": ("megahertz", "megahertz"),
    "GHz": ("gigahertz", "gigahertz"), "kW": ("kilowatt", "kilowatts"), "kWh": ("kilowatt hour", "kilowatt hours"),
}


def _unit(match: re.Match) -> str:
    """"5km" / "5 km" -> "5 kilometers", "1 lb" -> "1 pound" (eSpeak spells unit symbols letter by letter)."""
    number, unit = match.group(1), match.group(2)
    return f"{number} {_UNITS[unit][0 if number == '1' else 1]}"


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


#: Digit runs longer than LONG_NUMBER are read digit by digit, as people read codes (eSpeak NG would name
#: them in sextillions, and from about 35 digits on it silently drops the rest); words longer than
#: LONG_WORD letters are read in pieces (eSpeak drops the end of words over about 100 letters).
LONG_NUMBER = 15
LONG_WORD = 40

_MONTH_ABBREVIATIONS = {month[:3]: month for month in _MONTHS} | {"Sept": "September"}
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
_UNIT_NAMES = "|".join(sorted(map(re.escape, _UNITS), key=len, reverse=True))


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
    (re.compile(r"\b(\d{4}-\d\d-\d\d)T(\d\d:\d\d(?::\d\d)?)(?:\.\d+)?(Z|[+-]\d\d:?\d\d)?\b"), _timestamp),
    # years as people say them ("1999-2005" -> "19 99 to 2005", "in 1999" -> "in 19 99", "the 1990s"), before
    # thousands separators go ("1,999" stays a quantity)
    (re.compile(r"(?<![\d.,:/$£€¥-])(1[1-9]\d\d|20\d\d)(s?)[-–](1[1-9]\d\d|20\d\d)(s?)(?![\d-])"),
     lambda m: f"{_year(m.group(1))}{m.group(2)} to {_year(m.group(3))}{m.group(4)}"),
    (re.compile(r"(?<![\d.,:/$£€¥-])(1[1-9]\d\d)(s|'s)?(?![\d.,:/-]?\d)"), _year_in_context),
    (re.compile(r"(?<=\d),(?=\d{3}\b)"), ""),  # thousands separators: "$1,200.50" is one amount
    # money: "$10-20" -> "10 to 20 dollars", "20$" -> "$20", "$5M" -> "5 million dollars", "$ 5", "$.99"
    (re.compile(rf"({_CURRENCY}) ?(\d+(?:\.\d+)?) ?[-–] ?{_CURRENCY}? ?(\d+(?:\.\d+)?)(?![\d.]*\d)"),
     r"\2 to \1\3"),
    (re.compile(rf"(?<![\w$£€¥.])(\d+(?:\.\d+)?) ?({_CURRENCY})(?![\w$£€¥])"), r"\2\1"),
    (re.compile(rf"({_CURRENCY}) ?(\d+(?:\.\d+)?) ?(thousand|million|billion|trillion|[kKmMbBtT]|bn)\b"),
     _scaled_money),
    (re.compile(rf"({_CURRENCY}) ?(\d+)?(?:\.(\d+))?(?<=\d)(?![\w.,]*[A-Za-z])"), _money),
    # phone numbers, digit by digit: 1-800-555-1234, +44 20 7946 0958, (555) 123-4567, 555-123-4567, 555-0199
    (re.compile(r"(?<![\d-])1[-. ]\d{3}[-. ]\d{3}[-. ]\d{4}(?![\d-]|\.\d)"), _digit_groups),
    (re.compile(r"\+\d{1,3}(?:[ -]\(?\d{1,4}\)?){2,5}(?![\d-]|\.\d)"), _digit_groups),
    (re.compile(r"(?<![\d-])(?:\(\d{3}\) ?|\d{3}[-.])\d{3}[-.]\d{4}(?![\d-]|\.\d)"), _digit_groups),
    (re.compile(r"(?<![\w.,:/-])(\d{3})-(\d{4})(?![\w-]|[.,:/]\d)"), _local_phone_or_range),
    (re.compile(rf"\d{{{LONG_NUMBER + 1},}}"), _digit_by_digit),
    # dates: 3/14/2025, 3/14/25, on 3/4, 2025-03-14, 14.03.2025
    (re.compile(r"(?<![\d/.-])(\d{1,2})/(\d{1,2})/(\d{4}|\d{2})(?![\d/])"), _slash_date),
    (re.compile(r"\b([Oo]n|[Bb]y|[Uu]ntil|[Tt]ill|[Ss]ince|[Ff]rom|[Bb]efore|[Aa]fter|[Dd]ue) (\d{1,2})/(\d{1,2})"
                r"(?![\d/])"), _slash_date_after_preposition),
    (re.compile(r"(?<![\d/.-])(\d{4})-(\d{2})-(\d{2})(?![\d-])"), _iso_date),
    (re.compile(r"(?<![\d.])(\d{1,2})\.(\d{1,2})\.(\d{4})(?!\d|\.\d)"), _dotted_date),
    (re.compile(r"(?<![\d.])\d+(?:\.\d+){2,}(?![\d]|\.\d)"), _dotted_numbers),  # versions, addresses
    (re.compile(r"(?<![\d.,/])(\d+) (\d)/(\d{1,2})(?![\d/])"), _mixed_number),
    (re.compile(r"(?<![\d/.])(\d{1,3})/(\d{1,3})(?![\d/])"), _fraction),
    # "3-4 times", "52-48", "pp. 12-15": a hyphen between numbers is "to", not "dash"
    (re.compile(r"(?<![\w.,:/-])(\d+(?:\.\d+)?) ?[-–] ?(\d+(?:\.\d+)?)(?![\w-]|[.,:/]\d)"), r"\1 to \2"),
    (re.compile(rf"(?<![\w.])(\d+(?:\.\d+)?) ?({_UNIT_NAMES})(?![\w/])\.?"),
     _with_sentence_end(_unit, names_follow=False)),
    (re.compile(r"(?<![\w.])(\d+(?:\.\d+)?) ?(bn|[MB])\b(?= [a-z])"),
     lambda m: f"{m.group(1)} {_SCALES[m.group(2).lower()]}"),  # "1.5B parameters"
    (re.compile(r"\b(\d{1,2})\.([0-5]\d)(?= ?[aApP]\.?[mM]\b)"), r"\1:\2"),  # "6.30 pm" is a time
    (re.compile(r"(\d+)\.(\d+)"), lambda m: f"{m.group(1)} point {' '.join(m.group(2))}"),
    (re.compile(r"(?<=\d) ?([aApP])[mM]\b"), lambda m: f" {m.group(1).upper()}M"),  # "7pm", "6 30 pm"
    (re.compile(r"\b(\d{1,2}):(\d\d):(\d\d)(?!\d)"), _clock_with_seconds),
    (re.compile(r"\b(\d{1,2}):(\d\d)(?!\d|:\d)"), lambda m: _clock(m.group(1), m.group(2))),  # "7:30pm" too
    # eSpeak says "AM" as letters
    (re.compile(r"\b([aApP])\.[mM]\.?(?![A-Za-z])"), _with_sentence_end(lambda m: f"{m.group(1).upper()}M")),
    # "on Elm St." / "Mulholland Dr." is a street (a name before it, mid-sentence); "St. Louis" a saint
    (re.compile(rf"(?:(?<=[a-z0-9,] )|(?<=\d[A-Z] ))([A-Z][a-z]*) ({_alternatives(_STREETS)})\."),
     _with_sentence_end(lambda m: f"{m.group(1)} {_STREETS[m.group(2)]}")),
    (re.compile(rf"\b({_alternatives(_TITLES)})\.(?= [A-Z])"), lambda m: _TITLES[m.group(1)]),
    (re.compile(rf"\b({_alternatives(_AFTER_WORDS)})\.?(?![\w.]|\.\w)"),
     _with_sentence_end(lambda m: _AFTER_WORDS[m.group(1)])),
    (re.compile(r"\bSt\.(?= [A-Z])"), "Saint"),
    (re.compile(rf"\b({_alternatives(_MONTH_ABBREVIATIONS)})\.(?= \d)"), lambda m: _MONTH_ABBREVIATIONS[m.group(1)]),
    (re.compile(rf"\b({_alternatives(_WEEKDAYS)})\.?(?=,? (?:\d|{_MONTH_NAMES}))"), lambda m: _WEEKDAYS[m.group(1)]),
    (re.compile(rf"\b(?P<month>{_MONTH_NAMES}) (?P<day>\d{{1,2}})(?![\d:]|\.\d| ?(?:st|nd|rd|th)\b)"), _month_day),
    (re.compile(rf"(?<![\w.,])(?P<day>\d{{1,2}}) (?P<month>{_MONTH_NAMES})\b"), _month_day),
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
    dropping = False
    for ch in text:
        if unicodedata.category(ch).startswith("M"):
            yield ch, dropping  # a combining mark goes with the letter it sits on
            continue
        dropping = _unreadable(ch)
        yield ch, dropping


#: Scripts whose letters eSpeak NG's English voice reads by name, or spells, well enough to keep.
READABLE_SCRIPTS = ("LATIN", "GREEK", "CYRILLIC")


#: Pictograph blocks (emoji, their skin tones and flags, dingbats, miscellaneous symbols).
EMOJI_BLOCKS = ((0x2600, 0x27BF), (0x2B00, 0x2BFF), (0x1F000, 0x1FAFF))


def _unreadable(ch: str) -> bool:
    """A letter of another script (CJK, kana, Arabic, Hebrew, Thai, ...): eSpeak's English voice would say
    "Chinese letter" or "Hebrew shin" for it, or switch language mid-sentence, so it is left out. Judged on
    its compatibility form, so that "µ" (Greek mu), "ℓ" or bold maths letters count as what they look like;
    modifier letters ("ʻ" in Hawaiʻi, "ʼ") are punctuation-like and stay. Emoji go too: eSpeak reads 😀
    as "grinning face" and 🍕 as "pizza", in the middle of the sentence."""
    if unicodedata.category(ch) in ("So", "Sk") and any(low <= ord(ch) <= high for low, high in EMOJI_BLOCKS):
        return True
    if not ch.isalpha() or unicodedata.category(ch) == "Lm":
        return False
    return not unicodedata.name(unicodedata.normalize("NFKC", ch)[0], "").startswith(READABLE_SCRIPTS)


def left_out(text: str) -> str:
    """The distinct letters and emoji (with their marks) `clean_text` leaves out of `text`, in order ("" when none)."""
    return "".join(dict.fromkeys(ch for ch, dropped in _marked(unicodedata.normalize("NFC", text)) if dropped))


def normalize_text(text: str) -> str:
    """Collapse whitespace and spell out money, decimals, times, dates and abbreviations with inner dots."""
    text = " ".join(text.split())
    for pattern, replacement in _REWRITES:
        text = pattern.sub(replacement, text)
    return " ".join(text.split())  # a dropped bullet or "*" leaves two spaces


def check_text(text: str) -> str:
    """`clean_text` then `normalize_text`: what the voice will actually read."""
    return normalize_text(clean_text(text))


# ---------------------------------------------------------------- phonemes


@dataclass(frozen=True)
class TimedPhoneme:
    symbol: int  # index into SYMBOLS
    start_ms: int
    end_ms: int


def _symbol_for(ipa: str) -> int | None:
    """An eSpeak IPA event -> inventory index; unknown stressed vowels fall back to their base."""
    if ipa in SYMBOL_TO_INDEX:
        return SYMBOL_TO_INDEX[ipa]
    bare = ipa.lstrip("ˈˌ")
    if bare in SYMBOL_TO_INDEX:
        return SYMBOL_TO_INDEX[bare]
    bare = "".join(ch for ch in unicodedata.normalize("NFD", bare) if not unicodedata.combining(ch))
    return SYMBOL_TO_INDEX.get(bare)  # None: a sound outside English (rare in foreign names): skipped


def _pause_symbol(text: str, text_position: int) -> int:
    """Label a pause with the punctuation just before it (eSpeak reports 1-based positions)."""
    index = text_position - 2
    for offset in range(3):
        i = index - offset
        if 0 <= i < len(text) and text[i] in PAUSE_MARKS:
            return SYMBOL_TO_INDEX[PAUSE + text[i]]
        if 0 <= i < len(text) and text[i].isalnum():
            break
    return SYMBOL_TO_INDEX[PAUSE]


def events_to_track(text: str, events: list[espeak.PhonemeEvent], duration_ms: int) -> list[TimedPhoneme]:
    """eSpeak events -> inventory symbols with [start, end) times; consecutive pauses merge into one."""
    track: list[list[int]] = []  # [symbol, start]
    for event in events:
        if event.ipa == "":
            symbol = _pause_symbol(text, event.text_position)
            if track and SYMBOLS[track[-1][0]].startswith(PAUSE):
                if track[-1][0] == SYMBOL_TO_INDEX[PAUSE]:
                    track[-1][0] = symbol  # keep the more specific label
                continue
        else:
            symbol = _symbol_for(event.ipa)
            if symbol is None:
                continue
        track.append([symbol, event.start_ms])
    ends = [start for _, start in track[1:]] + [max(duration_ms, track[-1][1] if track else 0)]
    return [TimedPhoneme(symbol, start, max(start, end)) for (symbol, start), end in zip(track, ends)]


def phoneme_track(text: str) -> list[TimedPhoneme]:
    """Timed phonemes of already normalised text, as eSpeak NG (en-us, 175 wpm) plans them."""
    rendering_events = espeak.phoneme_events(text)
    last = rendering_events[-1].start_ms if rendering_events else 0
    return events_to_track(text, rendering_events, last)


def phonemes(text: str) -> list[int]:
    """Inventory indices for `text` (cleaned and normalised here); TextError if nothing is pronounceable."""
    text = check_text(text)
    symbols = [p.symbol for p in phoneme_track(text)]
    if not any(not SYMBOLS[s].startswith(PAUSE) for s in symbols):
        raise TextError("Nothing pronounceable in the text: it needs at least one word.")
    return symbols


def base_phonemes(symbols: list[int]) -> list[int]:
    """Inventory indices -> stress-free phoneme classes, pauses dropped (the units PER counts)."""
    out = []
    for s in symbols:
        symbol = SYMBOLS[s]
        if not symbol.startswith(PAUSE):
            out.append(BASE_TO_INDEX[symbol.lstrip("ˈˌ")])
    return out


# ---------------------------------------------------------------- chunking


@dataclass(frozen=True)
class Chunk:
    text: str
    pause_after_ms: int  # silence to insert after this chunk when joining audio


#: Silence after a chunk, by how it ends: sentence end, phrase break, or a split inside a phrase.
SENTENCE_PAUSE_MS = 350
PHRASE_PAUSE_MS = 150
WORD_PAUSE_MS = 30

# After . ! ? and any closing quotes or brackets (kept with the sentence they close): fixed-width lookbehinds.
_SENTENCE_END = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"')\]])|(?<=[.!?][\"')\]]{2}))\s+")
_PHRASE_END = re.compile(r"(?<=[,;:])\s+|\s+(?=[-–—]+\s)")


def _pause_for(piece: str, is_last: bool) -> int:
    stripped = piece.rstrip("\"')] ")
    if is_last or stripped.endswith((".", "!", "?")):
        return SENTENCE_PAUSE_MS
    if stripped.endswith((",", ";", ":", "-", "–", "—")):
        return PHRASE_PAUSE_MS
    return WORD_PAUSE_MS


def split_text(text: str, budget: int = CHUNK_PHONEMES, count=None) -> list[Chunk]:
    """Chunks of normalised `text` of at most `budget` phoneme tokens each (single words may exceed it).

    `count(piece) -> int` measures a piece (default: its eSpeak phoneme tokens). Joining the chunk
    texts with single spaces gives `text` back unchanged.
    """
    count = count or (lambda piece: len(phoneme_track(piece)))
    words_pieces: list[str] = []
    for sentence in _split(text, _SENTENCE_END):
        if count(sentence) <= budget:
            words_pieces.append(sentence)
            continue
        for phrase in _pack(_split(sentence, _PHRASE_END), budget, count):
            if count(phrase) <= budget:
                words_pieces.append(phrase)
            else:
                words_pieces.extend(_split_words(phrase, budget, count))
    words_pieces = _merge_wordless(words_pieces)
    return [Chunk(piece, _pause_for(piece, i == len(words_pieces) - 1)) for i, piece in enumerate(words_pieces)]


def _merge_wordless(pieces: list[str]) -> list[str]:
    """A piece with nothing to read ("!" left after its sentence's letters were dropped) joins its neighbour:
    on its own it would be refused as text without letters."""
    out: list[str] = []
    for piece in pieces:
        if out and not (_has_words(out[-1]) and _has_words(piece)):
            out[-1] = out[-1] + " " + piece
        else:
            out.append(piece)
    return out


def _has_words(piece: str) -> bool:
    return any(ch.isalnum() for ch in piece)


def _split(text: str, pattern: re.Pattern) -> list[str]:
    return [piece for piece in pattern.split(text) if piece]


def _pack(pieces: list[str], budget: int, count) -> list[str]:
    """Greedily join neighbouring pieces while they fit the budget (fewer, longer chunks sound better)."""
    out: list[str] = []
    for piece in pieces:
        if out and count(out[-1] + " " + piece) <= budget:
            out[-1] = out[-1] + " " + piece
        else:
            out.append(piece)
    return out


def _split_words(phrase: str, budget: int, count) -> list[str]:
    """Split a phrase into the fewest word groups that fit, their sizes differing by one word at most."""
    words = phrase.split(" ")
    for parts in range(2, len(words) + 1):
        size, extra = divmod(len(words), parts)
        bounds = [i * size + min(i, extra) for i in range(parts + 1)]
        groups = [" ".join(words[a:b]) for a, b in zip(bounds, bounds[1:])]
        if all(count(g) <= budget for g in groups):
            return groups
    return words


__all__ = [
    "BASE_PHONEMES", "CHUNK_PHONEMES", "Chunk", "MAX_TEXT_CHARS", "SYMBOLS", "TextError", "TimedPhoneme",
    "base_phonemes", "check_text", "clean_text", "events_to_track", "normalize_text", "phoneme_track",
    "phonemes", "split_text",
]
