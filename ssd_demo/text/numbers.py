"""Numbers as people say them: money, years, dates, clock times, fractions, phone numbers, versions, units.

Each `read_*` function turns one regular-expression match into the words eSpeak NG should read; the rules
that decide where they apply, and in which order, are in `normalize`. Digits stay digits wherever eSpeak
already reads them well ("12", "2025"): only the way they are grouped and named changes.
"""

from __future__ import annotations

import calendar
import re


_CURRENCIES = {"$": ("dollar", "dollars"), "£": ("pound", "pounds"), "€": ("euro", "euros"), "¥": ("yen", "yen")}
CURRENCY = "[$£€¥]"
SCALES = {"k": "thousand", "m": "million", "b": "billion", "bn": "billion", "t": "trillion"}


def read_money(match: re.Match) -> str:
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


def read_scaled_money(match: re.Match) -> str:
    """"$5M" / "$5 million" -> "5 million dollars", "€1.5bn" -> "1.5 billion euros"."""
    scale = match.group(3)
    scale = SCALES.get(scale.lower(), scale.lower())
    return f"{match.group(2)} {scale} {_CURRENCIES[match.group(1)][1]}"


MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")
MONTH_NAMES = "|".join(MONTHS)


def _ordinal(day: int) -> str:
    suffix = "th" if 10 <= day % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return f"{day}{suffix}"


def read_year(year: str) -> str:
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
    r"between|early|late|mid|the|summer|spring|autumn|fall|winter|" + MONTH_NAMES + r")|\b(?:"
    + MONTH_NAMES + r") \d{1,2}(?:st|nd|rd|th)?,?|\(|1[1-9]\d\d (?i:to|and|or|until|till|through)) $")


def read_year_in_context(match: re.Match) -> str:
    """"in 1999" -> "in 19 99", "the 1990s" -> "the 19 90s", "(1850)" -> "(18 50)"; "1250 people" stays a number."""
    year, suffix = match.group(1), match.group(2)
    before = match.string[max(0, match.start() - 30) : match.start()]
    if suffix or _YEAR_BEFORE.search(before) or match.string.startswith(")", match.end()):
        return read_year(year) + (suffix.replace("'", "") if suffix else "")
    return match.group(0)


def _date(month: str, day: str, year: str | None, fallback: str) -> str:
    """A real calendar date in words, or `fallback` (the text as written) for "2/30/2025" or "13/13/2025"; no
    year: any day that some year has ("on 2/29")."""
    m, d = int(month), int(day)
    full_year = int(_full_year(year)) if year else 2024
    if not (1 <= m <= 12 and 1 <= d <= calendar.monthrange(full_year, m)[1]):
        return fallback
    return f"{MONTHS[m - 1]} {_ordinal(d)}" + (f", {read_year(_full_year(year))}" if year else "")


def read_slash_date(match: re.Match) -> str:
    """"3/14/2025" -> "March 14th, 2025", "3/14/25" too. Month first, as in the US, unless only day-first makes a
    date ("14/3/2025"); "4/5/2025" is read as April 5th (the order cannot be told from the digits)."""
    first, second, year = match.groups()
    if int(first) > 12 >= int(second):
        first, second = second, first
    return _date(first, second, year, match.group(0))


def read_slash_date_after_preposition(match: re.Match) -> str:
    """"on 3/4" -> "on March 4th" (after "on", "by", "until", ... a slash pair is a date, not a fraction)."""
    word, first, second = match.groups()
    return f"{word} " + _date(first, second, None, f"{first}/{second}")


def read_dotted_date(match: re.Match) -> str:
    """"14.03.2025" -> "March 14th, 2025": day first, as where dots are written, unless only month-first fits."""
    first, second, year = match.groups()
    if int(second) > 12 >= int(first):
        first, second = second, first
    return _date(second, first, year, match.group(0))


def read_iso_date(match: re.Match) -> str:
    """"2025-03-14" -> "March 14th, 2025"."""
    year, month, day = match.groups()
    return _date(month, day, year, match.group(0))


