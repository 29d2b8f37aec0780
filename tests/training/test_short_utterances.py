"""Short utterances: the corpus's one-to-three-word supplement and how it joins a tokenised dataset."""

import json
import re
from pathlib import Path

import pytest

from ssd_demo.errors import InputError
from ssd_demo.speech.latent_codec import LatentCodec, LatentCodecConfig
from ssd_demo.training.corpus import SHORT_PHRASES, _BLOCKED, short_corpus
from ssd_demo.training.dataset import DataConfig, add_utterances, load_dataset, save_dataset

EVERYDAY = Path(__file__).parents[1] / "data" / "everyday_sentences.txt"
SHORT_TEST_SET = Path(__file__).parents[1] / "data" / "short_utterances.txt"
VOICE = Path(__file__).parents[2] / "assets" / "embedded"


def test_short_corpus_is_one_to_three_words_said_alone_and_the_same_on_every_machine():
    corpus = short_corpus(2000, seed=3)
    assert corpus == short_corpus(2000, seed=3) and corpus != short_corpus(2000, seed=4)
    for utterance in corpus:
        assert 1 <= len(utterance.split()) <= 3, utterance
        assert utterance[0].isupper() or utterance[0].isdigit(), utterance
        assert utterance[-1] in ".!?", utterance
        assert not {w.lower() for w in re.findall(r"[A-Za-z']+", utterance)} & _BLOCKED, utterance
    phrases = sum(u in SHORT_PHRASES for u in corpus) / len(corpus)
    assert 0.3 < phrases < 0.5  # people's phrases and words drawn from the list, both
    assert len(set(corpus)) > 900  # the word draws vary
    held_out = {line.strip() for line in EVERYDAY.read_text().splitlines() if line.strip()}
    assert not set(corpus) & held_out  # the evaluation's sentences stay unheard


def test_the_short_test_set_is_not_in_what_the_voice_trained_on():
    lines = [line.strip() for line in SHORT_TEST_SET.read_text().splitlines()]
    test_set = {line for line in lines if line and not line.startswith("#")}
    assert len(test_set) >= 30 and all(1 <= len(line.split()) <= 3 for line in test_set)
    assert not test_set & (set(short_corpus(4000, seed=0)) | set(SHORT_PHRASES))


def _dataset(codebook_size: int) -> dict:
    """A one-chunk dataset in the shipped voice's layout (what `load_dataset` returns)."""
    voice = json.loads((VOICE / "voice.json").read_text())
    config = json.loads(json.dumps(DataConfig(codebook_size=codebook_size).__dict__))
    example = {"sentence": 0, "text": "A sentence.", "prompt": [1, 2, 3], "speech": [200, 201, 4, 3]}
    return {"config": config, "layout": voice["vocab"], "phonemes": voice["phonemes"], "audio_hours": 1.0,
            "build_seconds": 1.0, "train": [example], "test": [{**example, "sentence": 1}]}


@pytest.mark.slow
@pytest.mark.skipif(not (VOICE / "voice.json").exists(), reason="embedded voice not shipped")
def test_added_utterances_are_rendered_tokenised_with_the_voice_codebook_and_recorded(tmp_path):
    pytest.importorskip("piper")
    codec = LatentCodec.load(VOICE / "codec")
    data = _dataset(codec.config.codebook_size)
    added = add_utterances(data, ["Hi!", "Thank you."], codec, tmp_path / "work", "short utterances")
    assert added["test"] == data["test"]  # held-out loss stays comparable
    assert added["train"][0] == data["train"][0] and len(added["train"]) == 3
    layout = added["layout"]
    for example, text in zip(added["train"][1:], ("Hi!", "Thank you.")):
        assert example["text"] == text and example["sentence"] > 1  # ids after the corpus's
        speech = example["speech"]
        assert speech[-1] == layout["end_of_speech_id"]
        codes = [t for t in speech if t >= layout["speech_offset"]]
        assert 20 < len(codes) < 200  # about 86 frames a second: a word or two
        assert max(codes) < layout["speech_offset"] + codec.config.codebook_size
    record = added["supplements"][0]
    assert record["kind"] == "short utterances" and record["sentences"] == 2 and record["chunks"] == 2
    assert added["audio_hours"] == pytest.approx(1.0 + record["audio_hours"], abs=1e-3)
    save_dataset(tmp_path / "dataset.npz", added)  # the record travels with the file
    assert load_dataset(tmp_path / "dataset.npz")["supplements"] == added["supplements"]


def test_a_codec_of_another_size_is_refused(tmp_path):
    data = _dataset(2048)

    class Small:
        config = LatentCodecConfig(codebook_size=8)

    with pytest.raises(InputError, match="8 codes but the dataset was made with 2048"):
        add_utterances(data, ["Hi!"], Small(), tmp_path / "work", "short utterances")
