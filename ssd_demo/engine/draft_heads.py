"""Draft heads: a tiny proposer that runs on the target's own hidden state (no draft model).

An AR draft model pays K forward calls of its own per round; on a CPU those calls, not the verify,
cap the speedup (docs/benchmarks.md). Draft heads read the hidden state the target already computed
in its verify call and roll it forward one token at a time through a small recurrent block, so a
round costs one target call plus K steps of a few small matmuls. The target stays frozen: the heads
borrow its input embedding and its output layer.

    state_0 = h_p                     the target's hidden state at the last position it processed
    state_j = step(state_{j-1}, E[x]) one step per following token x (committed, forced or drafted)
    p_j     = softmax(lm_head(state_j)) processed like the target's (temperature, top-k/p, mask)

Each step is a residual block over [RMSNorm(state), RMSNorm(E[x])] (EAGLE's idea of feeding the token
with the feature, without its transformer layer), trained to reproduce the target's next hidden state
and next-token distribution (`training.heads`). Proposals are verified by the same acceptance rules
as any draft, so at beta = 0 the output keeps the target's distribution whatever the heads propose.
"""

from __future__ import annotations

import hashlib
import json
import weakref
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn
from ..errors import ModelLoadError
from .heads_config import HeadsConfig

CONFIG_NAME = "heads.json"
WEIGHTS_NAME = "heads.safetensors"


class HeadBlock(nn.Module):
    def __init__(self, config: HeadsConfig):
        super().__init__()
        self.state_norm = nn.RMSNorm(config.hidden, eps=config.eps)
        self.token_norm = nn.RMSNorm(config.hidden, eps=config.eps)
        self.up = nn.Linear(2 * config.hidden, config.inner)
        self.down = nn.Linear(config.inner, config.hidden)

    def forward(self, state: torch.Tensor, token: torch.Tensor) -> torch.Tensor:
        # state, token: [..., d] -> [..., d]
        x = torch.cat([self.state_norm(state), self.token_norm(token)], dim=-1)
        return state + self.down(F.silu(self.up(x)))


class DraftHeads(nn.Module):
    """The recurrent step of the heads (the target's embedding and output layer are passed in, not owned)."""

    def __init__(self, config: HeadsConfig):
        super().__init__()
        self.config = config
        self.blocks = nn.ModuleList(HeadBlock(config) for _ in range(config.blocks))
        # `target_fingerprint` of the target the heads were trained on (None: not recorded, e.g. untrained)
        self.made_for: str | None = None

    def step(self, state: torch.Tensor, token_embedding: torch.Tensor) -> torch.Tensor:
        """[..., d] state and the embedding of the token that follows it -> the state after that token."""
        for block in self.blocks:
            state = block(state, token_embedding)
        return state

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def save(self, folder: str | Path, extra: dict | None = None) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        dtype = next(self.parameters()).dtype
        save_file({k: v.detach().to(dtype).contiguous() for k, v in self.state_dict().items()}, folder / WEIGHTS_NAME)
        made_for = {"made_for": self.made_for} if self.made_for else {}
        (folder / CONFIG_NAME).write_text(json.dumps({**asdict(self.config), **made_for, **(extra or {})},
                                                     indent=1) + "\n")

    @classmethod
    def load(cls, folder: str | Path, dtype: torch.dtype = torch.float32) -> "DraftHeads":
        """Load strictly: a missing or unexpected tensor is an error, never silently re-initialised."""
        folder = Path(folder)
        meta = json.loads((folder / CONFIG_NAME).read_text())
        fields = HeadsConfig.__dataclass_fields__
        heads = cls(HeadsConfig(**{k: v for k, v in meta.items() if k in fields}))
        heads.load_state_dict(load_file(folder / WEIGHTS_NAME), strict=True)
        heads.made_for = meta.get("made_for")
        return heads.to(dtype).eval()


