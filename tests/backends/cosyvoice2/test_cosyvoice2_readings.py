"""CosyVoice 2's text front end: readings of English the official front end gets wrong, one test each; and the
sentences of `data/cosyvoice2_readings.tsv` (English and Chinese) in both normaliser modes.

The file's `default` column was checked by hand, sentence by sentence. Its `official` and `official_chunks`
columns are the official front end's own output, recorded from CosyVoice's `CosyVoiceFrontEnd.text_normalize`
(repository FunAudioLLM/CosyVoice at commit ace7c47, with wetext 0.1.8 and inflect 7.5.0; the chunks counted
with a whitespace word count in the tokenizer's place, which every sentence here keeps far under the budget).
"""

from __future__ import annotations

from support.paths import REPOSITORY, TEST_DATA

import csv
import re
import subprocess
import sys

import pytest

from ssd_demo.backends.cosyvoice2.text_norm import normalize, normalize_english, speakable_chunks

READINGS = TEST_DATA / "cosyvoice2_readings.tsv"


def _rows() -> list[dict[str, str]]:
    with READINGS.open(encoding="utf-8", newline="") as handle:
        lines = [line for line in handle if not line.startswith("#")]
    return list(csv.DictReader(lines, delimiter="\t", quoting=csv.QUOTE_NONE))


ROWS = _rows()

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
    "numbers listed with spaces": ("He ran 100 200 and 400 meters.",
                                   "He ran one hundred, two hundred and four hundred meters."),
    "a longer list": ("Sets of 100 200 300, 400", "Sets of one hundred, two hundred, three hundred, four hundred"),
    "thousands grouped by spaces": ("From 12 500 and 15 000 to 1 000 000",
                                    "From twelve thousand, five hundred and fifteen thousand to one million"),
    "an emergency number": ("Dial 911 or call 112.", "Dial nine one one or call one one two."),
    "a price per month is no year": ("Prices rose to $1,625 a month.",
                                     "Prices rose to one thousand, six hundred and twenty-five dollars a month."),
    "a street after an ordinal": ("Her office is on 5th St. near the park.",
                                  "Her office is on fifth Street near the park."),
    "a number with a leading zero and groups is dialled": (
        "Reach me at 07700 900123.", "Reach me at zero seven seven zero zero, nine zero zero one two three."),
    "a count per week is no year": ("I sold 1,750 a week.", "I sold one thousand, seven hundred and fifty a week."),
    "a year before 'a' + noun stays a year": ("In 1999 a storm hit the coast.",
                                              "In nineteen ninety-nine a storm hit the coast."),
    "an extension": ("Ext. 204, or extension 7788", "Extension two zero four, or extension seven seven eight eight"),
    "a count after call": ("I will call 50 more and phone 20 people.",
                           "I will call fifty more and phone twenty people."),
    "a grouped number after dial": ("Dial 020 7946 0958",
                                    "Dial zero two zero, seven nine four six, zero nine five eight"),
    "hours and minutes": ("It took 3h 20m.", "It took three hours twenty minutes."),
    "abbreviated units": ("2 hrs 15 mins, 1 hr, 1 min 30 secs",
                          "two hours fifteen minutes, one hour, one minute thirty seconds"),
    "hours, minutes and seconds": ("1h 5m 30s", "one hour five minutes thirty seconds"),
    "m or s alone": ("A 20m rope in the 90s", "A twenty m rope in the nineties"),
    "an area and a volume": ("20 m², 1 km² and 1 cm³",
                             "twenty square meters, one square kilometer and one cubic centimeter"),
    "a height": ("He is 5'11\" and she is 6'0\".", "He is five feet eleven inches and she is six feet."),
    "a height without the inch mark": ("He is 5′11 tall.", "He is five feet eleven inches tall."),
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


def test_the_sentences_cover_both_languages():
    assert len(ROWS) >= 100 and sum(row["language"] == "zh" for row in ROWS) >= 20
    assert all(row["language"] in ("en", "zh") and row["text"] and row["default"] for row in ROWS)


def test_every_sentence_reads_as_checked_in_the_default_mode():
    wrong = [(row["text"], normalize(row["text"]), row["default"]) for row in ROWS
             if normalize(row["text"]) != row["default"]]
    assert wrong == []


def test_the_official_mode_gives_the_official_text_and_chunks():
    words = lambda piece: len(piece.split())  # noqa: E731 - the count the chunks were recorded with
    wrong = [(row["text"], row["official"]) for row in ROWS if normalize(row["text"], "official") != row["official"]]
    split = [(row["text"], row["official_chunks"]) for row in ROWS
             if " | ".join(speakable_chunks(row["text"], words, mode="official")) != row["official_chunks"]]
    assert wrong == [] and split == []


