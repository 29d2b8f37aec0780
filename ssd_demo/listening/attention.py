"""Attention checks: trials that an attentive rater answers one known way, to screen out raters who answer
without listening. A study chooses one kind (`[attention] kind`):

- `noise`: the reference buried in white noise 6 dB above its level (`attention noise`, `anchors.attention_noise`),
  in MOS and A/B blocks. Failed by a MOS score above 2, or by not choosing the clean clip in A/B.
- `spoken`: a clip in which the study's voice (the reference's decoding) says an instruction with a target,
  in MUSHRA, MOS and A/B blocks (`attention spoken mushra|mos|ab`, one clip per target of the kind):
  - MUSHRA: "This is an attention check. For this sample, move the slider to twenty. Again: twenty." The clip
    is one more rated sample in a MUSHRA trial of the sentence; failed when its score is more than 10 from the
    target.
  - MOS: "... Please give this sample a score of two. Again: two." Failed by any other score.
  - A/B: "... Please choose the first sample. Again: the first sample, A." The clip sits beside the reference,
    on either side; failed by choosing the other sample or no preference.

Every target of a kind is rendered once per stimulus set (`render_spoken`), each clip under the system name
`attention spoken KIND target=T` (`check_system`), and each check's target is drawn per rater (from the
session's seed, `study_plan`): two raters of the same sentence hear different words, so a target cannot be
passed on or learned. A stimulus set rendered before this holds one clip per sentence and kind under
`attention spoken KIND`, its target drawn from the sentence's seed; it is still served, with that target
(`spoken_clips`). The manifest records each clip's instruction and target; a check trial stores its clip under
`check_system`, so the ratings (and their CSV export) alone tell whether a check was passed (`failed`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..speech.system import SPOKEN_CHECK_KINDS, DecodingSystem

NOISE_SYSTEM = "attention noise"  # the reference buried in loud noise: an obvious defect
CHECK_KINDS = ("noise", "spoken")
DEFAULT_CHECK_KIND = "noise"
NOISE_TRIAL_KINDS = ("mos", "ab")
SPOKEN_TRIAL_KINDS = SPOKEN_CHECK_KINDS  # ("mushra", "mos", "ab")
#: The targets a spoken check draws from. MUSHRA leaves out 50, the middle where an idle slider tends to rest,
#: and MOS leaves out 3 for the same reason.
SPOKEN_TARGETS: dict[str, tuple[int | str, ...]] = {
    "mushra": (10, 20, 30, 40, 60, 70, 80, 90), "mos": (1, 2, 4, 5), "ab": ("A", "B")}
MUSHRA_TOLERANCE = 10  # a MUSHRA check passes within this many points of its target
MOS_NOISE_MAX = 2  # a MOS noise check fails above this score
_WORDS = {1: "one", 2: "two", 4: "four", 5: "five", 10: "ten", 20: "twenty", 30: "thirty", 40: "forty",
          60: "sixty", 70: "seventy", 80: "eighty", 90: "ninety"}
_CHECK_SYSTEM = re.compile(r"^attention spoken (mushra|mos|ab) target=([0-9]+|A|B)$")

# (audio, sample rate, settings) for a text under a system and seed: a stimulus set's Renderer.
Render = Callable[[str, DecodingSystem, int], tuple[np.ndarray, int, dict[str, Any]]]


def spoken_system(kind: str) -> str:
    """The stimulus set's system name of the spoken check for a trial kind."""
    return f"attention spoken {kind}"


def instruction(kind: str, target: int | str) -> str:
    """What the clip says: numbers in words, so every voice reads them alike, and the target said twice, so a
    small voice's unclear word is heard again (Whisper tiny.en missed a single "five" of the embedded voice)."""
    opening = "This is an attention check."
    if kind == "mushra":
        return f"{opening} For this sample, move the slider to {_WORDS[int(target)]}. Again: {_WORDS[int(target)]}."
    if kind == "mos":
        return f"{opening} Please give this sample a score of {_WORDS[int(target)]}. Again: {_WORDS[int(target)]}."
    position = "first" if target == "A" else "second"
    return f"{opening} Please choose the {position} sample. Again: the {position} sample, {target}."


def parse_spoken_system(system: str) -> str | None:
    """The trial kind of a stimulus set's spoken check system (`spoken_system`); None for any other system."""
    words = system.split()
    return words[2] if len(words) == 3 and words[:2] == ["attention", "spoken"] else None


def check_system(kind: str, target: int | str) -> str:
    """The system name a check trial stores for its spoken clip: the kind and the target."""
    return f"attention spoken {kind} target={target}"


def parse_check(system: str) -> tuple[str, int | str] | None:
    """(trial kind, target) of a stored spoken check's system name; None for any other system."""
    match = _CHECK_SYSTEM.match(system)
    if match is None:
        return None
    kind, target = match.groups()
    return kind, target if kind == "ab" else int(target)


def failed(kind: str, label: str, system: str, score: float) -> bool | None:
    """Whether a rating fails its attention check; None for a rating that is not a check's verdict (the
    other samples of a check trial). A/B ratings give the chosen sample 1, the other 0, each 0.5 for none."""
    if system == NOISE_SYSTEM:
        return score > MOS_NOISE_MAX if kind == "mos" else score > 0
    parsed = parse_check(system)
    if parsed is None or parsed[0] != kind:
        return None
    target = parsed[1]
    if kind == "mushra":
        return abs(score - int(target)) > MUSHRA_TOLERANCE
    if kind == "mos":
        return score != target
    target_chosen = score == 1 if label == target else score == 0  # this sample, or the other one, was chosen
    return not target_chosen


def spoken_clips(clips: Mapping[str, Any], kind: str) -> dict[int | str, Any]:
    """{target: clip} of a sentence's spoken checks of one trial kind, from its clips by system name: one per
    target (`check_system`), or, in a set rendered before targets were drawn per rater, the sentence's one clip
    (`spoken_system`) with the target its manifest entry records."""
    found = {}
    for system, clip in clips.items():
        parsed = parse_check(system)
        if parsed is not None and parsed[0] == kind:
            found[parsed[1]] = clip
    single = clips.get(spoken_system(kind))
    if not found and single is not None and single.settings.get("target") in SPOKEN_TARGETS[kind]:
        found[single.settings["target"]] = single
    return found


def render_spoken(system: DecodingSystem, voice: DecodingSystem, render: Render, seed: int,
                  rendered: dict[str, tuple] | None = None) -> list[tuple[str, np.ndarray, int, dict[str, Any]]]:
    """(system name, audio, rate, settings) of the spoken check clips of `system`'s trial kind, one per target,
    each instruction rendered with the voice's (the reference's) decoding and `seed`. `rendered` keeps them
    between the sentences of a set: the clips do not depend on the sentence, so each is rendered once."""
    kind = system.overrides["spoken"]
    rendered = {} if rendered is None else rendered
    clips = []
    for target in SPOKEN_TARGETS[kind]:
        name = check_system(kind, target)
        if name not in rendered:
            text = instruction(kind, target)
            audio, sample_rate, decoding = render(text, voice, seed)
            rendered[name] = (name, audio, sample_rate, {
                "mode": "attention", "check": "spoken", "trial_kind": kind, "target": target, "instruction": text,
                "voice": voice.label, "decoding": decoding})
        clips.append(rendered[name])
    return clips
