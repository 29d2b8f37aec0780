"""Test-set files for eval: plain lines and the Seed-TTS meta format, and a clear error for each mistake."""

import pytest

from ssd_demo.errors import UserError
from ssd_demo.measure.test_sets import TestSetError, parse_test_set, read_test_set


@pytest.fixture
def meta_dir(tmp_path):
    (tmp_path / "prompt-wavs").mkdir()
    for name in ("a.wav", "b.wav"):
        (tmp_path / "prompt-wavs" / name).write_bytes(b"RIFF")  # only existence is checked here
    return tmp_path


def write(folder, text, name="meta.lst"):
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def test_plain_file_one_text_per_line_skipping_blank_lines_and_comments(tmp_path):
    path = write(tmp_path, "\ufeff# a comment\nHello there.\n\n   \n  The cat sat on the mat.  \n# end\n", "texts.txt")
    test_set = read_test_set(path)
    assert test_set.format == "plain" and not test_set.has_voice_prompts
    assert [(i.id, i.text, i.line) for i in test_set.items] == [("2", "Hello there.", 2),
                                                                ("5", "The cat sat on the mat.", 5)]


def test_seed_tts_meta_lines_resolve_prompt_wavs_against_the_file(meta_dir):
    path = write(meta_dir, "# id|prompt text|prompt wav|target text\n"
                           "utt1|A prompt.|prompt-wavs/a.wav|Say this.\n\n"
                           "utt2 | Another prompt. | prompt-wavs/b.wav | And this, please.\n")
    test_set = read_test_set(path)
    assert test_set.format == "seed-tts" and test_set.has_voice_prompts
    first, second = test_set.items
    assert (first.id, first.prompt_text, first.text, first.line) == ("utt1", "A prompt.", "Say this.", 2)
    assert first.prompt_wav == meta_dir / "prompt-wavs" / "a.wav"
    assert (second.id, second.text, second.prompt_wav.name) == ("utt2", "And this, please.", "b.wav")


@pytest.mark.parametrize("text, message", [
    ("u1|prompt|prompt-wavs/a.wav\n", r"line 1: expected 4 fields .*got 3"),
    ("u1|prompt|prompt-wavs/a.wav|target|extra\n", r"line 1: expected 4 fields .*got 5"),
    ("u1|prompt|prompt-wavs/a.wav|target\nu2||prompt-wavs/b.wav|target\n", r"line 2: the prompt text field is empty"),
    ("u1|prompt|prompt-wavs/a.wav|   \n", r"line 1: the target text field is empty"),
    ("# c\nu1|prompt|prompt-wavs/missing.wav|target\n", r"line 2: prompt wav prompt-wavs/missing.wav not found"),
    ("u1|prompt|prompt-wavs/a.wav|target\nu1|prompt|prompt-wavs/b.wav|target\n", r"line 2: id 'u1' is already used on line 1"),
    ("u1|prompt|prompt-wavs/a.wav|target\njust a text\n", r"line 2: the file mixes formats"),
    ("just a text\nu1|prompt|prompt-wavs/a.wav|target\n", r"line 2: the file mixes formats"),
    ("\n# only comments\n\n", r"has no texts"),
])
def test_each_mistake_names_its_line_and_what_is_wrong(meta_dir, text, message):
    with pytest.raises(TestSetError, match=message) as caught:
        read_test_set(write(meta_dir, text))
    assert isinstance(caught.value, UserError)  # the CLI prints it in one line and exits 2


def test_missing_wavs_can_be_left_unchecked_and_unreadable_files_are_refused(meta_dir):
    test_set = parse_test_set("u1|prompt|nowhere.wav|target\n", meta_dir / "meta.lst", check_files=False)
    assert test_set.items[0].prompt_wav == meta_dir / "nowhere.wav"
    with pytest.raises(TestSetError, match="does not exist"):
        read_test_set(meta_dir / "absent.lst")
    with pytest.raises(TestSetError, match="is a folder"):
        read_test_set(meta_dir)
    (meta_dir / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    with pytest.raises(TestSetError, match="not UTF-8"):
        read_test_set(meta_dir / "latin1.txt")
