"""What `bench` can be asked for: its methods, dtypes and decoding flags (no torch: the command's --help reads them).
The benchmark itself is `bench`."""

from __future__ import annotations

from ..config import SETTINGS
from ..errors import InputError

METHODS = ("ar", "speculative", "speculative_calibrated", "hf_assisted", "hf_assisted_default", "hf_generate", "ar_transformers",
           "speculative_transformers")
#: `bench --dtype` names; "auto" is the app's choice (`models.hub.auto_dtype`: bfloat16 on a GPU, float32 on a CPU).
DTYPE_NAMES = ("auto", "float32", "bfloat16", "float16")

#: The decoding settings bench takes as flags, and its defaults: the settings' own (`config.SETTINGS`), with a
#: shorter generation to time.
DECODING_FLAGS = ("draft_len", "beta", "acceptance", "temperature", "top_k", "top_p", "max_new_tokens", "seed")
BENCH_MAX_NEW_TOKENS = 128
DECODING_DEFAULTS = {**{name: SETTINGS[name].default for name in DECODING_FLAGS}, "max_new_tokens": BENCH_MAX_NEW_TOKENS}


def parse_methods(text: str) -> tuple[str, ...]:
    """A comma-separated subset of METHODS; InputError naming the unknown ones."""
    methods = tuple(m.strip() for m in text.split(",") if m.strip())
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise InputError(f"unknown method(s) {unknown}; choose from {', '.join(METHODS)}")
    return methods
