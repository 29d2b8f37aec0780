"""English readings CosyVoice 2's default normaliser adds to the shared one (`ssd_demo.text.normalize_text`).

Before it (`before_shared`): e-mail addresses and web addresses as a reader says them ("jane.doe42@example.com"
-> "jane dot doe 42 at example dot com", "https://example.org/page2" -> "example dot org slash page 2"), h:mm:ss
durations ("2:03:11" -> "2 hours 3 minutes and 11 seconds"; after "at", or before "am"/"pm", it stays a clock time
for the shared rules), numbers dialled digit by digit ("Dial 911" -> "Dial nine one one", "ext. 204" -> "extension
two zero four"), time units as typed ("3h 20m" -> "3 hours 20 minutes", "1 hr" -> "1 hour"), areas and volumes
("20 m²" -> "20 square meters") and heights (5'11" -> "5 feet 11 inches"). After it (`after_shared`): four-digit
numbers it left as quantities that the context makes years ("1984 is a novel", "ended in 1945, not 1944", "from
1042"), and a day before its month read "the 5th of November". The digits left are spelt out later
(`spell_out_number`). `read_grouped_digits` tells thousands grouped by spaces ("12 345") from numbers listed with
spaces ("100 200 and 400") for `text_norm`.
"""

from __future__ import annotations

import re

from ...text.numbers import MONTH_NAMES, read_year

_SPOKEN_SYMBOLS = {".": "dot", "@": "at", "/": "slash", "-": "dash", "_": "underscore", "+": "plus", ":": "colon",
                   "?": "question mark", "=": "equals", "&": "and", "#": "hash", "~": "tilde", "%": "percent"}
_EMAIL = re.compile(r"(?<![\w.+-])[\w.+-]*\w@[\w-]+(?:\.[\w-]+)+")
_URL = re.compile(r"\b(?:https?://|www\.)[^\s<>\"'()\[\]]*[^\s<>\"'()\[\].,;:!?]")
_TOP_LEVEL = "com|org|net|edu|gov|io|ai|dev|info|co|uk|us|de|fr|cn|jp"
_DOMAIN = re.compile(rf"(?<![\w@./-])[A-Za-z][\w-]*(?:\.[\w-]+)*\.(?:{_TOP_LEVEL})(?:/[^\s<>\"'()]*[^\s<>\"'().,;:!?])?"
                     r"(?![\w@-]|\.\w)")


def spell_address(address: str) -> str:
    """An e-mail or web address as said aloud: the scheme left out ("https://"), "www" as letters, a two-letter
    top-level domain as letters ("co dot U K", "acme dot I O"), symbols named ("dot", "at", "slash", "dash"),
    digits set apart from letters for the number step ("page2" -> "page 2")."""
    address = re.sub(r"^https?://", "", address).rstrip("/")
    address = re.sub(r"^www\.", "w w w.", address)
    parts = [part for part in re.split(r"([./@\-_+:?=&#~%])", address) if part]
    domain_end = parts.index("/") if "/" in parts else len(parts)  # the host ends at the first slash
    if domain_end >= 2 and parts[domain_end - 2] == "." and re.fullmatch(r"[a-z]{2}", parts[domain_end - 1]):
        parts[domain_end - 1] = " ".join(parts[domain_end - 1].upper())  # a country code: "uk" -> "U K"
    words = [_SPOKEN_SYMBOLS.get(part, part) for part in parts]
    return re.sub(r"(?<=[A-Za-z])(?=\d)|(?<=\d)(?=[A-Za-z])", " ", " ".join(words))


def _address(match: re.Match) -> str:
    return spell_address(match.group(0))


#: E-mail and web addresses in Latin letters inside Chinese text (`\w` would take the Chinese around them).
_LATIN_ADDRESS = re.compile(
    r"(?<![A-Za-z0-9._%+-])(?:[A-Za-z0-9._%+-]*[A-Za-z0-9]@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+"
    r"|(?:https?://|www\.)[A-Za-z0-9./?=&_%#:~+-]*[A-Za-z0-9/]"
    rf"|[A-Za-z][A-Za-z0-9-]*(?:\.[A-Za-z0-9-]+)*\.(?:{_TOP_LEVEL})\b)", re.ASCII)


