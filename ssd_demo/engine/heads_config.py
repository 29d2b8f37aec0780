"""The draft heads' sizes (`draft_heads.DraftHeads`), apart from their torch code: a training recipe names them, and
the command line's flags read the recipe without loading torch."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HeadsConfig:
    hidden: int  # the target's hidden size (the state lives in the space its output layer reads)
    inner: int = 1024  # width of each block's MLP
    blocks: int = 2  # residual blocks per step
    eps: float = 1e-5
