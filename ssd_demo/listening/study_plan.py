"""A rater's trials in a study, planned from a per-session seed (stored, so a plan can be reproduced).

The rater gets `items_per_rater` sentences drawn at random, the same ones in every block, and the
blocks in the order the study file lists them. Within a block the trials are shuffled; within a
trial the conditions are shuffled and labelled by position only ("A", "B", ...), so neither a label
nor a clip's file name tells the rater which system made a clip (the server gives every condition its
own copy under its own URL: `app/listening/study_service.py`).

- MUSHRA: one trial per item; rated conditions are the hidden reference, every system and every anchor;
  the labelled reference ("Reference") plays but is not rated.
- MOS: one trial per (item, system); one clip, labelled "A".
- A/B: one trial per (item, pair); the pair in random positions "A" and "B".
- ABX: one trial per (item, pair); "A" and "B" in random positions and "X", a copy of one of them
  chosen at random.
- Attention checks (`attention.py`), `per_block` in each block of the kinds they are made for, placed at random
  among the block's trials, each on a sentence drawn at random from the rater's. Noise checks (MOS, A/B): the
  reference buried in loud noise (`study.ATTENTION_SYSTEM`) as the MOS clip or one side of the A/B pair. Spoken
  checks: an instruction clip, its target drawn for the rater, as one more rated sample of a MUSHRA trial, as the
  MOS clip, or as one side of an A/B pair beside the reference; the condition's system names the target
  (`attention.check_system`).
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, replace

from . import attention as checks
from .errors import ListeningError
from .stimulus_sets import StimulusItem, StimulusSet
from .study import ATTENTION_SYSTEM, Block, Study

REFERENCE_LABEL = "Reference"
X_LABEL = "X"
ROLES = ("rated", "reference", "x")  # rated: has a control; reference: MUSHRA's labelled reference; x: ABX's X


@dataclass(frozen=True)
class PlannedCondition:
    label: str
    role: str
    system: str
    clip: str  # path relative to the stimulus set's folder
    duration_seconds: float


@dataclass(frozen=True)
class PlannedStudyTrial:
    kind: str
    item_id: str
    text: str
    conditions: tuple[PlannedCondition, ...]  # in presentation order
    attention_check: bool = False


def labels(n: int) -> tuple[str, ...]:
    """"A", "B", ... for n positions (at most 26)."""
    return tuple(chr(ord("A") + i) for i in range(n))


def plan_study(study: Study, stimulus_set: StimulusSet, seed: int) -> list[PlannedStudyTrial]:
    rng = random.Random(seed)
    usable = [item for item in stimulus_set.items if all(_has_clip(item, s) for s in study.rendered_systems())]
    if len(usable) < study.items_per_rater:
        raise ListeningError(f"Study {study.name!r} needs {study.items_per_rater} sentences rendered under every "
                             f"system; its stimulus set has {len(usable)}. Create the study again.")
    items = rng.sample(usable, study.items_per_rater)
    planned: list[PlannedStudyTrial] = []
    for block in study.blocks:
        trials = _block_trials(block, items, study.reference, rng)
        if block.kind in study.attention_kinds:
            for _ in range(study.attention_per_block):
                item = rng.choice(items)
                check = (_spoken_check(block, item, study.reference, rng) if study.attention_kind == "spoken"
                         else _attention_trial(block.kind, item, study.reference, rng))
                trials.insert(rng.randrange(len(trials) + 1), check)
        planned += trials
    return planned


def _block_trials(block: Block, items: list[StimulusItem], reference: str, rng: random.Random) -> list[PlannedStudyTrial]:
    if block.kind == "mushra":
        trials = [_mushra_trial(item, block.systems, reference, rng) for item in items]
    elif block.kind == "mos":
        trials = [_trial("mos", item, [("A", "rated", system)]) for item, system in itertools.product(items, block.systems)]
    elif block.kind == "ab":
        trials = [_trial("ab", item, _positions(pair, rng)) for item, pair in itertools.product(items, block.pairs)]
    else:
        trials = [_abx_trial(item, pair, rng) for item, pair in itertools.product(items, block.pairs)]
    rng.shuffle(trials)
    return trials


def _positions(pair: tuple[str, str], rng: random.Random) -> list[tuple[str, str, str]]:
    first, second = pair if rng.random() < 0.5 else pair[::-1]
    return [("A", "rated", first), ("B", "rated", second)]


def _mushra_trial(item: StimulusItem, systems: tuple[str, ...], reference: str, rng: random.Random) -> PlannedStudyTrial:
    shuffled = list(systems)  # the hidden reference is among them
    rng.shuffle(shuffled)
    rated = [(label, "rated", system) for label, system in zip(labels(len(shuffled)), shuffled)]
    return _trial("mushra", item, [*rated, (REFERENCE_LABEL, "reference", reference)])


def _abx_trial(item: StimulusItem, pair: tuple[str, str], rng: random.Random) -> PlannedStudyTrial:
    positions = _positions(pair, rng)
    x_system = positions[rng.randrange(2)][2]
    return _trial("abx", item, [*positions, (X_LABEL, "x", x_system)])


def _attention_trial(kind: str, item: StimulusItem, reference: str, rng: random.Random) -> PlannedStudyTrial:
    if kind == "mos":
        return _trial("mos", item, [("A", "rated", ATTENTION_SYSTEM)], attention=True)
    return _trial("ab", item, _positions((reference, ATTENTION_SYSTEM), rng), attention=True)


def _has_clip(item: StimulusItem, system: str) -> bool:
    spoken = checks.parse_spoken_system(system)
    return bool(checks.spoken_clips(item.clips, spoken)) if spoken else system in item.clips


def _spoken_check(block: Block, item: StimulusItem, reference: str, rng: random.Random) -> PlannedStudyTrial:
    """A check trial whose spoken clip names its target, drawn for this rater (the session's seed): raters of
    the same sentence hear different targets. The clip's condition is stored under `check_system`."""
    choices = checks.spoken_clips(item.clips, block.kind)
    if not choices:
        raise ListeningError(f"The spoken attention check of {item.item_id} names no target a rater could give; "
                             "create the study again.")
    target = rng.choice(sorted(choices, key=str))
    clip_system = choices[target].system  # the target's own clip, or an older set's one clip of the sentence
    if block.kind == "mushra":
        trial = _mushra_trial(item, (*block.systems, clip_system), reference, rng)
    elif block.kind == "mos":
        trial = _trial("mos", item, [("A", "rated", clip_system)])
    else:
        trial = _trial("ab", item, _positions((reference, clip_system), rng))
    stored = checks.check_system(block.kind, target)
    conditions = tuple(replace(c, system=stored) if c.system == clip_system else c for c in trial.conditions)
    return replace(trial, conditions=conditions, attention_check=True)


def _trial(kind: str, item: StimulusItem, conditions: list[tuple[str, str, str]], attention: bool = False) -> PlannedStudyTrial:
    planned = tuple(
        PlannedCondition(label=label, role=role, system=system, clip=item.clips[system].path,
                         duration_seconds=item.clips[system].duration_seconds)
        for label, role, system in conditions
    )
    return PlannedStudyTrial(kind=kind, item_id=item.item_id, text=item.text, conditions=planned,
                             attention_check=attention)
