"""CosyVoice 2's vocoder (HiFT): 80-bin mel frames at 24 kHz, hop 480, to a waveform.

HiFT (HiFTNet, arXiv 2309.09493) is a HiFi-GAN generator with two additions. A neural source filter:
a small network predicts f0 from the mel, and f0 becomes a harmonic-plus-noise excitation at the
sample rate. And an STFT head: the generator does not produce samples but the magnitude and phase
of a short STFT (16-point, hop 4), which an inverse STFT turns into audio. In between, the mel runs
through three transposed-convolution upsamplers (x8, x5, x3) with multi-receptive-field residual
blocks, and at each scale the excitation's own STFT, strided down to that scale, is added in.

    mel [B, 80, N] -> f0 [B, N] -> excitation [B, 1, 480 N] -> STFT [B, 18, 120 N + 1]
    mel -> conv_pre -> (up x8 | up x5 | up x3, each + excitation STFT) -> conv_post -> iSTFT -> [B, 480 N]

Why our own: the released module lives inside a repository whose imports reach far beyond the
vocoder, and draws its excitation noise from the global random generator, so two calls never give
the same audio. This module loads the released `hift.pt` strictly (same parameter names and
shapes) and takes its noise explicitly (`SourceNoise`, or a `torch.Generator`), drawn in the same
order as the reference so that a seeded generator reproduces it; `parity_hift` checks the waveform
against the reference implementation.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.parametrizations import weight_norm

from ...errors import ModelLoadError

#: What the reference loader strips from every key (a HiFi-GAN training checkpoint nests the generator).
CHECKPOINT_PREFIX = "generator."
# Weight norm as `torch.nn.utils.parametrizations` stores it (g, v); the released file uses this layout.
_WN_G, _WN_V = ".parametrizations.weight.original0", ".parametrizations.weight.original1"
# The same tensors as the older `torch.nn.utils.weight_norm` names them.
_LEGACY_G, _LEGACY_V = ".weight_g", ".weight_v"
_SHOWN = 5  # keys listed per kind in a mismatch message


@dataclass(frozen=True)
class HiFTConfig:
    """Hyperparameters of CosyVoice 2's HiFT (the released `hift.pt` needs exactly these)."""

    in_channels: int = 80  # mel bins
    base_channels: int = 512  # width after conv_pre; halved by every upsampler
    nb_harmonics: int = 8  # overtones above f0 in the excitation (9 sines in all)
    sampling_rate: int = 24000
    nsf_alpha: float = 0.1  # amplitude of each sine
    nsf_sigma: float = 0.003  # noise std where voiced (unvoiced: nsf_alpha / 3)
    nsf_voiced_threshold: float = 10.0  # f0 in Hz above which a sample counts as voiced
    upsample_rates: tuple[int, ...] = (8, 5, 3)
    upsample_kernel_sizes: tuple[int, ...] = (16, 11, 7)
    istft_n_fft: int = 16
    istft_hop: int = 4
    resblock_kernel_sizes: tuple[int, ...] = (3, 7, 11)
    resblock_dilations: tuple[tuple[int, ...], ...] = ((1, 3, 5), (1, 3, 5), (1, 3, 5))
    source_resblock_kernel_sizes: tuple[int, ...] = (7, 7, 11)
    source_resblock_dilations: tuple[tuple[int, ...], ...] = ((1, 3, 5), (1, 3, 5), (1, 3, 5))
    lrelu_slope: float = 0.1
    audio_limit: float = 0.99  # the waveform is clamped to [-audio_limit, audio_limit]
    f0_classes: int = 1  # f0 predictor outputs (one: f0 in Hz)
    f0_cond_channels: int = 512  # f0 predictor width
    # How the excitation's phase is accumulated. "frame": per mel frame, then interpolated to the
    # sample rate (what the reference does for every rate but 22050 Hz, and for CosyVoice 2 since
    # mid-2025). "sample": a running sum per sample (the reference at 22050 Hz, i.e. CosyVoice 1,
    # and at every rate in its earlier releases). Both have no weights; only the audio differs.
    source_phase: Literal["frame", "sample"] = "frame"

    def __post_init__(self) -> None:
        stages = len(self.upsample_rates)
        if len(self.upsample_kernel_sizes) != stages:
            raise ValueError("upsample_rates and upsample_kernel_sizes differ in length")
        if len(self.source_resblock_kernel_sizes) != stages or len(self.source_resblock_dilations) != stages:
            raise ValueError("one source residual block per upsampling stage is needed")
        if len(self.resblock_kernel_sizes) != len(self.resblock_dilations):
            raise ValueError("resblock_kernel_sizes and resblock_dilations differ in length")
        if any((k - u) % 2 for u, k in zip(self.upsample_rates, self.upsample_kernel_sizes)):
            raise ValueError("each upsample kernel minus its rate must be even (else lengths drift)")
        if self.source_phase not in ("frame", "sample"):
            raise ValueError(f"source_phase must be 'frame' or 'sample', not {self.source_phase!r}")

    @property
    def hop_length(self) -> int:
        """Waveform samples per mel frame (480 at the defaults: 8 * 5 * 3 * 4)."""
        return math.prod(self.upsample_rates) * self.istft_hop

    @property
    def n_sines(self) -> int:
        return self.nb_harmonics + 1

    @property
    def n_bins(self) -> int:
        """Frequency bins of the head's STFT."""
        return self.istft_n_fft // 2 + 1