def spell_latin_addresses(text: str) -> str:
    """Addresses in Chinese text said as in English, digits one by one ("zhang.wei@163.com" -> "zhang dot wei
    at one six three dot com"): the Chinese reading would take each dot for a full stop and 163 for a number."""
    def spoken(match: re.Match) -> str:
        words = re.sub(r"\d", lambda digit: f" {DIGIT_WORDS[int(digit.group(0))]} ", spell_address(match.group(0)))
        return f" {' '.join(words.split())} "
    return _LATIN_ADDRESS.sub(spoken, text)


def read_duration(match: re.Match) -> str:
    """"2:03:11" -> "2 hours 3 minutes and 11 seconds", "0:45:00" -> "45 minutes"; a clock time (after "at",
    or before "am"/"pm") is left as written."""
    before = match.string[max(0, match.start() - 3) : match.start()]
    after = match.string[match.end() : match.end() + 4]
    if before.lower() == "at " or re.match(r" ?[aApP]\.?[mM]\b", after):
        return match.group(0)
    names = ("hour", "minute", "second")
    parts = [f"{int(value)} {name}{'' if int(value) == 1 else 's'}"
             for value, name in zip(match.groups(), names) if int(value)]
    if not parts:
        return "0 seconds"
    return " ".join(parts[:-1]) + (" and " if len(parts) > 1 else "") + parts[-1]


_DURATION = re.compile(r"(?<![\d:.])(\d{1,2}):([0-5]\d):([0-5]\d)(?![\d:]|\.\d)")

#: Words after a four-digit number that make it a quantity ("1500 of them", "1200 point 5", "1500 thousand").
_QUANTITY_WORDS = frozenset("""
    of point thousand million billion hundred percent per times people men women children feet teeth mice geese
    yen sheep fish deer staff cattle personnel police hertz
    dollars pounds euros cents pence rupees yuan won francs
""".split())
#: "a" + these after a number make it a rate, a quantity ("1750 a week", "1899 dollars a year").
_RATE_UNITS = frozenset("second minute hour day night week month year".split())
#: Words ending in "s" that are not plural nouns.
_NOT_PLURALS = frozenset("""
    is was has does this his its thus yes plus minus always perhaps unless whereas towards afterwards besides as
    us across less
""".split())
#: Words that, after a plural-looking word, make that word a verb ("1945 marks the end", "1984 remains a classic").
_DETERMINERS = frozenset("the a an its his her their our my your this that these those no every".split())
#: Words before a four-digit number that make it a quantity ("more than 1234", "page 1066").
_QUANTITY_BEFORE = frozenset("""
    than over under nearly almost exactly only just some total approximately roughly page pages number room times
    plus minus equals cost costs paid pay weighs score scored of
""".split())
_COPULAS = frozenset("is was were are be".split())
#: Words before a number of 1001-1099 that make it a year ("from 1042", "in 1066").
_YEAR_BEFORE = frozenset("in from since until till before after by circa around year born".split())
_ERAS = frozenset("ad bc ce bce".split())


def _words(text: str) -> list[str]:
    return re.findall(r"[A-Za-z]+|\d+|[^\sA-Za-z\d]", text)


def _is_quantity_noun(following: list[str]) -> bool:
    """Whether the words after a number start with a noun it counts ("copies", "people", "of them", "%"); a
    range or list word and the next number are skipped ("1200 and 1500 people", "1200, 1300 points")."""
    while len(following) >= 2 and following[0].lower() in (",", "and", "or", "to", "-") and following[1].isdigit():
        following = following[2:]
    if following and following[0] in ("%", "‰"):
        return True
    if len(following) >= 2 and following[0].lower() in ("a", "an", "per") and following[1].lower() in _RATE_UNITS:
        return True
    if not following or not following[0].isalpha():
        return False
    word = following[0].lower()
    if word in _QUANTITY_WORDS:
        return True
    if len(word) < 3 or not word.endswith("s") or word.endswith(("ss", "us", "is")) or word in _NOT_PLURALS:
        return False
    return not (len(following) > 1 and following[1].lower() in _DETERMINERS)


