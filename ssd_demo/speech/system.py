"""A decoding system: one labelled way to decode, as the measurements and listening tests name them.

`DecodingSystem` holds a label ("AR", "SSD beta=0.3 K=4"), the mode the synthesizer decodes in ("ar" or
"speculative"), the `DecodingConfig` fields it changes from the voice's own config, and the draft it drafts
with (None: the voice's default draft). Every default comes from the voice's config, i.e. from
`ssd_demo.config.SETTINGS`; a system holds only what differs. The sweep, `eval`, the stimulus sets and the
listening studies all read systems of this one type, on our engine and on vLLM alike.

Listening tests also name clips that are not a decoding under test ("anchor lowpass=HZ", "attention noise",
"attention spoken KIND"): those are systems of mode "anchor" and "attention" (`derived`), made from the
reference's clip of the same sentence (the anchor's cut-off among the overrides), or, for a spoken attention
check, an instruction rendered with the reference's decoding (the trial kind it instructs, "mushra", "mos" or
"ab", as the override `spoken`). The draft-alone anchor ("anchor draft", "anchor draft=NAME") is decoded: mode
"draft", the draft model decoding autoregressively on its own (`Synthesizer.solo_draft` picks the draft).

`parse_system` reads the names people write: "AR", "exact speculative [K=n]", "SSD beta=b [K=n]" (any
speculative one may add draft=NAME), "anchor lowpass=HZ", "anchor draft[=NAME]", "attention noise",
"attention spoken mushra|mos|ab". K in a name is the paper's symbol for `draft_len`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..config import DecodingConfig
from ..errors import InputError

Mode = Literal["ar", "speculative", "draft", "anchor", "attention"]
DECODED_MODES = ("ar", "speculative", "draft")  # "draft": the draft model alone, autoregressively
DERIVED_MODES = ("anchor", "attention")

#: How names spell the settings they may set: K is `draft_len` (the paper's symbol), beta is `beta`.
NAME_KEYS = {"k": "draft_len", "beta": "beta"}
LOWPASS_RANGE_HZ = (100.0, 20000.0)
SPOKEN_CHECK_KINDS = ("mushra", "mos", "ab")  # the trial kinds a spoken attention check instructs

_KEY_VALUE = re.compile(r"^([A-Za-z_]+)=(\S+)$")


@dataclass(frozen=True)
class DecodingSystem:
    """A labelled decoding setup: the mode, the config fields it changes, and its draft (None: the default)."""

    label: str
    mode: Mode
    overrides: Mapping[str, Any] = field(default_factory=dict, hash=False)
    draft: str | None = None

    @classmethod
    def autoregressive(cls, label: str = "AR") -> "DecodingSystem":
        return cls(label, "ar")

    @classmethod
    def speculative(cls, label: str, draft: str | None = None, **overrides: Any) -> "DecodingSystem":
        return cls(label, "speculative", dict(overrides), draft)

    @property
    def derived(self) -> bool:
        """Not a decoding under test (listening tests): made from the reference's clip of the same sentence, or a
        spoken attention check's instruction rendered with the reference's decoding."""
        return self.mode in DERIVED_MODES

    @property
    def speculates(self) -> bool:
        return self.mode == "speculative"

    def config(self, base: DecodingConfig, **changes: Any) -> DecodingConfig:
        """`base` (the voice's config) with this system's overrides, then `changes` (a seed, say), applied."""
        return base.with_(**{**self.overrides, **changes})

    def check(self) -> None:
        """InvalidSettingError when a decoded system's overrides are outside the settings' bounds."""
        if not self.derived:
            DecodingConfig(**self.overrides)


def parse_system(name: str) -> DecodingSystem:
    """The system a name describes (see the module's docstring); InputError for a name it cannot read."""
    words = name.split()
    if not words:
        raise InputError("a system name is empty")
    head, rest = words[0].lower(), words[1:]
    if head in DERIVED_MODES:
        return _parse_derived(name, head, rest)
    if head == "exact" and rest and rest[0].lower() == "speculative":
        rest = rest[1:]
    options = _options(name, rest)
    draft = options.pop("draft", None)
    overrides = _settings(name, options)
    if head == "ar":
        if overrides or draft:
            raise InputError(f"system {name!r}: AR takes no K, beta or draft")
        return DecodingSystem.autoregressive(name)
    if head == "exact":
        if "beta" in overrides:
            raise InputError(f"system {name!r}: exact speculative sampling has beta=0 by definition")
        return DecodingSystem.speculative(name, draft, **overrides, acceptance="exact", beta=0.0)
    if head == "ssd":
        if "beta" not in overrides:
            raise InputError(f"system {name!r}: SSD needs beta=..., e.g. 'SSD beta=0.3 K=4'")
        return DecodingSystem.speculative(name, draft, **overrides, acceptance="ssd")
    raise InputError(f"unknown system {name!r}; use 'AR', 'exact speculative' or 'SSD beta=0.3 K=4'")


def is_anchor_name(name: str) -> bool:
    """Whether a name asks for an anchor ("anchor ..."); `parse_system` checks the rest of it."""
    words = name.split()
    return bool(words) and words[0].lower() == "anchor" and len(words) > 1


def _options(name: str, words: list[str]) -> dict[str, str]:
    """KEY=VALUE words, keys in lower case."""
    options: dict[str, str] = {}
    for word in words:
        match = _KEY_VALUE.match(word)
        if not match:
            raise InputError(f"system {name!r}: cannot read {word!r}; expected KEY=VALUE (beta=0.3, K=4, draft=NAME)")
        options[match.group(1).lower()] = match.group(2)
    return options


def _settings(name: str, options: dict[str, str]) -> dict[str, Any]:
    """The config fields a name sets (K as `draft_len`, beta), in the order K, beta."""
    overrides: dict[str, Any] = {}
    try:
        if "k" in options:
            overrides[NAME_KEYS["k"]] = int(options.pop("k"))
        if "beta" in options:
            overrides[NAME_KEYS["beta"]] = float(options.pop("beta"))
    except ValueError:
        raise InputError(f"system {name!r}: K must be an integer and beta a number") from None
    if options:
        raise InputError(f"system {name!r}: unknown setting(s) {', '.join(sorted(options))}; known: K, beta, draft")
    return overrides


def _parse_derived(name: str, head: str, rest: list[str]) -> DecodingSystem:
    words = [w.lower() for w in rest]
    if head == "attention":
        if words == ["noise"]:
            return DecodingSystem(name, "attention")
        if len(words) == 2 and words[0] == "spoken" and words[1] in SPOKEN_CHECK_KINDS:
            return DecodingSystem(name, "attention", {"spoken": words[1]})
        raise InputError(f"system {name!r}: an attention-check clip is 'attention noise' or 'attention spoken KIND' "
                         f"(KIND: {', '.join(SPOKEN_CHECK_KINDS)})")
    if len(words) == 1 and (words[0] == "draft" or words[0].startswith("draft=")):
        draft = rest[0].split("=", 1)[1] if "=" in rest[0] else None
        if draft == "":
            raise InputError(f"system {name!r}: name the draft, e.g. 'anchor draft=distilled', or leave out '='")
        return DecodingSystem(name, "draft", {}, draft)
    match = _KEY_VALUE.match(rest[0]) if len(rest) == 1 else None
    if not match or match.group(1).lower() != "lowpass":
        raise InputError(f"system {name!r}: an anchor is 'anchor lowpass=HZ' (e.g. 'anchor lowpass=3500') or "
                         "'anchor draft[=NAME]' (the draft model decoding alone)")
    try:
        cutoff = float(match.group(2))
    except ValueError:
        raise InputError(f"system {name!r}: the cut-off must be a number of Hz") from None
    low, high = LOWPASS_RANGE_HZ
    if not low <= cutoff <= high:
        raise InputError(f"system {name!r}: the cut-off must be between {low:g} and {high:g} Hz")
    return DecodingSystem(name, "anchor", {"lowpass_hz": cutoff})
