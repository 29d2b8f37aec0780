"""CosyVoice 2's token encoder: speech-token embeddings -> one 512-d vector per mel frame.

The flow model first turns the (prompt + generated) token sequence into a frame-rate sequence that
the flow-matching decoder uses as its mean `mu`. The encoder is a small Conformer without
convolution modules (in effect a pre-norm Transformer with ESPnet's relative position attention):

    tokens [B, T, 512] --linear + LayerNorm, x sqrt(d)--> pre-lookahead conv (sees 3 tokens ahead)
      --> 6 layers at the token rate --> x2 nearest upsampling + causal conv
      --> linear + LayerNorm, x sqrt(d) --> 4 layers at the frame rate --> LayerNorm  [B, 2T, 512]

Only the full-context (non-streaming) path is here: with one unpadded sequence the official
padding and chunk masks are all-true, so attention runs without a mask. The official streaming
mode (chunked attention masks, look-ahead `context` tokens) is left out on purpose.

Parameter names follow the official checkpoint (`flow.pt`) so it loads strictly; the structure and
code are our own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class EncoderConfig:
    """UpsampleConformerEncoder as CosyVoice 2's yaml builds it (input_layer linear, rel_pos_espnet)."""

    input_size: int = 512  # width of the token embedding fed in
    d_model: int = 512  # attention width (`output_size` in the yaml)
    heads: int = 8
    ffn_units: int = 2048  # `linear_units`
    num_blocks: int = 6  # layers at the token rate
    num_up_blocks: int = 4  # layers at the frame rate (fixed in the official class)
    pre_lookahead_len: int = 3  # tokens of right context the first conv sees
    upsample: int = 2  # mel frames per token (`token_mel_ratio`)
    embed_eps: float = 1e-5  # LayerNorm after each input projection and at the end
    layer_eps: float = 1e-12  # LayerNorms inside the layers (ESPnet's choice)


def relative_positions(size: int, d_model: int, device=None, dtype=torch.float32) -> torch.Tensor:
    """ESPnet's relative sinusoid table for a sequence of `size`: [1, 2*size - 1, d_model].

    Row k encodes relative distance `size - 1 - k` (from +(size-1) down to -(size-1)), interleaving
    sin and cos per frequency. The angles are formed exactly as the official table forms them, so
    the values agree bit for bit (the official slices the same rows out of a 5000-position table).
    """
    inv_freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * -(math.log(10000.0) / d_model))
    distance = torch.arange(size - 1, -size, -1, dtype=torch.float32).unsqueeze(1)  # [2S-1, 1]
    angle = distance * inv_freq  # [2S-1, d/2]
    table = torch.stack([torch.sin(angle), torch.cos(angle)], dim=-1).flatten(1)  # [2S-1, d]
    return table.unsqueeze(0).to(device=device, dtype=dtype)