def read_year_by_context(match: re.Match) -> str:
    """A four-digit number the shared normaliser left as a quantity, as a year where the context says so:
    1100-1999 unless a noun of quantity follows or a quantity word comes before ("1984 is a novel", "not 1944."
    but "1500 copies", "more than 1234"); 1001-1099 after "in", "from", "since"... or before "AD", "BC"."""
    number = match.group(0)
    before = _words(match.string[max(0, match.start() - 40) : match.start()])
    following = _words(match.string[match.end() : match.end() + 60])
    previous = before[-1].lower() if before else ""
    if following and following[0].lower() in _ERAS:
        return read_year(number)
    if number < "1100":
        return read_year(number) if previous in _YEAR_BEFORE and number != "1000" else number
    if previous in _QUANTITY_BEFORE or previous in ("$", "£", "€", "¥"):
        return number
    if previous in _COPULAS and "year" not in (word.lower() for word in before[-6:]):
        return number
    return number if _is_quantity_noun(following) else read_year(number)


def _day_of_month(match: re.Match) -> str:
    return f"the {match.group(1)} of {match.group(2)}"


#: `inflect`'s words for the ten digits, for numbers read digit by digit (`spell_out_number` uses them too).
DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")

#: A number right after a word for dialling is dialled, not counted ("Dial 911", "ext. 204"). After "call",
#: "phone", "ring" or "text" it may also be a count ("call 100 people"), so a counted noun after it keeps it
#: a number. Two to six digits standing alone: longer runs and grouped ones are the phone rules' to read.
_DIAL = re.compile(r"\b(?P<word>(?P<ext>[Ee]xt\.?)|[Ee]xtension|[Dd]ial(?:s|ed|led|ing|ling)?|"
                   r"(?P<call>[Cc]all(?:s|ed|ing)?|[Pp]hon(?:e|es|ed|ing)|[Rr]ing|[Tt]ext)) (?P<number>[0-9]{2,6})"
                   r"(?! ?[0-9]|[\w-]|[.,:/][0-9])")
#: Words after a number that make it a count after "call" ("call 50 more", "call 100 new customers").
_COUNTED_AFTER = frozenset("more other others new extra different each".split())


def read_dialled_number(match: re.Match) -> str:
    """"Dial 911" -> "Dial nine one one", "ext. 204" -> "extension two zero four"; "call 100 people" stays."""
    word, number = match.group("word"), match.group("number")
    following = _words(match.string[match.end() : match.end() + 60])
    if match.group("call") and (_is_quantity_noun(following) or (following and following[0] in _COUNTED_AFTER)):
        return match.group(0)
    if match.group("ext"):
        word = "Extension" if word[0] == "E" else "extension"
    return f"{word} " + " ".join(DIGIT_WORDS[int(digit)] for digit in number)


_TIME_NAMES = {"h": "hour", "m": "minute", "s": "second"}
_TIME_PART = r"\d+(?:\.\d+)? ?(?:hrs?|h|mins?|m|secs?|s)\b"
#: Durations as typed: "3h 20m", "2 hrs 15 mins", "1h 5m 30s", "45 min". "m" and "s" are minutes and seconds
#: only after a larger unit ("20m" alone may be metres or millions, "the 90s" a decade).
_TIME_UNITS = re.compile(rf"(?<![\w.,:/$£€¥-]){_TIME_PART}(?: {_TIME_PART})*(?![.,]?\d)")


def read_time_units(match: re.Match) -> str:
    """"3h 20m" -> "3 hours 20 minutes", "1 hr" -> "1 hour", "15 mins" -> "15 minutes": read as written, without
    an "and"; units out of order ("5m 3h"), or "m" or "s" alone, are left as they are."""
    parts = re.findall(r"(\d+(?:\.\d+)?) ?([a-z]+)", match.group(0))
    units = [unit for _, unit in parts]
    if len(parts) == 1 and (units[0] in ("m", "s") or (units[0] == "h" and " " in match.group(0))):
        return match.group(0)
    order = ["hms".index(unit[0]) for unit in units]
    if order != sorted(set(order)):
        return match.group(0)
    return " ".join(f"{number} {_TIME_NAMES[unit[0]]}{'' if number == '1' else 's'}" for number, unit in parts)


_LENGTHS = {"km": ("kilometer", "kilometers"), "m": ("meter", "meters"), "cm": ("centimeter", "centimeters"),
            "mm": ("millimeter", "millimeters"), "ft": ("foot", "feet"), "in": ("inch", "inches"),
            "mi": ("mile", "miles")}
