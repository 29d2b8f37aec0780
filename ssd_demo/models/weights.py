"""Step 3 of loading: the weights (safetensors only) placed straight onto the device, and refused unless
every tensor of the model came from the checkpoint. `ssd_demo.models.hub` has steps 1 and 2.
"""

from __future__ import annotations

import gc
import importlib
from pathlib import Path

import torch
from safetensors import SafetensorError
from transformers import AutoModelForCausalLM

from ..errors import ModelLoadError
from .checks import some_names
from .hub import LoadOptions, on_zerogpu


def placement(device: torch.device) -> str:
    """The `device_map` for from_pretrained: accelerate puts each tensor on `device` as it is read.

    Without it transformers builds the whole model in host RAM first and moves it afterwards (about
    17 GB of host RAM at peak for Llasa-8B). ZeroGPU is the exception: there CUDA must not be
    touched outside the GPU-decorated call, so weights load to host RAM and `.to("cuda")` hands them
    to ZeroGPU, which moves them when a call gets a GPU.
    """
    try:
        # deferred: checked only when weights are placed, to say how to install it if it is missing
        importlib.import_module("accelerate")  # a pinned requirement; from_pretrained needs it for device_map
    except ImportError:
        raise ModelLoadError(
            "loading onto a device needs the `accelerate` package: `pip install -r requirements.txt`"
        ) from None
    return "cpu" if on_zerogpu() and device.type == "cuda" else str(device)


def check_loading_info(info: dict, ref: str, tied_embeddings: bool = False, hint: str = "") -> None:
    """Raise ModelLoadError unless every weight of the model came from the checkpoint, and only those.

    transformers only logs missing, unexpected and mismatched keys and initialises the missing
    weights at random, so a checkpoint with other tensor names (an older conversion, another
    architecture, a truncated upload) would load without error and produce noise. A missing
    `lm_head.weight` is fine only when the output layer is tied to the input embeddings.
    """
    missing = sorted(info.get("missing_keys") or ())
    if tied_embeddings:
        missing = [key for key in missing if key != "lm_head.weight"]
    unexpected = sorted(info.get("unexpected_keys") or ())
    mismatched = sorted(info.get("mismatched_keys") or ())
    reshaped = [f"{key} {tuple(saved)} vs {tuple(expected)}" for key, saved, expected in mismatched]
    problems = [some_names(items, what) for items, what in (
        (missing, "weights missing from the checkpoint"), (unexpected, "checkpoint tensors the model does not have"),
        (reshaped, "tensors of the wrong shape"), (list(info.get("error_msgs") or ()), "loading errors"),
    ) if items]
    if problems:
        raise ModelLoadError(
            f"{ref}: the checkpoint does not match the model, so some weights would be random: "
            + "; ".join(problems)
            + ". Check the repository and revision (a different conversion or a truncated download?)"
            + hint
        )


def strict_from_pretrained(model_class, folder: Path, ref: str, device: torch.device, hint: str = "", **kwargs):
    """`model_class.from_pretrained` placed on `device`, with its loading report checked (strict)."""
    try:
        model, info = model_class.from_pretrained(
            folder, use_safetensors=True, device_map=placement(device), output_loading_info=True,
            # Shape mismatches are reported in `info` (and raised below) instead of as a bare RuntimeError.
            ignore_mismatched_sizes=True, **kwargs,
        )
    except (OSError, ValueError, RuntimeError, SafetensorError) as error:
        raise ModelLoadError(f"{ref}: the model cannot be loaded ({error})") from None
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    check_loading_info(info, ref, tied_embeddings=tied, hint=hint)
    return model.to(device).eval()


def load_causal_lm(folder: Path, ref: str, device: torch.device, dtype: torch.dtype, options: LoadOptions):
    return strict_from_pretrained(
        AutoModelForCausalLM, folder, ref, device, dtype=dtype, trust_remote_code=options.trust_remote_code
    )


def free_models() -> None:
    """Return memory held by models that are no longer referenced (call after dropping a pair)."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
