"""This machine's measured costs, kept between runs: which forward and kernel serve each model, and the draft and
verify costs, so that a second run on the same machine answers in seconds instead of timing them again.

Why: `onnx_forward.choice`, `kernels.kernel_choice` and `calibration.calibrated_costs` time real calls (3-12 s on
a 2-core machine, more when it is busy); their answers depend on the machine, the libraries and the models' shapes,
not on anything a run does. They are kept in one small JSON file per machine under $SSD_DEMO_CACHE (default
$XDG_CACHE_HOME/ssd_demo or ~/.cache/ssd_demo), never inside the repository. The file is named by a hash of
`machine()`: the CPU model and its flags, the CPUs this process may use, the platform, Python and the versions of
torch, onnxruntime, onnx, transformers and numpy; a new library version or another CPU reads another file, so
everything is measured again. Each entry is keyed by the model's `signature` (its config and its weights' names,
shapes and dtypes: what a safetensors header holds) and the thread count.

The ONNX graphs of the models' forwards are kept too (`graph`): building one imports onnx and copies the weights
(1-2 s for the embedded target). A graph holds the weights' values, so its key is a hash of those (`digest`), and
the file's own hash is checked on every read.

`SSD_DEMO_CACHE=off` turns the cache off; `SSD_DEMO_CACHE=refresh` measures everything again and overwrites what was
kept. A file that cannot be read, parsed or written is ignored with one warning: the run measures as if it were
not there, and never fails because of it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import platform
import sys
import tempfile
import threading
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

log = logging.getLogger(__name__)

CACHE_ENV = "SSD_DEMO_CACHE"
OFF = ("off", "0", "no", "false", "none")
REFRESH = "refresh"
#: Raised when what is stored, or how it is measured, changes: older files are then not read.
FORMAT = 1
#: The libraries whose versions change what is measured (or how a graph is read).
LIBRARIES = ("torch", "onnxruntime", "onnx", "transformers", "numpy")
#: Graph files kept (the least recently used beyond this are removed): the embedded voice's three models and a
#: few more; the target's is 42 MB.
MAX_GRAPHS = 8

_lock = threading.RLock()
_warned: set[str] = set()
_entries: dict[Path, dict] = {}  # the file's entries as read once per process (and as written since)


def folder() -> Path | None:
    """Where the cache lives, or None when it is off."""
    raw = os.environ.get(CACHE_ENV, "").strip()
    if raw.lower() in OFF:
        return None
    if raw and raw.lower() != REFRESH:
        return Path(raw).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ssd_demo"


def refreshing() -> bool:
    """Whether this run measures again (and overwrites) instead of reading what was kept."""
    return os.environ.get(CACHE_ENV, "").strip().lower() == REFRESH


def _cpu() -> tuple[str, str]:
    """The CPU's model name and a hash of its feature flags (Linux: /proc/cpuinfo; elsewhere what platform says)."""
    name, flags = "", ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            for line in info:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and not name:
                    name = value.strip()
                elif key in ("flags", "Features") and not flags:
                    flags = " ".join(sorted(value.split()))
                if name and flags:
                    break
    except OSError:
        pass
    return name or platform.processor() or platform.machine(), hashlib.sha256(flags.encode()).hexdigest()[:16]


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "none"


@functools.cache
def machine() -> dict:
    """What the measured costs depend on besides the models (read once, without importing the libraries)."""
    name, flags = _cpu()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"format": FORMAT, "cpu": name, "cpu_flags": flags, "cpus": os.cpu_count(), "usable_cpus": usable,
            "platform": f"{platform.system()} {platform.machine()}",
            "python": ".".join(map(str, sys.version_info[:3])),
            **{package: _version(package) for package in LIBRARIES}}


def machine_key() -> str:
    return hashlib.sha256(json.dumps(machine(), sort_keys=True).encode()).hexdigest()[:16]


def _warn(problem: str, error: object) -> None:
    if problem not in _warned:
        _warned.add(problem)
        log.warning("%s (%s): measuring this machine as if there were no cache", problem, error)


def _path() -> Path | None:
    root = folder()
    return None if root is None else root / f"machine-{machine_key()}.json"