#: An area or a volume: "20 m²" -> "20 square meters" (not "20 m squared"), "1 cm³" -> "1 cubic centimeter".
_POWERED_UNIT = re.compile(r"(?<![\w.,])(\d+(?:,\d{3})*(?:\.\d+)?) ?(km|cm|mm|m|ft|in|mi)([²³])")


def read_powered_unit(match: re.Match) -> str:
    number, unit, power = match.groups()
    return f"{number} {'square' if power == '²' else 'cubic'} {_LENGTHS[unit][number != '1']}"


#: A height in feet and inches: 5'11", 5′11″, 5' 11", 6'0" or 5'11 without the inch mark. Inches run 0 to 11
#: ("3'45"" is a track's minutes and seconds, not feet).
_FEET_INCHES = re.compile(r"(?<![\w.'’])(\d{1,2}) ?['′’] ?(\d|1[01]) ?(?:[\"″”]|''|(?![\w'\"″”]|[.,]\d))")


def read_feet_inches(match: re.Match) -> str:
    """5'11" -> "5 feet 11 inches", 6'0" -> "6 feet", 1'1" -> "1 foot 1 inch"."""
    feet, inches = match.groups()
    spoken = f"{feet} {'foot' if feet == '1' else 'feet'}"
    return spoken if inches == "0" else f"{spoken} {inches} {'inch' if inches == '1' else 'inches'}"


#: The next number in a list ("100 200 and 400", "100 200, 400"): a plain number, not one grouped by spaces itself.
_LIST_AFTER = re.compile(r"(?:,? (?:and|or)|,) [0-9]{1,3}(?! ?[0-9])")


def read_grouped_digits(match: re.Match) -> str:
    """Digit groups of the thousands shape ("12 345", "1 000 000", "1_000_000"): one number ("12345"), as a
    thousands separator writes it, but in a list of numbers apart by plain spaces ("He ran 100 200 and 400
    meters" -> "100, 200 and 400"), where each is its own number. A group after the first that begins with 0
    ("25 000") is always part of the number: no number is written with a leading zero."""
    groups = re.split(r"[ _\u00a0\u202f]", match.group(0))
    plain = all(ch.isdigit() or ch == " " for ch in match.group(0))
    listed = _LIST_AFTER.match(match.string, match.end()) is not None
    if plain and listed and not any(group.startswith("0") for group in groups[1:]):
        return ", ".join(groups)
    return "".join(groups)


#: Applied before the shared normaliser: addresses first (their dots and digits must not be read as decimals,
#: versions or acronyms), then durations, numbers dialled, units as typed and heights.
BEFORE_SHARED: tuple[tuple[re.Pattern, object], ...] = (
    (_EMAIL, _address),
    (_URL, _address),
    (_DOMAIN, _address),
    (_DURATION, read_duration),
    (_DIAL, read_dialled_number),
    (_TIME_UNITS, read_time_units),
    (_POWERED_UNIT, read_powered_unit),
    (_FEET_INCHES, read_feet_inches),
)


#: Applied after the shared normaliser: bare four-digit numbers (not part of an amount, a decimal or a time), and
#: "5th November" (a day before its month) as "the 5th of November".
AFTER_SHARED: tuple[tuple[re.Pattern, object], ...] = (
    (re.compile(r"(?<![\w.,:/$£€¥-])1\d{3}(?![\w%]|[.,:/-]\d)"), read_year_by_context),
    (re.compile(rf"(?<!\bthe )\b(\d{{1,2}}(?:st|nd|rd|th)) ({MONTH_NAMES})\b"), _day_of_month),
)


def before_shared(text: str) -> str:
    for pattern, replacement in BEFORE_SHARED:
        text = pattern.sub(replacement, text)
    return text


def after_shared(text: str) -> str:
    for pattern, replacement in AFTER_SHARED:
        text = pattern.sub(replacement, text)
    return text


__all__ = ["DIGIT_WORDS", "after_shared", "before_shared", "read_dialled_number", "read_duration", "read_feet_inches",
           "read_grouped_digits", "read_powered_unit", "read_time_units", "read_year_by_context", "spell_address",
           "spell_latin_addresses"]
