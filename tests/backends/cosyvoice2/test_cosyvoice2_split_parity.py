"""CosyVoice 2's paragraph split against the official one, on 5,000 random paragraphs, in both normaliser modes.

The reference below (`official_split_paragraph`, `official_chunks`) is a re-implementation written for this test
from the official behaviour, not a copy of its code: `split_paragraph` in `cosyvoice/utils/frontend_utils.py` and
the steps around it in `CosyVoiceFrontEnd.text_normalize` (`cosyvoice/cli/frontend.py`), repository
FunAudioLLM/CosyVoice at commit ace7c47f41bbd303aa6bf1ea80e6f9fbd595cd40 (the split itself last changed in
0b76dfa, 2024-09-29). What it does: add a full stop ("。" for Chinese) when the text does not end at a sentence
end; cut after every sentence end (English: . ? ! ; :  Chinese: 。？！；：、.?!;), an end with no text before it
starting no sentence, and a straight or curly closing quote right after an end going with the sentence before
it; pack the sentences, starting a new chunk only when adding the next sentence would take it over 80 and it is
already over 60; join a last chunk under 20 to the one before; then drop chunks made only of punctuation and
symbols. English is measured with the tokenizer, Chinese (text holding a CJK ideograph) in characters.

Both modes split the official way, each on its own spoken form (`normalize(text, mode)`): the modes differ in the
normaliser only (README, "CosyVoice 2"). The project's documented departures, and nothing else, are allowed:
a chunk without a word is dropped (the official keeps one holding a space or a combining mark), text whose spoken
form has no word gives no chunks (the official raises IndexError on an empty one), and an official chunk over
twice the budget is cut further, into pieces within it that give its text back but for spaces.

Token counts: the tiny byte-level BPE the chunking tests use (a Chinese character is several of its tokens, so
the cap cuts Chinese chunks often), and the whitespace word count the official chunks in
`data/cosyvoice2_readings.tsv` were recorded with.
"""

from __future__ import annotations

import random
import re
import time
from functools import lru_cache

import pytest
import regex

from support.cosyvoice2 import bpe_token_count
from ssd_demo.backends.cosyvoice2 import text_norm
from ssd_demo.backends.cosyvoice2.text_norm import has_words, speakable_chunks

BUDGET = 80
CAP = 2 * BUDGET

# ---------------------------------------------------------------------------------------------------------------
# The reference: the official split, re-implemented.

OFFICIAL_ENDS = {"en": ".?!;:", "zh": "。？！；：、.?!;"}
OFFICIAL_FINAL = {"en": ".", "zh": "。"}
_IDEOGRAPH = re.compile("[\u4e00-\u9fff]")
_ONLY_PUNCTUATION = regex.compile(r"[\p{P}\p{S}]*")


def official_sentences(text: str, lang: str) -> list[str]:
    """The official sentence cut of `text` (which ends at a sentence end): each end with the text before it and
    a closing quote after it; an end with nothing before it is dropped, its closing quote still going to the
    sentence before (IndexError when there is none, as upstream)."""
    ends = re.escape(OFFICIAL_ENDS[lang])
    sentences: list[str] = []
    for match in re.finditer(rf"([^{ends}]*)([{ends}])([\"\u201d]?)", text):
        body, end, quote = match.groups()
        if body:
            sentences.append(body + end + quote)
        elif quote:
            sentences[-1] += quote
    return sentences


def official_split_paragraph(text: str, count, lang: str, token_max_n: int = BUDGET, token_min_n: int = 60,
                             merge_len: int = 20) -> list[str]:
    """`split_paragraph(text, tokenize, lang)` as upstream computes it, with `count(piece)` for `len(tokenize(piece))`."""
    length = len if lang == "zh" else count
    if text[-1] not in OFFICIAL_ENDS[lang]:  # IndexError on empty text, as upstream
        text += OFFICIAL_FINAL[lang]
    chunks: list[str] = []
    current = ""
    for sentence in official_sentences(text, lang):
        if length(current + sentence) > token_max_n and length(current) > token_min_n:
            chunks.append(current)
            current = ""
        current += sentence
    if current and chunks and length(current) < merge_len:
        chunks[-1] += current
    elif current:
        chunks.append(current)
    return chunks


