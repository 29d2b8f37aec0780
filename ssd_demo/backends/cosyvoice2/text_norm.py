"""CosyVoice 2's text front end: text -> spoken-form text -> the chunks decoded one by one.

The official front end (`CosyVoiceFrontEnd.text_normalize`) does, in this order: strip the text; if it holds a
Chinese character, run `wetext`'s Chinese normaliser and a few clean-ups (`text_zh`), and split it at Chinese
sentence ends, measured in characters; otherwise run `wetext`'s normaliser, spell out the digits still left with
`inflect` (`spell_out_number`), and split the paragraph into chunks of about 80 text tokens; then drop chunks
that are only punctuation. The model was trained on spoken-form text, so every digit must be words by the time
it is tokenised.

Two modes (`NORMALISER_MODES`). `official` runs that procedure as published (`text_official`), for reproducing
published numbers. `default` reads Chinese through `wetext` too, but for two departures (`text_zh.read_chinese`:
"¥88.50" "八十八点五元", not "八十八点五零元"; a space kept between Chinese and a Latin word), and English with the project's
own normaliser in `wetext`'s place (`normalize_numbers`): the shared one (`ssd_demo.text.normalize_text`: money,
decimals, clock times, dates, years, phone numbers, ranges, units), the readings added for this voice (`readings`:
e-mail and web addresses, durations, numbers dialled, time units, areas and heights as typed, years told by their
context, "the 5th of November"), and the readings the shared one leaves to eSpeak (ordinals, decades, percent,
minus). Before it, digit layouts and symbols it leaves alone become words (`_SYMBOL_REWRITES`: thousands grouped
by spaces or dots but not numbers listed with spaces, phone and card numbers digit by digit, degrees, powers,
fraction characters, plus, equals, cents). Where the two differ (docs/hub-models.md lists examples): "$5.99" is "five
dollars ninety-nine" here, "five point nine nine dollars" in `wetext`; "1250 people" is a number here, "twelve
fifty people" there; "Version 3.11.4" is "three point eleven point four" here, "three.eleven point four" there.
Like `wetext`, the default reads English only when the text holds a digit (or an e-mail or web address): other
text reaches the model exactly as in an official install.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

from ... import text as text_frontend
from ...errors import InvalidSettingError, TextError
from ...text import LONG_NUMBER, normalize_text
from .readings import DIGIT_WORDS, after_shared, before_shared, read_grouped_digits, spell_latin_addresses
from .text_official import is_markup, official_normalize
from .text_zh import CHINESE_FINAL, CHINESE_SENTENCE_ENDS, contains_chinese, read_chinese


@lru_cache(maxsize=1)
def _inflect():
    import inflect

    return inflect.engine()


def _ascii_digits(run: str) -> str:
    return "".join(str(unicodedata.digit(ch)) for ch in run)  # "٣" -> "3": inflect reads ASCII digits only


def _ordinal(match: re.Match) -> str:
    return _inflect().number_to_words(_ascii_digits(match.group(1)) + match.group(2).lower())  # "21st" -> "twenty-first"


def _decade(match: re.Match) -> str:
    return _inflect().plural_noun(_inflect().number_to_words(_ascii_digits(match.group(1))))  # "90s" -> "nineties"


# What `normalize_text` leaves as digits because eSpeak NG reads it well, but `inflect` would not:
# "2nd" ("twond"), "the 90s" ("ninetys"), "50%", "-5", ".5". Applied after `normalize_text`.
_NUMBER_REWRITES: tuple[tuple[re.Pattern, object], ...] = (
    (re.compile(r"(\d+)(st|nd|rd|th|ST|ND|RD|TH)\b"), _ordinal),
    (re.compile(r"(?<![\d.])(\d*0)'?s\b"), _decade),  # "1990s" is "19 90s" by now; "the 80's"
    (re.compile(r"(\d) ?%"), r"\1 percent"),
    (re.compile(r"(?<![\w.,:/-])-(?=\d)"), "minus "),
    (re.compile(r"(?<![\w.])\.(\d+)"), lambda m: "point " + " ".join(m.group(1))),
)


_FRACTIONS = {"½": "a half", "¼": "a quarter", "¾": "three quarters", "⅓": "a third", "⅔": "two thirds"}
_THOUSANDS = re.compile(r"[1-9]\d{0,2}(?: \d{3})+")


def _digit_groups(match: re.Match) -> str:
    """Three or more groups of digits apart by spaces (hyphenated ones are dates, ranges and phone
    numbers, which `normalize_text` reads): thousands ("1 000 000") stay one number
    for the next rule; anything else (phone, card, account numbers) is read digit by digit, group by group."""
    run = match.group(0)
    if not run.startswith("+") and _THOUSANDS.fullmatch(run):
        return run
    groups = re.findall(r"\d+", run)
    return ("plus " if run.startswith("+") else "") + ", ".join(" ".join(group) for group in groups)


# Symbols and digit layouts `normalize_text` leaves alone (eSpeak reads some itself) and `inflect` cannot
# read: applied first. Thousands grouped by spaces, underscores or two or more dots become one number
# ("1 000 000", "1_000_000", "1.000.000"), but not numbers listed with spaces ("100 200 and 400",
# `read_grouped_digits`); other runs of three or more space-separated digit groups, and groups after a
# leading zero (phone, card and account numbers) are read digit by digit; degrees, powers, cents, plus, equals and fraction characters
# become words.
_SYMBOL_REWRITES: tuple[tuple[re.Pattern, object], ...] = (
    (re.compile("\u2212"), "-"),  # the minus sign
    (re.compile(r"(?<![\w.,-])\+?\d{1,4}(?: \d{1,4}){2,}(?![\w.,-]?\d)"), _digit_groups),
    # A number written with a leading zero and more digit groups after it is dialled ("07700 900123"): no
    # quantity begins with 0.
    (re.compile(r"(?<![\w.,-])(?<!\d[ _\u00a0\u202f])0\d{2,5}(?: \d{3,8})+(?![\w.,-]?\d)"), _digit_groups),
    (re.compile(r"(?<![\d.,])[1-9]\d{0,2}(?:[ _\u00a0\u202f]\d{3})+(?![\d.,]\d)"), read_grouped_digits),
    (re.compile(r"(?<![\d.,])([1-9]\d{0,2})((?:\.\d{3}){2,})(?![\d.])"), lambda m: m.group(1) + m.group(2).replace(".", "")),
    (re.compile(r"(\d)\s*([½¼¾⅓⅔])"), lambda m: f"{m.group(1)} and {_FRACTIONS[m.group(2)]}"),
    (re.compile("[½¼¾⅓⅔]"), lambda m: _FRACTIONS[m.group(0)]),
    (re.compile(r"\s*°\s*C\b"), " degrees Celsius"),
    (re.compile(r"\s*°\s*F\b"), " degrees Fahrenheit"),
    (re.compile(r"\s*°"), " degrees"),
    (re.compile("²"), " squared"),
    (re.compile("³"), " cubed"),
    (re.compile(r"(\d)\s*¢"), r"\1 cents"),
    (re.compile(r"(\d)\s*\+\s*(?=\d)"), r"\1 plus "),
    (re.compile(r"(?<![\w)])\+\s*(?=\d)"), "plus "),
    (re.compile(r"(\d)\+(?!\d)"), r"\1 plus"),
    (re.compile(r"(?<=[\d\s])=(?=[\s\d-])"), " equals "),
    (re.compile(r"(\d)[xX]\b"), r"\1 times"),
)

#: What makes the normaliser run: a digit, or a symbol read as a number.
_NUMERIC = re.compile(r"[\d½¼¾⅓⅔°²³]")


def normalize_numbers(text: str) -> str:
    """The normaliser step, in `wetext`'s place (see the module's docstring): amounts, decimals, dates,
    times, ordinals and the like as words, the digits of plain numbers left for `spell_out_number`. Text
    with no digit (nor a fraction, degree or power sign) is returned as `wetext` returns it: unchanged, but
    for its e-mail and web addresses, which are spelt out."""
    numeric = _NUMERIC.search(text) is not None  # asked first: "Dial 911" has no digit left after `before_shared`
    text = before_shared(text)
    if not numeric:
        return text
    for pattern, replacement in _SYMBOL_REWRITES:
        text = pattern.sub(replacement, text)
    text = after_shared(normalize_text(text))
    for pattern, replacement in _NUMBER_REWRITES:
        text = pattern.sub(replacement, text)
    return text


# Runs read digit by digit use `DIGIT_WORDS` (`readings`), not `inflect`: inflect checks the types of its
# arguments on every call, which made it most of the time spent on text full of digit runs.


@lru_cache(maxsize=4096)
def _cardinal(run: str) -> str:
    return _inflect().number_to_words(run)


def _number_words(match: re.Match) -> str:
    run = _ascii_digits(match.group(0))
    if len(run) > LONG_NUMBER or (len(run) > 1 and run[0] == "0"):
        # A code, not a quantity: inflect refuses 37 digits or more, and reads "007" as "seven".
        words = " ".join(DIGIT_WORDS[int(digit)] for digit in run)
    else:
        words = _cardinal(run)
    before = match.string[match.start() - 1] if match.start() else " "
    after = match.string[match.end()] if match.end() < len(match.string) else " "
    return (" " if before.isalpha() else "") + words + (" " if after.isalpha() else "")


def spell_out_number(text: str) -> str:
    """The official `spell_out_number` step: every run of digits still in the text as words with
    `inflect` ("1955" -> "one thousand, nine hundred and fifty-five"). Three departures, so that nothing is
    misread, lost or refused: a run longer than LONG_NUMBER digits, or one with a leading zero ("007",
    "02134"), is read digit by digit (the official raises inflect's NumOutOfRangeError from 37 digits on,
    and reads "007" as "seven"); and a run touching a letter is set apart by a space ("v2" -> "v two",
    where the official writes "vtwo")."""
    return re.sub(r"\d+", _number_words, text)


def normalize_english(text: str) -> str:
    """The default mode's `text_normalize(text, split=False)` for English: strip, normalise
    (`normalize_numbers` in `wetext`'s place), then `spell_out_number`."""
    return spell_out_number(normalize_numbers(text.strip()))


SENTENCE_ENDS = ".?!;:"
CLOSING_QUOTES = "\"\u201d"


def split_paragraph(text: str, count, max_tokens: int = 80, min_tokens: int = 60, merge_tokens: int = 20,
                    ends: str = SENTENCE_ENDS, final: str = ".") -> list[str]:
    """Text in the chunks the official front end decodes one by one: sentences (ended by one of `ends`, a
    closing quote kept with its sentence; `final` added when the text ends without one) packed while a chunk
    stays within `max_tokens` or is still under `min_tokens`, a last chunk under `merge_tokens` joined to the
    one before; sentences are never cut. `count(piece)` measures a piece (text tokens for English, characters
    for Chinese). An end right after another ("!!") starts no sentence of its own: it is dropped, and a closing
    quote after it goes to the sentence before."""
    if text[-1] not in ends:
        text += final
    sentences, start = [], 0
    for index, ch in enumerate(text):
        if ch not in ends or index < start:
            continue
        if index > start:
            sentences.append(text[start:index + 1])
        start = index + 1
        if start < len(text) and text[start] in CLOSING_QUOTES:
            if sentences:
                sentences[-1] += text[start]
            start += 1
    chunks, current = [], ""
    for sentence in sentences:
        if count(current + sentence) > max_tokens and count(current) > min_tokens:
            chunks.append(current)
            current = ""
        current += sentence
    if current:
        if chunks and count(current) < merge_tokens:
            chunks[-1] += current
        else:
            chunks.append(current)
    return [chunk for chunk in chunks if has_words(chunk)]  # punctuation alone is not spoken


def has_words(text: str) -> bool:
    """Whether `text` has anything to say: a word character. Text without one (punctuation, symbols,
    whitespace) is what the official front end drops, and what the backend refuses."""
    return re.search(r"\w", text) is not None


#: The normaliser modes: the project's English reading (`default`), or the official procedure (`official`:
#: `wetext` for English too, then `inflect` on the digits left). Chinese goes through `wetext` in both (`text_zh`).
NORMALISER_MODES = ("default", "official")


def check_mode(mode: str) -> str:
    if mode not in NORMALISER_MODES:
        raise InvalidSettingError(f"the text normaliser must be one of {', '.join(NORMALISER_MODES)}; got {mode!r}")
    return mode


def normalize(text: str, mode: str = "default") -> str:
    """The spoken form of `text` (the official `text_normalize(text, split=False)`'s place): Chinese through
    `wetext` (`text_zh`: `read_chinese`, or `normalize_chinese` in the `official` mode); other text through
    `normalize_english`, or in the `official` mode as the official computes it (`text_official`). What a voice
    prompt's transcript goes through too."""
    if check_mode(mode) == "official":
        return official_normalize(checked_text(text))
    stripped = clean_text(checked_text(text)).strip()
    return read_chinese(spell_latin_addresses(stripped)) if contains_chinese(stripped) else normalize_english(stripped)


def _paragraph(text: str, spoken: str, count, max_tokens: int, mode: str) -> list[str]:
    """The official paragraph split of `spoken`: Chinese measured in characters, at Chinese sentence ends;
    markup left whole in the `official` mode, as the official leaves it."""
    if mode == "official" and (is_markup(text) or not text):
        return [text] if has_words(text) else []
    if contains_chinese(text.strip()):
        return split_paragraph(spoken, len, max_tokens=max_tokens, ends=CHINESE_SENTENCE_ENDS, final=CHINESE_FINAL)
    return split_paragraph(spoken, count, max_tokens=max_tokens)


#: Never spoken, and a tokenizer would keep them: ASCII control characters (a space instead) and the invisible
#: format marks of Unicode text (zero-width spaces and joiners' kin, direction overrides, a byte-order mark).
CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
INVISIBLE_MARKS = re.compile("[\u200b-\u200f\u202a-\u202e\u2060\u2066-\u2069\ufeff]")


def checked_text(text: object) -> str:
    """`text` if it is a string of valid Unicode; else `TextError` (never an AttributeError further on)."""
    if not isinstance(text, str):
        raise TextError(f"the text must be a string, got {type(text).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (e.g. invalid UTF-8 on a command line): no tokenizer takes it
        raise TextError("the text contains characters that are not valid Unicode") from None
    return text


def clean_text(text: str) -> str:
    """Control characters as spaces, invisible format marks removed: what no reader says."""
    return INVISIBLE_MARKS.sub("", CONTROL_CHARACTERS.sub(" ", text))


def speakable_chunks(text: str, count, max_tokens: int = 80, mode: str = "default") -> list[str]:
    """`text` as the backend speaks it: `normalize` in the given `mode`, the official paragraph split, and a sentence
    over twice the budget cut further at phrases and words (the official front end never cuts a sentence
    and its loop has no length cap, but a 300-word sentence without punctuation would run past what one
    generation is allowed here and lose its end), and a word over the budget (a digit run, a URL, text with
    no spaces) cut inside: no chunk is over twice `max_tokens`, whatever the text.

    Total on strings: text with nothing to say (empty, whitespace, punctuation alone) gives no chunks; text
    that is not a string, or not valid Unicode (a lone surrogate), raises `TextError`. Control characters and
    invisible format marks never reach a chunk (`clean_text`). `count`: a chunk's token count (the backend
    passes its tokenizer's)."""
    text = clean_text(checked_text(text))
    spoken = normalize(text, mode)
    if not has_words(spoken):
        return []
    count, limit = _remembering(count), 2 * max_tokens
    chunks = []
    for chunk in _paragraph(text, spoken, count, max_tokens, mode):
        if count(chunk) <= limit:
            chunks.append(chunk)
            continue
        chunks.extend(_cut_chunk(chunk, count, max_tokens))
    return chunks


def _cut_chunk(chunk: str, count, max_tokens: int) -> list[str]:
    """A chunk over twice the budget in pieces within it: at phrases and words (`_cut_sentence`), a piece still
    over it cut inside (`_cut_run`). A piece without a word (the "：" cut off a run of Chinese) joins the piece
    before it where the two stay within twice the budget, and is dropped otherwise: punctuation alone is not
    spoken."""
    limit, pieces = 2 * max_tokens, []
    for piece in _cut_sentence(chunk, count, max_tokens):
        for part in [piece] if count(piece) <= limit else _cut_run(piece, count, max_tokens):
            if has_words(part):
                pieces.append(part)
            elif pieces and count(pieces[-1] + part) <= limit:
                pieces[-1] += part
    return pieces


def _remembering(count):
    """`count` remembering what it measured: the split and the cuts measure many pieces more than once (a
    chunk when packed and again against the cap, the groups of a run of words when it is cut)."""
    known: dict[str, int] = {}

    def counted(piece: str) -> int:
        if piece not in known:
            known[piece] = count(piece)
        return known[piece]

    return counted


#: Most token counts `text.split_text` may take over one run of words: it tries every group size in turn and
#: counts the groups of each, which ordinary text settles in tens of counts, but a run of long words (spelt-out
#: digit runs, words of tens of tokens) would take hundreds of thousands. Past it the run is cut at spaces.
SPLIT_COUNTS = 2000


class _TooManyCounts(Exception):
    pass


def _cut_sentence(sentence: str, count, max_tokens: int) -> list[str]:
    """A sentence over twice the budget at phrases and word groups (`text.split_text`), a word over the
    budget set apart as a piece of its own first (word groups around it could never fit); a run of words
    `split_text` cannot settle within SPLIT_COUNTS counts is cut at spaces instead (`_cut_run`)."""
    words = sentence.split(" ")
    long_words = {index for index, word in enumerate(words) if count(word) > max_tokens}
    pieces, run = [], []
    for index, word in enumerate(words + [None]):
        if word is not None and index not in long_words:
            run.append(word)
            continue
        if any(w.strip() for w in run):
            pieces.extend(_split_words(" ".join(run), count, max_tokens))
        run = []
        if word is not None:
            pieces.append(word)
    return pieces


def _split_words(run: str, count, max_tokens: int) -> list[str]:
    calls = 0

    def counted(piece: str) -> int:
        nonlocal calls
        calls += 1
        if calls > SPLIT_COUNTS:
            raise _TooManyCounts
        return count(piece)

    try:
        return [piece.text for piece in text_frontend.split_text(run, budget=max_tokens, count=counted)]
    except _TooManyCounts:
        return _cut_run(run, count, max_tokens)


def _cut_run(run: str, count, max_tokens: int) -> list[str]:
    """`run` in pieces of at most `max_tokens` each (a single character may be more), taken from the front:
    the longest prefix that fits, cut after its last space or, failing that, after its last character
    that is not a letter or a digit ("/", "-", ".") when that keeps at least half of it; never before a
    combining mark. Joining the pieces gives `run` back."""
    pieces = []
    while run and count(run) > max_tokens:
        low, high = 1, len(run) - 1  # the longest prefix within the budget (token counts grow with the prefix)
        while low < high:
            middle = (low + high + 1) // 2
            if count(run[:middle]) <= max_tokens:
                low = middle
            else:
                high = middle - 1
        cut = low
        for boundary in (lambda ch: ch.isspace(), lambda ch: not ch.isalnum()):
            found = next((i for i in range(low, low // 2, -1) if boundary(run[i - 1])), None)
            if found is not None:
                cut = found
                break
        while 1 < cut < len(run) and unicodedata.combining(run[cut]):
            cut -= 1
        pieces.append(run[:cut])
        run = run[cut:]
    if run:
        pieces.append(run)
    return pieces


__all__ = ["NORMALISER_MODES", "check_mode", "has_words", "normalize", "normalize_english", "normalize_numbers",
           "speakable_chunks", "spell_out_number", "split_paragraph"]
