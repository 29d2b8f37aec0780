"""How many torch threads decoding a model uses on the CPU: one for small models, torch's default otherwise."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ..errors import InputError

if TYPE_CHECKING:  # torch and the models' code load with a model, not with a command's flags (--threads)
    from ..speech.synthesis import Synthesizer

#: Below this many target parameters one torch thread is used: such models are bound by
#: per-call overhead, and a second thread only adds synchronisation (and, on a shared or
#: busy CPU, waits for a core another process holds: 10x slower was seen on 2 cores).
SMALL_MODEL_PARAMETERS = 100_000_000
_DEFAULT_THREADS = None


def cpu_threads_for(synthesizer: Synthesizer) -> int:
    """Torch CPU threads for this model: $SSD_TORCH_THREADS, else 1 for small models, else torch's default."""
    import torch

    global _DEFAULT_THREADS
    if _DEFAULT_THREADS is None:
        _DEFAULT_THREADS = torch.get_num_threads()
    override = os.environ.get("SSD_TORCH_THREADS", "").strip()
    if override:
        return max(1, int(override))
    parameters = sum(p.numel() for p in synthesizer.target.parameters())
    return 1 if parameters < SMALL_MODEL_PARAMETERS else _DEFAULT_THREADS


def check_thread_count(threads: int, flag: str = "--threads") -> None:
    """A thread count a user asked for: between 1 and this machine's CPUs (torch refuses 0 and below with an
    internal error; more threads than CPUs only wait for each other)."""
    cpus = os.cpu_count() or 1
    if not 1 <= threads <= cpus:
        raise InputError(f"{flag} must be between 1 and {cpus} (this machine's CPUs), got {threads}")