def official_chunks(text: str, spoken: str, count) -> list[str]:
    """The chunks `text_normalize(text)` returns for `text` normalised to `spoken`: split by language (the
    language told from the stripped text), chunks of punctuation and symbols only dropped."""
    lang = "zh" if _IDEOGRAPH.search(text.strip()) else "en"
    return [chunk for chunk in official_split_paragraph(spoken, count, lang) if not _ONLY_PUNCTUATION.fullmatch(chunk)]


# ---------------------------------------------------------------------------------------------------------------
# Random paragraphs.

ENGLISH = ("the a an of and to in is was he she it they we you that this with for on at by from as but or not "
           "house river morning village teacher window garden letter music water light street train station "
           "walked opened said quickly slowly never always perhaps because although while under over between "
           "children doctor city country evening mountain story question answer friend old new small large "
           "quiet bright dark warm cold early late yesterday tomorrow little great happy tired strange "
           "don't it's we'll she'd O'Brien well-known twenty-one Mr. Mrs. Dr. St. e.g. etc. U.S. "
           "supercalifragilistic internationalization responsibilities").split()
CHINESE = ("今天 天气 很好 我们 一起 去 公园 散步 学校 老师 学生 北京 上海 朋友 喜欢 吃饭 看书 音乐 电影 时间 工作 "
           "城市 山上 河边 早上 晚上 非常 已经 可能 因为 所以 但是 虽然 然后 他们 你们 这个 那个").split()
ENGLISH_PUNCTUATION = [".", ".", ".", "?", "!", ";", ":", "...", "?!", '."', '!"', ".\u201d", "", ","]
CHINESE_PUNCTUATION = ["。", "。", "？", "！", "；", "：", "、", "……", "”。", ".", ""]


def _english_sentence(rng: random.Random) -> str:
    """Ordinary words, now and then a comma, a dash, brackets, an opening quote or a number; sometimes one long
    sentence with no punctuation at all."""
    if rng.random() < 0.08:
        return " ".join(rng.choice(ENGLISH) for _ in range(rng.randint(40, 180)))
    words = [rng.choice(ENGLISH) for _ in range(rng.choice([rng.randint(1, 6), rng.randint(4, 20), rng.randint(15, 40)]))]
    for index in range(len(words) - 1):
        roll = rng.random()
        if roll < 0.08:
            words[index] += ","
        elif roll < 0.1:
            words[index] += rng.choice([" -", " \u2014", "'s", ")", " ("])
        elif roll < 0.11:
            words[index] += f" {rng.randint(0, 2100)}"
    words[0] = rng.choice(['"', "\u201c", "(", "", "", "", ""]) + words[0].capitalize()
    return " ".join(words) + rng.choice(ENGLISH_PUNCTUATION)


def _chinese_sentence(rng: random.Random) -> str:
    """Chinese words without spaces, now and then a comma, an English word or a number; sometimes a long run
    with no punctuation."""
    size = rng.randint(40, 120) if rng.random() < 0.08 else rng.randint(1, 25)
    pieces = []
    for _ in range(size):
        roll = rng.random()
        pieces.append(rng.choice(CHINESE) + ("，" if roll < 0.1 else ""))
        if roll > 0.97:
            pieces.append(rng.choice([" hello world ", "GPT", f"{rng.randint(1, 99)}个", " ok "]))
    return "".join(pieces) + rng.choice(CHINESE_PUNCTUATION)


def random_paragraph(rng: random.Random) -> str:
    """One to six sentences, English or (about one in eight) Chinese, apart by a space, a newline or nothing
    (wetext's time grows faster than the length of the text: longer paragraphs would only slow the test)."""
    sentence = _chinese_sentence if rng.random() < 0.12 else _english_sentence
    count = rng.choice([1, rng.randint(1, 3), rng.randint(2, 6)])
    text = ""
    for _ in range(count):
        text += sentence(rng) + rng.choice([" ", " ", " ", "  ", "\n", ""])
    return text.rstrip(rng.choice([" \n", ""]))


