"""Load model pairs from the Hugging Face Hub or local folders: safe, checked, offline-capable.

The generic steps live here (resolving files) and beside it (`checks`: the pre-flight checks,
`weights`: loading the weights, `memory`: will the pair fit, `policy`: what visitors may load); a
model family's loader (next to its backend) puts them together with its own checks. Loading goes in three steps so that mistakes fail in seconds,
before gigabytes move:
  1. resolve the small files (configs, tokenizers) of the target, the draft and the codec,
     from a local folder or with `snapshot_download` at an explicit revision
     (offline: from the local cache only);
  2. pre-flight checks: each model is a causal LM, the family's own checks pass (target and
     draft share one tokenizer and embedding size, say), and the pair fits in memory
     (`ssd_demo.models.memory`: parameter counts from safetensors headers, or the config);
  3. fetch the weights (safetensors only: pickled checkpoints are never loaded), load them
     with the automatic dtype straight onto the device (accelerate's device_map), and refuse
     any checkpoint whose tensors do not match the model's exactly (`check_loading_info`).

`trust_remote_code` is never turned on implicitly; `HF_TOKEN` (or a stored login) is
used for gated repositories through huggingface_hub's own lookup, or pass `token=`.
Errors are `ModelLoadError`s (`ssd_demo.errors`, a `ValueError`) with a message that says what to do.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from huggingface_hub import constants, snapshot_download, try_to_load_from_cache
from huggingface_hub.errors import (
                                    GatedRepoError,
                                    HfHubHTTPError,
                                    LocalEntryNotFoundError,
                                    RepositoryNotFoundError,
                                    RevisionNotFoundError,
                                    )
from tqdm.auto import tqdm

from ..errors import ModelNotFoundError, ModelUnavailableError
from .checks import read_config
from .policy import check_hub_only, valid_repo_id

if TYPE_CHECKING:  # torch loads where a device is chosen: the command line's flags and --help stay quick
    import torch

#: progress(fraction in [0, 1], message); Gradio users can pass `lambda f, m: progress(f, desc=m)`.
ProgressCallback = Callable[[float, str], None]

#: Revisions are always passed explicitly; pin commit hashes here to freeze the presets.
DEFAULT_REVISION = "main"
#: Repositories whose default revision is a pinned commit rather than DEFAULT_REVISION, registered
#: with `pin_revision` by the module that knows the pin (the Llasa loader pins its codec).
PINNED_REVISIONS: dict[str, str] = {}


def pin_revision(repo_id: str, revision: str) -> None:
    """Load `repo_id` at `revision` whenever no revision is asked for."""
    PINNED_REVISIONS[repo_id] = revision


#: Repositories of which only some files are used (CosyVoice 2: 3.1 of 4.9 GB), registered with
#: `use_only` by the module that loads them, so that download commands fetch just those.
DOWNLOAD_PATTERNS: dict[str, tuple[str, ...]] = {}


def use_only(repo_id: str, patterns: list[str]) -> None:
    DOWNLOAD_PATTERNS[repo_id] = tuple(patterns)

# Small files needed for the pre-flight checks; weights come only after they pass.
METADATA_PATTERNS = [
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "chat_template.json",
    "preprocessor_config.json",
    "*.safetensors.index.json",
]
WEIGHT_PATTERNS = ["*.safetensors"]


@dataclass(frozen=True)
class LoadOptions:
    """How to fetch and place models. None means automatic."""

    device: str | None = None  # "cuda" when available, else "cpu"
    dtype: torch.dtype | None = None  # bfloat16 on CUDA, float32 on CPU
    token: str | bool | None = None  # None: HF_TOKEN or the stored login
    offline: bool | None = None  # None: follow HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE
    cache_dir: str | Path | None = None  # None: HF_HUB_CACHE / the default cache
    trust_remote_code: bool = False  # never enabled unless the caller asks
    check_memory: bool = True  # the pre-flight check of `ssd_demo.models.memory`
    memory_margin: float = 1.25  # activations, KV cache, allocator slack
    allow_local: bool = True  # False: refs are Hub repo ids only, and the file system is never consulted


# -- environment ------------------------------------------------------------------------


def is_offline(offline: bool | None = None) -> bool:
    """Offline when asked, or when HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE is set (read now, not at import)."""
    if offline is not None:
        return offline
    flags = (os.environ.get("HF_HUB_OFFLINE", ""), os.environ.get("TRANSFORMERS_OFFLINE", ""))
    return constants.HF_HUB_OFFLINE or any(f.strip().upper() in ("1", "ON", "YES", "TRUE") for f in flags)


def on_zerogpu() -> bool:
    """True on a Hugging Face ZeroGPU Space, where CUDA may only be touched inside `spaces.GPU` calls."""
    return bool(os.environ.get("SPACES_ZERO_GPU", "").strip())


def auto_device(device: str | torch.device | None = None) -> torch.device:
    import torch

    if device is not None:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def auto_dtype(device: torch.device, dtype: torch.dtype | None = None) -> torch.dtype:
    import torch

    if dtype is not None:
        return dtype
    if device.type == "cuda":
        if on_zerogpu():
            return torch.bfloat16  # its GPUs all have bfloat16, and asking would initialise CUDA here
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


def revision_for(ref: str, revision: str | None = None) -> str:
    """The revision to load `ref` at: the one asked for, else its pin (PINNED_REVISIONS), else DEFAULT_REVISION."""
    return revision or PINNED_REVISIONS.get(ref, DEFAULT_REVISION)


def download_command(repo_id: str, revision: str | None = None) -> str:
    revision = revision_for(repo_id, revision)
    rev = f" --revision {revision}" if revision != "main" else ""
    patterns = DOWNLOAD_PATTERNS.get(repo_id)
    include = " --include " + " ".join(f'"{pattern}"' for pattern in patterns) if patterns else ""
    return f"hf download {repo_id}{rev}{include}"


def _cache_dir(options: LoadOptions) -> str | None:
    if options.cache_dir is not None:
        return str(options.cache_dir)
    return os.environ.get("HF_HUB_CACHE") or None  # read now so tests and users can point it anywhere


# -- resolving files ---------------------------------------------------------------------


def _looks_like_path(ref: str) -> bool:
    # Hub ids are "name" or "org/name"; anything else that names a file system location is a path.
    return ref.startswith((".", "/", "~")) or ref.count("/") > 1 or "\\" in ref or Path(ref).exists()


def resolve(
    ref: str,
    revision: str | None = None,
    options: LoadOptions = LoadOptions(),
    patterns: list[str] | None = None,
    progress: ProgressCallback | None = None,
) -> Path:
    """A local folder holding `ref`'s files (those matching `patterns`), downloading if allowed."""
    if not options.allow_local:
        check_hub_only(ref)
    elif Path(ref).expanduser().is_dir():
        return Path(ref).expanduser()
    elif _looks_like_path(ref):
        raise ModelNotFoundError(f"{ref!r}: no such directory (and it is not a Hub repo id like 'org/name')")
    if not valid_repo_id(ref):
        raise ModelNotFoundError(f"{ref!r} is neither an existing directory nor a valid Hub repo id ('org/name')")
    revision = revision_for(ref, revision)
    offline = is_offline(options.offline)
    kwargs = dict(
        revision=revision,
        cache_dir=_cache_dir(options),
        token=options.token,
        local_files_only=offline,
        allow_patterns=patterns,
    )
    if progress is not None:
        kwargs["tqdm_class"] = _progress_bar(progress, ref)
    try:
        folder = Path(snapshot_download(ref, **kwargs))
    except GatedRepoError:
        raise ModelUnavailableError(
            f"{ref} is gated: accept its licence at https://huggingface.co/{ref} while logged in, then set HF_TOKEN "
            "(or run `hf auth login`) and try again"
        ) from None
    except RevisionNotFoundError:
        raise ModelNotFoundError(f"{ref} has no revision {revision!r}") from None
    except RepositoryNotFoundError:
        raise ModelNotFoundError(
            f"no Hub repository {ref!r} (or it is private: set HF_TOKEN to a token that can read it)"
        ) from None
    except LocalEntryNotFoundError:
        why = "offline mode is on (HF_HUB_OFFLINE=1)" if offline else "the Hub could not be reached"
        raise ModelUnavailableError(
            f"{ref} (revision {revision}) is not in the local Hugging Face cache and {why}. "
            f"Download it first on a machine with network access: `{download_command(ref, revision)}` "
            f"(or `huggingface-cli download {ref}`), then run again with the same cache (HF_HUB_CACHE)."
        ) from None
    except HfHubHTTPError as error:  # after its subclasses above: server errors, rate limits
        raise ModelUnavailableError(f"the Hub could not serve {ref} right now: {error}") from None
    if patterns == METADATA_PATTERNS and not (folder / "config.json").is_file():
        why = "the cached snapshot is incomplete" if offline else "it has no config.json"
        raise ModelUnavailableError(
            f"{ref} (revision {revision}): {why}; `{download_command(ref, revision)}` fetches it"
        )
    return folder


