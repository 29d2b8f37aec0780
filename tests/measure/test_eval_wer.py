"""WER as the paper measures it: normalisation, word-level edit distance, and a Whisper checkpoint loaded
from a folder or the Hub cache (a tiny random one built here: its transcripts are noise, so the metric is
checked on hand-made pairs and the plumbing on what the model says)."""

import numpy as np
import pytest

from support.llasa_fixtures import install_in_hub_cache
from support.tiny_whisper import build_tiny_whisper

from ssd_demo.measure.asr import WhisperScorer, corpus_wer, seed_tts_normalise, word_error_rate, word_errors
from ssd_demo.errors import InputError, ModelLoadError


@pytest.fixture(scope="module")
def tiny_whisper(tmp_path_factory):
    return build_tiny_whisper(tmp_path_factory.mktemp("whisper") / "tiny-whisper")


@pytest.fixture(scope="module")
def scorer(tiny_whisper):
    return WhisperScorer.load(str(tiny_whisper), device="cpu")


def test_seed_tts_normalisation_deletes_punctuation_but_the_apostrophe_and_lower_cases():
    assert seed_tts_normalise("Hello, World!  It's a well-known “fact” — isn't it?") == \
        "hello world it's a wellknown fact isn't it"
    assert seed_tts_normalise("$5.99 (about 50%)") == "599 about 50"  # numbers stay as written, as in Seed-TTS
    assert seed_tts_normalise(" ...! ") == ""


def test_wer_equals_a_hand_count_of_substitutions_deletions_and_insertions():
    reference = "the cat sat on the mat".split()
    assert word_errors(reference, "the cat sit on mat".split()) == 2  # sat -> sit, the deleted
    assert word_error_rate(reference, "the cat sit on mat".split()) == pytest.approx(2 / 6)
    assert word_error_rate(reference, reference) == 0.0
    assert word_error_rate(["yes"], "no no no".split()) == 3.0  # 1 substitution + 2 insertions: above 1
    assert word_error_rate(reference, []) == 1.0
    # corpus WER: all errors over all reference words (2 + 1) / (6 + 2), not the mean of 1/3 and 1/2
    assert corpus_wer([(reference, "the cat sit on mat".split()), ("good morning".split(), ["good"])]) == \
        pytest.approx(3 / 8)
    with pytest.raises(ValueError, match="no words"):
        word_error_rate([], ["a"])


def test_whisper_normaliser_reads_numbers_alike_on_both_sides(scorer, tiny_whisper):
    whisper_style = WhisperScorer.load(str(tiny_whisper), device="cpu", normaliser="whisper")
    assert whisper_style.words("It's twenty-five dollars.") == whisper_style.words("it is $25")
    assert whisper_style.words("We're about to...") == ["we", "are", "about", "to"]  # an ellipsis is no word
    assert scorer.words("It's twenty-five dollars.") == ["it's", "twentyfive", "dollars"]
    with pytest.raises(InputError, match="normaliser"):
        WhisperScorer(scorer.model, scorer.processor, normaliser="none")


def test_tiny_whisper_transcribes_short_and_long_clips_at_any_rate(scorer):
    noise = np.random.default_rng(0).standard_normal(24_000 * 2).astype(np.float32) * 0.1
    short = scorer.transcribe(noise, 24_000)  # resampled to 16 kHz
    assert isinstance(short, str) and short == scorer.transcribe(noise, 24_000)  # greedy: the same every time
    long = scorer.transcribe(np.tile(noise[:16_000], 35), 16_000)  # 35 s: Whisper's long-form mode
    assert isinstance(long, str)
    assert scorer.transcribe(np.zeros(0, np.float32), 16_000) == ""


def test_score_counts_the_transcript_words_against_the_text(scorer):
    audio = np.random.default_rng(1).standard_normal(16_000).astype(np.float32) * 0.1
    scored = scorer.score(audio, 16_000, "The cat sat on the mat.")
    assert scored.reference_words == ["the", "cat", "sat", "on", "the", "mat"]
    assert scored.hypothesis_words == scorer.words(scored.transcript)
    assert scored.wer == word_error_rate(scored.reference_words, scored.hypothesis_words)
    with pytest.raises(InputError, match="no words"):
        scorer.score(audio, 16_000, "?!")


def test_whisper_loads_from_the_hub_cache_offline_and_says_how_to_fetch_a_missing_one(tiny_whisper, tmp_path,
                                                                                      monkeypatch):
    cache = tmp_path / "hub"
    install_in_hub_cache(tiny_whisper, cache, "someone/tiny-whisper")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    loaded = WhisperScorer.load("someone/tiny-whisper", device="cpu")
    assert loaded.name == "someone/tiny-whisper" and loaded.model.config.d_model == 16
    with pytest.raises(ModelLoadError, match="not in the local Hugging Face cache.*hf download openai/whisper-large-v3"):
        WhisperScorer.load("openai/whisper-large-v3", device="cpu")


def test_tiny_en_is_the_packaged_judge_with_whispers_normaliser():
    from ssd_demo.measure.asr import JudgeScorer, load_scorer

    judge_scorer = load_scorer("tiny.en")  # nothing loads until a clip is transcribed
    assert isinstance(judge_scorer, JudgeScorer) and judge_scorer.name == "tiny.en"
    assert judge_scorer.normaliser == "whisper"
    assert judge_scorer.words("It's twenty-five dollars.") == judge_scorer.words("it is $25")
    assert load_scorer("tiny.en", normaliser="seed-tts").words("Hello, World!") == ["hello", "world"]
    assert judge_scorer.transcribe(np.zeros(0, np.float32), 22_050) == ""
    with pytest.raises(InputError, match="no words"):
        judge_scorer.score(np.zeros(1600, np.float32), 16_000, "?!")
