"""The single-word and short-reply test sets (issue 60) are held out: nothing in them is in what the voice trains on.

"In" is judged as the evaluation's judge reads a text (`judge.normalise`: Whisper's English normaliser, so "Seven."
and "7." or "Okay!" and "Okay?" are one text), against every text the shipped voice's training data was made from:
its tokenised corpus (each chunk's text, training and held-out split), the corpus those chunks came from
(`training.corpus.build_corpus` at the dataset's own settings), the short utterances a voice was trained on
(`short_corpus(4000, seed 0)`, docs/benchmarks.md "Short utterances"), the hand-written phrases and sentences; and
against the other test sets, so that each set measures something of its own.
"""

import json
import re
from pathlib import Path

import numpy as np
import pytest

DATA = Path(__file__).parents[1] / "data"
DATASET = Path(__file__).parents[2] / "assets" / "teacher_voice" / "dataset.npz"
SETS = {"single_words.txt": (1, 1), "short_replies.txt": (2, 4)}  # words per item, fewest and most


def items(name: str) -> list[str]:
    return [line.strip() for line in (DATA / name).read_text().splitlines()
            if line.strip() and not line.startswith("#")]


def key(text: str) -> tuple[str, ...]:
    """A text as the judge counts its words."""
    from ssd_demo.measure.judge import normalise
    from ssd_demo.text import normalize_text

    return tuple(normalise(normalize_text(text)))


@pytest.mark.parametrize("name", sorted(SETS))
def test_each_set_has_forty_items_or_more_of_the_right_length_and_no_repeats(name):
    texts = items(name)
    fewest, most = SETS[name]
    assert len(texts) >= 40
    assert all(fewest <= len(re.findall(r"[A-Za-z']+", text)) <= most for text in texts), name
    assert all(text[-1] in ".!?" for text in texts)
    assert len({key(text) for text in texts}) == len(texts)


def training_texts() -> set[tuple[str, ...]]:
    pytest.importorskip("wordfreq")  # the corpus's free word sequences come from its list
    from ssd_demo.training.corpus import HAND_WRITTEN, SHORT_PHRASES, CorpusConfig, build_corpus, short_corpus

    stored = np.load(DATASET)
    config = json.loads(str(stored["meta"]))["config"]
    texts = [str(t) for t in stored["train_text"]] + [str(t) for t in stored["test_text"]]
    texts += build_corpus(CorpusConfig(size=config["corpus_size"], seed=config["seed"], free_share=config["free_share"]))
    texts += short_corpus(4000, seed=0) + list(SHORT_PHRASES) + list(HAND_WRITTEN)
    # The items have at most four words: a text of over ten cannot read as one of them (the normaliser joins a
    # number's words, "twenty five" -> "25", but not ten into four), and normalising 30,000 texts takes seconds.
    return {key(text) for text in set(texts) if len(text.split()) <= 10}


@pytest.mark.skipif(not DATASET.exists(), reason="the tokenised corpus is not shipped")
def test_no_item_is_in_what_the_voice_trains_on_or_in_another_test_set():
    trained = training_texts()
    assert ("morning",) in trained and ("7",) in trained  # the check sees words said alone in the corpus
    others = {name: {key(text) for text in items(name)}
              for name in ("everyday_sentences.txt", "short_utterances.txt", *SETS)}
    for name in SETS:
        mine = {key(text): text for text in items(name)}
        assert not [text for k, text in mine.items() if k in trained], name
        for other, keys in others.items():
            if other != name:
                assert not [text for k, text in mine.items() if k in keys], (name, other)
