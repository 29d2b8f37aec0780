"""CosyVoice 2's flow model (`flow.pt`): speech tokens -> 80-bin mel frames, our own implementation.

CosyVoice 2 speaks in two stages: the language model emits speech tokens (6561 FSQ ids, 25 per
second) and this model turns them into a mel spectrogram (24 kHz, hop 480: 2 frames per token)
for the vocoder. It is a conditional flow-matching model:

    mu   = encoder_proj(encoder(embed(prompt tokens + tokens)))   [1, 80, 2 * (P + N)]
    spks = Linear(normalize(speaker x-vector))                    [1, 80]
    cond = prompt mel on the prompt's frames, zeros after           [1, 80, 2 * (P + N)]
    x_0  = noise;  x_{k+1} = x_k + dt_k * v(x_k, t_k)   (10 Euler steps, cosine-warped times)
    v    = 1.7 * estimator(x, mu, spks, cond, t) - 0.7 * estimator(x, 0, 0, 0, t)   (guidance 0.7)
    mel  = x_10 without the prompt's frames                       [1, 80, 2N]

The prompt's tokens and mel are how the voice is cloned: the estimator sees the prompt's real mel
as `cond` and continues in that voice. The generated part is returned alone, as the official
`inference` does.

Noise: the official sampler does not draw fresh noise per call. At construction it seeds torch with
0 and keeps one fixed [1, 80, 15000] standard-normal tensor (300 s of frames), then uses its first
T frames every time, so the same tokens always give the same mel. `official_noise` rebuilds that
tensor bit for bit (the CPU generator seeded 0), and it is the default here; a tensor or a
`torch.Generator` can be passed instead.

Left out: the streaming path (chunk attention masks in encoder and estimator, look-ahead `context`
tokens for unfinished utterances), training, TensorRT. With `finalize=True, streaming=False` (the
official non-streaming synthesis) those masks are all-true and the look-ahead pads with zeros, which
is exactly what runs here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ...errors import ModelLoadError
from .flow_decoder import CausalConditionalDecoder, EstimatorConfig
from .flow_encoder import EncoderConfig, UpsampleConformerEncoder


@dataclass(frozen=True)
class CFMConfig:
    """The sampler (CausalConditionalCFM at inference)."""

    n_timesteps: int = 10
    cfg_rate: float = 0.7  # `inference_cfg_rate`: v = (1 + r) v_cond - r v_uncond
    t_scheduler: str = "cosine"  # t_k = 1 - cos(k / n * pi / 2); "linear" keeps k / n
    temperature: float = 1.0  # noise scale
    noise_seed: int = 0  # the official seeds torch with 0 right before drawing its noise
    noise_frames: int = 50 * 300  # length of the fixed noise: the longest mel it can make


@dataclass(frozen=True)
class FlowConfig:
    """CausalMaskedDiffWithXvec as CosyVoice 2's yaml builds it."""

    vocab_size: int = 6561
    input_size: int = 512  # token embedding width
    n_mels: int = 80  # `output_size`
    spk_embed_dim: int = 192
    token_mel_ratio: int = 2
    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    estimator: EstimatorConfig = field(default_factory=EstimatorConfig)
    cfm: CFMConfig = field(default_factory=CFMConfig)

    def __post_init__(self):
        if self.encoder.input_size != self.input_size:
            raise ValueError(f"encoder.input_size {self.encoder.input_size} != input_size {self.input_size}")
        if self.estimator.n_mels != self.n_mels:
            raise ValueError(f"estimator.n_mels {self.estimator.n_mels} != n_mels {self.n_mels}")
        if self.encoder.upsample != self.token_mel_ratio:
            raise ValueError(f"encoder.upsample {self.encoder.upsample} != token_mel_ratio {self.token_mel_ratio}")
        if self.cfm.t_scheduler not in ("cosine", "linear"):
            raise ValueError(f"unknown t_scheduler {self.cfm.t_scheduler!r}")