#: Where the default mode reads Chinese its own way: a price with a trailing zero or a thousands comma, a space
#: between Chinese and a Latin letter (`text_zh.read_chinese`).
DEFAULT_CHINESE = re.compile(r"[¥￥$€£]? ?\d{1,3}(?:,\d{3})+|\d\.\d*0(?!\d) ?[万亿]?[元块]|[¥￥$€£] ?\d+\.\d*0(?!\d)|"
                             r"[\u4e00-\u9fff] +[A-Za-z]|[A-Za-z] +[\u4e00-\u9fff]")


def test_chinese_is_read_the_official_way_in_both_modes_but_for_prices_and_latin_words():
    chinese = [row for row in ROWS if row["language"] == "zh"]
    assert all(row["default"] == row["official"] for row in chinese if not DEFAULT_CHINESE.search(row["text"]))
    assert all(row["default"] != row["official"] for row in chinese if DEFAULT_CHINESE.search(row["text"]))
    assert normalize("温度降到了-5℃，增长了3.5%") == "温度降到了负五摄氏度，增长了百分之三点五"


@pytest.mark.parametrize("text, default, official", [
    ("价格是¥88.50", "价格是八十八点五元", "价格是八十八点五零元"),
    ("共¥88.50元", "共八十八点五元", "共八元八点五零元"),
    ("售价¥1,288.00", "售价一千二百八十八元", "售价一元,两百八十八点零零"),
    ("收入3.20亿元，花了12.50块", "收入三点二亿元，花了十二点五块", "收入三点二零亿元，花了十二点五零块"),
    ("长3.50米", "长三点五零米", "长三点五零米"),  # a measure's zero may be its precision: read as written
    ("我 like apple 和 banana", "我 like apple 和 banana", "我like apple和banana"),
    ("iPhone 15 很好，你 好", "iPhone 十五很好，你好", "iPhone十五很好，你好"),
    # addresses as said in English, digit by digit (the official takes each dot for a full stop)
    ("我的email是zhang.wei@163.com。", "我的email是 zhang dot wei at one six three dot com。",
     "我的email是zhang。wei@一百六十三。com。"),
    ("请访问www.baidu.com查看详情。", "请访问 w w w dot baidu dot com 查看详情。", "请访问www。baidu。com查看详情。"),
])
def test_the_default_mode_reads_prices_and_keeps_a_space_before_a_latin_word(text, default, official):
    assert (normalize(text), normalize(text, "official")) == (default, official)


def test_the_chinese_normaliser_needs_no_network():
    """wetext's grammars ship inside its wheel: normalising works with every socket refused."""
    code = ("import socket\n"
            "def refuse(*args, **kwargs):\n    raise OSError('no network')\n"
            "socket.socket = socket.create_connection = refuse\n"
            "from ssd_demo.backends.cosyvoice2.text_zh import normalize_chinese\n"
            "print(normalize_chinese('今天是2024年5月3日'))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=REPOSITORY)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "今天是二零二四年五月三日"


def test_the_official_mode_gives_no_chunks_where_the_official_fails():
    """wetext returns nothing for this sentence, and the official front end then raises IndexError."""
    assert normalize("Read more at example.com/news.", "official") == ""
    assert speakable_chunks("Read more at example.com/news.", len, mode="official") == []
    assert normalize("Read more at example.com/news.") == "Read more at example dot com slash news."


@pytest.mark.parametrize("text", ["Hello  world.", "One.\n\nTwo 3.", "a \t b", "€½¾¢", "(#%<^>'(}=\\:~–;\"),'"])
def test_the_official_mode_reads_text_wetext_cannot(text):
    """wetext's English grammar finds no reading of two blanks in a row between words, or of a run of symbols
    (the official front end raises AssertionError): read with single spaces, or else as written."""
    chunks = speakable_chunks(text, len, mode="official")
    assert all(chunk.strip() for chunk in chunks)
    assert normalize("Hello  world.", "official") == "Hello world."
    assert "three" in normalize("One.\n\nTwo 3.", "official")


@pytest.mark.parametrize("mode", ["default", "official"])
@pytest.mark.parametrize("text", [None, b"bytes", 42, "a lone \ud800 surrogate"])
def test_normalize_refuses_what_is_not_text_with_a_typed_error(text, mode):
    from ssd_demo.errors import TextError

    with pytest.raises(TextError):
        normalize(text, mode)
