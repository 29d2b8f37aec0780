"""What visitors may load on this server: Hub repo ids only, or local folders too; which Hub repositories.

An operator hosting the app publicly decides with environment variables; the defaults are safe on a
Hugging Face Space (SPACE_ID set) and permissive on one's own machine:

    SSD_DEMO_LOCAL_MODELS   1: visitors may name local model folders; 0: Hub repo ids only
                            (default: 0 on a Space, 1 elsewhere)
    SSD_DEMO_HUB_ALLOW      comma-separated repo-id patterns custom pairs may download ("*": any;
                            default: the built-in families' namespace on a Space, any elsewhere)
    SSD_DEMO_MAX_DOWNLOAD_GB  the most one custom pair may download (default: 40 on a Space, no limit
                            elsewhere)

With local folders off, a reference is refused with one message whether or not such a folder exists,
and the file system is never consulted.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping

from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id

from ..errors import ModelLoadError

LOCAL_MODELS_ENV = "SSD_DEMO_LOCAL_MODELS"
HUB_ALLOW_ENV = "SSD_DEMO_HUB_ALLOW"
#: On a Space with no allow-list set, custom pairs may only come from these Hub namespaces.
SPACE_DEFAULT_HUB_ALLOW = ("HKUSTAudio/*",)
LOCAL_REFUSED = ("Only Hugging Face Hub repo ids ('org/name') are accepted on this server; local folders are "
                 f"turned off (the operator can allow them with {LOCAL_MODELS_ENV}=1).")


def local_models_allowed(environ: Mapping[str, str] | None = None) -> bool:
    """Whether visitors may name local folders: $SSD_DEMO_LOCAL_MODELS if set, else not on a Space."""
    env = os.environ if environ is None else environ
    flag = env.get(LOCAL_MODELS_ENV, "").strip().lower()
    if flag:
        return flag in ("1", "true", "yes")
    return not env.get("SPACE_ID")


def check_hub_only(ref: str) -> None:
    """Refuse anything but a well-formed Hub repo id, with one message whatever exists on disk."""
    if not valid_repo_id(ref) or ref.startswith((".", "~")):
        raise ModelLoadError(LOCAL_REFUSED)


def hub_allow_list(environ: Mapping[str, str] | None = None) -> tuple[str, ...] | None:
    """Repo-id patterns (fnmatch) custom pairs may download: $SSD_DEMO_HUB_ALLOW (comma-separated; "*" for
    any), else the built-in families' namespace on a Space, else None (any)."""
    env = os.environ if environ is None else environ
    configured = env.get(HUB_ALLOW_ENV, "").strip()
    if configured:
        patterns = tuple(p.strip() for p in configured.split(",") if p.strip())
        return None if "*" in patterns else patterns
    return SPACE_DEFAULT_HUB_ALLOW if env.get("SPACE_ID") else None


def check_hub_allowed(ref: str, environ: Mapping[str, str] | None = None) -> None:
    """Refuse a Hub repo the operator's allow-list does not name."""
    patterns = hub_allow_list(environ)
    if patterns is not None and valid_repo_id(ref) and not any(fnmatch.fnmatchcase(ref, p) for p in patterns):
        raise ModelLoadError(f"{ref} is not among the Hub repositories this server downloads "
                             f"({', '.join(patterns)}; the operator sets {HUB_ALLOW_ENV}).")


MAX_DOWNLOAD_ENV = "SSD_DEMO_MAX_DOWNLOAD_GB"
SPACE_DEFAULT_MAX_DOWNLOAD_GB = 40.0


def max_download_bytes(environ: Mapping[str, str] | None = None) -> float | None:
    """The most a custom pair may download: $SSD_DEMO_MAX_DOWNLOAD_GB, else 40 GB on a Space, else no limit."""
    env = os.environ if environ is None else environ
    configured = env.get(MAX_DOWNLOAD_ENV, "").strip()
    if configured:
        return float(configured) * 1e9
    return SPACE_DEFAULT_MAX_DOWNLOAD_GB * 1e9 if env.get("SPACE_ID") else None


def valid_repo_id(ref: str) -> bool:
    """Whether `ref` is well-formed as a Hub repo id ('name' or 'org/name'); nothing is looked up."""
    try:
        validate_repo_id(ref)
    except HFValidationError:
        return False
    return True
