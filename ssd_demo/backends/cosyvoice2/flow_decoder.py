"""CosyVoice 2's flow-matching estimator: a 1-D U-Net that predicts the velocity d(mel)/dt.

Each Euler step of the flow calls this network on the current noisy mel `x` together with the
conditions, stacked on the channel axis: [x, mu (encoder output), speaker vector (repeated over
time), cond (the prompt's mel, zeros elsewhere)] -> 4 x 80 = 320 channels. The timestep enters
every resnet block through a sinusoid + MLP embedding.

    320 -> resnet + 4 transformer blocks (256) -> causal conv          (the "down" level)
        -> 12 x [resnet + 4 transformer blocks]                          (the middle)
        -> concat skip (512) -> resnet + 4 transformer blocks -> causal conv  (the "up" level)
        -> causal conv block -> 1x1 conv -> 80

CosyVoice 2 configures a single U-Net level (`channels: [256]`), so nothing is actually down- or
up-sampled; the skip connection still doubles the width going up. Convolutions are causal (left
padding only) and normalised with LayerNorm, which is what makes chunked streaming possible
upstream; here attention sees the whole utterance (the non-streaming path), restricted only by the
padding mask.

The blocks come from Matcha-TTS (resnet/time embedding) and diffusers (`BasicTransformerBlock`
with the default attention processor: bias-free q/k/v, biased output projection, exact-GELU
MLP of 4x width). Parameter names follow the official checkpoint so `flow.pt` loads strictly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class EstimatorConfig:
    """CausalConditionalDecoder as CosyVoice 2's yaml builds it."""

    n_mels: int = 80  # output channels; the input stacks 4 signals of this width
    channels: int = 256  # the yaml's `channels: [256]` (one U-Net level)
    heads: int = 8
    head_dim: int = 64  # attention width is heads * head_dim = 512, wider than the blocks
    n_blocks: int = 4  # transformer blocks after each resnet
    num_mid_blocks: int = 12
    ff_mult: int = 4  # transformer MLP width = ff_mult * channels

    @property
    def in_channels(self) -> int:
        return 4 * self.n_mels

    @property
    def time_dim(self) -> int:
        return 4 * self.channels


def timestep_sinusoid(t: torch.Tensor, dim: int, scale: float = 1000.0) -> torch.Tensor:
    """t [B] in [0, 1] -> [B, dim]: sin | cos of scale*t at geometric frequencies (Matcha's layout)."""
    half = dim // 2
    freq = torch.exp(torch.arange(half, device=t.device).float() * -(math.log(10000) / (half - 1)))
    angle = scale * t.unsqueeze(1) * freq.unsqueeze(0)
    return torch.cat((angle.sin(), angle.cos()), dim=-1)