def _normed(conv: nn.Module) -> nn.Module:
    # Parametrized weight norm, as the released weights were trained and saved: weight = g * v / |v|.
    return weight_norm(conv)


class Snake(nn.Module):
    """x + sin^2(alpha x) / alpha per channel: a periodic nonlinearity that suits waveforms (BigVGAN)."""

    def __init__(self, channels: int):
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [B, C, T] -> [B, C, T]
        alpha = self.alpha[None, :, None]
        return x + (1.0 / (alpha + 1e-9)) * torch.sin(x * alpha).pow(2)


class SnakeResBlock(nn.Module):
    """Residual pairs (dilated conv, plain conv), Snake before each conv; length-preserving."""

    def __init__(self, channels: int, kernel_size: int, dilations: tuple[int, ...]):
        super().__init__()

        def conv(dilation: int) -> nn.Module:
            padding = dilation * (kernel_size - 1) // 2  # "same" length
            return _normed(nn.Conv1d(channels, channels, kernel_size, dilation=dilation, padding=padding))

        self.convs1 = nn.ModuleList(conv(d) for d in dilations)
        self.convs2 = nn.ModuleList(conv(1) for _ in dilations)
        self.activations1 = nn.ModuleList(Snake(channels) for _ in dilations)
        self.activations2 = nn.ModuleList(Snake(channels) for _ in dilations)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [B, C, T] -> [B, C, T]
        for conv1, conv2, act1, act2 in zip(self.convs1, self.convs2, self.activations1, self.activations2):
            x = x + conv2(act2(conv1(act1(x))))
        return x


class F0Predictor(nn.Module):
    """Mel to f0 in Hz: five width-3 convolutions with ELU, then a per-frame linear read-out."""

    def __init__(self, in_channels: int, channels: int, classes: int):
        super().__init__()
        layers: list[nn.Module] = []
        for i in range(5):
            layers += [_normed(nn.Conv1d(in_channels if i == 0 else channels, channels, 3, padding=1)), nn.ELU()]
        self.condnet = nn.Sequential(*layers)
        self.classifier = nn.Linear(channels, classes)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        # mel: [B, in, N] -> f0 [B, N] (abs: f0 is a frequency, never negative)
        hidden = self.condnet(mel).transpose(1, 2)  # [B, N, C]
        return self.classifier(hidden).squeeze(-1).abs()


