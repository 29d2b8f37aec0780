"""A listening study defined in one TOML file: its trial types, systems, reference, anchors, items per
rater, instructions and attention checks (the file's fields are documented in this package's README).

Reading a file checks everything a study needs before any audio is rendered or any rater starts:
a mistake is a `StudyFileError` that names the field and says what is accepted.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..speech.system import is_anchor_name
from . import attention as checks
from .errors import StudyFileError
from .stimulus_sets import SET_NAME

try:
    import tomllib  # Python 3.11 and later
except ModuleNotFoundError:  # Python 3.10: the same parser, packaged as tomli
    try:
        import tomli as tomllib
    except ModuleNotFoundError:
        tomllib = None

KINDS = ("mushra", "abx", "ab", "mos")
DEFAULT_REFERENCE = "AR"
LOWPASS_ANCHOR = "anchor lowpass=3500"  # ITU-R BS.1534's low anchor: the reference low-passed at 3.5 kHz
MID_ANCHOR = "anchor lowpass=7000"  # BS.1534-3's mid-range anchor: low-passed at 7 kHz
#: Screening rules a study may name (`[screening] rules`); `screening.py` says what each does.
SCREENING_RULES = ("hidden-reference", "mid-anchor", "anchor-above-reference", "attention")
ATTENTION_SYSTEM = checks.NOISE_SYSTEM  # the reference buried in loud noise: an obvious defect
MAX_MUSHRA_CONDITIONS = 12  # hidden reference, systems and anchors on one screen (BS.1534 advises few)
MAX_ITEMS_PER_RATER = 200
DEFAULT_INSTRUCTIONS = {
    "mushra": ("Listen to the reference and to every sample. Rate each sample from 0 (bad) to 100 (excellent) "
               "for how close it is to the reference; one of the samples is the reference itself."),
    "abx": "Listen to A, B and X. X is the same recording as A or as B: say which.",
    "ab": "Listen to both samples and choose the one that sounds more natural, or no preference.",
    "mos": "Listen to the sample and rate how natural it sounds, from 1 (bad) to 5 (excellent).",
}
_TOP_LEVEL = {"name", "title", "instructions", "reference", "systems", "anchors", "items_per_rater", "sentences",
              "seed", "preset", "stimulus_set", *KINDS, "attention", "screening"}


@dataclass(frozen=True)
class Block:
    """The trials of one kind: MUSHRA and MOS rate `systems`, A/B and ABX compare `pairs`."""

    kind: str
    instructions: str
    systems: tuple[str, ...] = ()
    pairs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Study:
    name: str
    title: str
    instructions: str
    reference: str
    systems: tuple[str, ...]  # the systems under test (not the reference, not the anchors)
    anchors: tuple[str, ...]
    items_per_rater: int
    sentences: tuple[str, ...]
    seed: int
    preset: str
    stimulus_set: str  # the stimulus set's name (default: the study's name)
    blocks: tuple[Block, ...]  # in the order the file lists them; a rater gets them in this order
    attention_per_block: int = 0  # attention checks in each block that has them (`attention_kinds`)
    attention_max_failures: int = 0  # a rater who fails more is excluded
    attention_kind: str = checks.DEFAULT_CHECK_KIND  # "noise" (MOS, A/B) or "spoken" (MUSHRA, MOS, A/B)
    screening_rules: tuple[str, ...] = ()  # () : BS.1534-3's (`default_screening`)
    sha256: str = ""  # of the file it was read from
    source: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(block.kind for block in self.blocks)

    def block(self, kind: str) -> Block:
        for block in self.blocks:
            if block.kind == kind:
                return block
        raise KeyError(kind)

    @property
    def screening(self) -> tuple[str, ...]:
        """The screening rules applied: the study's own, else `default_screening`."""
        return self.screening_rules or default_screening(self.anchors)

    @property
    def attention_kinds(self) -> tuple[str, ...]:
        """The kinds of the blocks that get attention checks (none without `attention_per_block`)."""
        if not self.attention_per_block:
            return ()
        eligible = checks.SPOKEN_TRIAL_KINDS if self.attention_kind == "spoken" else checks.NOISE_TRIAL_KINDS
        return tuple(kind for kind in self.kinds if kind in eligible)

    @property
    def lowpass_anchors(self) -> tuple[str, ...]:
        """The anchors made by low-passing the reference (not the draft decoding alone)."""
        return tuple(anchor for anchor in self.anchors if anchor.split()[1].lower().startswith("lowpass"))

    def rendered_systems(self) -> tuple[str, ...]:
        """Every system the stimulus set needs, the reference first, then the systems, anchors and attention clips."""
        wanted = [self.reference, *self.systems, *self.anchors]
        for block in self.blocks:
            wanted += [*block.systems, *(s for pair in block.pairs for s in pair)]
        if self.attention_kind == "spoken":
            wanted += [checks.spoken_system(kind) for kind in self.attention_kinds]
        elif self.attention_kinds:
            wanted.append(ATTENTION_SYSTEM)
        return tuple(dict.fromkeys(wanted))


