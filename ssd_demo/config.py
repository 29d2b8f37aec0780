"""Decoding settings shared by autoregressive and speculative generation, each defined once.

`SETTINGS` holds every scalar setting's type, default, bounds, help text and UI hint; the frozen
`DecodingConfig` takes its defaults from it and validates with it on construction, so that a bad
setting fails loudly where it is made (CLI flag, UI slider, API call) instead of deep inside the
decoding loop. The app's controls and the command-line flags are generated from the same table.

Bounds: a `SettingSpec`'s minimum and maximum are the library's (and the command line's). The app
may take a narrower part of that range, declared in the same spec's `ControlHint` (a slider's top
is also the highest value the app's API accepts, as the page cannot show more).

One validator: `SettingSpec.accept` turns a submitted value (a slider's float, an API caller's number)
into the setting's kind and checks it against the setting's bounds, or the app's part of them; every
refusal reads '<name> must be <requirement>, got <value>', from the library, the command line and
the app alike. A setting not given is None, and the chosen preset's default fills it (the comparison
request does, `ssd_demo.comparison.request.build_config`).
"""

from __future__ import annotations

import math
import numbers
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np

from .errors import InvalidSettingError
from .rules.registry import RULE_NAMES

#: Acceptance rules that `speculative_generate` knows (`ssd_demo.rules.registry` is the one list).
ACCEPTANCE_RULES = RULE_NAMES

#: Most tokens one generation may ask for: far beyond any supported model's context (the embedded voice
#: 1,024 positions, Llasa 2,048), yet small enough that the key/value cache sized from it can be allocated.
MAX_NEW_TOKENS = 100_000

#: Seeds the library accepts: below 2**63, as chunk i of a long text decodes with (seed + i) % 2**63 and a
#: torch.Generator takes any of them.
SEED_LIMIT = 2**63

#: Seeds the app accepts and every randomly drawn seed: small enough for any number box (a JavaScript
#: number holds integers exactly only up to 2**53) and short enough to read back and type in again.
MAX_SEED = 2**31 - 1

Kind = Literal["int", "float", "choice", "bool"]


@dataclass(frozen=True)
class ControlHint:
    """How the app draws a setting, and which part of the setting's range the app accepts.

    minimum/maximum: the lowest and highest value the app accepts (None: the setting's own bound);
                     a slider is drawn between them. `grows`: a preset whose default is larger raises the maximum.
    slider_minimum:  a slider's lowest drawn value when it is above the accepted minimum (values between
                     are still accepted from the API, e.g. top-p 0.01).
    info:            the control's short help (None: the setting's help).
    row:             settings sharing a row sit side by side; `rule`: shown only with this acceptance rule.
    """

    label: str
    section: Literal["speculation", "sampling"]
    widget: Literal["slider", "number", "dropdown", "checkbox"]
    info: str | None = None
    minimum: float | None = None
    maximum: float | None = None
    slider_minimum: float | None = None
    step: float | None = None
    grows: bool = False
    row: str | None = None
    rule: str | None = None