@dataclass
class SourceNoise:
    """The randomness of one excitation, given explicitly so that audio can be reproduced.

    `SourceNoise.draw` draws it as the reference does (initial phases, then the additive noise, each
    filled the same way), so a generator seeded like the reference's global one gives the same audio.
    """

    initial_phase: torch.Tensor  # [B, S]: start phase of each sine in cycles, [0, 1); the fundamental's is 0
    additive: torch.Tensor  # [B, S, T]: standard normal, scaled by the voiced/unvoiced noise level

    @classmethod
    def draw(cls, batch: int, sines: int, samples: int, *, generator: torch.Generator | None = None,
             device: torch.device | str | None = None, dtype: torch.dtype = torch.float32,
             source_phase: Literal["frame", "sample"] = "frame") -> "SourceNoise":
        phase = torch.rand(batch, sines, generator=generator, device=device, dtype=dtype)
        phase[:, 0] = 0  # the fundamental starts at phase 0, only the overtones are randomised
        if source_phase == "frame":
            # The reference's frame-phase path fills a transposed ([B, T, S]) view of [B, S, T] memory.
            # torch fills such a view one element at a time, in memory order, and a contiguous tensor
            # with a vectorised routine that gives other numbers from the same seed: fill it the same way.
            additive = torch.empty(batch, sines, samples, device=device, dtype=dtype).transpose(1, 2)
            additive = additive.normal_(generator=generator).transpose(1, 2)
        else:
            additive = torch.randn(batch, sines, samples, generator=generator, device=device, dtype=dtype)
        return cls(phase, additive)


class HarmonicSource(nn.Module):
    """Neural source filter: f0 at the sample rate -> a single excitation channel.

    Nine sines (f0 and its overtones) where voiced, Gaussian noise everywhere (weak where voiced,
    stronger where not), merged by a learned linear layer and a tanh.
    """

    def __init__(self, config: HiFTConfig):
        super().__init__()
        self.config = config
        self.l_linear = nn.Linear(config.n_sines, 1)
        self.register_buffer("harmonic_numbers", torch.arange(1, config.n_sines + 1, dtype=torch.float32),
                             persistent=False)

    def sines(self, f0: torch.Tensor, initial_phase: torch.Tensor) -> torch.Tensor:
        """f0 [B, T] per sample, start phases [B, S] in cycles -> nsf_alpha * sin(phase) [B, S, T]."""
        config = self.config
        frequencies = f0[:, None, :] * self.harmonic_numbers[None, :, None]  # [B, S, T] in Hz
        if config.source_phase == "sample":
            # phase = 2 pi * running sum of cycles per sample, wrapped to one turn before the sine
            cycles = frequencies / config.sampling_rate
            phase = 2 * math.pi * (torch.cumsum(cycles, dim=-1) % 1)
            start = -math.pi + initial_phase * (2 * math.pi)  # uniform in [-pi, pi), fundamental excluded
            start = torch.where(torch.arange(config.n_sines, device=f0.device) == 0, 0.0, start)
            return config.nsf_alpha * torch.sin(phase + start[:, :, None])
        # "frame": sum the cycles per frame, not per sample, then interpolate the phase back to the
        # sample rate, so the phase is piecewise linear between frame centres. The start phase is
        # added to the first sample; at hop > 1 the linear resampling never reads that sample, so it
        # has no audible effect, but it stays to follow the reference exactly.
        hop = config.hop_length
        cycles = (frequencies / config.sampling_rate) % 1  # [B, S, T] cycles per sample
        cycles[:, :, 0] = cycles[:, :, 0] + initial_phase
        per_frame = F.interpolate(cycles, scale_factor=1 / hop, mode="linear")  # [B, S, N] cycles per sample
        phase = torch.cumsum(per_frame, dim=-1) * 2 * math.pi  # [B, S, N], in units of one sample per frame
        phase = F.interpolate(phase * hop, scale_factor=hop, mode="linear")  # x hop samples a frame: [B, S, T]
        return torch.sin(phase) * config.nsf_alpha

    def forward(self, f0: torch.Tensor, noise: SourceNoise) -> torch.Tensor:
        # f0: [B, T] in Hz per sample -> excitation [B, 1, T]
        config = self.config
        voiced = (f0 > config.nsf_voiced_threshold).to(f0.dtype)[:, None, :]  # [B, 1, T]
        noise_level = voiced * config.nsf_sigma + (1 - voiced) * config.nsf_alpha / 3
        harmonics = self.sines(f0, noise.initial_phase) * voiced + noise_level * noise.additive  # [B, S, T]
        return torch.tanh(self.l_linear(harmonics.transpose(1, 2))).transpose(1, 2)


class HiFTOutput(NamedTuple):
    waveform: torch.Tensor  # [B, T], T = N * hop_length, within +-audio_limit
    source: torch.Tensor  # [B, 1, T]: the excitation (keep its tail as the next chunk's cache_source)
    f0: torch.Tensor  # [B, N] in Hz