def official_noise(n_mels: int = 80, frames: int = 50 * 300, seed: int = 0) -> torch.Tensor:
    """The official sampler's fixed noise, [1, n_mels, frames] (equal to it for the defaults)."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn((1, n_mels, frames), generator=generator)


class FlowMatchingSampler(nn.Module):
    """Euler integration of the estimator's velocity with classifier-free guidance.

    Holds the estimator under the checkpoint's name (`decoder.estimator.*`). The fixed noise is a
    plain attribute, not a buffer, so the state dict stays exactly the official one.
    """

    def __init__(self, cfm: CFMConfig, estimator: EstimatorConfig):
        super().__init__()
        self.cfm = cfm
        self.estimator = CausalConditionalDecoder(estimator)
        self._fixed_noise: torch.Tensor | None = None

    def fixed_noise(self) -> torch.Tensor:
        if self._fixed_noise is None:
            n_mels = self.estimator.config.n_mels
            self._fixed_noise = official_noise(n_mels, self.cfm.noise_frames, self.cfm.noise_seed)
        return self._fixed_noise

    def initial_noise(self, frames: int, like: torch.Tensor,
                      noise: torch.Tensor | torch.Generator | None) -> torch.Tensor:
        """x_0 [1, n_mels, frames]: the fixed noise, a given tensor's first frames, or a fresh draw."""
        n_mels = self.estimator.config.n_mels
        if isinstance(noise, torch.Generator):
            z = torch.randn((1, n_mels, frames), generator=noise, device=noise.device)
        else:
            source = self.fixed_noise() if noise is None else noise
            if source.dim() != 3 or source.shape[0] != 1 or source.shape[1] != n_mels or source.shape[2] < frames:
                raise ValueError(f"noise must be [1, {n_mels}, >= {frames}] for {frames} frames, got "
                                 f"{list(source.shape)}" + (" (the fixed noise covers "
                                 f"{self.cfm.noise_frames} frames; pass a torch.Generator for longer)"
                                 if noise is None else ""))
            z = source[:, :, :frames]
        return z.to(device=like.device, dtype=like.dtype) * self.cfm.temperature

    def time_grid(self, n_timesteps: int, like: torch.Tensor) -> torch.Tensor:
        t = torch.linspace(0, 1, n_timesteps + 1, device=like.device, dtype=like.dtype)
        return 1 - torch.cos(t * 0.5 * torch.pi) if self.cfm.t_scheduler == "cosine" else t

    def forward(self, x: torch.Tensor, mask: torch.Tensor, mu: torch.Tensor, spks: torch.Tensor,
                cond: torch.Tensor, n_timesteps: int) -> torch.Tensor:
        """x (the noise) [B, n_mels, T], mask [B, 1, T], mu/cond [B, n_mels, T], spks [B, n_mels] -> mel like x."""
        rate = self.cfm.cfg_rate
        batch = x.shape[0]
        if rate != 0:
            # One estimator call for both branches: the second half sees no mu, speaker or prompt.
            mask, mu = torch.cat([mask, mask]), torch.cat([mu, torch.zeros_like(mu)])
            spks, cond = torch.cat([spks, torch.zeros_like(spks)]), torch.cat([cond, torch.zeros_like(cond)])
        grid = self.time_grid(n_timesteps, x)
        # Time advances by t += dt and the next dt is measured from that running t, as the official does
        # (so the float rounding of the step sizes matches too).
        t, dt = grid[:1], grid[1] - grid[0]
        for step in range(1, n_timesteps + 1):
            x_in = torch.cat([x, x]) if rate != 0 else x
            velocity = self.estimator(x_in, mask, mu, t.expand(x_in.shape[0]), spks, cond)
            if rate != 0:
                v_cond, v_free = velocity[:batch], velocity[batch:]
                velocity = (1.0 + rate) * v_cond - rate * v_free
            x = x + dt * velocity
            t = t + dt
            if step < n_timesteps:
                dt = grid[step + 1] - t
        return x


def _as_tokens(tokens: torch.Tensor | Sequence[int], device: torch.device) -> torch.Tensor:
    """Token ids as [1, N] int64 on `device`."""
    ids = torch.as_tensor(tokens, dtype=torch.long, device=device)
    if ids.dim() == 2 and ids.shape[0] == 1:
        return ids
    if ids.dim() != 1:
        raise ValueError(f"tokens must be [N] or [1, N], got {list(ids.shape)}")
    return ids.unsqueeze(0)