# ---------------------------------------------------------------------------------------------------------------
# The comparison.


def matches_official(chunks: list[str], official: list[str], count) -> bool:
    """Whether `chunks` are the `official` ones with the documented departures (see the module's docstring);
    whether an official chunk over the cap was cut. Fails the test on any other difference."""
    def bare(piece: str) -> str:
        return re.sub(r"\s", "", piece)

    expected = [chunk for chunk in official if has_words(chunk)]
    position, cut = 0, False
    for chunk in expected:
        if count(chunk) <= CAP:
            assert chunks[position:position + 1] == [chunk]
            position += 1
            continue
        cut, joined = True, ""
        while bare(joined) != bare(chunk):
            assert position < len(chunks) and bare(chunk).startswith(bare(joined + chunks[position]))
            joined += chunks[position]
            position += 1
    assert position == len(chunks)
    return cut


@pytest.fixture(scope="module")
def counts():
    return {"bpe": bpe_token_count(), "words": lambda piece: len(piece.split())}


@pytest.fixture
def cached_normalize(monkeypatch):
    """`normalize` remembering its results (it is deterministic): each paragraph is normalised once per mode,
    not once per token count and once more for the reference."""
    cached = lru_cache(maxsize=None)(text_norm.normalize)
    monkeypatch.setattr(text_norm, "normalize", cached)
    return cached


@pytest.mark.slow  # about two minutes, most of it in wetext's grammars
def test_random_paragraphs_chunk_as_the_official_split_and_none_over_the_cap(counts, cached_normalize):
    rng = random.Random(43)
    started, tally = time.process_time(), {"paragraphs": 0, "chinese": 0, "cut": 0, "exact": 0}
    for _ in range(5000):
        text = random_paragraph(rng)
        tally["paragraphs"] += 1
        tally["chinese"] += bool(_IDEOGRAPH.search(text))
        for mode in ("default", "official"):
            spoken = cached_normalize(text, mode)
            for name, count in counts.items():
                chunks = speakable_chunks(text, count, max_tokens=BUDGET, mode=mode)
                context = f"{mode} mode, {name} count, {text!r}"
                assert all(count(chunk) <= CAP and has_words(chunk) for chunk in chunks), context
                official = official_chunks(text, spoken, count) if has_words(spoken) else []
                try:
                    cut = matches_official(chunks, official, count)
                except AssertionError:
                    pytest.fail(f"{context}: {chunks!r} against the official {official!r}")
                tally["cut" if cut else "exact"] += 1
    assert tally["chinese"] > 300 and tally["cut"] > 500 and tally["exact"] > 15000, tally
    assert time.process_time() - started < 300, tally


def test_the_reference_splits_as_upstream_does():
    """The reference on small cases worked out by hand from upstream's code (one "token" per character)."""
    assert official_split_paragraph("Hi there", len, "en") == ["Hi there."]
    text = "Aaaa bbbb. Cccc dddd! Eeee ffff? Gg."
    assert official_split_paragraph(text, len, "en", 12, 15, 4) == ["Aaaa bbbb. Cccc dddd!", " Eeee ffff? Gg."]
    assert official_split_paragraph(text, len, "en", 12, 8, 5) == ["Aaaa bbbb.", " Cccc dddd!", " Eeee ffff? Gg."]
    assert official_split_paragraph('He said "go." Then left.', len, "en", 5, 1, 1) == ['He said "go."', " Then left."]
    assert official_split_paragraph("Fine. ... !", len, "en", 5, 1, 1) == ["Fine.", " . !"]
    assert official_chunks("Fine. ...!", "Fine. ...!", len) == ["Fine. ."]  # ends after an end are dropped
    assert official_chunks("!?", "!?", len) == []  # punctuation only: dropped
    assert official_chunks("好", "好", len) == ["好。"]
    assert official_sentences("你好！！”再见。", "zh") == ["你好！”", "再见。"]
    assert official_sentences("a: b. c", "en") == ["a:", " b."]  # no end after "c": upstream adds one first
    with pytest.raises(IndexError):
        official_sentences('."Hi.', "en")  # upstream pops from an empty list here