class TimestepMLP(nn.Module):
    """Linear -> SiLU -> Linear on the timestep sinusoid."""

    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.linear_1 = nn.Linear(in_dim, out_dim)
        self.linear_2 = nn.Linear(out_dim, out_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_2(F.silu(self.linear_1(x)))


class CausalConv1d(nn.Conv1d):
    """Stride-1 convolution padded on the left only, so output t depends on inputs <= t."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__(in_channels, out_channels, kernel_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(F.pad(x, (self.kernel_size[0] - 1, 0)))


class CausalConvBlock(nn.Module):
    """Masked causal conv (kernel 3) -> LayerNorm over channels -> Mish, output masked again."""

    def __init__(self, dim: int, dim_out: int):
        super().__init__()
        # Checkpoint names: block.0 is the conv, block.2 the norm (the official keeps transposes in
        # between); index 1 is a parameter-free placeholder that keeps the numbering.
        self.block = nn.ModuleList([CausalConv1d(dim, dim_out, 3), nn.Identity(), nn.LayerNorm(dim_out)])

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """x [B, C, T], mask [B, 1, T] -> [B, C_out, T]."""
        conv, _, norm = self.block
        h = conv(x * mask)
        h = norm(h.transpose(1, 2)).transpose(1, 2)
        return F.mish(h) * mask


class CausalResnetBlock(nn.Module):
    """Two conv blocks with the timestep embedding added in between, plus a 1x1 residual path."""

    def __init__(self, dim: int, dim_out: int, time_dim: int):
        super().__init__()
        # `mlp.1`: the official Sequential is (Mish, Linear).
        self.mlp = nn.Sequential(nn.Mish(), nn.Linear(time_dim, dim_out))
        self.block1 = CausalConvBlock(dim, dim_out)
        self.block2 = CausalConvBlock(dim_out, dim_out)
        self.res_conv = nn.Conv1d(dim, dim_out, 1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, time: torch.Tensor) -> torch.Tensor:
        """x [B, C, T], mask [B, 1, T], time [B, time_dim] -> [B, C_out, T]."""
        h = self.block1(x, mask) + self.mlp(time).unsqueeze(-1)
        h = self.block2(h, mask)
        return h + self.res_conv(x * mask)


class SelfAttention(nn.Module):
    """diffusers' `Attention` with its defaults: bias-free q/k/v to heads*head_dim, biased output."""

    def __init__(self, dim: int, heads: int, head_dim: int):
        super().__init__()
        inner = heads * head_dim
        self.heads, self.head_dim = heads, head_dim
        self.to_q = nn.Linear(dim, inner, bias=False)
        self.to_k = nn.Linear(dim, inner, bias=False)
        self.to_v = nn.Linear(dim, inner, bias=False)
        self.to_out = nn.ModuleList([nn.Linear(inner, dim)])  # `to_out.0` (the official `.1` is a dropout)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """x [B, T, dim], bias [B, 1, 1, T] (0 or -1e10 per key) -> [B, T, dim]."""
        batch, length, _ = x.shape

        def heads(y: torch.Tensor) -> torch.Tensor:
            return y.view(batch, length, self.heads, self.head_dim).transpose(1, 2)  # [B, H, T, hd]

        out = F.scaled_dot_product_attention(heads(self.to_q(x)), heads(self.to_k(x)), heads(self.to_v(x)),
                                             attn_mask=bias)
        return self.to_out[0](out.transpose(1, 2).reshape(batch, length, self.heads * self.head_dim))


class GeluProjection(nn.Module):
    """Linear followed by exact GELU (diffusers' `GELU` activation module)."""

    def __init__(self, dim_in: int, dim_out: int):
        super().__init__()
        self.proj = nn.Linear(dim_in, dim_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.proj(x))


class GeluMLP(nn.Module):
    """dim -> mult*dim (exact GELU) -> dim; `net.0`, `net.2` as in the checkpoint (the official `net.1`: dropout)."""

    def __init__(self, dim: int, mult: int):
        super().__init__()
        self.net = nn.ModuleList([GeluProjection(dim, mult * dim), nn.Identity(), nn.Linear(mult * dim, dim)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.net:
            x = layer(x)
        return x


class TransformerBlock(nn.Module):
    """Pre-norm self-attention + GELU MLP, both residual (diffusers' BasicTransformerBlock, no cross-attention)."""

    def __init__(self, dim: int, heads: int, head_dim: int, ff_mult: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn1 = SelfAttention(dim, heads, head_dim)
        self.norm3 = nn.LayerNorm(dim)
        self.ff = GeluMLP(dim, ff_mult)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """x [B, T, dim] -> [B, T, dim]."""
        x = x + self.attn1(self.norm1(x), bias)
        return x + self.ff(self.norm3(x))


def _stage(config: EstimatorConfig, dim_in: int) -> nn.ModuleList:
    """[resnet, transformer blocks], the unit every U-Net position repeats."""
    c = config.channels
    blocks = nn.ModuleList(TransformerBlock(c, config.heads, config.head_dim, config.ff_mult)
                           for _ in range(config.n_blocks))
    return nn.ModuleList([CausalResnetBlock(dim_in, c, config.time_dim), blocks])


class CausalConditionalDecoder(nn.Module):
    """The velocity network: (x, mask, mu, t, spks, cond) -> d(x)/dt, all [B, n_mels, T] but t [B], spks [B, n_mels]."""

    def __init__(self, config: EstimatorConfig = EstimatorConfig()):
        super().__init__()
        self.config = config
        c = config.channels
        self.time_mlp = TimestepMLP(config.in_channels, config.time_dim)
        # Module lists indexed like the official ones: [resnet, transformers, (causal conv)].
        down = _stage(config, config.in_channels)
        down.append(CausalConv1d(c, c, 3))
        self.down_blocks = nn.ModuleList([down])
        self.mid_blocks = nn.ModuleList(_stage(config, c) for _ in range(config.num_mid_blocks))
        up = _stage(config, 2 * c)
        up.append(CausalConv1d(c, c, 3))
        self.up_blocks = nn.ModuleList([up])
        self.final_block = CausalConvBlock(c, c)
        self.final_proj = nn.Conv1d(c, config.n_mels, 1)

    @staticmethod
    def _transformers(blocks: nn.ModuleList, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        h = x.transpose(1, 2)  # [B, T, C]
        for block in blocks:
            h = block(h, bias)
        return h.transpose(1, 2)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, mu: torch.Tensor, t: torch.Tensor,
                spks: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        time = self.time_mlp(timestep_sinusoid(t, self.config.in_channels).to(t.dtype))  # [B, 4c]
        h = torch.cat([x, mu, spks.unsqueeze(-1).expand(-1, -1, x.shape[-1]), cond], dim=1)  # [B, 4*n_mels, T]
        # Padded keys get a large negative score; padded queries still attend to the real frames.
        bias = (1.0 - mask.to(h.dtype)).unsqueeze(1) * -1.0e10  # [B, 1, 1, T]

        resnet, blocks, conv = self.down_blocks[0]
        h = self._transformers(blocks, resnet(h, mask, time), bias)
        skip = h
        h = conv(h * mask)

        for resnet, blocks in self.mid_blocks:
            h = self._transformers(blocks, resnet(h, mask, time), bias)

        resnet, blocks, conv = self.up_blocks[0]
        h = torch.cat([h[:, :, :skip.shape[-1]], skip], dim=1)  # [B, 2c, T]
        h = self._transformers(blocks, resnet(h, mask, time), bias)
        h = conv(h * mask)

        h = self.final_block(h, mask)
        return self.final_proj(h * mask) * mask