def read_month_day(match: re.Match) -> str:
    """"January 5" -> "January 5th", "5 January" -> "5th January": a day of the month is an ordinal."""
    month, day = match.group("month"), int(match.group("day"))
    if not 1 <= day <= 31:
        return match.group(0)
    return f"{month} {_ordinal(day)}" if match.group(0).startswith(month) else f"{_ordinal(day)} {month}"


def read_clock(hours: str, minutes: str) -> str:
    """"9:05" -> "9 oh 5", "10:00" -> "10", "7:45" -> "7 45", "06:45" -> "6 45", "00:00" -> "midnight"."""
    hours = str(int(hours))
    if minutes == "00":
        return "midnight" if hours == "0" else hours
    return f"{hours} oh {minutes[1]}" if minutes[0] == "0" else f"{hours} {minutes}"


def read_clock_with_seconds(match: re.Match) -> str:
    """"10:00:30" -> "10 and 30 seconds" (not "10" followed by ":30")."""
    hours, minutes, seconds = match.groups()
    spoken = read_clock(hours, minutes)
    if seconds == "00":
        return spoken
    return f"{spoken} and {int(seconds)} second{'' if int(seconds) == 1 else 's'}"


def read_timestamp(match: re.Match) -> str:
    """"2025-03-14T10:30:00Z" -> "2025-03-14 at 10:30:00 UTC" (the date and clock rules then read both parts)."""
    date, clock, zone = match.groups()
    return f"{date} at {clock}" + (" U-T-C" if zone == "Z" else "")


_DENOMINATORS = {2: ("half", "halves"), 3: ("third", "thirds"), 4: ("quarter", "quarters"), 5: ("fifth", "fifths"),
                 6: ("sixth", "sixths"), 8: ("eighth", "eighths"), 10: ("tenth", "tenths")}


def read_fraction(match: re.Match) -> str:
    """"1/2" -> "1 half", "3/4" -> "3 quarters"; other pairs as two numbers ("24/7" -> "24 7", "50/50")."""
    top, bottom = int(match.group(1)), int(match.group(2))
    if bottom in _DENOMINATORS and 0 < top < bottom:
        return f"{top} {_DENOMINATORS[bottom][top > 1]}"
    return f"{match.group(1)} {match.group(2)}"


def read_mixed_number(match: re.Match) -> str:
    """"1 1/2" -> "1 and a half", "2 3/4" -> "2 and 3 quarters"."""
    whole, top, bottom = match.group(1), int(match.group(2)), int(match.group(3))
    if bottom not in _DENOMINATORS or not 0 < top < bottom:
        return match.group(0)
    return f"{whole} and {'a' if top == 1 else top} {_DENOMINATORS[bottom][top > 1]}"


def read_digit_groups(match: re.Match) -> str:
    """A phone number digit by digit, a pause per group: "555-123-4567" -> "5 5 5, 1 2 3, 4 5 6 7", "+44 20 7946
    0958" -> "plus 4 4, 2 0, 7 9 4 6, 0 9 5 8"; "1-800-555-1234" -> "1, 800, 5 5 5, 1 2 3 4"."""
    groups = re.findall(r"\d+", match.group(0))
    spoken = [" ".join(group) for group in groups]
    if len(groups) == 4 and groups[:2] == ["1", "800"]:  # a toll-free number: "1-800" is "one eight hundred"
        spoken[1] = "800"
    return ("plus " if match.group(0).startswith("+") else "") + ", ".join(spoken)


def read_local_phone_or_range(match: re.Match) -> str:
    """"555-0199" is a phone number; "100-2000", both round, a range ("100 to 2000")."""
    first, second = match.groups()
    if first.endswith("0") and second.endswith("0"):
        return f"{first} to {second}"
    return read_digit_groups(match)


def read_dotted_numbers(match: re.Match) -> str:
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


def read_unit(match: re.Match) -> str:
    """"5km" / "5 km" -> "5 kilometers", "1 lb" -> "1 pound" (eSpeak spells unit symbols letter by letter)."""
    number, unit = match.group(1), match.group(2)
    return f"{number} {_UNITS[unit][0 if number == '1' else 1]}"


#: The unit symbols as regex alternatives, longest first ("kWh" before "kW").
UNIT_NAMES = "|".join(sorted(map(re.escape, _UNITS), key=len, reverse=True))
