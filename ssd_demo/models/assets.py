"""Where the trained assets live: the embedded voice (assets/ in the repository).

They are not part of the package (36 MB). A checkout, and a package installed from it with `pip install -e .`,
finds them next to the package, at the repository root. A package installed from a wheel (`pip install .`)
looks next to its own files, where there are none, so it is told where they are:
SSD_DEMO_ASSETS=/path/to/repo/assets. The variable is read on each call, so it may be set after import.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The environment variable naming the assets folder (the repository's assets/, or a copy of it).
ENV_VAR = "SSD_DEMO_ASSETS"
#: Where a checkout keeps them: the repository root, next to the package.
CHECKOUT_ASSETS = Path(__file__).resolve().parents[2] / "assets"


def assets_root() -> Path:
    """The assets folder: $SSD_DEMO_ASSETS when set, else the one next to the package."""
    value = os.environ.get(ENV_VAR, "").strip()
    return Path(value).expanduser() if value else CHECKOUT_ASSETS


def asset_path(name: str) -> Path:
    """One asset folder, e.g. asset_path("embedded") for the voice."""
    return assets_root() / name


def where_to_find(name: str) -> str:
    """How to point the package at the assets, for the message of a default asset folder that is missing."""
    if os.environ.get(ENV_VAR, "").strip():
        source = f"{ENV_VAR} is {os.environ[ENV_VAR]!r}"
    else:
        source = f"{ENV_VAR} is not set, so it looked next to the package"
    return (f"{source}; the {name}/ folder is in assets/ at the root of the repository (not in an installed "
            f"package): set {ENV_VAR}=/path/to/repo/assets, or pass the folder as path=")
