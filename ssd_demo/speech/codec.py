"""The embedded voice's speech tokenizer: k-means over log-mel frames, Griffin-Lim back to audio.

Encoding: 16 kHz audio -> 80-bin log-mel frames (hop 320 = 50 frames per second) -> index of
the nearest of `codebook_size` centroids. Decoding: centroid log-mels -> mel magnitudes ->
linear magnitudes (torchaudio InverseMelScale, least squares) -> waveform (torchaudio
GriffinLim, deterministic start so the same tokens always give the same audio).

Why this design: no pretrained neural codec can be downloaded here, and a k-means codebook
fits in seconds, weighs a few hundred kilobytes and is exactly invertible to its centroids.
Its round-trip distortion is measured by `ssd_demo.measure.mcd` (see docs/benchmarks.md).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torchaudio
from safetensors.torch import load_file, save_file

from ..errors import ModelLoadError

CONFIG_NAME = "codec_config.json"
CODEBOOK_NAME = "codebook.safetensors"


@dataclass(frozen=True)
class CodecConfig:
    sample_rate: int = 16_000
    n_fft: int = 1024
    hop_length: int = 320  # 50 frames (tokens) per second
    n_mels: int = 80
    f_min: float = 0.0
    f_max: float = 8000.0
    codebook_size: int = 1024
    griffin_lim_iters: int = 48
    log_floor: float = 1e-5

    @property
    def frames_per_second(self) -> float:
        return self.sample_rate / self.hop_length


class MelFeatures:
    """Audio <-> log-mel frames (shared by the codec and the MCD metric)."""

    def __init__(self, config: CodecConfig):
        self.config = config
        self._mel = torchaudio.transforms.MelSpectrogram(
            sample_rate=config.sample_rate, n_fft=config.n_fft, hop_length=config.hop_length,
            n_mels=config.n_mels, f_min=config.f_min, f_max=config.f_max, power=1.0, center=True,
        )
        self._inverse_mel = torchaudio.transforms.InverseMelScale(
            n_stft=config.n_fft // 2 + 1, n_mels=config.n_mels, sample_rate=config.sample_rate,
            f_min=config.f_min, f_max=config.f_max,
        )
        self._griffin_lim = torchaudio.transforms.GriffinLim(
            n_fft=config.n_fft, hop_length=config.hop_length, n_iter=config.griffin_lim_iters,
            power=1.0, rand_init=False,
        )

    def log_mel(self, audio: np.ndarray) -> np.ndarray:
        """float32 mono audio -> (frames, n_mels) natural-log mel magnitudes."""
        wave = torch.as_tensor(np.asarray(audio, dtype=np.float32))
        with torch.no_grad():
            mel = self._mel(wave)  # (n_mels, frames)
        return torch.log(mel.clamp_min(self.config.log_floor)).T.contiguous().numpy()

    def invert(self, log_mel: np.ndarray) -> np.ndarray:
        """(frames, n_mels) log-mel -> float32 waveform via least-squares inverse mel + Griffin-Lim."""
        if len(log_mel) == 0:
            return np.zeros(0, dtype=np.float32)
        mel = torch.exp(torch.as_tensor(log_mel, dtype=torch.float32)).T
        with torch.no_grad():
            linear = self._inverse_mel(mel)
            wave = self._griffin_lim(linear)
        audio = wave.numpy().astype(np.float32)
        peak = float(np.abs(audio).max()) if audio.size else 0.0
        return audio / peak * 0.9 if peak > 1.0 else audio


class Codec:
    """Speech tokenizer: audio -> token ids in [0, codebook_size) -> audio."""

    def __init__(self, config: CodecConfig, codebook: np.ndarray):
        codebook = np.asarray(codebook, dtype=np.float32)
        if codebook.shape != (config.codebook_size, config.n_mels):
            raise ModelLoadError(f"codebook shape {codebook.shape} does not match the config "
                             f"({config.codebook_size}, {config.n_mels})")
        self.config = config
        self.codebook = codebook
        self.features = MelFeatures(config)
        self._codebook_t = torch.from_numpy(codebook)

    @property
    def sample_rate(self) -> int:
        return self.config.sample_rate

    def encode_frames(self, log_mel: np.ndarray) -> np.ndarray:
        frames = torch.as_tensor(log_mel, dtype=torch.float32)
        if frames.numel() == 0:
            return np.zeros(0, dtype=np.int64)
        return torch.cdist(frames, self._codebook_t).argmin(dim=1).numpy()

    def encode(self, audio: np.ndarray) -> np.ndarray:
        """Audio at `sample_rate` -> int64 token ids, 50 per second."""
        return self.encode_frames(self.features.log_mel(audio))

    def decode(self, tokens) -> np.ndarray:
        """Token ids -> float32 waveform."""
        ids = np.asarray(tokens, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.config.codebook_size):
            raise ValueError(f"codec token ids must be in [0, {self.config.codebook_size}); got {ids.min()}..{ids.max()}")
        return self.features.invert(self.codebook[ids])

    def save(self, directory: str | Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / CONFIG_NAME).write_text(json.dumps(asdict(self.config), indent=2) + "\n")
        save_file({"codebook": torch.from_numpy(self.codebook)}, str(directory / CODEBOOK_NAME))

    @classmethod
    def load(cls, directory: str | Path) -> "Codec":
        directory = Path(directory)
        config_path = directory / CONFIG_NAME
        if not config_path.exists():
            raise FileNotFoundError(f"no codec found in {directory} (missing {CONFIG_NAME})")
        config = CodecConfig(**json.loads(config_path.read_text()))
        codebook = load_file(str(directory / CODEBOOK_NAME))["codebook"].numpy()
        return cls(config, codebook)


def fit_codec(audios: list[np.ndarray], config: CodecConfig = CodecConfig(), max_frames: int = 200_000,
              seed: int = 0) -> Codec:
    """Fit the k-means codebook on log-mel frames of `audios` (scikit-learn MiniBatchKMeans)."""
    from sklearn.cluster import MiniBatchKMeans  # deferred: only training fits a codebook; the app never does

    features = MelFeatures(config)
    frames = np.concatenate([features.log_mel(a) for a in audios], axis=0)
    if len(frames) < config.codebook_size:
        raise ValueError(f"need at least {config.codebook_size} frames to fit the codebook, got {len(frames)}")
    rng = np.random.default_rng(seed)
    if len(frames) > max_frames:
        frames = frames[rng.choice(len(frames), max_frames, replace=False)]
    kmeans = MiniBatchKMeans(n_clusters=config.codebook_size, batch_size=4096, n_init=1, max_iter=20,
                             random_state=seed, reassignment_ratio=0.01)
    kmeans.fit(frames)
    return Codec(config, kmeans.cluster_centers_.astype(np.float32))


__all__ = ["Codec", "CodecConfig", "MelFeatures", "fit_codec"]
