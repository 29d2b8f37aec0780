"""The embedded voice's codec: nearest centroids of a neural voice's latent frames, and its own decoder.

The teacher voice (Piper's en_US-joe-medium, a VITS model) turns phonemes into a prior latent sequence z_p
(192 channels, one frame per 256 samples at 22,050 Hz, about 86 frames a second: each phoneme's mean m_p,
repeated for its duration, plus scaled noise), its flow turns z_p into the latent z, and its decoder turns z
into audio. A token is the index of the nearest of `codebook_size` k-means centroids of one of two latents
(`LatentCodecConfig.latent`), and decoding runs the centroids of a token sequence through the part of the
teacher's ONNX graph after that latent (`training.teacher.extract_decoder`), with onnxruntime:
- "prior": centroids of m_p, decoded by the flow and the decoder. A frame's code depends on its phoneme in
  context, not on the frames around it (the flow makes them a coherent z), so a language model that picks a
  neighbouring centroid of the right phoneme still says the word: the embedded voice's codec;
- "z": centroids of z, decoded by the decoder alone (a smaller graph; a code must also fit its neighbours'
  spectral trajectory, which a small language model sampling frame by frame failed to keep: docs/benchmarks.md).

With `symbols` > 0 a code is relative to the phoneme symbol being said: each symbol has a codebook of its own
(`codebook_size` centroids of that symbol's frames), stored as one table of `symbols` x `codebook_size` rows, so
that whatever code a language model picks, it is a sound of the right phoneme (`encode_latents(..., symbols)`
gives codes in [0, codebook_size); `decode` takes rows of the whole table, `symbol * codebook_size + code`).

Streaming: the decoder is a stack of convolutions, so a frame's samples depend on a few frames either side.
`CodecWindows` decodes windows of frames with left context and a short lookahead and cross-fades the
joins (`speech.streaming.decode_windows`); tests bound the difference from a whole-clip decode.
"""

from __future__ import annotations

import json
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..errors import ModelLoadError

CONFIG_NAME = "codec_config.json"
CODEBOOK_NAME = "codebook.npy"
DECODER_NAME = "decoder.onnx"
#: The decoder graph's input and output tensors (names from the teacher's export).
DECODER_INPUT = "/Mul_7_output_0"
DECODER_OUTPUT = "/dec/Tanh_output_0"
#: The flow's input on the prior side (z_p) and the frame mask it multiplies by (all ones for one clip).
PRIOR_INPUT = "/Add_output_0"
PRIOR_MASK = "/Cast_2_output_0"
#: latent kind -> (the graph's input tensor, its frame-mask input or None)
LATENT_INPUTS = {"prior": (PRIOR_INPUT, PRIOR_MASK), "z": (DECODER_INPUT, None)}


@dataclass(frozen=True)
class LatentCodecConfig:
    sample_rate: int = 22_050
    hop_length: int = 256  # samples per latent frame (token)
    latent_dim: int = 192
    codebook_size: int = 1024
    kind: str = "latent"
    latent: str = "z"  # what the codes quantize: "prior" (z_p, decoded by flow + decoder) or "z" (see above)
    symbols: int = 0  # phoneme symbols with a codebook each (0: one codebook for every frame; see above)

    @property
    def rows(self) -> int:
        """Rows of the codebook table: `decode` takes ids in [0, rows)."""
        return self.codebook_size * max(self.symbols, 1)

    def __post_init__(self) -> None:
        if self.latent not in LATENT_INPUTS:
            raise ModelLoadError(f"unknown codec latent {self.latent!r}; expected one of {sorted(LATENT_INPUTS)}")

    @property
    def frames_per_second(self) -> float:
        return self.sample_rate / self.hop_length