def _progress_bar(progress: ProgressCallback, label: str):
    """A tqdm class that forwards snapshot_download's bars to `progress`.

    snapshot_download drives three bars with it: network bytes ("Downloading bytes", whose
    total is only a guess), bytes written to disk (total = file sizes), and files done. The
    last two are forwarded; totals grow as downloads start, so the fraction is kept monotonic.
    The bars still print as usual.
    """
    best = [0.0]

    class ForwardingBar(tqdm):
        def update(self, n=1):
            result = super().update(n)
            if not self.total or self.disable:
                return result
            if self.unit == "B":
                if str(self.desc or "").startswith("Downloading bytes"):
                    return result
                message = f"{label}: {human_count(self.n, 'B')} of {human_count(self.total, 'B')}"
            else:
                message = f"{label}: {int(self.n)} of {int(self.total)} files"
            best[0] = max(best[0], min(self.n / self.total, 1.0))
            progress(best[0], message)
            return result

    return ForwardingBar


# -- loading -----------------------------------------------------------------------------


@dataclass
class _Resolved:
    ref: str
    revision: str | None
    folder: Path
    config: dict


def _resolve_metadata(ref: str, revision: str | None, options: LoadOptions) -> _Resolved:
    folder = resolve(ref, revision, options, METADATA_PATTERNS)
    return _Resolved(ref, revision, folder, read_config(folder, ref))


