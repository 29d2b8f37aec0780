"""CosyVoice 2's readings of English the official front end gets wrong (issue 43's cases), one test each."""

from __future__ import annotations

import pytest

from ssd_demo.backends.cosyvoice2.text_norm import normalize_english

CASES = {
    "day month year": ("5 November 1999", "the fifth of November nineteen ninety-nine"),
    "day month year in a sentence": ("On 4 July 1776, they met.", "On the fourth of July seventeen seventy-six, they met."),
    "a year opening a sentence": ("1984 is a novel.", "nineteen eighty-four is a novel."),
    "a year after a comma": ("The war ended in 1945, not 1944.",
                             "The war ended in nineteen forty-five, not nineteen forty-four."),
    "an eleventh-century year": ("It dates from 1042.", "It dates from ten forty-two."),
    "a number before a noun of quantity": ("We sold 1500 copies.", "We sold one thousand, five hundred copies."),
    "a duration": ("It took 2:03:11.", "It took two hours three minutes and eleven seconds."),
    "an e-mail address": ("Write to jane.doe42@example.com now.",
                          "Write to jane dot doe forty-two at example dot com now."),
    "a web address": ("See https://example.org/page2 for more.", "See example dot org slash page two for more."),
    "a month abbreviation": ("Dec 25 is Christmas.", "December twenty-fifth is Christmas."),
    "a month abbreviation and a year": ("Jan 15, 2024", "January fifteenth, two thousand and twenty-four"),
}


@pytest.mark.parametrize("name", CASES)
def test_english_reading(name):
    text, spoken = CASES[name]
    assert normalize_english(text) == spoken


def test_every_year_after_a_day_and_month_stays_a_year():
    """1100-1999: the shared normaliser splits the year ("17 76"); its "July 17" must not become a day."""
    wrong = []
    for year in range(1100, 2000):
        spoken = normalize_english(f"4 July {year}")
        rest = spoken.removeprefix("the fourth of July ")
        if rest == spoken or "th " in rest + " " or "thousand" in rest:  # "seventeenth", "one thousand, ..."
            wrong.append(spoken)
    assert wrong == []
