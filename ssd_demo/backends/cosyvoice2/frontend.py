"""CosyVoice 2's inputs: text tokens, and the features of a voice prompt (the clip it imitates).

A zero-shot voice prompt is a short clip and its transcript. The speech LM reads the transcript's
text tokens and the clip's speech tokens; the flow model reads the clip's speech tokens, its 80-bin
mel spectrogram and a speaker embedding. The speech tokens and the speaker embedding come from two
ONNX models shipped with the checkpoint (`speech_tokenizer_v2.onnx` over a 128-bin Whisper log-mel
at 16 kHz, `campplus.onnx` over Kaldi filter banks); they run on onnxruntime, imported only here and
only when a clip is encoded, so the package (and the presets that do not clone) never need it.
The spectrograms and the resampling are written with torch and torchaudio, step for step as the
official front end computes them (its `load_wav`, Matcha's mel in the yaml's settings, Whisper's
log-mel, Kaldi fbank); `parity_frontend` checks them against it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torchaudio

from ...errors import InputError, ModelLoadError
from .llm import ADDED_SPECIAL_TOKENS, BACKBONE_FOLDER

SPEECH_TOKENIZER_FILE = "speech_tokenizer_v2.onnx"
SPEAKER_ENCODER_FILE = "campplus.onnx"
SAMPLE_RATE = 24000  # the flow model's and the vocoder's
ENCODER_RATE = 16000  # the two ONNX models'
MAX_PROMPT_SECONDS = 30  # the speech tokenizer's limit
MIN_PROMPT_SECONDS = 0.04  # one speech token (25 a second)


def load_text_tokenizer(folder: str | Path):
    """Qwen's tokenizer from CosyVoice-BlankEN with CosyVoice 2's added special tokens, in their order.

    The Hub folder holds vocab.json, merges.txt and a tokenizer_config.json naming Qwen's three added tokens
    (<|endoftext|> 151643, <|im_start|>, <|im_end|>); no tokenizer.json and no remote code. The new tokens
    follow (<|endofprompt|> 151646, [breath] 151647, ...), and no BOS is prepended, as the official tokenizer."""
    from transformers import AutoTokenizer

    path = Path(folder) / BACKBONE_FOLDER
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as error:
        raise ModelLoadError(f"{path}: the text tokenizer cannot be loaded ({error})") from None
    tokenizer.add_special_tokens({"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
                                  "additional_special_tokens": list(ADDED_SPECIAL_TOKENS)})
    return tokenizer


def text_tokens(tokenizer, text: str) -> list[int]:
    return list(tokenizer([text])["input_ids"][0])


def slaney_mel_filters(sample_rate: int, n_fft: int, n_mels: int, f_min: float, f_max: float) -> torch.Tensor:
    """librosa's `filters.mel` (Slaney mel scale and area norm) as the references use it: [n_mels, n_fft // 2 + 1].

    Matcha's mel and Whisper's both take their filters from librosa, built in float64 and stored in
    float32; these are made the same way, step for step, so the spectrograms match theirs bit for bit
    (torchaudio's `melscale_fbanks`, built in float32, leaves them up to 6e-5 apart in the log domain).
    """
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, np.log(6.4) / 27.0

    def hz_to_mel(hz: float) -> float:
        return min_log_mel + np.log(hz / min_log_hz) / logstep if hz >= min_log_hz else hz / f_sp

    mels = np.linspace(hz_to_mel(f_min), hz_to_mel(f_max), n_mels + 2)
    edges = np.where(mels >= min_log_mel, min_log_hz * np.exp(logstep * (mels - min_log_mel)), f_sp * mels)
    ramps = np.subtract.outer(edges, np.fft.rfftfreq(n=n_fft, d=1.0 / sample_rate))
    widths = np.diff(edges)
    weights = np.maximum(0, np.minimum(-ramps[:-2] / widths[:-1, None], ramps[2:] / widths[1:, None]))
    weights = weights.astype(np.float32)  # librosa's array is float32 from the start
    weights = (weights * (2.0 / (edges[2:] - edges[:-2]))[:, None]).astype(np.float32)
    return torch.from_numpy(weights)


def prompt_mel(audio_24k: torch.Tensor) -> torch.Tensor:
    """The flow model's mel spectrogram (Matcha's `mel_spectrogram` in the settings of CosyVoice 2's yaml):
    [samples] at 24 kHz -> [frames, 80] natural-log magnitudes, floored at 1e-5 (n_fft 1920 = window,
    hop 480, 0-8 kHz Slaney mel, reflect padding of 720 each side, no centring: samples // 480 frames)."""
    n_fft, hop = 1920, 480
    padded = torch.nn.functional.pad(audio_24k.view(1, 1, -1), ((n_fft - hop) // 2,) * 2, mode="reflect")[0]
    spectrum = torch.stft(padded, n_fft, hop_length=hop, win_length=n_fft, window=torch.hann_window(n_fft),
                          center=False, onesided=True, return_complex=True)
    magnitude = torch.sqrt(spectrum.real ** 2 + spectrum.imag ** 2 + 1e-9)  # [1, bins, frames]
    mel = slaney_mel_filters(SAMPLE_RATE, n_fft, 80, 0.0, 8000.0) @ magnitude[0]
    return torch.log(mel.clamp_min(1e-5)).T.contiguous()


def whisper_log_mel(audio_16k: torch.Tensor, n_mels: int = 128) -> torch.Tensor:
    """Whisper's log-mel input (its `log_mel_spectrogram`): [samples] at 16 kHz -> [n_mels, frames]
    (n_fft 400, hop 160, centred, last frame dropped: samples // 160 frames; log10, floored 8 below
    the clip's peak, scaled to about [-1, 1])."""
    spectrum = torch.stft(audio_16k, 400, hop_length=160, window=torch.hann_window(400), return_complex=True)
    power = spectrum[..., :-1].abs() ** 2
    mel = slaney_mel_filters(ENCODER_RATE, 400, n_mels, 0.0, ENCODER_RATE / 2) @ power
    log_spec = torch.log10(mel.clamp_min(1e-10))
    log_spec = torch.maximum(log_spec, log_spec.max() - 8.0)
    return (log_spec + 4.0) / 4.0


def resample(audio: torch.Tensor, sample_rate: int, target: int) -> torch.Tensor:
    """The official `load_wav`'s resampling: torchaudio's `Resample` transform (its kernel built in float64,
    kept in float32; `functional.resample` builds it in float32, about 1e-5 apart), none at the same rate."""
    if sample_rate == target:
        return audio
    return torchaudio.transforms.Resample(orig_freq=sample_rate, new_freq=target)(audio)


def speaker_fbank(audio_16k: torch.Tensor) -> torch.Tensor:
    """The speaker encoder's input: 80 Kaldi filter banks, no dither, mean removed per bin. [frames, 80]"""
    from torchaudio.compliance import kaldi

    feats = kaldi.fbank(audio_16k.view(1, -1), num_mel_bins=80, dither=0, sample_frequency=ENCODER_RATE)
    return feats - feats.mean(dim=0, keepdim=True)


@dataclass(frozen=True)
class VoiceFeatures:
    """What a voice prompt gives the models; speech tokens and mel frames cut to the official 1 : 2."""

    transcript_tokens: tuple[int, ...]
    speech_tokens: tuple[int, ...]
    mel: torch.Tensor  # [2 x len(speech_tokens), 80]
    speaker_embedding: torch.Tensor  # [192]

    @classmethod
    def aligned(cls, transcript_tokens, speech_tokens, mel: torch.Tensor,
                speaker_embedding: torch.Tensor) -> VoiceFeatures:
        count = min(mel.shape[0] // 2, len(speech_tokens))
        return cls(tuple(transcript_tokens), tuple(int(t) for t in speech_tokens[:count]), mel[: 2 * count],
                   speaker_embedding.reshape(-1))

    def save(self, path: str | Path) -> None:
        torch.save({"transcript_tokens": list(self.transcript_tokens), "speech_tokens": list(self.speech_tokens),
                    "mel": self.mel, "speaker_embedding": self.speaker_embedding}, path)

    @classmethod
    def load(cls, path: str | Path) -> VoiceFeatures:
        data = torch.load(path, map_location="cpu", weights_only=True)
        return cls.aligned(data["transcript_tokens"], data["speech_tokens"], data["mel"], data["speaker_embedding"])


class PromptEncoders:
    """The checkpoint's two ONNX models, opened on first use (onnxruntime, CPU or CUDA)."""

    def __init__(self, folder: str | Path, device: str = "cpu"):
        self.folder, self.device = Path(folder), device
        self._sessions: dict[str, object] = {}

    def _session(self, name: str):
        if name not in self._sessions:
            try:
                import onnxruntime
            except ImportError:
                raise ModelLoadError("cloning a voice with CosyVoice 2 needs onnxruntime "
                                     "(pip install -r requirements.txt)") from None
            path = self.folder / name
            if not path.is_file():
                raise ModelLoadError(f"{self.folder}: no {name} (needed to encode a voice prompt)")
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = 1
            # The speaker encoder runs on the CPU even beside a GPU, as the official front end runs it.
            on_gpu = self.device.startswith("cuda") and name != SPEAKER_ENCODER_FILE
            providers = (["CUDAExecutionProvider"] if on_gpu else []) + ["CPUExecutionProvider"]
            self._sessions[name] = onnxruntime.InferenceSession(str(path), sess_options=options, providers=providers)
        return self._sessions[name]

    def speech_tokens(self, audio_16k: torch.Tensor) -> list[int]:
        if audio_16k.numel() > MAX_PROMPT_SECONDS * ENCODER_RATE:
            raise InputError(f"the voice prompt is longer than {MAX_PROMPT_SECONDS} s, the speech tokenizer's limit")
        feats = whisper_log_mel(audio_16k)[None]  # [1, 128, frames]
        session = self._session(SPEECH_TOKENIZER_FILE)
        names = [i.name for i in session.get_inputs()]
        out = session.run(None, {names[0]: feats.numpy(), names[1]: np.array([feats.shape[2]], dtype=np.int32)})[0]
        return [int(t) for t in np.asarray(out).reshape(-1)]

    def speaker_embedding(self, audio_16k: torch.Tensor) -> torch.Tensor:
        session = self._session(SPEAKER_ENCODER_FILE)
        out = session.run(None, {session.get_inputs()[0].name: speaker_fbank(audio_16k)[None].numpy()})[0]
        return torch.from_numpy(np.asarray(out, dtype=np.float32).reshape(-1))

    def encode(self, audio: np.ndarray, sample_rate: int, transcript_tokens: list[int]) -> VoiceFeatures:
        """A clip (mono float, any rate >= 16 kHz) and its transcript's tokens -> the prompt's features."""
        samples = np.asarray(audio, dtype=np.float32)
        if samples.squeeze().ndim > 1:
            raise InputError(f"the voice prompt must be mono (one channel); got samples shaped {samples.shape}")
        clip = torch.from_numpy(samples.reshape(-1).copy())
        if sample_rate < ENCODER_RATE:
            raise InputError(f"the voice prompt is sampled at {sample_rate} Hz; at least {ENCODER_RATE} Hz is needed")
        if clip.numel() > MAX_PROMPT_SECONDS * sample_rate:  # the same test as on the 16 kHz samples, made early
            raise InputError(f"the voice prompt is longer than {MAX_PROMPT_SECONDS} s, the speech tokenizer's limit")
        if clip.numel() < MIN_PROMPT_SECONDS * sample_rate:
            raise InputError(f"the voice prompt is {clip.numel() / sample_rate:.3f} s long; at least "
                             f"{MIN_PROMPT_SECONDS} s (one speech token) is needed")
        at_16k = resample(clip, sample_rate, ENCODER_RATE)
        mel = prompt_mel(resample(clip, sample_rate, SAMPLE_RATE))
        tokens, embedding = self.speech_tokens(at_16k), self.speaker_embedding(at_16k)
        features = VoiceFeatures.aligned(transcript_tokens, tokens, mel, embedding)
        if not features.speech_tokens:
            raise InputError("the voice prompt is too short: it gives no speech tokens")
        return features


__all__ = ["PromptEncoders", "VoiceFeatures", "load_text_tokenizer", "prompt_mel", "resample", "slaney_mel_filters",
           "speaker_fbank", "text_tokens", "whisper_log_mel"]
