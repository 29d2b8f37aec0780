"""Test-set files for `eval`: one text per line, or the Seed-TTS meta format.

Two formats, told apart by the file's first text line:

- plain: one text per line (`id` = the line number);
- Seed-TTS meta (`meta.lst` of the Seed-TTS evaluation sets): `id|prompt text|prompt wav|target text`, four
  fields separated by `|`; the prompt wav is a path relative to the file, read as the voice to imitate.

Blank lines and lines starting with `#` are skipped in both. A file must not mix the formats. Every problem
is a `TestSetError` naming the line and what is wrong with it; nothing here loads a model.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError

META_FIELDS = ("id", "prompt text", "prompt wav", "target text")


class TestSetError(InputError):
    """A test-set file cannot be read: the message names the file, the line and the problem."""

    __test__ = False  # a class named Test* that pytest must not collect


@dataclass(frozen=True)
class TestItem:
    """One utterance to synthesise and score."""

    __test__ = False

    id: str
    text: str  # what the system must say (the reference for WER)
    line: int  # 1-based line in the file, for messages
    prompt_text: str | None = None  # the voice prompt's transcript (Seed-TTS meta only)
    prompt_wav: Path | None = None  # the voice prompt's audio, resolved against the file's folder


@dataclass(frozen=True)
class TestSet:
    __test__ = False

    path: Path
    format: str  # "plain" | "seed-tts"
    items: tuple[TestItem, ...]

    @property
    def has_voice_prompts(self) -> bool:
        return any(item.prompt_wav is not None for item in self.items)


def read_test_set(path: str | Path, check_files: bool = True) -> TestSet:
    """Parse `path`; with `check_files`, every prompt wav must exist (checked before any model loads)."""
    path = Path(path)
    if path.is_dir():
        raise TestSetError(f"test set {path} is a folder: give a text file (one text per line, or id|prompt "
                           "text|prompt wav|target text)")
    if not path.is_file():
        raise TestSetError(f"test set {path} does not exist")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as error:
        raise TestSetError(f"test set {path} is not UTF-8 text (byte {error.start}): save it as UTF-8") from None
    return parse_test_set(text, path, check_files)


def parse_test_set(text: str, path: Path, check_files: bool = True) -> TestSet:
    """The items of a test-set file's `text`; `path` locates prompt wavs and names the file in messages."""
    lines = [(number, line.strip()) for number, line in enumerate(text.splitlines(), start=1)]
    lines = [(number, line) for number, line in lines if line and not line.startswith("#")]
    if not lines:
        raise TestSetError(f"test set {path} has no texts (blank lines and # comments are skipped)")
    first_number, first = lines[0]
    meta = "|" in first
    items = []
    for number, line in lines:
        if ("|" in line) != meta:
            kind = "has" if meta else "has no"
            raise TestSetError(f"{path}, line {number}: the file mixes formats (line {first_number} {kind} '|' "
                               "fields, this line does not match): use one text per line, or id|prompt text|prompt "
                               "wav|target text on every line")
        items.append(_meta_item(line, number, path, check_files) if meta else TestItem(str(number), line, number))
    _check_unique_ids(items, path)
    return TestSet(path, "seed-tts" if meta else "plain", tuple(items))


def _meta_item(line: str, number: int, path: Path, check_files: bool) -> TestItem:
    fields = [field.strip() for field in line.split("|")]
    if len(fields) != len(META_FIELDS):
        raise TestSetError(f"{path}, line {number}: expected {len(META_FIELDS)} fields separated by '|' "
                           f"({'|'.join(META_FIELDS)}), got {len(fields)}")
    for name, value in zip(META_FIELDS, fields):
        if not value:
            raise TestSetError(f"{path}, line {number}: the {name} field is empty")
    item_id, prompt_text, wav, target = fields
    wav_path = (path.parent / wav) if not Path(wav).is_absolute() else Path(wav)
    if check_files and not wav_path.is_file():
        raise TestSetError(f"{path}, line {number}: prompt wav {wav} not found (looked for {wav_path}; paths are "
                           "relative to the test-set file)")
    return TestItem(item_id, target, number, prompt_text, wav_path)


def _check_unique_ids(items: list[TestItem], path: Path) -> None:
    seen: dict[str, int] = {}
    for item in items:
        if item.id in seen:
            raise TestSetError(f"{path}, line {item.line}: id {item.id!r} is already used on line {seen[item.id]}")
        seen[item.id] = item.line