class CosyVoice2Flow(nn.Module):
    """Token embedding + x-vector projection + upsampling encoder + flow-matching sampler."""

    def __init__(self, config: FlowConfig = FlowConfig()):
        super().__init__()
        self.config = config
        self.input_embedding = nn.Embedding(config.vocab_size, config.input_size)
        self.spk_embed_affine_layer = nn.Linear(config.spk_embed_dim, config.n_mels)
        self.encoder = UpsampleConformerEncoder(config.encoder)
        self.encoder_proj = nn.Linear(config.encoder.d_model, config.n_mels)
        self.decoder = FlowMatchingSampler(config.cfm, config.estimator)

    def encode(self, tokens: torch.Tensor) -> torch.Tensor:
        """Token ids [1, N] -> mu [1, n_mels, ratio * N] (negative ids read as 0, as the official clamps)."""
        h = self.encoder(self.input_embedding(tokens.clamp(min=0)))  # [1, ratio*N, d_model]
        return self.encoder_proj(h).transpose(1, 2)

    @torch.inference_mode()
    def inference(self, tokens: torch.Tensor | Sequence[int], prompt_tokens: torch.Tensor | Sequence[int],
                  prompt_mel: torch.Tensor, speaker_embedding: torch.Tensor, n_timesteps: int | None = None,
                  noise: torch.Tensor | torch.Generator | None = None) -> torch.Tensor:
        """Mel for the generated tokens only: [1, n_mels, ratio * len(tokens)], float32.

        tokens, prompt_tokens: [N] / [1, N] speech-token ids (the prompt may be empty).
        prompt_mel: the prompt clip's mel, frames first as CosyVoice's front end makes it:
            [1, ratio * P, n_mels] (or without the batch axis). Its frames must pair with the prompt
            tokens (the official front end trims both to that).
        speaker_embedding: the 192-d x-vector, [1, 192] or [192] (normalised here).
        n_timesteps: Euler steps (config default 10).
        noise: None for the official fixed noise; a [1, n_mels, >= frames] tensor (its first frames
            are used, frames covering prompt + generated); or a torch.Generator for a fresh draw.
        """
        config = self.config
        weight = self.spk_embed_affine_layer.weight
        device, dtype = weight.device, weight.dtype
        tokens, prompt_tokens = _as_tokens(tokens, device), _as_tokens(prompt_tokens, device)
        prompt_mel = prompt_mel.to(device=device, dtype=dtype)
        if prompt_mel.dim() == 2:
            prompt_mel = prompt_mel.unsqueeze(0)
        prompt_frames = config.token_mel_ratio * prompt_tokens.shape[1]
        if prompt_mel.dim() != 3 or prompt_mel.shape[0] != 1 or prompt_mel.shape[2] != config.n_mels:
            raise ValueError(f"prompt_mel must be [1, frames, {config.n_mels}], got {list(prompt_mel.shape)}")
        if prompt_mel.shape[1] != prompt_frames:
            raise ValueError(f"prompt_mel has {prompt_mel.shape[1]} frames but {prompt_tokens.shape[1]} prompt tokens "
                             f"make {prompt_frames}: trim both to min(frames // {config.token_mel_ratio}, tokens)")
        spks = speaker_embedding.to(device=device, dtype=dtype).reshape(1, -1)
        spks = self.spk_embed_affine_layer(F.normalize(spks, dim=1))  # [1, n_mels]

        mu = self.encode(torch.cat([prompt_tokens, tokens], dim=1))  # [1, n_mels, T]
        frames = mu.shape[2]
        cond = torch.zeros_like(mu)
        cond[:, :, :prompt_frames] = prompt_mel.transpose(1, 2)
        mask = torch.ones(1, 1, frames, device=device, dtype=dtype)
        x0 = self.decoder.initial_noise(frames, mu, noise)
        steps = config.cfm.n_timesteps if n_timesteps is None else n_timesteps
        mel = self.decoder(x0, mask, mu, spks, cond, steps)
        return mel[:, :, prompt_frames:].float()


def check_state_dict(model: nn.Module, state: Mapping[str, torch.Tensor], shown: int = 8) -> None:
    """Raise ValueError naming the first missing / unexpected / mis-shaped keys, if any."""
    expected = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    missing = [name for name in expected if name not in state]
    unexpected = [name for name in state if name not in expected]
    misshaped = [f"{name} {tuple(state[name].shape)} (want {expected[name]})"
                 for name in expected if name in state and tuple(state[name].shape) != expected[name]]
    problems = []
    for label, names in (("missing", missing), ("unexpected", unexpected), ("wrong shape", misshaped)):
        if names:
            more = f" ... and {len(names) - shown} more" if len(names) > shown else ""
            problems.append(f"{len(names)} {label}: " + ", ".join(names[:shown]) + more)
    if problems:
        raise ModelLoadError("flow state dict does not match CosyVoice2Flow: " + "; ".join(problems))


def load_flow(path_or_state_dict: str | Path | Mapping[str, torch.Tensor], config: FlowConfig = FlowConfig(),
              device: str | torch.device = "cpu", dtype: torch.dtype | None = None) -> CosyVoice2Flow:
    """Build the model and load `flow.pt` (or a state dict) strictly; returns it in eval mode."""
    if isinstance(path_or_state_dict, Mapping):
        state = path_or_state_dict
    else:
        state = torch.load(path_or_state_dict, map_location="cpu", weights_only=True)
    with torch.device("meta"):
        model = CosyVoice2Flow(config)
    check_state_dict(model, state)
    model.load_state_dict(state, strict=True, assign=True)
    return model.to(device=device, dtype=dtype).eval()