def load_study(path: Path | str) -> Study:
    """Read and check a study file (TOML)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise StudyFileError(f"cannot read study file {path.name}: {error.strerror or error}") from None
    return parse_study(raw, origin=path.name)


def parse_study(raw: bytes | str, origin: str = "study file") -> Study:
    data = raw.encode("utf-8") if isinstance(raw, str) else raw
    if tomllib is None:
        raise StudyFileError("reading a study file needs Python 3.11 or later, or `pip install tomli` on Python 3.10")
    try:
        table = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise StudyFileError(f"{origin} is not valid TOML: {error}") from None
    return replace(_study_from_table(table, origin), sha256=hashlib.sha256(data).hexdigest(), source=table)


def _study_from_table(table: dict[str, Any], origin: str) -> Study:
    unknown = sorted(set(table) - _TOP_LEVEL)
    if unknown:
        raise StudyFileError(f"{origin}: unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(_TOP_LEVEL))}")
    name = _text(table, "name", origin, required=True)
    if not SET_NAME.match(name):
        raise StudyFileError(f"{origin}: name {name!r}: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit")
    reference = _text(table, "reference", origin) or DEFAULT_REFERENCE
    systems = _names(table, "systems", origin)
    if not systems:
        raise StudyFileError(f"{origin}: systems: list at least one system under test, e.g. [\"SSD beta=0.3 K=4\"]")
    anchors = _names(table, "anchors", origin, default=(LOWPASS_ANCHOR,))
    for anchor in anchors:
        if not is_anchor_name(anchor):
            raise StudyFileError(f"{origin}: anchors: {anchor!r} is not an anchor; use e.g. {LOWPASS_ANCHOR!r}")
    everything = (reference, *systems, *anchors)
    if len(set(everything)) != len(everything):
        raise StudyFileError(f"{origin}: the reference, systems and anchors must all differ")
    sentences = _names(table, "sentences", origin)
    if not sentences:
        raise StudyFileError(f"{origin}: sentences: give the sentences (items) to render, one string each")
    items = _integer(table, "items_per_rater", origin, default=len(sentences), low=1, high=MAX_ITEMS_PER_RATER)
    if items > len(sentences):
        raise StudyFileError(f"{origin}: items_per_rater is {items} but only {len(sentences)} sentences are given")
    general = _text(table, "instructions", origin)
    blocks = tuple(_block(kind, table[kind], origin, reference, systems, anchors)
                   for kind in table if kind in KINDS)
    if not blocks:
        raise StudyFileError(f"{origin}: no trials: add at least one of the tables {', '.join(f'[{k}]' for k in KINDS)}")
    attention = table.get("attention", {})
    if not isinstance(attention, dict) or set(attention) - {"per_block", "max_failures", "kind"}:
        raise StudyFileError(f"{origin}: [attention] takes per_block, max_failures and kind")
    per_block = _integer(attention, "per_block", origin, default=0, low=0, high=10, where="attention.")
    check_kind = _attention_kind(attention, origin, per_block, blocks)
    screening = table.get("screening", {})
    if not isinstance(screening, dict) or set(screening) - {"rules"}:
        raise StudyFileError(f"{origin}: [screening] takes rules, a list of {', '.join(SCREENING_RULES)}")
    rules = _names(screening, "rules", origin)
    unknown_rules = [rule for rule in rules if rule not in SCREENING_RULES]
    if unknown_rules:
        raise StudyFileError(f"{origin}: screening.rules: unknown {', '.join(unknown_rules)}; "
                             f"known: {', '.join(SCREENING_RULES)}")
    if "mid-anchor" in rules and MID_ANCHOR not in anchors:
        raise StudyFileError(f"{origin}: screening.rules names mid-anchor, but the anchors lack {MID_ANCHOR!r}")
    return Study(
        name=name, title=_text(table, "title", origin) or "Listening test", instructions=general,
        reference=reference, systems=systems, anchors=anchors, items_per_rater=items, sentences=sentences,
        seed=_integer(table, "seed", origin, default=0, low=0, high=2**31 - 1),
        preset=_text(table, "preset", origin) or "embedded",
        stimulus_set=_text(table, "stimulus_set", origin) or name, blocks=blocks,
        attention_per_block=per_block, attention_kind=check_kind,
        attention_max_failures=_integer(attention, "max_failures", origin, default=0, low=0, high=100,
                                        where="attention."),
        screening_rules=rules,
    )


def _attention_kind(attention: dict, origin: str, per_block: int, blocks: tuple[Block, ...]) -> str:
    """`[attention] kind`, checked against the blocks that would get the checks."""
    kind = attention.get("kind", checks.DEFAULT_CHECK_KIND)
    if kind not in checks.CHECK_KINDS:
        raise StudyFileError(f"{origin}: attention.kind must be one of {', '.join(map(repr, checks.CHECK_KINDS))}, "
                             f"got {kind!r}")
    kinds = {block.kind for block in blocks}
    if per_block and kind == "noise" and not kinds & set(checks.NOISE_TRIAL_KINDS):
        raise StudyFileError(f"{origin}: noise attention checks are made for [mos] and [ab] blocks; the study has "
                             "neither (kind = \"spoken\" checks MUSHRA too)")
    if per_block and kind == "spoken" and not kinds & set(checks.SPOKEN_TRIAL_KINDS):
        raise StudyFileError(f"{origin}: spoken attention checks are made for [mushra], [mos] and [ab] blocks; "
                             "the study has none of them")
    mushra = next((block for block in blocks if block.kind == "mushra"), None)
    if per_block and kind == "spoken" and mushra and len(mushra.systems) + 1 > MAX_MUSHRA_CONDITIONS:
        raise StudyFileError(f"{origin}: a MUSHRA attention check adds its spoken clip to {len(mushra.systems)} "
                             f"conditions; at most {MAX_MUSHRA_CONDITIONS} on one screen")
    return kind


def default_screening(anchors: tuple[str, ...]) -> tuple[str, ...]:
    """ITU-R BS.1534-3's post-screening (the hidden reference below 90, and the mid-range anchor above 90, each
    in more than 15% of items) and the attention checks. A study without the 7 kHz mid-range anchor cannot apply
    the second rule: it uses "an anchor above the hidden reference" in its place, as studies did before."""
    second = "mid-anchor" if MID_ANCHOR in anchors else "anchor-above-reference"
    return ("hidden-reference", second, "attention")


def _block(kind: str, table: object, origin: str, reference: str, systems: tuple[str, ...],
           anchors: tuple[str, ...]) -> Block:
    where = f"{origin}: [{kind}]"
    if not isinstance(table, dict):
        raise StudyFileError(f"{where} must be a table")
    allowed = {"instructions"} | ({"pairs"} if kind in ("ab", "abx") else {"systems"} if kind == "mos" else set())
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise StudyFileError(f"{where}: unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(allowed))}")
    instructions = _text(table, "instructions", origin) or DEFAULT_INSTRUCTIONS[kind]
    known = (reference, *systems, *anchors)
    if kind == "mushra":
        conditions = 1 + len(systems) + len(anchors)
        if conditions > MAX_MUSHRA_CONDITIONS:
            raise StudyFileError(f"{where}: {conditions} conditions on one screen; at most {MAX_MUSHRA_CONDITIONS}")
        return Block(kind, instructions, systems=(reference, *systems, *anchors))
    if kind == "mos":
        chosen = _names(table, "systems", origin, default=(reference, *systems))
        if not chosen:
            raise StudyFileError(f"{where}: systems: list at least one system to rate")
        _check_known(chosen, known, where)
        return Block(kind, instructions, systems=chosen)
    default_pairs = tuple((reference, s) for s in systems) if kind == "ab" else tuple((s, reference) for s in systems)
    pairs = table.get("pairs", default_pairs)
    if (not isinstance(pairs, (list, tuple)) or not pairs
            or not all(isinstance(p, (list, tuple)) and len(p) == 2 and all(isinstance(s, str) for s in p) for p in pairs)):
        raise StudyFileError(f"{where}: pairs must be a list of two-system lists, e.g. [[\"AR\", \"SSD beta=0.3 K=4\"]]")
    pairs = tuple((str(a), str(b)) for a, b in pairs)
    for a, b in pairs:
        _check_known((a, b), known, where)
        if a == b:
            raise StudyFileError(f"{where}: a pair compares two different systems, got {a!r} twice")
    return Block(kind, instructions, pairs=pairs)


def _check_known(names, known, where: str) -> None:
    for name in names:
        if name not in known:
            raise StudyFileError(f"{where}: {name!r} is not the reference, a system or an anchor of this study")


def _text(table: dict, key: str, origin: str, required: bool = False) -> str:
    value = table.get(key)
    if value is None:
        if required:
            raise StudyFileError(f"{origin}: {key} is required")
        return ""
    if not isinstance(value, str):
        raise StudyFileError(f"{origin}: {key} must be a string")
    return value.strip()


def _names(table: dict, key: str, origin: str, default: tuple[str, ...] = ()) -> tuple[str, ...]:
    value = table.get(key)
    if value is None:
        return default
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise StudyFileError(f"{origin}: {key} must be a list of non-empty strings")
    names = tuple(v.strip() for v in value)
    if len(set(names)) != len(names):
        twice = next(name for name in names if names.count(name) > 1)
        what = {"sentences": "sentence", "anchors": "anchor"}.get(key, "system")
        raise StudyFileError(f"{origin}: {key} lists the same {what} twice: {twice!r}")
    return names


def _integer(table: dict, key: str, origin: str, default: int, low: int, high: int, where: str = "") -> int:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise StudyFileError(f"{origin}: {where}{key} must be a whole number from {low} to {high}, got {value!r}")
    return value