@dataclass(frozen=True)
class SettingSpec:
    """One decoding setting: what it is, its default, the values it takes, how it is shown and typed.

    minimum/maximum: the bounds the library validates (None: unbounded), inclusive unless
    `min_exclusive`/`max_exclusive`; floats must also be finite. `note` follows the bounds in the error
    message; `requirement` replaces the generated description of the bounds. The command-line flag is the
    name with dashes (`cli_flag`); `old_flags`: former names of that flag, still accepted (deprecated);
    `control`: None when the app has no control for it.
    """

    name: str
    kind: Kind
    default: object
    help: str
    minimum: float | None = None
    maximum: float | None = None
    min_exclusive: bool = False
    max_exclusive: bool = False
    choices: tuple[str, ...] = ()
    nullable: bool = False
    note: str = ""
    requirement: str | None = None
    old_flags: tuple[str, ...] = ()
    control: ControlHint | None = None

    @property
    def cli_flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def bounds(self, controls: bool = False, defaults: "DecodingConfig | None" = None
               ) -> tuple[float | None, float | None, bool, bool]:
        """(minimum, maximum, minimum exclusive, maximum exclusive) accepted: the setting's own range, or with
        `controls` the part of it the app's control accepts (its `ControlHint`; a growing maximum rises to
        the preset's default in `defaults`)."""
        low, high, low_open, high_open = self.minimum, self.maximum, self.min_exclusive, self.max_exclusive
        hint = self.control if controls else None
        if hint is not None and hint.minimum is not None:
            low, low_open = hint.minimum, False
        if hint is not None and hint.maximum is not None:
            high, high_open = hint.maximum, False
            preset_value = getattr(defaults, self.name, None) if hint.grows else None
            if isinstance(preset_value, (int, float)) and not isinstance(preset_value, bool):
                high = max(high, preset_value)
        return low, high, low_open, high_open

    def requirement_text(self, controls: bool = False, defaults: "DecodingConfig | None" = None) -> str:
        """What a valid value is, in words: 'an integer from 1 to 64', 'in (0, 1]', ..."""
        low, high, low_open, high_open = self.bounds(controls, defaults)
        own = (low, high, low_open, high_open) == (self.minimum, self.maximum, self.min_exclusive, self.max_exclusive)
        if self.requirement is not None and own:
            return self.requirement
        if self.kind == "choice":
            return f"one of {', '.join(self.choices)}"
        if self.kind == "bool":
            return "true or false"
        noun = "an integer" if self.kind == "int" else "a finite number"
        if low is not None and high is not None:
            if low_open or high_open:
                return f"in {'(' if low_open else '['}{_show(low)}, {_show(high)}{')' if high_open else ']'}"
            return f"{noun} from {_show(low)} to {_show(high)}" if self.kind == "int" else f"between {_show(low)} and {_show(high)}"
        if low is not None:
            return f"{noun} {'>' if low_open else '>='} {_show(low)}"
        if high is not None:
            return f"{noun} {'<' if high_open else '<='} {_show(high)}"
        return noun

    def problem(self, value: object, controls: bool = False, defaults: "DecodingConfig | None" = None) -> str | None:
        """Why `value` is not valid for this setting (None: it is); `controls`: within the app's range."""
        if value is None:
            return None if self.nullable else "missing"
        if self.kind == "choice":
            return None if value in self.choices else "choice"
        if self.kind == "bool":
            return None if isinstance(value, (bool, np.bool_)) else "kind"
        if self.kind == "int" and not isinstance(value, int):
            return "kind"
        if self.kind == "float" and (isinstance(value, bool) or not isinstance(value, numbers.Real)
                                     or not math.isfinite(value)):
            return "kind"
        low, high, low_open, high_open = self.bounds(controls, defaults)
        if low is not None and not (value > low if low_open else value >= low):
            return "low"
        if high is not None and not (value < high if high_open else value <= high):
            return "high"
        return None

    def check(self, value: object, controls: bool = False, defaults: "DecodingConfig | None" = None,
              shown: object = None) -> None:
        """InvalidSettingError, naming the setting and its valid values, when `value` is not one (`shown`:
        the value as submitted, when it was converted first)."""
        if self.problem(value, controls, defaults) is not None:
            self.refuse(value if shown is None else shown, controls, defaults)

    def refuse(self, value: object, controls: bool = False, defaults: "DecodingConfig | None" = None):
        """Raise the one message for an invalid value: '<name> must be <requirement><note>, got <value>'."""
        joiner = "; got" if self.kind == "choice" else ", got"
        raise InvalidSettingError(f"{self.name} must be {self.requirement_text(controls, defaults)}{self.note}"
                                  f"{joiner} {_shown(value)}", param=self.name)

    def accept(self, value: object, controls: bool = False, defaults: "DecodingConfig | None" = None) -> object:
        """The one validator of a submitted value (a front end's, an API caller's): converted to the setting's
        kind (an integral float is an int, sliders send them; a number a float; 0/1 a switch) and checked
        against its bounds (`controls`: the part of them the app's control accepts; `defaults`: the preset's
        config, which may raise a growing maximum). InvalidSettingError otherwise, worded as everywhere."""
        converted = _converted(self.kind, value)
        if converted is _UNREADABLE:
            self.refuse(value, controls, defaults)
        self.check(converted, controls, defaults, shown=value)
        return converted


