"""Endings cut at full loudness, on synthetic audio: a fade-out is not cut, a tone stopped at full level is."""

import numpy as np
import pytest

from ssd_demo.measure.endings import CUT_SHARE, cut_share, ending

RATE = 22_050


def tone(seconds: float, level: float = 0.5, hz: float = 220.0) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return (level * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def silence(seconds: float) -> np.ndarray:
    return np.zeros(int(seconds * RATE), dtype=np.float32)


def faded(seconds: float, fade: float) -> np.ndarray:
    clip = tone(seconds)
    n = int(fade * RATE)
    clip[-n:] *= np.linspace(1.0, 0.0, n, dtype=np.float32) ** 2
    return clip


def test_a_tone_stopped_at_full_level_is_cut():
    result = ending(tone(0.5), RATE)
    assert result.cut and result.tail_level == pytest.approx(1.0, abs=0.05)
    assert result.sound_seconds == pytest.approx(0.5, abs=0.01)


def test_silence_after_the_stop_does_not_hide_it():
    """A clip that stops at full level and is then padded with silence (a chunk's pause, the decoder's last
    frames) is still cut: the ending is that of the sound, not of the file."""
    result = ending(np.concatenate([silence(0.1), tone(0.4), silence(0.3)]), RATE)
    assert result.cut and result.sound_seconds == pytest.approx(0.5, abs=0.01)


def test_a_fade_out_is_not_cut():
    result = ending(faded(0.6, 0.15), RATE)
    assert not result.cut and result.tail_level < 0.05


def test_a_fade_into_a_faint_noise_floor_is_not_cut():
    """Noise below the silence threshold after the fade (a decoder's hiss) is not sound."""
    rng = np.random.default_rng(0)
    floor = (0.001 * rng.standard_normal(int(0.3 * RATE))).astype(np.float32)
    result = ending(np.concatenate([faded(0.6, 0.15), floor]), RATE)
    assert not result.cut and result.sound_seconds < 0.61


def test_a_fade_too_short_to_hear_as_one_is_still_cut():
    """10 ms from full level to nothing is a click, not a fade."""
    assert ending(faded(0.5, 0.01), RATE).cut


def test_the_loudest_frame_sets_the_scale():
    """A quiet ending after a loud start is not cut; the same ending at the clip's loudest level is."""
    loud_then_quiet = np.concatenate([tone(0.2, level=0.8), tone(0.3, level=0.1)])
    assert not ending(loud_then_quiet, RATE).cut
    assert ending(tone(0.3, level=0.1), RATE).cut
    assert ending(loud_then_quiet, RATE).tail_level == pytest.approx(0.125, abs=0.02) and 0.125 < CUT_SHARE


@pytest.mark.parametrize("audio", [np.zeros(0, np.float32), silence(0.2), np.zeros(100, np.float32)])
def test_no_sound_has_no_ending_to_cut(audio):
    result = ending(audio, RATE)
    assert not result.cut and result.tail_level == 0.0


def test_a_clip_shorter_than_the_tail_is_judged_on_all_of_it():
    assert ending(tone(0.015), RATE).cut


def test_the_share_of_cut_endings():
    assert cut_share([True, False, False, False]) == 0.25
    assert cut_share([]) != cut_share([])  # nan: nothing to count


def test_eval_scores_every_clip_ending_and_reports_the_share_per_system_and_for_the_teacher():
    """The teacher's row and each system's carry the share of clips cut at full loudness, as the table shows it."""
    from types import SimpleNamespace

    from ssd_demo.measure.evaluation_report import markdown
    from ssd_demo.measure.evaluation_scoring import Scoring, _quality_summary
    from ssd_demo.speech.system import DecodingSystem

    scoring = Scoring(whisper=None, dnsmos=False, reference=None)
    clips = [tone(0.4), faded(0.4, 0.15), faded(0.5, 0.15), faded(0.3, 0.1)]
    rows = [{**scoring.clip_scores(clip, RATE, "text"), "lm_s_per_token": 0.01, "total_s_per_token": 0.02,
             "audio_s": 0.4, "lm_s": 0.1, "finish": "eos", "nll": 1.0} for clip in clips]
    assert [row["cut_ending"] for row in rows] == [True, False, False, False]
    assert rows[0]["tail_level"] > 0.9 > 0.05 > rows[1]["tail_level"]
    assert _quality_summary(rows, ["1-8 words"] * 4) == {"cut_endings": 0.25, "cut_endings_count": 1}
    from ssd_demo.measure.evaluation_scoring import summarise

    system = summarise(DecodingSystem.autoregressive("AR"), rows, rows, ["1-8 words"] * 4, (), False)
    assert system["cut_endings"] == 0.25
    teacher = {"system": "teacher (Piper en_US-joe-medium)", **_quality_summary(rows[1:], ["1-8 words"] * 3)}
    report = {"metrics": [], "embedded": True, "teacher": "Piper en_US-joe-medium", "commit": "abc", "date": "today",
              "machine": "a CPU", "texts": ["a"] * 4, "test_set": "single_words.txt", "test_set_format": "plain",
              "config": {"temperature": 0.3, "top_k": 50, "top_p": 1.0, "draft_len": 4}, "systems": [teacher, system],
              "bucket_names": []}
    table = markdown(report, "python -m ssd_demo eval")
    assert "| cut endings % (clips) |" in table and "| 25.0 (1) |" in table and "| 0.0 (0) |" in table
    assert "last 30 ms of sound above a third of the loudest 10 ms frame's RMS" in table
    old = {**report, "systems": [{"system": "AR"}]}  # a report made before the column: the cell stays empty
    assert "| AR |  |" in markdown(old, "python -m ssd_demo eval")