def resolve_all(refs: list[tuple[str, str | None]], options: LoadOptions) -> list[_Resolved]:
    """Resolve every model's small files; report all unavailable ones together, with one command each."""
    resolved, unavailable = [], []
    for ref, revision in refs:
        try:
            resolved.append(_resolve_metadata(ref, revision, options))
        except ModelUnavailableError as error:
            unavailable.append((ref, revision, error))
    if len(unavailable) == 1:
        raise unavailable[0][2]
    if unavailable:
        lines = "\n".join(f"- {error}" for _, _, error in unavailable)
        commands = " && ".join(download_command(ref, rev) for ref, rev, _ in unavailable if not Path(ref).is_dir())
        raise ModelUnavailableError(f"{len(unavailable)} models are not available:\n{lines}\nAll at once: `{commands}`")
    return resolved


def fetch_weights(item: _Resolved, options: LoadOptions, progress: ProgressCallback | None) -> Path:
    folder = resolve(item.ref, item.revision, options, METADATA_PATTERNS + WEIGHT_PATTERNS, progress)
    if not any(folder.glob("*.safetensors")):
        hint = "" if Path(item.ref).is_dir() else f" (`{download_command(item.ref, item.revision)}` fetches them)"
        raise ModelUnavailableError(
            f"{item.ref}: no .safetensors weights found{hint}; pickled .bin checkpoints are not loaded for safety"
        )
    return folder


def is_cached(ref: str, revision: str | None = None, cache_dir: str | Path | None = None) -> bool:
    """True when `ref` is a local folder or its config is in the Hub cache (no network)."""
    if Path(ref).expanduser().is_dir():
        return True
    if not valid_repo_id(ref):
        return False
    found = try_to_load_from_cache(
        ref, "config.json", revision=revision_for(ref, revision),
        cache_dir=str(cache_dir) if cache_dir else _cache_dir(LoadOptions()),
    )
    return isinstance(found, str)


def has_cached_weights(ref: str, revision: str | None = None) -> bool:
    """True when `ref` is a local folder or its safetensors weights (single file or index) are cached."""
    if Path(ref).expanduser().is_dir():
        return True
    if not valid_repo_id(ref):
        return False
    cache = _cache_dir(LoadOptions())
    return any(isinstance(try_to_load_from_cache(ref, name, revision=revision_for(ref, revision), cache_dir=cache), str)
               for name in ("model.safetensors", "model.safetensors.index.json"))


def human_count(count: float, unit: str = "") -> str:
    """1234567 -> '1.23 M'; with unit 'B': '1.23 MB'."""
    for scale, prefix in ((1e12, "T"), (1e9, "G" if unit else "B"), (1e6, "M"), (1e3, "k")):
        if count >= scale:
            return f"{count / scale:.2f} {prefix}{unit}"
    return f"{int(count)} {unit}".rstrip()


def short_name(ref: str) -> str:
    return Path(ref.rstrip("/")).name or ref