class HiFTVocoder(nn.Module):
    """The HiFT generator; attribute names follow the released state dict (`load_hift`)."""

    def __init__(self, config: HiFTConfig = HiFTConfig()):
        super().__init__()
        self.config = config
        c = config
        self.m_source = HarmonicSource(c)
        self.conv_pre = _normed(nn.Conv1d(c.in_channels, c.base_channels, 7, padding=3))

        widths = [c.base_channels // 2 ** (i + 1) for i in range(len(c.upsample_rates))]  # after each upsampler
        self.ups = nn.ModuleList(
            _normed(nn.ConvTranspose1d(c.base_channels // 2**i, width, k, u, padding=(k - u) // 2))
            for i, (width, u, k) in enumerate(zip(widths, c.upsample_rates, c.upsample_kernel_sizes))
        )

        # The excitation's STFT runs at the final frame rate; stage i runs slower by the product of the
        # rates after it, so a strided convolution brings the STFT down to each stage's length.
        stft_channels = 2 * c.n_bins  # real and imaginary parts
        self.source_downs = nn.ModuleList()
        for i, width in enumerate(widths):
            stride = math.prod(c.upsample_rates[i + 1:])
            self.source_downs.append(
                nn.Conv1d(stft_channels, width, 1) if stride == 1
                else nn.Conv1d(stft_channels, width, 2 * stride, stride, padding=stride // 2)
            )
        self.source_resblocks = nn.ModuleList(
            SnakeResBlock(width, k, d)
            for width, k, d in zip(widths, c.source_resblock_kernel_sizes, c.source_resblock_dilations)
        )
        # Multi-receptive-field fusion: per stage, one block per kernel size, averaged.
        self.resblocks = nn.ModuleList(
            SnakeResBlock(width, k, d)
            for width in widths for k, d in zip(c.resblock_kernel_sizes, c.resblock_dilations)
        )
        self.conv_post = _normed(nn.Conv1d(widths[-1], stft_channels, 7, padding=3))
        # Periodic Hann, computed in float64 like the reference's window before rounding to float32.
        window = torch.hann_window(c.istft_n_fft, periodic=True, dtype=torch.float64).to(torch.float32)
        self.register_buffer("stft_window", window, persistent=False)
        self.f0_predictor = F0Predictor(c.in_channels, c.f0_cond_channels, c.f0_classes)

    def excitation(self, f0: torch.Tensor, noise: SourceNoise) -> torch.Tensor:
        """f0 [B, N] per frame -> excitation [B, 1, N * hop_length]."""
        f0_samples = f0.repeat_interleave(self.config.hop_length, dim=-1)  # nearest-neighbour to [B, T]
        return self.m_source(f0_samples, noise)

    def decode(self, mel: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
        """mel [B, in, N] and excitation [B, 1, T] -> waveform [B, T]."""
        c = self.config
        spec = torch.stft(source.squeeze(1), c.istft_n_fft, c.istft_hop, c.istft_n_fft, window=self.stft_window,
                          return_complex=True)  # [B, bins, T / hop + 1]
        source_spec = torch.cat([spec.real, spec.imag], dim=1)  # [B, 2 bins, T / hop + 1]

        x = self.conv_pre(mel)  # [B, base, N]
        kernels = len(c.resblock_kernel_sizes)
        for i, (up, down, source_block) in enumerate(zip(self.ups, self.source_downs, self.source_resblocks)):
            x = up(F.leaky_relu(x, c.lrelu_slope))  # [B, width_i, N * rates[0..i]]
            if i == len(self.ups) - 1:
                x = F.pad(x, (1, 0), mode="reflect")  # one frame more, to the STFT's T / hop + 1 frames
            x = x + source_block(down(source_spec))
            blocks = self.resblocks[i * kernels:(i + 1) * kernels]
            total = blocks[0](x)
            for block in blocks[1:]:
                total = total + block(x)
            x = total / kernels

        # The released weights were trained with the default slope (0.01) here, not lrelu_slope.
        x = self.conv_post(F.leaky_relu(x))  # [B, 2 bins, T / hop + 1]
        magnitude = torch.exp(x[:, :c.n_bins]).clamp(max=100.0)  # capped so a wild frame cannot explode
        phase = torch.sin(x[:, c.n_bins:])  # the head's phase is squashed to [-1, 1] radians, as trained
        spec = torch.complex(magnitude * torch.cos(phase), magnitude * torch.sin(phase))
        audio = torch.istft(spec, c.istft_n_fft, c.istft_hop, c.istft_n_fft, window=self.stft_window)  # [B, T]
        return audio.clamp(-c.audio_limit, c.audio_limit)

    def forward(self, mel: torch.Tensor, cache_source: torch.Tensor | None = None, *,
                noise: SourceNoise | None = None, generator: torch.Generator | None = None) -> HiFTOutput:
        """mel [B, in, N] -> waveform [B, N * hop_length], with its excitation and f0.

        `cache_source` [B, 1, L] replaces the first L samples of the excitation: in streaming, the
        previous chunk's excitation tail, so the overlap is voiced with the same phase (no glitch).
        Noise: `noise` if given, else drawn from `generator` (else from torch's global generator).
        """
        f0 = self.f0_predictor(mel)  # [B, N]
        samples = mel.shape[-1] * self.config.hop_length
        if noise is None:
            noise = SourceNoise.draw(mel.shape[0], self.config.n_sines, samples, generator=generator,
                                     device=mel.device, dtype=mel.dtype, source_phase=self.config.source_phase)
        elif noise.additive.shape != (mel.shape[0], self.config.n_sines, samples):
            raise ValueError(f"noise.additive has shape {tuple(noise.additive.shape)}, "
                             f"expected {(mel.shape[0], self.config.n_sines, samples)}")
        source = self.excitation(f0, noise)  # [B, 1, T]
        if cache_source is not None and cache_source.shape[-1] > 0:
            source[:, :, :cache_source.shape[-1]] = cache_source
        return HiFTOutput(self.decode(mel, source), source, f0)

    @torch.inference_mode()
    def inference(self, mel: torch.Tensor, cache_source: torch.Tensor | None = None, *,
                  noise: SourceNoise | None = None,
                  generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The reference's call: mel [B, in, N] -> (waveform [B, T], excitation [B, 1, T])."""
        out = self(mel, cache_source, noise=noise, generator=generator)
        return out.waveform, out.source


def normalize_state_dict(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The file's keys in our module's layout: a leading `generator.` dropped (a HiFi-GAN training
    checkpoint), and weight norm saved by the older API (`weight_g`, `weight_v`) renamed to the
    parametrized names (the same tensors: g is [out, 1, 1], v the direction, both along dim 0)."""
    out = {}
    for key, value in state.items():
        if key.startswith(CHECKPOINT_PREFIX):
            key = key[len(CHECKPOINT_PREFIX):]
        if key.endswith(_LEGACY_G):
            key = key[:-len(_LEGACY_G)] + _WN_G
        elif key.endswith(_LEGACY_V):
            key = key[:-len(_LEGACY_V)] + _WN_V
        out[key] = value
    return out


def check_state_dict(model: nn.Module, state: Mapping[str, torch.Tensor]) -> None:
    """Raise ValueError naming the first few missing, unexpected and mis-shaped keys, if any."""
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    reshaped = [f"{k} (file {tuple(state[k].shape)}, model {expected[k]})"
                for k in expected if k in state and tuple(state[k].shape) != expected[k]]
    if not (missing or unexpected or reshaped):
        return
    parts = []
    for label, keys in (("missing", missing), ("unexpected", unexpected), ("with another shape", reshaped)):
        if keys:
            more = f", and {len(keys) - _SHOWN} more" if len(keys) > _SHOWN else ""
            parts.append(f"{len(keys)} {label}: {', '.join(keys[:_SHOWN])}{more}")
    raise ModelLoadError("HiFT weights do not match the vocoder (is the config right?): " + "; ".join(parts))


def load_hift(source: str | os.PathLike | Mapping[str, torch.Tensor], config: HiFTConfig = HiFTConfig(),
              device: torch.device | str = "cpu") -> HiFTVocoder:
    """The vocoder with the released weights (`hift.pt`, or a state dict), loaded strictly, in eval mode."""
    if isinstance(source, Mapping):
        state = source
    else:
        state = torch.load(source, map_location="cpu", weights_only=True)
    state = normalize_state_dict(state)
    model = HiFTVocoder(config)
    check_state_dict(model, state)
    model.load_state_dict(state, strict=True)
    return model.to(device).eval()
