"""The experimenter's side of the listening pages: the results token that guards results, exports and
building stimulus sets (off when none is configured), the guard against building on a Space without one, and
the private folder the exports are written to (the newest few kept).
"""

from __future__ import annotations

import hmac
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from ...listening.errors import ListeningError


def check_build_allowed(environ: Mapping[str, str] | None = None) -> None:
    """Refuse to build stimulus sets on a Space without a results token: anyone could keep the model busy."""
    env = os.environ if environ is None else environ
    if env.get("SPACE_ID") and not env.get("SSD_DEMO_RESULTS_TOKEN", ""):
        raise ListeningError(
            "Building stimulus sets is disabled on this Space because no results token is configured: "
            "set the SSD_DEMO_RESULTS_TOKEN secret in the Space settings, restart, and enter the token here."
        )


def prune_exports(folder: Path | str, keep: int = 5, pattern: str = "listening_votes_*.csv") -> list[Path]:
    """Delete all but the `keep` newest exports in `folder` (names sort by UTC timestamp); return those deleted."""
    if keep < 0:
        raise ValueError(f"keep must be zero or more, got {keep}")
    exports = sorted(Path(folder).glob(pattern), key=lambda p: p.name, reverse=True)
    removed = exports[keep:]
    for old in removed:
        old.unlink(missing_ok=True)
    return removed


EXPERIMENTER_OFF = (
    "The experimenter's view (results, export, building a stimulus set) is off: no results token is configured. "
    "Set SSD_DEMO_RESULTS_TOKEN on the server (a Space secret on Hugging Face), restart, and enter it here."
)


def results_token_configured() -> bool:
    return bool(os.environ.get("SSD_DEMO_RESULTS_TOKEN", ""))


def check_results_token(token: str | None) -> None:
    """Refuse unless SSD_DEMO_RESULTS_TOKEN is set and `token` matches it (constant-time compare).
    Without a configured token the experimenter's view is off, so raters never reach the results."""
    expected = os.environ.get("SSD_DEMO_RESULTS_TOKEN", "")
    if not expected:
        raise ListeningError(EXPERIMENTER_OFF)
    if not hmac.compare_digest((token or "").encode(), expected.encode()):
        raise ListeningError("Results are protected: enter the results token.")


_EXPORTS: list[Path] = []


def _export_dir() -> Path:
    """One private temporary folder per process for CSV exports (Gradio serves a copy from its cache)."""
    if not _EXPORTS:
        _EXPORTS.append(Path(tempfile.mkdtemp(prefix="listening-export-")))
    return _EXPORTS[0]


def _private_file(path: Path) -> Path:
    """`path` created empty with mode 0600 (or set to it), so what is written into it next is private."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    return path
