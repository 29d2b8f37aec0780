"""A preset: a target, the drafts that share its vocabulary and how to load them (`registry` keeps them)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..models.hub import download_command

if TYPE_CHECKING:  # the models' code loads with the presets, not with this module (a command's flags)
    from ..speech.synthesis import Synthesizer


@dataclass(frozen=True)
class Preset:
    key: str  # stable identifier used by the CLI and the API
    label: str  # shown in the UI
    description: str
    licence: str
    drafts: tuple[str, ...]  # draft names, in the order the UI lists them
    default_draft: str
    # Builds the Synthesizer; receives the device string ("cpu", "cuda", ...) or None for automatic.
    # Loaders may also accept a `progress=` keyword (fraction, message) callback.
    loader: Callable[..., Synthesizer] = field(repr=False, compare=False)
    needs_download: bool = False  # True when weights come from the Hugging Face Hub
    # What the Hub presets are made of, for display and for availability checks.
    repos: tuple[str, ...] = ()  # Hub repo ids: target, draft(s), codec
    revision: str | None = None  # the revision `repos` are loaded at, unless pinned below
    pins: tuple[tuple[str, str], ...] = ()  # (repo, commit) pairs loaded at that commit instead
    sample_rate: int | None = None
    codec: str = ""
    gated: bool = False  # some repos may ask users to accept terms first
    recommended_device: str = "cpu"
    # A custom pair belongs to the browser session that added it (None: everyone's, e.g. built-ins and
    # pairs registered from Python); nobody else sees it or can load it by key.
    owner: str | None = None
    # Checks that need no weights (configs, tokenizers, vocabulary, download size), run before the
    # resident pair is dropped: a pair that cannot load must not cost everyone a reload.
    preflight: Callable[[], None] | None = field(default=None, repr=False, compare=False)

    def revision_for(self, repo: str) -> str | None:
        """The revision `repo` is loaded at: its pin if it has one, else `revision`."""
        return dict(self.pins).get(repo, self.revision)

    @property
    def download_hint(self) -> str:
        """Commands that put this preset's models in the local cache."""
        return " && ".join(download_command(repo, self.revision_for(repo)) for repo in self.repos)