class LinearEmbed(nn.Module):
    """Input projection: Linear -> LayerNorm, then scaled by sqrt(d) (the positional table is separate)."""

    def __init__(self, in_dim: int, d_model: int, eps: float):
        super().__init__()
        # `out.0` / `out.1` are the checkpoint's names (the official third entry is a dropout).
        self.out = nn.Sequential(nn.Linear(in_dim, d_model), nn.LayerNorm(d_model, eps=eps))
        self.scale = math.sqrt(d_model)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [B, T, in] -> (x [B, T, d], relative position table [1, 2T-1, d])."""
        x = self.out(x) * self.scale
        return x, relative_positions(x.shape[1], x.shape[2], device=x.device, dtype=x.dtype)


class RelPositionAttention(nn.Module):
    """Multi-head self-attention with Transformer-XL relative positions (ESPnet's variant).

    score(i, j) = [(q_i + u) . k_j + (q_i + v) . P(i - j)] / sqrt(d_k), where P is a learned
    projection of the sinusoid for the distance i - j and u, v are learned per-head biases.
    """

    def __init__(self, d_model: int, heads: int):
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model {d_model} is not divisible by {heads} heads")
        self.heads, self.d_k = heads, d_model // heads
        self.linear_q = nn.Linear(d_model, d_model)
        self.linear_k = nn.Linear(d_model, d_model)
        self.linear_v = nn.Linear(d_model, d_model)
        self.linear_out = nn.Linear(d_model, d_model)
        self.linear_pos = nn.Linear(d_model, d_model, bias=False)
        self.pos_bias_u = nn.Parameter(torch.empty(heads, self.d_k))
        self.pos_bias_v = nn.Parameter(torch.empty(heads, self.d_k))
        nn.init.xavier_uniform_(self.pos_bias_u)
        nn.init.xavier_uniform_(self.pos_bias_v)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        """[B, T, d] -> [B, T, H, d_k]."""
        return x.view(x.shape[0], x.shape[1], self.heads, self.d_k)

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """x [B, T, d], pos [1, 2T-1, d] -> [B, T, d]."""
        batch, length, _ = x.shape
        q = self._split(self.linear_q(x))  # [B, T, H, d_k]
        k = self._split(self.linear_k(x)).transpose(1, 2)  # [B, H, T, d_k]
        v = self._split(self.linear_v(x)).transpose(1, 2)
        p = self._split(self.linear_pos(pos)).transpose(1, 2)  # [1, H, 2T-1, d_k]

        content = torch.matmul((q + self.pos_bias_u).transpose(1, 2), k.transpose(-2, -1))  # [B, H, T, T]
        by_distance = torch.matmul((q + self.pos_bias_v).transpose(1, 2), p.transpose(-2, -1))  # [B, H, T, 2T-1]
        # Column k of `by_distance` is distance T-1-k; pick distance i-j for each (i, j).
        rows = torch.arange(length, device=x.device).unsqueeze(1)
        cols = torch.arange(length, device=x.device).unsqueeze(0)
        index = (length - 1 - rows + cols).expand(batch, self.heads, length, length)
        position = torch.gather(by_distance, -1, index)  # [B, H, T, T]

        weights = torch.softmax((content + position) / math.sqrt(self.d_k), dim=-1)
        out = torch.matmul(weights, v).transpose(1, 2).reshape(batch, length, self.heads * self.d_k)
        return self.linear_out(out)


class FeedForward(nn.Module):
    """Position-wise MLP with SiLU (the yaml's default `swish`)."""

    def __init__(self, d_model: int, hidden: int):
        super().__init__()
        self.w_1 = nn.Linear(d_model, hidden)
        self.w_2 = nn.Linear(hidden, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_2(F.silu(self.w_1(x)))


class ConformerLayer(nn.Module):
    """Pre-norm residual attention + MLP (the yaml disables macaron MLPs and convolution modules)."""

    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.self_attn = RelPositionAttention(config.d_model, config.heads)
        self.feed_forward = FeedForward(config.d_model, config.ffn_units)
        self.norm_ff = nn.LayerNorm(config.d_model, eps=config.layer_eps)
        self.norm_mha = nn.LayerNorm(config.d_model, eps=config.layer_eps)

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.norm_mha(x), pos)
        return x + self.feed_forward(self.norm_ff(x))


class PreLookahead(nn.Module):
    """Residual conv pair that lets each token see `lookahead` tokens to its right.

    conv1 (kernel lookahead+1) reads the token and the next ones (zeros past the end, as at the
    end of a finished utterance); conv2 (kernel 3) is causal. Works in [B, T, C].
    """

    def __init__(self, channels: int, lookahead: int):
        super().__init__()
        self.lookahead = lookahead
        self.conv1 = nn.Conv1d(channels, channels, kernel_size=lookahead + 1)
        self.conv2 = nn.Conv1d(channels, channels, kernel_size=3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.transpose(1, 2)  # [B, C, T]
        h = F.leaky_relu(self.conv1(F.pad(h, (0, self.lookahead))))
        h = self.conv2(F.pad(h, (self.conv2.kernel_size[0] - 1, 0)))
        return x + h.transpose(1, 2)


class FrameUpsampler(nn.Module):
    """Token rate -> frame rate: repeat each step `factor` times, then a causal conv (kernel 2f+1)."""

    def __init__(self, channels: int, factor: int):
        super().__init__()
        self.factor = factor
        self.conv = nn.Conv1d(channels, channels, kernel_size=2 * factor + 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, C, T] -> [B, C, factor*T]."""
        x = F.interpolate(x, scale_factor=float(self.factor), mode="nearest")
        return self.conv(F.pad(x, (2 * self.factor, 0)))


class UpsampleConformerEncoder(nn.Module):
    """Token embeddings [B, T, input_size] -> frame features [B, upsample*T, d_model]."""

    def __init__(self, config: EncoderConfig = EncoderConfig()):
        super().__init__()
        self.config = config
        d = config.d_model
        self.embed = LinearEmbed(config.input_size, d, config.embed_eps)
        self.pre_lookahead_layer = PreLookahead(d, config.pre_lookahead_len)
        self.encoders = nn.ModuleList(ConformerLayer(config) for _ in range(config.num_blocks))
        self.up_layer = FrameUpsampler(d, config.upsample)
        self.up_embed = LinearEmbed(d, d, config.embed_eps)
        self.up_encoders = nn.ModuleList(ConformerLayer(config) for _ in range(config.num_up_blocks))
        self.after_norm = nn.LayerNorm(d, eps=config.embed_eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x, pos = self.embed(x)  # [B, T, d]
        x = self.pre_lookahead_layer(x)
        for layer in self.encoders:
            x = layer(x, pos)
        x = self.up_layer(x.transpose(1, 2)).transpose(1, 2)  # [B, 2T, d]
        x, pos = self.up_embed(x)
        for layer in self.up_encoders:
            x = layer(x, pos)
        return self.after_norm(x)
