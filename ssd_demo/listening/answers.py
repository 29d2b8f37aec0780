"""A study trial's answer: the dict a client submits, checked and turned into one rating per condition.

Accepted answers (values may be ints, integral floats or short ASCII number strings such as "85", "+85" or
"85.0"; never booleans, other scripts' digits or strings longer than MAX_SCORE_CHARS):

- MUSHRA: {"scores": {label: 0..100 for every rated label}}
- MOS:    {"score": 1..5}
- A/B:    {"choice": "A" | "B" | "none"}
- ABX:    {"choice": "A" | "B"}  (which of A and B the rater hears in X)

Ratings in long format, one row per (trial, label): MUSHRA's score per condition; MOS's score; A/B
gives each of the two systems 1 (chosen), 0 (not chosen) or 0.5 each (no preference); ABX one row
for X: 1 when the rater matched X correctly, else 0, with the other system of the pair.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .errors import InvalidAnswerError, quote

MUSHRA_RANGE = (0, 100)
MOS_RANGE = (1, 5)
AB_CHOICES = ("A", "B", "none")
ABX_CHOICES = ("A", "B")
MAX_SCORE_CHARS = 12
SCORE_TEXT = re.compile(r"[+-]?[0-9]{1,6}(?:\.0*)?")  # ASCII only: "٥٠" or "²" is not a score
ANSWER_FIELDS = {"mushra": ("scores",), "mos": ("score",), "ab": ("choice",), "abx": ("choice",)}


@dataclass(frozen=True)
class Rating:
    label: str
    system: str
    other_system: str | None
    score: float


def normalize_answer(kind: str, answer: object, rated_labels: Sequence[str],
                     unrated_labels: Sequence[str] = ()) -> dict:
    """The answer in its canonical form (what is stored), or InvalidAnswerError saying what is wrong.
    `unrated_labels`: the trial's samples that are heard but not scored (MUSHRA's open reference)."""
    if not isinstance(answer, Mapping):
        raise InvalidAnswerError(f"An answer is a dict such as {_example(kind)}.")
    expected = ANSWER_FIELDS[kind]
    if set(answer) != set(expected):
        raise InvalidAnswerError(f"A {kind.upper()} answer has exactly the field(s) {', '.join(expected)}, "
                                 f"e.g. {_example(kind)}.")
    if kind == "mushra":
        scores = answer["scores"]
        if not isinstance(scores, Mapping):
            raise InvalidAnswerError("MUSHRA scores are a dict from each sample's label to 0..100.")
        missing = [label for label in rated_labels if label not in scores]
        if missing:
            raise InvalidAnswerError(f"Rate every sample: {', '.join(missing)} has no score yet.")
        unknown = [label for label in scores if label not in rated_labels]
        unrated = [label for label in unknown if label in unrated_labels]
        if unrated:
            raise InvalidAnswerError(f"{quote(unrated[0])} is the reference the others are compared with: it is not "
                                     f"scored. Score only {', '.join(rated_labels)}.")
        if unknown:
            raise InvalidAnswerError(f"This trial has no sample {quote(unknown[0])}"
                                     f"{f' (and {len(unknown) - 1} more)' if len(unknown) > 1 else ''}.")
        return {"scores": {label: whole_number(scores[label], MUSHRA_RANGE, f"sample {label}")
                           for label in rated_labels}}
    if kind == "mos":
        return {"score": whole_number(answer["score"], MOS_RANGE, "the sample")}
    choices = AB_CHOICES if kind == "ab" else ABX_CHOICES
    choice = answer["choice"]
    if choice not in choices:
        words = "A, B or no preference ('none')" if kind == "ab" else "whether X is A or B"
        raise InvalidAnswerError(f"Choose {words} (got {quote(choice)}).")
    return {"choice": choice}


def parse_whole_number(value: object) -> int | None:
    """An int, an integral float or a short ASCII number string ("85", " +85 ", "85.0") as an int; None for
    anything else (a bool, another script's digits, a long string, 85.5, inf)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        text = value.strip() if len(value) <= 4 * MAX_SCORE_CHARS else ""
        if len(text) > MAX_SCORE_CHARS or not SCORE_TEXT.fullmatch(text):
            return None
        return int(float(text))
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    return value if isinstance(value, int) else None


def whole_number(value: object, bounds: tuple[int, int], what: str) -> int:
    low, high = bounds
    number = parse_whole_number(value)
    if number is None or not low <= number <= high:
        raise InvalidAnswerError(f"The score of {what} must be a whole number from {low} to {high} "
                                 f"(got {quote(value)}).")
    return number


def ratings(kind: str, answer: dict, systems: Mapping[str, str]) -> list[Rating]:
    """One rating per row of the long format, from a normalized answer and the trial's {label: system}."""
    if kind == "mushra":
        return [Rating(label, systems[label], None, float(score)) for label, score in answer["scores"].items()]
    if kind == "mos":
        return [Rating("A", systems["A"], None, float(answer["score"]))]
    if kind == "ab":
        share = {"A": (1.0, 0.0), "B": (0.0, 1.0), "none": (0.5, 0.5)}[answer["choice"]]
        return [Rating("A", systems["A"], systems["B"], share[0]), Rating("B", systems["B"], systems["A"], share[1])]
    chosen, x_system = systems[answer["choice"]], systems["X"]
    other = systems["B"] if systems["A"] == x_system else systems["A"]
    return [Rating("X", x_system, other, 1.0 if chosen == x_system else 0.0)]


def _example(kind: str) -> str:
    return {"mushra": '{"scores": {"A": 85, "B": 40}}', "mos": '{"score": 4}', "ab": '{"choice": "A"}',
            "abx": '{"choice": "B"}'}[kind]
