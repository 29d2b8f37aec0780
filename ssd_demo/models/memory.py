"""Will a model pair fit? Parameter counts and the memory check made before (and on ZeroGPU, after) loading.

Parameters are counted from the safetensors headers (no weights read), from the Hub's safetensors
metadata, or estimated from the config; `MemoryEstimate` turns the counts into bytes for the chosen
dtype, and `check_memory` compares them with what the device has free. A model family's loader
(next to its backend) runs the check between `ssd_demo.models.hub`'s pre-flight checks and fetching weights.
"""

from __future__ import annotations

import json
import struct
import weakref
from dataclasses import dataclass
from pathlib import Path

import torch
from huggingface_hub import get_safetensors_metadata

from ..errors import ModelLoadError
from .checks import vocab_size_of
from .hub import LoadOptions, human_count, is_offline, on_zerogpu, revision_for, valid_repo_id
from ..speech.synthesis import Synthesizer


class InsufficientMemoryError(ModelLoadError):
    """The pair would not fit in the memory of the chosen device."""


# -- parameter counts --------------------------------------------------------------------


def tied_duplicates(config: dict) -> frozenset[str]:
    """Checkpoint tensors that load as views of another: a tied output layer stored anyway.

    Llasa-3B's shards (8.0 GB in bfloat16 for 3.41B parameters) appear to hold one; counting it would
    overstate the memory the loaded model takes by 0.6B parameters.
    """
    return frozenset({"lm_head.weight"}) if config.get("tie_word_embeddings") else frozenset()


def safetensors_parameter_count(folder: Path, skip: frozenset[str] = frozenset()) -> int | None:
    """Parameters in the folder's safetensors files but `skip`, read from their headers (no weights loaded)."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for file in files:
        with open(file, "rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(length))
        for name, info in header.items():
            if name == "__metadata__" or name in skip:
                continue
            count = 1
            for dim in info["shape"]:
                count *= dim
            total += count
    return total


def config_parameter_count(config: dict) -> int:
    """A decoder-only transformer's parameter count from its config (an estimate when no headers exist)."""
    hidden = config.get("hidden_size", 0)
    layers = config.get("num_hidden_layers", 0)
    vocab = vocab_size_of(config) or 0
    inter = config.get("intermediate_size", 4 * hidden)
    heads = config.get("num_attention_heads", 1) or 1
    kv_heads = config.get("num_key_value_heads", heads) or heads
    head_dim = config.get("head_dim") or hidden // heads
    attention = hidden * head_dim * (2 * heads + 2 * kv_heads)
    mlp = 3 * hidden * inter
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings") else 2)
    return layers * (attention + mlp + 2 * hidden) + embeddings + hidden


def parameter_count(folder: Path, config: dict, ref: str, revision: str | None, options: LoadOptions) -> int:
    skip = tied_duplicates(config)
    local = safetensors_parameter_count(folder, skip)
    if local is not None:
        return local
    if not is_offline(options.offline) and valid_repo_id(ref) and not Path(ref).is_dir():
        try:
            metadata = get_safetensors_metadata(ref, revision=revision_for(ref, revision), token=options.token)
            tied = sum(info.parameter_count for file in metadata.files_metadata.values()
                       for name, info in file.tensors.items() if name in skip)
            return int(sum(metadata.parameter_count.values()) - tied)
        except Exception:  # noqa: BLE001 - the estimate below is good enough to decide
            pass
    return config_parameter_count(config)


# -- the check ---------------------------------------------------------------------------


def available_memory(device: torch.device) -> int | None:
    """Free bytes on `device` (CUDA: free device memory; CPU: MemAvailable), None if unknown."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    if device.type == "cpu":
        try:
            for line in Path("/proc/meminfo").read_text().splitlines():
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            return None
    return None


@dataclass(frozen=True)
class MemoryEstimate:
    target_params: int
    draft_params: int
    codec_params: int
    lm_dtype: torch.dtype
    margin: float

    @property
    def required_bytes(self) -> int:
        lm_bytes = (self.target_params + self.draft_params) * torch.empty((), dtype=self.lm_dtype).element_size()
        codec_bytes = self.codec_params * 4  # the codec stays in float32
        return int((lm_bytes + codec_bytes) * self.margin)

    def describe(self) -> str:
        return (
            f"target {human_count(self.target_params)} + draft {human_count(self.draft_params)} parameters in "
            f"{str(self.lm_dtype).removeprefix('torch.')}, codec {human_count(self.codec_params)} in float32: "
            f"about {self.required_bytes / 2**30:.1f} GiB with margin"
        )


def check_memory(estimate: MemoryEstimate, device: torch.device, free: int | None = None) -> None:
    """Raise InsufficientMemoryError when `estimate` exceeds `free` bytes (default: what `device` has free now)."""
    free = available_memory(device) if free is None else free
    if free is not None and estimate.required_bytes > free:
        raise InsufficientMemoryError(
            f"not enough memory on {device}: {estimate.describe()}, but only {free / 2**30:.1f} GiB is free. "
            "Choose a smaller pair (e.g. Llasa-1B -> Llasa-3B), free memory, or use a larger GPU."
        )


def memory_checked_before_loading(options: LoadOptions, device: torch.device) -> bool:
    """Whether the pre-flight memory check runs: not on ZeroGPU's GPU, which only `check_gpu_memory` may measure."""
    return options.check_memory and not (on_zerogpu() and device.type == "cuda")


#: The memory estimate of each loaded pair, for the check inside a GPU call.
MEMORY_ESTIMATES: "weakref.WeakKeyDictionary[Synthesizer, tuple[MemoryEstimate, bool]]" = weakref.WeakKeyDictionary()


def check_gpu_memory(synthesizer: Synthesizer) -> None:
    """Inside a GPU call: raise InsufficientMemoryError if the loaded pair does not fit the GPU it got.

    On ZeroGPU this replaces the check before loading: CUDA may not be queried outside the
    GPU-decorated call, and only inside it is there a GPU to measure. The pair's weights are
    already there by then, so they count as usable memory. Elsewhere the check ran before the
    weights were fetched, and this does nothing.
    """
    estimate, checked = MEMORY_ESTIMATES.get(synthesizer, (None, True))
    device = synthesizer.device
    if checked or estimate is None or device.type != "cuda":
        return
    free, _ = torch.cuda.mem_get_info(device)
    check_memory(estimate, device, free=free + torch.cuda.memory_allocated(device))