_UNREADABLE = object()


def _converted(kind: Kind, value: object) -> object:
    """`value` as a setting of `kind` wants it, or _UNREADABLE (a word where a number goes, say)."""
    if value is None:
        return None
    if kind == "choice":
        return str(value)
    if kind == "bool":
        return bool(value) if isinstance(value, (bool, np.bool_)) or value in (0, 1) else _UNREADABLE
    if isinstance(value, (bool, np.bool_)):
        return _UNREADABLE
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return _UNREADABLE
    if kind == "float":
        return number if math.isfinite(number) else _UNREADABLE
    if not number.is_integer():
        return _UNREADABLE
    return value if isinstance(value, int) else int(number)


def _shown(value: object) -> str:
    """A refused value as the message shows it: its repr, a huge integer short (1e+30, never 31 digits)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**15:
        try:
            return f"{float(value):.6g}"
        except OverflowError:
            return "a number too large to show"
    return repr(value)


def _show(number: float) -> str:
    """A bound as people read it: 100,000 and 0.05, never 100000.0."""
    if float(number).is_integer():
        return f"{int(number):,}" if abs(number) >= 10_000 else str(int(number))
    return f"{number:g}"


#: Every scalar decoding setting, in the order the app's `/synthesize` endpoint takes them where it has them.
SETTINGS: Mapping[str, SettingSpec] = {spec.name: spec for spec in (
    SettingSpec("draft_len", "int", 4, "K, tokens the draft proposes per round (speculative only)", minimum=1, maximum=64,
                control=ControlHint("Draft length K", "speculation", "slider", info="tokens proposed per round",
                                    maximum=16, step=1, row="draft")),
    SettingSpec("beta", "float", 0.0, "SSD tolerance added to the acceptance ratio; 0 = exact speculative sampling",
                minimum=0.0, maximum=1.0, note=" (1 keeps every drafted token)",
                control=ControlHint("Tolerance β", "speculation", "slider", info="0 = exact; larger = faster, less faithful",
                                    step=0.05, row="draft")),
    SettingSpec("acceptance", "choice", "ssd", f"acceptance rule: {', '.join(ACCEPTANCE_RULES)}", choices=ACCEPTANCE_RULES,
                control=ControlHint("Acceptance rule", "speculation", "dropdown", info="")),
    SettingSpec("topk_tolerance", "int", 1, "k for the topk rule: a drafted token in the target's top k is accepted",
                minimum=1, control=ControlHint("top-k tolerance (topk rule)", "speculation", "slider", info="",
                                               maximum=64, step=1, rule="topk")),
    SettingSpec("pcg_theta", "float", 0.9, "cosine threshold for the pcg rule's acoustic groups", minimum=-1.0,
                control=ControlHint("group similarity θ (pcg rule)", "speculation", "slider",
                                    info="tokens whose embeddings have cosine > θ count as one",
                                    minimum=0.0, maximum=1.0, step=0.01, rule="pcg")),
    SettingSpec("temperature", "float", 1.0, "sampling temperature; 0 = greedy (argmax)", minimum=0.0,
                control=ControlHint("Temperature", "sampling", "slider", info="0 = greedy", maximum=2.0, step=0.05)),
    SettingSpec("top_k", "int", 0, "keep the k most likely tokens; 0 = off", minimum=0, note=" (0 = off)",
                control=ControlHint("Top-k", "sampling", "number", info="0 = off", maximum=1_000_000, row="filters")),
    SettingSpec("top_p", "float", 1.0, "nucleus: the probability mass to keep; 1 = off", minimum=0.0, maximum=1.0,
                min_exclusive=True, note=" (1 = off)",
                control=ControlHint("Top-p", "sampling", "slider", info="1 = off", slider_minimum=0.05, step=0.05,
                                    row="filters")),
    SettingSpec("seed", "int", 0, "seeds sampling; chunk i of a text spoken in chunks uses seed + i", minimum=0,
                maximum=SEED_LIMIT, max_exclusive=True, nullable=True,
                requirement="a non-negative integer below 2**63, or None (a fresh random seed)",
                control=ControlHint("Seed", "sampling", "number", info="", maximum=MAX_SEED, row="seed")),
    SettingSpec("max_new_tokens", "int", 256, "token limit per generation (per chunk for a text spoken in chunks; "
                "the end token counts)", minimum=1, maximum=MAX_NEW_TOKENS,
                control=ControlHint("Max length (tokens per chunk)", "sampling", "slider",
                                    info="long text is spoken in chunks; each may use this many",
                                    maximum=2048, slider_minimum=8, step=8, grows=True)),
    SettingSpec("adaptive_draft_len", "bool", False, "choose K each round (1..draft_len) from the running acceptance "
                "estimate and the draft/target cost ratio", old_flags=("--adaptive-k",),
                control=ControlHint("Adaptive K", "speculation", "checkbox",
                                    info="choose K each round (up to the draft length) from the running acceptance rate")),
    SettingSpec("adaptive_threshold", "float", 0.0, "stop drafting early when the draft's top probability falls below "
                "this; 0 = off", minimum=0.0, maximum=1.0, max_exclusive=True),
    SettingSpec("cost_ratio", "float", 0.1, "c, one draft step / one target step, for adaptive K (measure it with "
                "`python -m ssd_demo bench`)", minimum=0.0, maximum=10.0, max_exclusive=True),
)}


#: Not a decoding setting but a request's: draw a fresh random seed instead of the given (or the preset's) one.
RANDOMIZE_SEED = SettingSpec("randomize_seed", "bool", False, "draw a fresh random seed instead of the given one",
                             control=ControlHint("Randomise seed", "sampling", "checkbox", info="", row="seed"))


#: Not a decoding setting but a request's: how CosyVoice 2 reads the text (its `text_norm.NORMALISER_MODES`).
TEXT_NORMALIZER = SettingSpec("text_normalizer", "choice", "default", "how CosyVoice 2 reads the text: default (the "
                              "project's English readings) or official (the official procedure, for reproducing "
                              "published numbers)", choices=("default", "official"),
                              control=ControlHint("Text normaliser (CosyVoice 2)", "sampling", "dropdown",
                                                  info="official: the official procedure, as published"))


def check_setting(name: str, value: object) -> None:
    """InvalidSettingError when `value` is not valid for the setting `name` (the library's bounds)."""
    SETTINGS[name].check(value)


def draw_seed() -> int:
    """A fresh random seed, in 0..MAX_SEED so that it can be shown, typed in again and reproduce the run."""
    return secrets.randbelow(MAX_SEED + 1)


def resolve_seed(seed: object, randomize: bool = False) -> int:
    """The seed to decode with, the one rule for the app and the command line: a fresh random one in
    0..MAX_SEED when asked (or when none is given), else `seed` as an int (integral floats are fine:
    sliders send them); InvalidSettingError for anything else or outside the library's range."""
    if randomize or seed is None or (isinstance(seed, float) and math.isnan(seed)):
        return draw_seed()
    if isinstance(seed, float) and seed.is_integer():
        seed = int(seed)
    SETTINGS["seed"].check(seed)
    return int(seed)


def given_settings(values: Mapping[str, object], names: Sequence[str]) -> dict[str, object]:
    """The named settings given in `values` (a command line's options, say), each checked against its bounds
    before any model loads; one left unset (None) or a switch left off is not included, so the preset's own
    default applies. The seed goes through the one seed rule (`resolve_seed`)."""
    chosen: dict[str, object] = {}
    for name in names:
        value = values[name]
        if value is None or (SETTINGS[name].kind == "bool" and not value):
            continue
        if name == "seed":
            value = resolve_seed(value)
        check_setting(name, value)
        chosen[name] = value
    return chosen


def _default(name: str):
    return SETTINGS[name].default


@dataclass(frozen=True)
class DecodingConfig:
    """How to decode. The scalar settings (draft_len, beta, temperature, top_k, top_p, max_new_tokens, seed,
    acceptance, topk_tolerance, pcg_theta, adaptive_threshold, adaptive_draft_len, cost_ratio) are described,
    bounded and defaulted in `SETTINGS`; seed None draws a fresh random seed. The others:

    eos_token_id:     end token id(s); generation stops right after one is emitted.
    allowed_token_ids: restrict sampling to these ids (e.g. speech tokens + end of speech).
    untempered_token_ids: ids sampled at temperature 1, the others tempered among themselves (`engine.sampling`).
    verify_costs:     v_k, one target call over k + 1 tokens / one target step, for k = 0, 1, ... (measured by
                      `ssd_demo.engine.calibration`); None counts every verify as one step. Given, the adaptive
                      choice may also pick K = 0 (plain AR steps) when no K pays on this machine.
    """

    draft_len: int = _default("draft_len")
    beta: float = _default("beta")
    temperature: float = _default("temperature")
    top_k: int = _default("top_k")
    top_p: float = _default("top_p")
    max_new_tokens: int = _default("max_new_tokens")
    eos_token_id: int | Sequence[int] | None = None
    allowed_token_ids: Sequence[int] | None = field(default=None, repr=False)
    untempered_token_ids: Sequence[int] = ()
    seed: int | None = _default("seed")
    acceptance: str = _default("acceptance")
    topk_tolerance: int = _default("topk_tolerance")
    pcg_theta: float = _default("pcg_theta")
    adaptive_threshold: float = _default("adaptive_threshold")
    adaptive_draft_len: bool = _default("adaptive_draft_len")
    cost_ratio: float = _default("cost_ratio")
    verify_costs: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        for spec in SETTINGS.values():
            spec.check(getattr(self, spec.name))
        if self.verify_costs is not None:
            try:
                costs = tuple(float(v) for v in self.verify_costs)
            except (TypeError, ValueError):
                costs = ()
            if not costs or not all(0 < v < 1000 for v in costs):
                raise InvalidSettingError("verify_costs must be positive numbers (target steps per verify call), "
                                          f"got {self.verify_costs!r}")
            object.__setattr__(self, "verify_costs", costs)
        for token in self.eos_ids:
            if not isinstance(token, int) or token < 0:
                raise InvalidSettingError(f"eos_token_id must hold non-negative integers, got {token!r}")
        if self.allowed_token_ids is not None:
            if len(self.allowed_token_ids) == 0:
                raise InvalidSettingError("allowed_token_ids is empty: nothing could ever be sampled")
            # A tuple keeps the config hashable; an end token outside it is fine (a forced schedule may insert it).
            object.__setattr__(self, "allowed_token_ids", tuple(int(t) for t in self.allowed_token_ids))
        ids = self.untempered_token_ids
        if not isinstance(ids, (list, tuple)) or len(set(ids)) < len(ids) or not all(
                isinstance(t, (int, np.integer)) and not isinstance(t, bool) and t >= 0 for t in ids):
            raise InvalidSettingError(f"untempered_token_ids must be distinct token ids, got {ids!r}")
        object.__setattr__(self, "untempered_token_ids", tuple(int(t) for t in ids))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def eos_ids(self) -> tuple[int, ...]:
        eos = self.eos_token_id
        return () if eos is None else (eos,) if isinstance(eos, int) else tuple(eos)

    def with_(self, **changes) -> "DecodingConfig":
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)
