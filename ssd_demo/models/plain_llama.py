"""A shipped voice's Llama models loaded without transformers: the config read from config.json, the weights from
model.safetensors (strictly: every tensor present, of its shape, and nothing else), held in modules named as
transformers' LlamaForCausalLM names them.

Why by hand: importing transformers' modelling code costs about 2.5 s on a 2-core CPU (its integrations import
torch's compiler and distributed packages), several times the whole language-model work of a short sentence, and a
voice on a CPU never runs transformers' forward: the engine's lean forward (`engine.static_cache`) or its ONNX
Runtime graph (`engine.onnx_forward`) read the weights from these modules. So the modules hold the weights, compute
the rotary tables and norms exactly as transformers does (the lean forward calls them), and have a plain
full-sequence forward for checks; `to_transformers()` gives transformers' own model of the same weights where its
forward is wanted (the lean forward turned off, `SSD_DEMO_STATIC_CACHE=0`). Other architectures and settings
(biases, tied or scaled embeddings, other rotary types) are refused here (`Unsupported`) and load through
transformers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ModelLoadError

WEIGHTS_NAME = "model.safetensors"


class Unsupported(ValueError):
    """A config this module does not read: load the model through transformers instead."""


@dataclass(frozen=True)
class PlainLlamaConfig:
    """The fields of a Llama config.json the forward depends on; `raw` keeps the whole file (for `to_dict`)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    raw: dict
    name_or_path: str = ""  # the folder it was read from (as transformers' configs record it)
    # What the engine asks of every model config (plain Llamas have neither).
    sliding_window = None
    layer_types = None

    @classmethod
    def from_dict(cls, raw: dict) -> "PlainLlamaConfig":
        """The config of a plain Llama (Unsupported for anything else)."""
        rope = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
        refusals = {
            "model type": raw.get("model_type") != "llama",
            "activation": raw.get("hidden_act", "silu") != "silu",
            "attention or MLP biases": bool(raw.get("attention_bias") or raw.get("mlp_bias")),
            "tied embeddings": bool(raw.get("tie_word_embeddings", False)),
            "rotary type": rope.get("rope_type", rope.get("type", "default")) != "default",
            "tensor-parallel slicing": raw.get("pretraining_tp", 1) != 1,
        }
        refused = [what for what, bad in refusals.items() if bad]
        if refused:
            raise Unsupported(f"not a plain Llama config ({', '.join(refused)})")
        heads = int(raw["num_attention_heads"])
        return cls(
            vocab_size=int(raw["vocab_size"]), hidden_size=int(raw["hidden_size"]),
            intermediate_size=int(raw["intermediate_size"]), num_hidden_layers=int(raw["num_hidden_layers"]),
            num_attention_heads=heads, num_key_value_heads=int(raw.get("num_key_value_heads") or heads),
            head_dim=int(raw.get("head_dim") or int(raw["hidden_size"]) // heads),
            rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
            rope_theta=float(rope.get("rope_theta", raw.get("rope_theta", 10000.0))),
            max_position_embeddings=int(raw.get("max_position_embeddings", 2048)), raw=dict(raw),
        )

    @property
    def _name_or_path(self) -> str:
        return self.name_or_path

    def to_dict(self) -> dict:
        """The config as its file says it (what `engine.machine_cache.signature` hashes)."""
        return dict(self.raw)

    def __repr__(self) -> str:
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.name != "raw")
        return f"PlainLlamaConfig({shown})"


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * w, in float32, with transformers' order of casts."""

    def __init__(self, width: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.variance_epsilon = eps

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        dtype = hidden.dtype
        hidden = hidden.to(torch.float32)
        hidden = hidden * torch.rsqrt(hidden.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * hidden.to(dtype)


class RotaryEmbedding(nn.Module):
    """Llama's default rotary tables, computed as transformers computes them (the same bits)."""

    rope_type = "default"
    attention_scaling = 1.0

    def __init__(self, config: PlainLlamaConfig):
        super().__init__()
        dim = config.head_dim
        inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(cos, sin), each [batch, positions, head_dim], in x's dtype."""
        freqs = position_ids[..., None].float() * self.inv_freq.to(device=x.device, dtype=torch.float)
        angles = torch.cat((freqs, freqs), dim=-1)
        return ((angles.cos() * self.attention_scaling).to(dtype=x.dtype),
                (angles.sin() * self.attention_scaling).to(dtype=x.dtype))


class Attention(nn.Module):
    def __init__(self, config: PlainLlamaConfig):
        super().__init__()
        d, heads, kv_heads, head_dim = (config.hidden_size, config.num_attention_heads, config.num_key_value_heads,
                                        config.head_dim)
        self.q_proj = nn.Linear(d, heads * head_dim, bias=False)
        self.k_proj = nn.Linear(d, kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(d, kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(heads * head_dim, d, bias=False)
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.scaling = head_dim ** -0.5

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """Causal self-attention over the whole sequence: x [b, n, d] -> [b, n, d]."""
        b, n, _ = x.shape
        q = self.q_proj(x).view(b, n, self.heads, self.head_dim).transpose(1, 2)  # [b, heads, n, head_dim]
        k = self.k_proj(x).view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        cos, sin = cos[:, None], sin[:, None]
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scaling,
                                             enable_gqa=self.kv_heads != self.heads)
        return self.o_proj(out.transpose(1, 2).reshape(b, n, -1))


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class MLP(nn.Module):
    def __init__(self, config: PlainLlamaConfig):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, config: PlainLlamaConfig):
        super().__init__()
        self.self_attn = Attention(config)
        self.mlp = MLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        hidden = hidden + self.self_attn(self.input_layernorm(hidden), cos, sin)
        return hidden + self.mlp(self.post_attention_layernorm(hidden))


class LlamaModel(nn.Module):
    def __init__(self, config: PlainLlamaConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = RotaryEmbedding(config)


@dataclass(frozen=True)
class CausalLMOutput:
    logits: torch.Tensor  # [b, n, vocab]


class PlainLlamaForCausalLM(nn.Module):
    """A Llama causal LM under transformers' module names, for the engine's own forwards (see the module's doc)."""

    def __init__(self, config: PlainLlamaConfig):
        super().__init__()
        self.config = config
        self.model = LlamaModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self._transformers = None

    def get_input_embeddings(self) -> nn.Embedding:
        return self.model.embed_tokens

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    @property
    def name_or_path(self) -> str:
        return self.config.name_or_path

    @property
    def device(self) -> torch.device:
        return self.lm_head.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.lm_head.weight.dtype

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor) -> "CausalLMOutput":
        """Logits of every position of whole sequences, no cache: [b, n] ids -> .logits [b, n, vocab], called as
        transformers' models are (`model(input_ids=ids).logits`; for scoring and checks: the decoders use the
        engine's cached forwards)."""
        hidden = self.model.embed_tokens(input_ids)  # [b, n, d]
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)[None].expand_as(input_ids)
        cos, sin = self.model.rotary_emb(hidden, positions)
        for layer in self.model.layers:
            hidden = layer(hidden, cos, sin)
        return CausalLMOutput(self.lm_head(self.model.norm(hidden)))

    def to_transformers(self):
        """transformers' LlamaForCausalLM with these weights (built once, then kept; imports transformers)."""
        if self._transformers is None:
            from transformers import LlamaConfig, LlamaForCausalLM  # deferred: the import this module avoids

            raw = {k: v for k, v in self.config.raw.items() if k not in ("architectures", "transformers_version")}
            model = LlamaForCausalLM(LlamaConfig(**raw))
            model.load_state_dict(self.state_dict(), strict=True)
            # kept beside the module, not registered in it: its weights are not this model's parameters
            self.__dict__["_transformers"] = model.to(device=self.device, dtype=self.dtype).eval()
        return self._transformers


def load(folder: str | Path, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"
         ) -> PlainLlamaForCausalLM:
    """The plain Llama in `folder` (config.json + model.safetensors), every tensor checked against the model's.

    Raises Unsupported for a config this module does not read, ModelLoadError for a checkpoint that does not match
    its config (a tensor missing, extra or of another shape: the model would otherwise hold random weights)."""
    from safetensors.torch import load_file

    folder = Path(folder)
    config = replace(PlainLlamaConfig.from_dict(json.loads((folder / "config.json").read_text())),
                     name_or_path=str(folder))
    weights_path = folder / WEIGHTS_NAME
    if not weights_path.is_file():
        raise Unsupported(f"{folder} has no single {WEIGHTS_NAME}")
    model = PlainLlamaForCausalLM(config)  # (not on the meta device: its random init pulls in torch's compiler)
    saved = load_file(weights_path)
    expected = {name: tuple(p.shape) for name, p in model.named_parameters()}
    problems = [f"missing {name}" for name in expected if name not in saved]
    problems += [f"unexpected {name}" for name in saved if name not in expected]
    problems += [f"{name} {tuple(saved[name].shape)} vs {shape}" for name, shape in expected.items()
                 if name in saved and tuple(saved[name].shape) != shape]
    if problems:
        raise ModelLoadError(f"{folder}: the checkpoint does not match its config.json, so some weights would be "
                             f"random: {'; '.join(problems[:5])}{' ...' if len(problems) > 5 else ''}")
    model.load_state_dict({name: tensor.to(dtype) for name, tensor in saved.items()}, strict=True, assign=True)
    return model.to(device).eval()


def load_causal_lm(folder: str | Path, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"):
    """A voice folder's causal LM: the plain Llama where this module reads it, else transformers' (offline)."""
    try:
        return load(folder, dtype, device)
    except Unsupported:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, local_files_only=True)
        return model.to(device).eval()


__all__ = ["PlainLlamaConfig", "PlainLlamaForCausalLM", "Unsupported", "load", "load_causal_lm"]