class FastStep:
    """`DraftHeads.step` for one state at a time, rearranged for speed at decode time (same maths).

    Why: a draft step on a CPU is bound by reading weights, and the token half of each block's up
    projection only depends on the token, so it is looked up, not computed: table[x] =
    up_e(RMSNorm(E[x])) + bias for every id, built once per heads and embedding. The state half folds
    the norm's weight into the matrix, stored [in, out] (faster for one row, see `static_cache`).
    """

    def __init__(self, heads: DraftHeads, embedding: torch.Tensor):
        d = heads.config.hidden
        self.layers = []
        dtype = embedding.dtype  # the target's: the state comes from its hidden states and goes to its output layer
        with torch.no_grad():
            embedding = embedding.float()
            for block in heads.blocks:
                up, up_bias = block.up.weight.float(), block.up.bias.float()
                w_state, w_token = up[:, :d], up[:, d:]  # [inner, d] each
                token_norm = F.rms_norm(embedding, (d,), block.token_norm.weight.float(), block.token_norm.eps)
                table = token_norm @ w_token.T + up_bias  # [V, inner]
                up_state = (w_state * block.state_norm.weight.float()[None, :]).T.contiguous()  # [d, inner]
                down = block.down.weight.float().T.contiguous()  # [inner, d]
                self.layers.append((up_state.to(dtype), table.to(dtype), down.to(dtype),
                                    block.down.bias.to(dtype), block.state_norm.eps))

    def __call__(self, state: torch.Tensor, token: int) -> torch.Tensor:
        """state [d] after `token` -> [d]."""
        for up_state, table, down, down_bias, eps in self.layers:
            x = F.rms_norm(state, state.shape, eps=eps)
            state = state + torch.addmv(down_bias, down.T, F.silu(torch.addmv(table[token], up_state.T, x)))
        return state


# heads -> (fingerprint of their weights and the embedding, FastStep); rebuilt when any of them changes.
_FAST: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def fast_step(heads: DraftHeads, embedding: torch.Tensor) -> FastStep:
    """The heads' `FastStep` for this embedding table, built once (about 30 ms) and reused."""
    fingerprint = (embedding.data_ptr(), embedding._version, *((p.data_ptr(), p._version) for p in heads.parameters()))
    cached = _FAST.get(heads)
    if cached is None or cached[0] != fingerprint:
        cached = (fingerprint, FastStep(heads, embedding))
        _FAST[heads] = cached
    return cached[1]


def is_heads(draft) -> bool:
    return isinstance(draft, DraftHeads)


def target_fingerprint(target) -> str:
    """A short hash of the target's output layer, rounded to float16 (so a float32 training copy and its
    float16 export agree): heads trained on one target are worthless on another of the same width."""
    weight = target.get_output_embeddings().weight
    key = (weight.data_ptr(), weight._version, tuple(weight.shape))  # changed in place -> hashed again
    cached = _FINGERPRINTS.get(target)
    if cached is not None and cached[0] == key:
        return cached[1]
    data = weight.detach().to("cpu", torch.float16).contiguous().view(torch.int16).numpy().tobytes()
    fingerprint = hashlib.sha256(data).hexdigest()[:16]
    _FINGERPRINTS[target] = (key, fingerprint)
    return fingerprint


#: target model -> (its output weight's identity, fingerprint); a decoder checks once per sequence.
_FINGERPRINTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def check_fits(heads: DraftHeads, target) -> None:
    """The heads must have been made for a target of this width and, where they record it, this target."""
    width = target.get_output_embeddings().weight.shape[1]
    if heads.config.hidden != width:
        raise ModelLoadError(f"the draft heads work on {heads.config.hidden}-wide hidden states but the target's are {width}")
    if heads.made_for is not None and heads.made_for != target_fingerprint(target):
        raise ModelLoadError(f"the draft heads were trained on another target (fingerprint {heads.made_for}, this "
                         f"target's is {target_fingerprint(target)}): retrain them on this one "
                         f"(python -m ssd_demo train --stages heads)")


class OutputInputCapture:
    """Keeps the input of a model's output layer from its last forward: the hidden state the heads start from.

    A forward pre-hook on `get_output_embeddings()` sees exactly what the logits were computed from, for
    any causal LM (after its final norm), without asking the model for all its layers' hidden states.
    """

    def __init__(self, model):
        self.hidden: torch.Tensor | None = None
        self._handle = model.get_output_embeddings().register_forward_pre_hook(self._keep)

    def _keep(self, module, args) -> None:
        self.hidden = args[0].detach()

    def close(self) -> None:
        self._handle.remove()


__all__ = ["CONFIG_NAME", "DraftHeads", "FastStep", "fast_step", "HeadsConfig", "OutputInputCapture", "check_fits", "is_heads",
           "target_fingerprint"]
