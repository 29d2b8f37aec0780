"""Command-line flags for decoding settings, made from their one definition (`ssd_demo.config.SETTINGS`).

Every tool that lets the user set a decoding setting adds its flag here, so the flag's name, type
and help, and the bounds it is checked against, are the library's own:

    add_decoding_arguments(parser, ["draft_len", "beta"], defaults={"beta": 0.0})
    ...
    overrides = decoding_arguments(args, ["draft_len", "beta"])  # InvalidSettingError for a bad value
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence

from ..config import SETTINGS, given_settings

_TYPES = {"int": int, "float": float, "choice": str}


def add_decoding_arguments(parser: argparse.ArgumentParser, names: Sequence[str],
                           defaults: Mapping[str, object] | None = None, unset: str = "the preset's") -> None:
    """A flag per named setting. A name in `defaults` gets that default; any other defaults to None, which
    `decoding_arguments` leaves out so that the model's own default applies (`unset` says whose, in the help).
    A bool setting is an on/off switch."""
    defaults = defaults or {}
    for name in names:
        spec = SETTINGS[name]
        flags = (spec.cli_flag, *spec.old_flags)
        if spec.kind == "bool":
            parser.add_argument(*flags, dest=name, action="store_true", help=spec.help + _old_names(spec))
            continue
        default = defaults.get(name)
        shown = unset if name not in defaults else (f"{default:g}" if isinstance(default, float) else str(default))
        parser.add_argument(*flags, dest=name, type=_TYPES[spec.kind], default=default,
                            help=f"{spec.help} (default: {shown}){_old_names(spec)}")


def _old_names(spec) -> str:
    """The help's note on a flag's former names, still accepted for now."""
    if not spec.old_flags:
        return ""
    return f" ({', '.join(spec.old_flags)}: its former name, deprecated)"


def decoding_arguments(args: argparse.Namespace, names: Sequence[str]) -> dict[str, object]:
    """The named settings given (or defaulted) on the command line, each checked against the library's bounds
    before any model loads; a flag left unset (None) or a switch left off is not included."""
    return given_settings(vars(args), names)
