"""`python -m ssd_demo synth "Some text" --out out.wav`: speak text with a preset or a custom pair.

    python -m ssd_demo synth "Hello there." --out hello.wav --mode speculative --draft-len 4 --beta 0.3
    python -m ssd_demo synth --text-file story.txt --out story.wav
    python -m ssd_demo synth "Hello there." --preset llasa-1b-3b --voice-prompt me.wav --voice-transcript "..."
    python -m ssd_demo synth "Hello there." --target-model ./llasa-3b --draft-model ./llasa-1b
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import InputError, TextError
from ..backends import registry as presets
from ..backends.llasa_codec import DEFAULT_CODEC, DEFAULT_CODEC_REVISION
from ..config import DecodingConfig
from ..backends.vllm import ENGINES, engine_choice, use_engine
from ..backends.vllm.worker import require_vllm_python
from ..models.cpu_threads import check_thread_count
from .decoding_flags import add_decoding_arguments, decoding_arguments

#: The presets --help names (a test checks that they are the registry's: listing them loads every backend).
PRESETS_HELP = "embedded (default), llasa-1b-3b, llasa-1b-8b or cosyvoice2-paper"


#: The decoding settings synth takes as flags (the preset supplies the rest).
DECODING_FLAGS = ("draft_len", "beta", "acceptance", "temperature", "top_k", "top_p", "max_new_tokens", "seed")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("text", nargs="?", default=None,
                        help="English text to speak (the embedded voice reads up to 3,000 characters, in chunks)")
    parser.add_argument("--text-file", type=Path, default=None, help="read the text from this UTF-8 file instead")
    parser.add_argument("--out", type=Path, default=Path("out.wav"),
                        help="output WAV file (16-bit PCM; default out.wav in the current folder)")
    parser.add_argument("--mode", choices=("ar", "speculative"), default="speculative",
                        help="decoder (default speculative; ar ignores --draft)")
    parser.add_argument("--preset", default="embedded", help=f"model preset: {PRESETS_HELP}")
    parser.add_argument("--draft", default=None,
                        help="draft name within the preset (embedded: heads (default), distilled or layers)")
    parser.add_argument("--target-model", help="custom pair: target repo id or local folder (with --draft-model)")
    parser.add_argument("--draft-model", help="custom pair: draft repo id or local folder (with --target-model)")
    parser.add_argument("--codec", default=None, help="custom pair: codec repo id or folder "
                        f"(default {DEFAULT_CODEC} at commit {DEFAULT_CODEC_REVISION[:7]})")
    parser.add_argument("--revision", default=None, help="custom pair: Hub revision of both models")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="where the models run (default auto: a GPU if there is one, else the CPU)")
    parser.add_argument("--voice", type=Path, default=None, help="embedded voice folder (default: the shipped voice)")
    parser.add_argument("--voice-prompt", type=Path, help="reference WAV to imitate (Llasa; with --voice-transcript)")
    parser.add_argument("--voice-transcript", help="what is said in --voice-prompt")
    # Decoding settings default to the preset's own (embedded voice: K 4, beta 0.2, temperature 0.3, top-k 50).
    add_decoding_arguments(parser, DECODING_FLAGS, defaults={"seed": 0})
    parser.add_argument("--text-normalizer", choices=TEXT_NORMALIZERS, default=None,
                        help="CosyVoice 2: how the text is read, default (the project's English readings) or "
                             "official (the official procedure: wetext, then inflect for the digits left; to "
                             "reproduce published numbers); default $SSD_COSYVOICE2_TEXT or default")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (default: torch's choice, one per core; the embedded voice's forward "
                             "picks its own thread count by timing)")
    parser.add_argument("--engine", choices=ENGINES, default=None,
                        help="where the speech LM runs: ours (default) or vllm (Llasa presets and custom pairs; "
                             "needs .venv-vllm, see docs/vllm.md); default $SSD_DEMO_ENGINE or ours")
    parser.add_argument("--verbose", action="store_true",
                        help="also say why this forward and these kernels run the LM here (the timings behind them)")


#: CosyVoice 2's text normaliser modes (`backends.cosyvoice2.text_norm.NORMALISER_MODES`, not imported here: the
#: backend loads only with its preset).
TEXT_NORMALIZERS = ("default", "official")


def _check_text_normalizer(args: argparse.Namespace) -> None:
    """Before the model loads: the official normaliser is CosyVoice 2's."""
    cosyvoice2 = args.preset.startswith("cosyvoice2") and not (args.target_model or args.draft_model or args.voice)
    if args.text_normalizer == "official" and not cosyvoice2:
        raise InputError("--text-normalizer official is CosyVoice 2's (--preset cosyvoice2-paper); other voices read "
                         "text their own way")


def _use_text_normalizer(synthesizer, mode: str | None) -> None:
    if mode is not None and synthesizer.backend.text_normalizers:
        synthesizer.backend.text_normalizer = mode


def _decoding_overrides(args: argparse.Namespace) -> dict:
    """The decoding settings given on the command line, checked (the preset supplies the rest)."""
    return decoding_arguments(args, DECODING_FLAGS)