class LatentCodec:
    """Latent frames -> token ids in [0, codebook_size) -> audio, through the teacher's decoder."""

    def __init__(self, config: LatentCodecConfig, codebook: np.ndarray, decoder_path: str | Path, threads: int = 1):
        codebook = np.asarray(codebook, dtype=np.float32)
        if codebook.shape != (config.rows, config.latent_dim):
            raise ModelLoadError(f"codebook shape {codebook.shape} does not match the codec config "
                                 f"({config.rows}, {config.latent_dim})")
        if not Path(decoder_path).is_file():
            raise ModelLoadError(f"no codec decoder at {decoder_path}")
        self.config = config
        self.codebook = codebook
        self.decoder_path = Path(decoder_path)
        self._threads = threads
        self._session = None
        self._lock = threading.Lock()  # one onnxruntime session, built on first use, shared by threads

    @property
    def sample_rate(self) -> int:
        return self.config.sample_rate

    @property
    def hop_length(self) -> int:
        return self.config.hop_length

    def _decoder(self):
        with self._lock:
            if self._session is None:
                import onnxruntime as ort  # deferred: importing the codec should not start a runtime

                options = ort.SessionOptions()
                options.intra_op_num_threads = self._threads
                options.inter_op_num_threads = 1
                options.log_severity_level = 3
                self._session = ort.InferenceSession(str(self.decoder_path), options, providers=["CPUExecutionProvider"])
            return self._session

    def encode_latents(self, latents: np.ndarray, symbols: np.ndarray | None = None) -> np.ndarray:
        """[frames, latent_dim] -> int64 codes in [0, codebook_size): each frame's nearest centroid (squared
        Euclidean distance), among its symbol's (`symbols`, one per frame) when the codes are relative to one."""
        z = np.asarray(latents, dtype=np.float32)
        if z.size == 0:
            return np.zeros(0, dtype=np.int64)
        if not self.config.symbols:
            return nearest(z, self.codebook)
        if symbols is None or len(symbols) != len(z):
            raise ValueError("this codec's codes are relative to a phoneme symbol: give one symbol per frame")
        codes = np.zeros(len(z), dtype=np.int64)
        size = self.config.codebook_size
        for symbol in np.unique(symbols):
            frames = symbols == symbol
            codes[frames] = nearest(z[frames], self.codebook[symbol * size : (symbol + 1) * size])
        return codes

    def decode_latents(self, latents: np.ndarray) -> np.ndarray:
        """[frames, latent_dim] -> float32 waveform of frames * hop_length samples."""
        if len(latents) == 0:
            return np.zeros(0, dtype=np.float32)
        z = np.ascontiguousarray(np.asarray(latents, dtype=np.float32).T[None])  # [1, latent_dim, frames]
        latent_input, mask_input = LATENT_INPUTS[self.config.latent]
        feeds = {latent_input: z}
        if mask_input is not None:
            feeds[mask_input] = np.ones((1, 1, z.shape[2]), dtype=np.float32)
        audio = self._decoder().run([DECODER_OUTPUT], feeds)[0]
        return np.clip(audio.reshape(-1), -1.0, 1.0).astype(np.float32)

    def decode(self, tokens, context=()) -> np.ndarray:
        """Token ids -> float32 waveform; `context` tokens are decoded before them and their samples cut off."""
        ids = np.asarray([*context, *tokens], dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.config.rows):
            raise ValueError(f"codec token ids must be in [0, {self.config.rows}); got {ids.min()}..{ids.max()}")
        if not len(tokens):
            return np.zeros(0, dtype=np.float32)
        return self.decode_latents(self.codebook[ids])[len(context) * self.hop_length:]

    def save(self, directory: str | Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / CONFIG_NAME).write_text(json.dumps(asdict(self.config), indent=2) + "\n")
        np.save(directory / CODEBOOK_NAME, self.codebook.astype(np.float32))
        if self.decoder_path.resolve() != (directory / DECODER_NAME).resolve():
            (directory / DECODER_NAME).write_bytes(self.decoder_path.read_bytes())

    @classmethod
    def load(cls, directory: str | Path, threads: int = 1) -> "LatentCodec":
        directory = Path(directory)
        config_path = directory / CONFIG_NAME
        if not config_path.exists():
            raise FileNotFoundError(f"no codec found in {directory} (missing {CONFIG_NAME})")
        config = LatentCodecConfig(**json.loads(config_path.read_text()))
        return cls(config, np.load(directory / CODEBOOK_NAME), directory / DECODER_NAME, threads=threads)


def nearest(latents: np.ndarray, codebook: np.ndarray) -> np.ndarray:
    """Each frame's nearest row of `codebook` (squared Euclidean distance), as int64."""
    distances = (latents * latents).sum(1, keepdims=True) - 2.0 * latents @ codebook.T + (codebook ** 2).sum(1)
    return distances.argmin(axis=1).astype(np.int64)


def fit_symbol_codebooks(latents: np.ndarray, symbols: np.ndarray, n_symbols: int, codebook_size: int,
                         seed: int = 0) -> np.ndarray:
    """[n_symbols * codebook_size, latent_dim]: k-means centroids of each symbol's frames (`symbols`: one per
    frame), each symbol's ordered along the frames' first principal axis, so that a code number means much the
    same sound height in every symbol's codebook (the target's embedding of a code is shared by all symbols).
    A symbol with fewer distinct frames than `codebook_size` repeats them; one never seen takes the centroids
    of all frames."""
    z = np.asarray(latents, dtype=np.float32)
    axis = np.linalg.svd(z[:: max(1, len(z) // 50_000)] - z.mean(0), full_matrices=False)[2][0]
    shared = fit_codebook(z, codebook_size, seed=seed)
    books = []
    for symbol in range(n_symbols):
        own = z[symbols == symbol]
        distinct = np.unique(own, axis=0)
        if len(distinct) == 0:
            book = shared
        elif len(distinct) <= codebook_size:
            book = distinct[np.arange(codebook_size) % len(distinct)]
        else:
            book = fit_codebook(own, codebook_size, seed=seed)
        books.append(book[np.argsort(book @ axis, kind="stable")])
    return np.concatenate(books).astype(np.float32)


def fit_codebook(latents: np.ndarray, codebook_size: int, seed: int = 0, max_frames: int = 400_000) -> np.ndarray:
    """k-means centroids [codebook_size, latent_dim] of latent frames (scikit-learn MiniBatchKMeans)."""
    from sklearn.cluster import MiniBatchKMeans  # deferred: only training fits a codebook

    z = np.asarray(latents, dtype=np.float32)
    if len(z) < codebook_size:
        raise ValueError(f"need at least {codebook_size} frames to fit the codebook, got {len(z)}")
    if len(z) > max_frames:
        z = z[np.random.default_rng(seed).choice(len(z), max_frames, replace=False)]
    kmeans = MiniBatchKMeans(n_clusters=codebook_size, batch_size=8192, n_init=1, max_iter=30, random_state=seed,
                             reassignment_ratio=0.01)
    return kmeans.fit(z).cluster_centers_.astype(np.float32)


__all__ = ["LatentCodec", "LatentCodecConfig", "fit_codebook", "fit_symbol_codebooks", "nearest"]
