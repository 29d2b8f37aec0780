"""Check our voice-prompt features against the official front end: the same clip, the same numbers.

    python -m scripts.cosyvoice2_parity_frontend --official PATH --matcha PATH [--seconds S]

PATH are checkouts of the official CosyVoice repository and of Matcha-TTS (whose `mel_spectrogram`
is the flow model's feature extractor); their packages are imported from there. The reference side
also needs librosa (Matcha's mel filters) and openai-whisper (`whisper.log_mel_spectrogram`, the
speech tokenizer's input); without whisper, a stand-in written from its source with librosa's
filters takes its place, and the output says so.

Two kinds of check, each on a clip of sines, a glide and a little noise:

* the spectrograms alone, on the same waveform: our mel filters against librosa's (bit for bit),
  `prompt_mel` against Matcha's `mel_spectrogram`
  with the settings read from the official `cosyvoice2.yaml` (`feat_extractor`), `whisper_log_mel`
  against whisper's, `speaker_fbank` against the official `_extract_spk_embedding`'s preprocessing;
* the whole path, clip to features: the official `CosyVoiceFrontEnd.frontend_zero_shot` reads the
  clip from a WAV file at several sample rates (its `load_wav`: torchaudio's `Resample` to 16 and
  24 kHz), ours gets the same samples as an array (`PromptEncoders.encode`). The two ONNX models are
  replaced by recorders, on both sides, that keep what they are given (so the comparison is of their
  inputs) and answer with tokens and an embedding computed from it. The token count is set a few
  tokens over and under half the mel frames, so the official 1 : 2 trimming rule is checked both ways.

The reference's imports that these paths never call (onnxruntime, inflect, regex) are stubbed when
they are not installed, and `torchaudio.load` is given a soundfile reader where torchaudio has no
backend of its own (the WAV files are written as 32-bit floats, so reading them is exact).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.util
import re
import sys
import tempfile
import types
from pathlib import Path

import numpy as np
import soundfile
import torch
import torchaudio

from ssd_demo.backends.cosyvoice2.frontend import (ENCODER_RATE, SAMPLE_RATE, SPEAKER_ENCODER_FILE,
    SPEECH_TOKENIZER_FILE, PromptEncoders, prompt_mel, resample, slaney_mel_filters, speaker_fbank, whisper_log_mel)

TOLERANCE = 1e-4  # max abs difference of a log spectrogram (natural log, or Whisper's scaled log10)
RESAMPLE_TOLERANCE = 1e-6  # of a resampled waveform
RATES = (16000, 22050, 24000, 44100, 48000)
YAML = "examples/libritts/cosyvoice2/conf/cosyvoice2.yaml"
EMBEDDING = 192


def stub_if_missing(name: str) -> bool:
    """An empty module in place of `name` when it cannot be imported (for imports the checks never call)."""
    try:
        importlib.import_module(name)
        return False
    except ImportError:
        sys.modules[name] = types.ModuleType(name)
        return True


def whisper_stand_in() -> types.ModuleType:
    """whisper's `log_mel_spectrogram`, as in its audio.py, with its mel filters made by librosa (as its
    mel_filters.npz was)."""
    import librosa

    def log_mel_spectrogram(audio, n_mels: int = 80, padding: int = 0, device=None):
        audio = torch.as_tensor(audio)
        if padding > 0:
            audio = torch.nn.functional.pad(audio, (0, padding))
        stft = torch.stft(audio, 400, 160, window=torch.hann_window(400), return_complex=True)
        magnitudes = stft[..., :-1].abs() ** 2
        filters = torch.from_numpy(librosa.filters.mel(sr=16000, n_fft=400, n_mels=n_mels))
        log_spec = torch.clamp(filters @ magnitudes, min=1e-10).log10()
        log_spec = torch.maximum(log_spec, log_spec.max() - 8.0)
        return (log_spec + 4.0) / 4.0

    module = types.ModuleType("whisper")
    module.log_mel_spectrogram = log_mel_spectrogram
    return module


def feat_extractor_settings(official: Path) -> dict:
    """The keyword arguments of `feat_extractor` in the official yaml (`!ref <name>` resolved from its top level)."""
    text = (official / YAML).read_text()
    head = r"^feat_extractor: !name:matcha\.utils\.audio\.mel_spectrogram\n"
    block = re.search(head + r"((?:[ \t]+.*\n)+)", text, re.MULTILINE)
    if block is None:
        raise SystemExit(f"no feat_extractor block in {official / YAML}")
    settings = {}
    for line in block.group(1).splitlines():
        key, value = (part.strip() for part in line.split("#")[0].split(":", 1))
        ref = re.fullmatch(r"!ref <(\w+)>", value)
        if ref:
            value = re.search(rf"^{ref.group(1)}: *(\S+)", text, re.MULTILINE).group(1)
        settings[key] = {"True": True, "False": False}.get(value, value)
        if isinstance(settings[key], str):
            settings[key] = int(float(value)) if float(value).is_integer() else float(value)
    return settings


def import_reference(official: Path, matcha: Path):
    """(CosyVoiceFrontEnd, Matcha's mel_spectrogram, whether whisper is the stand-in, stubbed names)."""
    sys.path.insert(0, str(official.resolve()))
    stubbed = [name for name in ("onnxruntime", "inflect", "regex") if stub_if_missing(name)]
    try:
        importlib.import_module("whisper")
        stand_in = False
    except ImportError:
        sys.modules["whisper"] = whisper_stand_in()
        stand_in = True
    try:
        from cosyvoice.cli.frontend import CosyVoiceFrontEnd

        # matcha/utils/audio.py alone: the package's __init__ pulls in its training stack (hydra, lightning).
        spec = importlib.util.spec_from_file_location("matcha_audio", matcha / "matcha" / "utils" / "audio.py")
        audio = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(audio)
    except (ImportError, FileNotFoundError) as error:
        raise SystemExit(f"cannot import the reference front end from {official} and {matcha}: {error}") from error
    return CosyVoiceFrontEnd, audio.mel_spectrogram, stand_in, stubbed


def read_with_soundfile(path, *args, **kwargs):
    """torchaudio.load's float result ([channels, samples], float32) read with soundfile."""
    data, rate = soundfile.read(str(path), dtype="float32", always_2d=True)
    return torch.from_numpy(data.T.copy()), rate


def ensure_wav_loading(folder: Path) -> bool:
    """Give `torchaudio.load` a soundfile reader where it cannot read a WAV itself; True if it was replaced."""
    probe = folder / "probe.wav"
    soundfile.write(probe, np.zeros(160, np.float32), ENCODER_RATE, subtype="FLOAT")
    try:
        torchaudio.load(str(probe), backend="soundfile")
        return False
    except (ImportError, RuntimeError, TypeError, ValueError):
        torchaudio.load = read_with_soundfile
        return True


def sample_clip(rate: int, seconds: float, seed: int) -> np.ndarray:
    """Sines (220 Hz, 1 kHz, 3.3 kHz), a 300-6000 Hz glide, a fade in and out and a little noise; peak 0.8."""
    t = np.arange(round(seconds * rate)) / rate
    glide = np.sin(2 * np.pi * (300 * t + (6000 - 300) / (2 * seconds) * t ** 2))
    clip = (np.sin(2 * np.pi * 220 * t) + 0.5 * np.sin(2 * np.pi * 1000 * t) + 0.3 * np.sin(2 * np.pi * 3300 * t)
            + 0.4 * glide) * np.minimum(1.0, np.minimum(t, t[-1] - t) / 0.2)
    clip = clip + 0.01 * np.random.default_rng(seed).standard_normal(len(t))
    return (0.8 * clip / np.abs(clip).max()).astype(np.float32)


class RecordingTokenizer:
    """Stands in for the speech tokenizer's onnxruntime session: keeps its inputs, answers with
    frames / 4 + `extra` tokens (25 per second, as the real one), each the loudest bin of its 4 frames."""

    def __init__(self, extra: int):
        self.extra, self.inputs = extra, []

    def get_inputs(self):
        return [types.SimpleNamespace(name="feats"), types.SimpleNamespace(name="feats_length")]

    def run(self, outputs, feeds):
        feats, length = feeds["feats"], feeds["feats_length"]
        assert feats.dtype == np.float32 and feats.ndim == 3 and length.dtype == np.int32
        assert int(length[0]) == feats.shape[2]
        self.inputs.append(feats.copy())
        count = max(1, feats.shape[2] // 4 + self.extra)
        tokens = [int(feats[0, :, 4 * i: 4 * i + 4].mean(axis=1).argmax()) if 4 * i < feats.shape[2] else 0
                  for i in range(count)]
        return [np.array([tokens], dtype=np.int64)]


class RecordingSpeakerEncoder:
    """Stands in for campplus's onnxruntime session: keeps its input, answers with a fixed projection of its mean."""

    def __init__(self):
        self.inputs = []
        self.projection = np.random.default_rng(7).standard_normal((80, EMBEDDING)).astype(np.float32)

    def get_inputs(self):
        return [types.SimpleNamespace(name="input")]

    def run(self, outputs, feeds):
        feats = feeds["input"]
        assert feats.dtype == np.float32 and feats.ndim == 3 and feats.shape[2] == 80
        self.inputs.append(feats.copy())
        return [(feats[0].std(axis=0) @ self.projection)[None]]


class TextTokens:
    """The official tokenizer's `encode` for the checks: one id per character."""

    def encode(self, text, **kwargs):
        return [ord(c) % 1000 for c in text]


def official_front_end(frontend_cls, feat_extractor, extra: int):
    """The official front end, built without its constructor (which opens the real ONNX files)."""
    front_end = frontend_cls.__new__(frontend_cls)
    front_end.tokenizer, front_end.allowed_special = TextTokens(), "all"
    front_end.feat_extractor = feat_extractor
    front_end.device = torch.device("cpu")
    front_end.speech_tokenizer_session = RecordingTokenizer(extra)
    front_end.campplus_session = RecordingSpeakerEncoder()
    front_end.spk2info = {}
    return front_end


def our_encoders(extra: int) -> PromptEncoders:
    encoders = PromptEncoders("unused")
    encoders._sessions = {SPEECH_TOKENIZER_FILE: RecordingTokenizer(extra),
                          SPEAKER_ENCODER_FILE: RecordingSpeakerEncoder()}
    return encoders


def max_diff(a, b) -> float:
    a, b = torch.as_tensor(np.asarray(a)), torch.as_tensor(np.asarray(b))
    if a.shape != b.shape:
        raise SystemExit(f"shapes differ: {tuple(a.shape)} vs {tuple(b.shape)}")
    return (a.double() - b.double()).abs().max().item() if a.numel() else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--official", type=Path, required=True, help="checkout of the official CosyVoice repository")
    parser.add_argument("--matcha", type=Path, required=True, help="checkout of Matcha-TTS")
    parser.add_argument("--seconds", type=float, default=3.37, help="length of the test clip")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    frontend_cls, mel_spectrogram, stand_in, stubbed = import_reference(args.official, args.matcha)
    settings = feat_extractor_settings(args.official)
    feat_extractor = functools.partial(mel_spectrogram, **settings)
    print(f"feat_extractor (official yaml): {settings}")
    print(f"whisper: {'stand-in (librosa filters)' if stand_in else 'openai-whisper'}"
          + (f"; stubbed imports: {', '.join(stubbed)}" if stubbed else ""))
    failures = []

    def check(name: str, diff: float, bar: float) -> None:
        print(f"  {name:<44} max abs diff {diff:.3g}  (bar {bar:g})")
        if not diff <= bar:
            failures.append(name)

    print("spectrograms on the same waveform:")
    import librosa

    for rate, n_fft, n_mels, f_max in ((SAMPLE_RATE, 1920, 80, 8000.0), (ENCODER_RATE, 400, 128, ENCODER_RATE / 2)):
        check(f"mel filters {rate} Hz, {n_mels} vs librosa",
              max_diff(librosa.filters.mel(sr=rate, n_fft=n_fft, n_mels=n_mels, fmin=0.0, fmax=f_max),
                       slaney_mel_filters(rate, n_fft, n_mels, 0.0, f_max)), 0.0)
    at_24k = torch.from_numpy(sample_clip(SAMPLE_RATE, args.seconds, args.seed))
    at_16k = torch.from_numpy(sample_clip(ENCODER_RATE, args.seconds, args.seed))
    reference_mel = feat_extractor(at_24k[None])[0].T  # [frames, 80]
    ours_mel = prompt_mel(at_24k)
    print(f"  prompt mel {tuple(ours_mel.shape)}, range {ours_mel.min().item():.2f}..{ours_mel.max().item():.2f}")
    check("prompt_mel vs matcha mel_spectrogram", max_diff(reference_mel, ours_mel), TOLERANCE)
    whisper = sys.modules["whisper"]
    check("whisper_log_mel vs whisper log_mel_spectrogram",
          max_diff(whisper.log_mel_spectrogram(at_16k[None], n_mels=128)[0], whisper_log_mel(at_16k)), TOLERANCE)
    silence = torch.zeros(ENCODER_RATE)
    check("whisper_log_mel on silence",
          max_diff(whisper.log_mel_spectrogram(silence[None], n_mels=128)[0], whisper_log_mel(silence)), TOLERANCE)
    recorder = RecordingSpeakerEncoder()
    front_end = official_front_end(frontend_cls, feat_extractor, 0)
    front_end.campplus_session = recorder
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        replaced = ensure_wav_loading(folder)
        if replaced:
            print("  (torchaudio.load read WAVs with soundfile)")
        path = folder / "clip16k.wav"
        soundfile.write(path, at_16k.numpy(), ENCODER_RATE, subtype="FLOAT")
        front_end._extract_spk_embedding(str(path))
        check("speaker_fbank vs _extract_spk_embedding input",
              max_diff(recorder.inputs[0][0], speaker_fbank(at_16k)), 0.0)

        print("clip to features (official frontend_zero_shot from a WAV file, ours from the array):")
        from cosyvoice.utils.file_utils import load_wav

        for rate in RATES:
            clip = sample_clip(rate, args.seconds, args.seed)
            path = folder / f"clip{rate}.wav"
            soundfile.write(path, clip, rate, subtype="FLOAT")
            tensor = torch.from_numpy(clip)
            for target in (ENCODER_RATE, SAMPLE_RATE):
                check(f"{rate} Hz -> {target} Hz resample vs load_wav",
                      max_diff(load_wav(str(path), target)[0], resample(tensor, rate, target)),
                      RESAMPLE_TOLERANCE)
            for extra in (-3, 3):
                official = official_front_end(frontend_cls, feat_extractor, extra)
                reference = official.frontend_zero_shot("tts text", "prompt text", str(path), SAMPLE_RATE, "")
                encoders = our_encoders(extra)
                transcript = TextTokens().encode("prompt text")
                ours = encoders.encode(clip, rate, transcript)
                label = f"{rate} Hz, {'fewer' if extra < 0 else 'more'} tokens than mel/2"
                ref_tokens = reference["flow_prompt_speech_token"][0].tolist()
                ref_mel = reference["prompt_speech_feat"][0]
                same_lengths = (list(ours.speech_tokens) == ref_tokens and ours.mel.shape == ref_mel.shape
                                and int(reference["prompt_speech_feat_len"][0]) == ours.mel.shape[0]
                                and int(reference["flow_prompt_speech_token_len"][0]) == len(ours.speech_tokens)
                                and list(ours.transcript_tokens) == reference["prompt_text"][0].tolist())
                print(f"  {label}: {len(ref_tokens)} tokens, mel {tuple(ref_mel.shape)}; tokens, lengths and "
                      f"transcript {'the same' if same_lengths else 'DIFFER'}")
                if not same_lengths:
                    failures.append(f"{label}: aligned lengths")
                seen = {name: session.inputs[0] for name, session in encoders._sessions.items()}
                check(f"  {label}: whisper feats",
                      max_diff(official.speech_tokenizer_session.inputs[0], seen[SPEECH_TOKENIZER_FILE]), TOLERANCE)
                check(f"  {label}: campplus fbank",
                      max_diff(official.campplus_session.inputs[0], seen[SPEAKER_ENCODER_FILE]), TOLERANCE)
                if ours.mel.shape == ref_mel.shape:
                    check(f"  {label}: prompt mel", max_diff(ref_mel, ours.mel), TOLERANCE)
                check(f"  {label}: embedding",
                      max_diff(reference["flow_embedding"][0], ours.speaker_embedding), TOLERANCE)
    print("PASS" if not failures else f"FAIL: {', '.join(failures)}")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