def _load(args: argparse.Namespace):
    import torch

    from ..backends.embedded import load_synthesizer

    device = None if args.device == "auto" else args.device
    if device == "cuda" and not torch.cuda.is_available():
        raise InputError("--device cuda: this machine has no usable CUDA GPU (or torch was built without CUDA); "
                         "use --device cpu or auto")

    def report(fraction: float, message: str) -> None:
        print(f"[{fraction:4.0%}] {message}", file=sys.stderr)

    if args.target_model or args.draft_model:
        if not (args.target_model and args.draft_model):
            raise InputError("a custom pair needs both --target-model and --draft-model")
        options = {"target_revision": args.revision, "draft_revision": args.revision}
        if args.codec:
            options["codec_ref"] = args.codec
        return presets.load_custom_pair(args.target_model, args.draft_model, device=device, progress=report, **options)
    if args.voice is not None:
        if args.preset != "embedded":
            raise InputError("--voice selects an embedded-voice folder; it cannot be combined with another preset")
        if not args.voice.is_dir():
            raise FileNotFoundError(f"--voice {args.voice} " + ("is a file: give the voice's folder" if args.voice.exists()
                                                               else "does not exist"))
        return load_synthesizer(path=args.voice, device=device)
    return presets.load_preset(args.preset, device=device, progress=report)


def _check_writable(out: Path) -> bool:
    """Fail before a synthesis that can take minutes, not after it: the folder exists or can be made, and a
    file can be created there (an empty file made here is removed again). True when the folder was made."""
    for parent in out.parents:
        if parent.exists() and not parent.is_dir():
            raise InputError(f"--out {out}: {parent} is a file, not a folder")
    existed, made = out.exists(), not out.parent.exists()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out, "ab"):
            pass
    except OSError as error:
        raise InputError(f"--out {out} cannot be written: {error.strerror or error}") from None
    if not existed:
        out.unlink(missing_ok=True)
    return made


def main(args: argparse.Namespace) -> int:
    if (args.text is None) == (args.text_file is None):
        raise InputError("give the text either as an argument or with --text-file (one of them)")
    if args.text_file is not None:
        if args.text_file.is_dir():
            raise InputError(f"--text-file {args.text_file} is a folder: give the path of a UTF-8 text file")
        if not args.text_file.is_file():
            raise FileNotFoundError(f"--text-file {args.text_file} does not exist")
        try:
            args.text = args.text_file.read_text(encoding="utf-8")
        except UnicodeDecodeError as error:
            raise InputError(f"--text-file {args.text_file} is not UTF-8 text (byte {error.start}): save it as UTF-8") from None
    if not args.text.strip():  # refused before the libraries load (seconds)
        raise TextError("The text is empty: type a sentence to synthesise.")
    import numpy as np
    import soundfile as sf
    import torch

    from ..measure.reporting import cpu_name
    from ..speech.synthesis import VoicePrompt

    # checked before the synthesis, which can take a minute: it must not end in a failed write
    if args.out.is_dir():
        raise InputError(f"--out {args.out} is a folder: give a file name, e.g. {args.out / 'out.wav'}")
    if args.out.suffix and args.out.suffix.lower() != ".wav":
        raise InputError(f"--out writes a WAV file: give a name ending in .wav, got {args.out}")
    made_folder = _check_writable(args.out)
    if bool(args.voice_prompt) != bool(args.voice_transcript):
        raise InputError("--voice-prompt and --voice-transcript go together")
    if args.threads is not None:
        check_thread_count(args.threads)
        torch.set_num_threads(args.threads)
    # decoding settings are checked before the model loads (seconds to minutes), as the backend's defaults
    # are not needed to refuse an impossible value
    DecodingConfig(**_decoding_overrides(args))
    _check_text_normalizer(args)
    if engine_choice(args.engine) == "vllm":
        require_vllm_python()  # before the models load
    synthesizer = use_engine(_load(args), args.engine)
    _use_text_normalizer(synthesizer, args.text_normalizer)
    config = synthesizer.config(**_decoding_overrides(args))
    voice_prompt = None
    if args.voice_prompt:
        audio, rate = sf.read(str(args.voice_prompt), dtype="float32", always_2d=True)
        voice_prompt = VoicePrompt(audio=audio.mean(axis=1), sample_rate=rate, transcript=args.voice_transcript)
    result = synthesizer.synthesize(args.text, mode=args.mode, config=config, draft=args.draft,
                                    voice_prompt=voice_prompt)
    pcm = np.clip(result.audio, -1.0, 1.0)
    try:
        sf.write(str(args.out), (pcm * 32767).astype(np.int16), result.sample_rate, format="WAV", subtype="PCM_16")
    except (OSError, RuntimeError) as error:  # soundfile's LibsndfileError is a RuntimeError (disk full, ...)
        raise InputError(f"--out {args.out} could not be written: {error}") from None
    stats = result.generation.stats
    chunks = f" in {len(result.chunks)} chunks" if len(result.chunks) > 1 else ""
    print(f"wrote {args.out}: {result.duration_seconds:.2f} s of audio{chunks}, {stats.sampled_tokens} tokens, "
          f"LM {result.lm_seconds:.2f} s, codec {result.codec_seconds:.2f} s"
          + (f", acceptance {stats.acceptance_rate:.2f}, seed {stats.seed}" if args.mode == "speculative" else ""))
    if synthesizer.device.type == "cpu":  # what the LM seconds were measured on
        engine = synthesizer.engine_description()
        print(f"LM on {cpu_name()}: " + (f"{engine}; {torch.get_num_threads()} torch thread(s)" if args.verbose
                                         else engine.split(" (")[0] + " (--verbose says why)"), file=sys.stderr)
    if made_folder:
        print(f"note: made the folder {args.out.parent} for --out", file=sys.stderr)
    if stats.finish_reason == "length":
        print(f"note: stopped at the length limit ({result.config.max_new_tokens} tokens) before the end token; "
              "the audio may be cut off", file=sys.stderr)
    left_out = synthesizer.left_out(args.text)
    if left_out:
        print(f"note: not spoken: {left_out} (letters of other scripts, Greek words and emoji are left out)", file=sys.stderr)
    return 0