def _read(path: Path) -> dict:
    """The file's entries; {} when it is missing, unreadable or not this machine's."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        _warn(f"the cache file {path} could not be read", error)
        return {}
    if not isinstance(data, dict) or data.get("machine") != machine() or not isinstance(data.get("entries"), dict):
        _warn(f"the cache file {path} is not this machine's or not in this version's format", "ignored")
        return {}
    return data["entries"]


def _write_atomically(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file and a rename: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def get(kind: str, *key: object) -> dict | None:
    """The value kept for (`kind`, `key`) on this machine, or None (none kept, cache off, or refreshing)."""
    path = _path()
    if path is None or refreshing():
        return None
    with _lock:
        if path not in _entries:
            _entries[path] = _read(path)
        value = _entries[path].get(_entry_key(kind, key))
    return value if isinstance(value, dict) else None


def put(kind: str, *key_and_value: object) -> None:
    """Keep `value` (a JSON object, the last argument) for (`kind`, key...); merged with what other processes wrote
    meanwhile. Never raises for a file system problem: warns once."""
    *key, value = key_and_value
    path = _path()
    if path is None:
        return
    with _lock:
        entries = _read(path)
        entries[_entry_key(kind, key)] = value
        _entries[path] = entries
        text = json.dumps({"machine": machine(), "entries": entries}, indent=1, sort_keys=True)
        try:
            _write_atomically(path, text.encode("utf-8"))
        except OSError as error:
            _warn(f"the cache folder {path.parent} could not be written", error)


def _entry_key(kind: str, key: tuple) -> str:
    return "/".join([kind, *map(str, key)])


def signature(model) -> str:
    """A short hash of what a model's timings depend on: its class, its config (names and paths left out) and its
    weights' names, shapes and dtypes (what a safetensors header holds), and its device type. Not the values:
    a call costs the same whatever they are; reading them all would cost more than the shapes' microseconds."""
    config = getattr(model, "config", None)
    settings = config.to_dict() if hasattr(config, "to_dict") else vars(config) if config is not None else {}
    settings = {k: v for k, v in settings.items() if not k.startswith("_") and k not in ("transformers_version",
                                                                                          "name_or_path")}
    parameters = [(name, tuple(p.shape), str(p.dtype)) for name, p in model.named_parameters()]
    device = next(iter(model.parameters())).device.type if parameters else "none"
    text = json.dumps([type(model).__name__, settings, parameters, device], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def digest(*parts) -> str:
    """A hash of tensors' values (and of any other parts, by their repr): what a graph holding them depends on.
    About 60 ms for the 10 M-parameter embedded target (42 MB)."""
    import torch

    hasher = hashlib.sha256()
    for part in parts:
        if torch.is_tensor(part):
            tensor = part.detach().to("cpu").contiguous()
            hasher.update(repr((tuple(tensor.shape), str(tensor.dtype))).encode())
            hasher.update(tensor.view(torch.uint8).numpy() if tensor.numel() else b"")
        else:
            hasher.update(repr(part).encode())
    return hasher.hexdigest()[:32]


def source_digest(*modules) -> str:
    """A hash of modules' source files: a graph built by changed code is not the one kept."""
    hasher = hashlib.sha256()
    for module in modules:
        hasher.update(Path(module.__file__).read_bytes())
    return hasher.hexdigest()[:16]


def graph(key: str, build: Callable[[], bytes]) -> bytes:
    """The serialized graph kept under `key` (its bytes checked against the hash kept with it), else `build()`'s,
    kept for next time. Never fails because of the cache: a damaged or unwritable file means building."""
    root = folder()
    if root is None:
        return build()
    path = root / "graphs" / f"{key}.onnx"
    kept = get("graph", key)
    if kept is not None and path.exists():
        try:
            data = path.read_bytes()
        except OSError as error:
            _warn(f"the cached graph {path} could not be read", error)
        else:
            if hashlib.sha256(data).hexdigest() == kept.get("sha256"):
                _touch(path)
                return data
            _warn(f"the cached graph {path} is damaged", "its hash differs")
    data = build()
    try:
        _write_atomically(path, data)
    except OSError as error:
        _warn(f"the cache folder {path.parent} could not be written", error)
        return data
    put("graph", key, {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)})
    _prune(path.parent)
    return data


def _touch(path: Path) -> None:
    try:
        os.utime(path)  # least recently used goes first (`_prune`)
    except OSError:
        pass


def _prune(graphs: Path, keep: int = MAX_GRAPHS) -> None:
    try:
        files = sorted(graphs.glob("*.onnx"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in files[keep:]:
            old.unlink(missing_ok=True)
    except OSError:
        pass


def forget_read() -> None:
    """Read the file again on the next `get` (tests; a process that changed $SSD_DEMO_CACHE)."""
    with _lock:
        _entries.clear()
        _warned.clear()
        machine.cache_clear()
