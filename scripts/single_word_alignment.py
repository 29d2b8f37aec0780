"""Words said alone: the embedded voice beside its teacher, phoneme by phoneme (issue 60's cause).

For each word (or short reply) it renders the teacher (Piper en_US-joe-medium at the corpus's scales, one
rendering per teacher seed) and the voice (AR and the default speculative setting, a few seeds), and prints:

- frames per phoneme: the teacher's from its duration predictor, given to symbols as the corpus was
  (`training.teacher.symbol_frames`: the start marker's and the first pad's frames go to the first symbol, the
  end marker's to the last), the voice's from its NEXT markers (what the decoder inserts a phoneme after);
- the opening pause (leading audio below 5 % of the loudest 10 ms frame's RMS) and whether the first phoneme
  reached the voice's opening cap (`max_opening_frames`);
- the last phoneme's frames (the closing punctuation, which carries the teacher's fade and closing silence), the
  closing silence (trailing audio below 5 %), and the ending's level (`measure.endings`: the last 30 ms of sound
  over the loudest frame; above a third it is cut at full loudness);
- the target's probability of NEXT on the last phoneme, frame by frame, teacher-forced on the teacher's own
  codes and on the voice's: where end of speech is decided (the decoder inserts END after the last NEXT);
- with --swap, Whisper tiny.en on codes mixed from both (the teacher's codes at the voice's durations, the
  voice's at the teacher's, the voice's with the teacher's first or last phoneme): which part of the voice's
  stream makes a word misheard;
- with --png DIR, log-mel spectrograms of the first --png-words words side by side (teacher, its codec round
  trip, the voice AR and speculative at the first seed), phoneme boundaries marked.

Developer tool, imported by nothing. One torch thread; about 5 s a word for three seeds on a 2-core CPU, 15 s with
--swap:

    HF_HUB_OFFLINE=1 python scripts/single_word_alignment.py --png /tmp/single-words --swap
    HF_HUB_OFFLINE=1 python scripts/single_word_alignment.py --words "No." "See you soon." --seeds 0 1 2 3
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a file: the repository root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts._cli import run_cli  # noqa: E402

WORDS = ("Hi!", "No.", "Wait!", "Help!", "Okay.", "Hello.", "Thanks!", "Why?", "Pizza!", "Tomorrow.", "Twelve.",
         "See you soon.")
QUIET_SHARE = 0.05  # leading and trailing audio below this share of the loudest 10 ms frame's RMS is silence


@dataclass
class Take:
    """One rendering: its codes per phoneme, audio, and (the voice's) where NEXT was likely."""

    label: str
    frames: list[list[int]]  # codec codes per phoneme
    audio: np.ndarray
    next_probs: list[list[float]] = field(default_factory=list)  # per phoneme: P(NEXT) at each frame, teacher-forced
    heard: str = ""

    @property
    def counts(self) -> list[int]:
        return [len(f) for f in self.frames]


def quiet_edges(audio: np.ndarray, rate: int, share: float = QUIET_SHARE) -> tuple[float, float]:
    """(leading, trailing) seconds of audio below `share` of the loudest 10 ms frame's RMS."""
    frame = rate // 100
    count = len(audio) // frame
    if count == 0:
        return 0.0, 0.0
    rms = np.sqrt((np.asarray(audio[: count * frame], np.float64).reshape(count, frame) ** 2).mean(axis=1))
    loud = np.flatnonzero(rms > share * rms.max())
    if not len(loud):
        return len(audio) / rate, 0.0
    return loud[0] * frame / rate, (len(audio) - (loud[-1] + 1) * frame) / rate


def per_phoneme(tokens: list[int], layout) -> list[list[int]]:
    """A chunk's generated ids -> codec codes per phoneme (split at NEXT; END stops)."""
    out, current = [], []
    for token in tokens:
        if token == layout.end_of_speech_id:
            break
        if token >= layout.speech_offset:
            current.append(token - layout.speech_offset)
        elif token == layout.next_phoneme_id:
            out.append(current)
            current = []
    return out


def next_probabilities(synth, prompt: list[int], stream: list[int]) -> list[list[float]]:
    """Teacher-forced P(NEXT) (temperature 1, over the ids the voice may sample) at each frame of each phoneme:
    the i-th value of a phoneme is the probability of ending it after i frames."""
    import torch

    layout = synth.backend.layout
    allowed = torch.tensor(synth.backend.allowed_token_ids())
    with torch.no_grad():
        logits = synth.target(input_ids=torch.tensor([prompt + stream])).logits[0, len(prompt) - 1 : -1].float()
    mask = torch.full_like(logits, float("-inf"))
    mask[:, allowed] = 0
    p_next = torch.softmax(logits + mask, dim=-1)[:, layout.next_phoneme_id].tolist()
    out, current = [], []
    for position, token in enumerate(stream):
        if token >= layout.speech_offset:
            current.append(p_next[position])
        elif token == layout.next_phoneme_id:
            out.append(current + [p_next[position]])
            current = []
    return out


def fit(codes: list[int], n: int) -> list[int]:
    """`codes` stretched or squeezed to `n` frames (nearest frame)."""
    if n == 0 or not codes:
        return []
    return [codes[min(int(i * len(codes) / n), len(codes) - 1)] for i in range(n)]


def render_word(text: str, synth, teacher_graph: Path, seeds: list[int], teacher_seeds: list[int]):
    """The teacher's takes (one per teacher seed) and the voice's (AR and speculative per seed), with the
    phoneme symbols."""
    import onnxruntime

    from ssd_demo.training.teacher import Teacher

    backend = synth.backend
    layout, codec = backend.layout, backend.codec
    script = synth.script(text)
    if len(script.chunks) != 1:
        raise ValueError(f"{text!r} is {len(script.chunks)} chunks; give a word or a short reply")
    prompt = script.prompts[0]
    symbols = backend.phonemes.symbols_of([t - layout.phoneme_offset for t in prompt[1 : prompt.index(layout.speech_start_id)]])
    teacher_takes = []
    for seed in teacher_seeds:
        onnxruntime.set_seed(seed)  # read when the session is made
        rendering = Teacher(teacher_graph, threads=1).render(script.chunks[0].text)
        codes = codec.encode_latents(rendering.latents.astype(np.float32)).tolist()
        frames, position = [], 0
        for count in rendering.frames:
            frames.append(codes[position : position + count])
            position += count
        stream = layout.stream(rendering.symbols, frames)
        teacher_takes.append(Take(f"teacher seed {seed}", frames, rendering.audio,
                                  next_probabilities(synth, layout.prompt(rendering.symbols), stream)))
    voice_takes = []
    for mode in ("ar", "speculative"):
        for seed in seeds:
            result = synth.synthesize(text, mode=mode, config=synth.config(seed=seed), script=script)
            tokens = list(result.chunks[0].generation.tokens)
            voice_takes.append(Take(f"{'AR' if mode == 'ar' else 'spec'} seed {seed}", per_phoneme(tokens, layout),
                                    result.audio, next_probabilities(synth, prompt, tokens)))
    return symbols, teacher_takes, voice_takes


def first_above(probs: list[float], level: float = 0.5) -> str:
    """The first frame count at which P(NEXT) exceeds `level` ("-" if never)."""
    return next((str(i) for i, p in enumerate(probs) if p > level), "-")


def describe(text: str, symbols: list[str], teacher: list[Take], voice: list[Take], backend) -> list[dict]:
    """Print one word's tables; returns a summary row per take."""
    from ssd_demo.measure.endings import ending

    rate = backend.sample_rate
    takes = teacher + voice
    print(f"\n=== {text}  /{''.join(symbols)}/  ({len(symbols)} symbols)")
    width = max(len(t.label) for t in takes)
    print(f"{'':{width}}  " + " ".join(f"{s!r:>4}"[-4:] for s in symbols)
          + "   total  open s  close s  tail  last P(NEXT)>0.5 at  heard")
    rows = []
    for take in takes:
        lead, trail = quiet_edges(take.audio, rate)
        end = ending(take.audio, rate)
        counts = take.counts + [0] * (len(symbols) - len(take.counts))
        capped = ""
        if take in voice:
            if counts[0] >= (backend.max_opening_frames or backend.max_symbol_frames):
                capped = " (opening cap)"
            elif any(c >= backend.max_symbol_frames for c in counts):
                capped = " (phoneme cap)"
        last = first_above(take.next_probs[-1]) if take.next_probs else "?"
        print(f"{take.label:{width}}  " + " ".join(f"{c:4d}" for c in counts)
              + f"  {sum(counts):6d}  {lead:6.2f}  {trail:7.2f}  {end.tail_level:4.2f}{'*' if end.cut else ' '} "
              f"{last:>12}        {take.heard}{capped}")
        rows.append({"text": text, "label": take.label.split(" seed")[0], "first": counts[0], "last": counts[-1],
                     "middle": counts[1:-1], "lead": lead, "trail": trail, "cut": end.cut, "tail": end.tail_level,
                     "n_symbols": len(symbols)})
    print("  P(NEXT) on the last phoneme, frame by frame (teacher-forced):")
    for take in [teacher[0], *voice[:1], *voice[len(voice) // 2 : len(voice) // 2 + 1]]:
        print(f"    {take.label:{width}}  " + " ".join(f"{p:.2f}" for p in take.next_probs[-1]))
    return rows


def swap_experiment(text: str, teacher: Take, voice: list[Take], codec) -> dict[str, list[float]]:
    """Whisper tiny.en WER of codes mixed from the teacher's take and each voice take (AR takes only)."""
    from ssd_demo.measure import judge

    def wer(frames: list[list[int]]) -> tuple[float, str]:
        audio = codec.decode([c for f in frames for c in f])
        heard = judge.transcribe(audio, codec.sample_rate)
        errors, words = judge.word_errors(text, heard)
        return errors / max(words, 1), heard

    scores: dict[str, list[float]] = {}
    for take in voice:
        if not take.label.startswith("AR") or len(take.frames) != len(teacher.frames):
            continue
        t, v = teacher.frames, take.frames
        variants = {
            "teacher's codes (round trip)": t,
            "the voice's codes": v,
            "teacher's codes, voice's durations": [fit(a, len(b)) for a, b in zip(t, v)],
            "voice's codes, teacher's durations": [fit(b, len(a)) for a, b in zip(t, v)],
            "voice with the teacher's first phoneme": [t[0], *v[1:]],
            "voice with the teacher's last phoneme": [*v[:-1], t[-1]],
        }
        for name, frames in variants.items():
            scores.setdefault(name, []).append(wer(frames)[0])
    return scores


def mel_image(audio: np.ndarray, rate: int) -> np.ndarray:
    """80-band log-mel magnitudes (1,024-point FFT, hop 256: one column per codec frame)."""
    import torch
    import torchaudio

    mel = torchaudio.transforms.MelSpectrogram(sample_rate=rate, n_fft=1024, hop_length=256, n_mels=80, power=1.0)
    with torch.no_grad():
        return torch.log10(mel(torch.as_tensor(np.asarray(audio, np.float32))).clamp_min(1e-4)).numpy()


def save_png(path: Path, text: str, symbols: list[str], rows: list[tuple[str, Take]], rate: int) -> None:
    """Log-mel spectrograms one above the other on one time axis, phoneme boundaries as lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hop = 256
    longest = max(len(take.audio) for _, take in rows) / rate
    fig, axes = plt.subplots(len(rows), 1, figsize=(7.5, 1.55 * len(rows)), sharex=True)
    for ax, (label, take) in zip(axes, rows):
        image = mel_image(take.audio, rate)
        seconds = image.shape[1] * hop / rate
        ax.imshow(image, origin="lower", aspect="auto", cmap="magma", extent=(0, seconds, 0, 80), vmin=-3, vmax=1.2)
        edge = 0
        for symbol, count in zip(symbols, take.counts):
            ax.axvline(edge * hop / rate, color="white", linewidth=0.6, alpha=0.7)
            if count:
                ax.text((edge + count / 2) * hop / rate, 72, symbol, color="white", ha="center", fontsize=8)
            edge += count
        ax.axvline(edge * hop / rate, color="cyan", linewidth=1.0)
        ax.set_xlim(0, longest)
        ax.set_yticks([])
        ax.set_ylabel(label, rotation=0, ha="right", va="center", fontsize=8)
    axes[-1].set_xlabel("seconds")
    fig.suptitle(f"{text}  /{''.join(symbols)}/", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def summary(rows: list[dict]) -> None:
    """Means over words per kind of take: first / middle / last phoneme frames, opening and closing silence."""
    print("\n=== summary over the words (means; frames of 256 samples at 22,050 Hz, 11.6 ms)")
    print(f"{'':10} {'first':>6} {'middle':>7} {'last':>6} {'open s':>7} {'close s':>8} {'cut':>6}")
    for label in dict.fromkeys(r["label"] for r in rows):
        mine = [r for r in rows if r["label"] == label]
        middle = [c for r in mine for c in r["middle"]]
        print(f"{label:10} {np.mean([r['first'] for r in mine]):6.1f} {np.mean(middle) if middle else 0:7.1f} "
              f"{np.mean([r['last'] for r in mine]):6.1f} {np.mean([r['lead'] for r in mine]):7.2f} "
              f"{np.mean([r['trail'] for r in mine]):8.2f} {sum(r['cut'] for r in mine):3d}/{len(mine)}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--words", nargs="+", default=list(WORDS), help="words or short replies (one chunk each)")
    parser.add_argument("--words-file", type=Path, default=None,
                        help="read the words from a test-set file instead (one per line, # comments)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="the voice's seeds")
    parser.add_argument("--teacher-seeds", type=int, nargs="+", default=[0], help="the teacher's noise seeds")
    parser.add_argument("--voice", type=Path, default=None, help="voice folder (default: the shipped voice)")
    parser.add_argument("--swap", action="store_true", help="Whisper tiny.en on codes mixed from teacher and voice")
    parser.add_argument("--png", type=Path, default=None, help="folder for spectrogram PNGs")
    parser.add_argument("--png-words", type=int, default=4, help="how many of the words get a PNG")


def main(args: argparse.Namespace) -> int:
    import torch

    from ssd_demo.backends.embedded import load_synthesizer
    from ssd_demo.measure import judge
    from ssd_demo.training.teacher import analysis_graph

    torch.set_num_threads(1)
    words = args.words
    if args.words_file is not None:
        words = [line.strip() for line in args.words_file.read_text().splitlines()
                 if line.strip() and not line.startswith("#")]
    synth = load_synthesizer(path=args.voice)
    backend = synth.backend
    if args.png is not None:
        args.png.mkdir(parents=True, exist_ok=True)
    rows, swaps = [], {}
    with tempfile.TemporaryDirectory(prefix="ssd-teacher-") as folder:
        graph = analysis_graph(Path(folder) / "teacher_prior.onnx", "prior")
        for index, text in enumerate(words):
            symbols, teacher, voice = render_word(text, synth, graph, args.seeds, args.teacher_seeds)
            for take in teacher + voice:  # what Whisper tiny.en hears (the teacher at its own 22,050 Hz)
                take.heard = judge.transcribe(take.audio, backend.sample_rate)
            if args.swap:
                for name, scores in swap_experiment(text, teacher[0], voice, backend.codec).items():
                    swaps.setdefault(name, []).extend(scores)
            rows += describe(text, symbols, teacher, voice, backend)
            if args.png is not None and index < args.png_words:
                round_trip = Take("round trip", teacher[0].frames,
                                  backend.codec.decode([c for f in teacher[0].frames for c in f]))
                spec = next(t for t in voice if t.label.startswith("spec"))
                name = "".join(c if c.isalnum() else "_" for c in text).strip("_").lower()
                path = args.png / f"{index:02d}_{name}.png"
                save_png(path, text, symbols, [(f"teacher\n{teacher[0].heard!r}", teacher[0]),
                                              ("codec round\ntrip", round_trip),
                                              (f"{voice[0].label}\n{voice[0].heard!r}", voice[0]),
                                              (f"{spec.label}\n{spec.heard!r}", spec)], backend.sample_rate)
                print(f"  spectrograms: {path}")
    summary(rows)
    if swaps:
        print(f"\n=== Whisper tiny.en WER, mean over {len(next(iter(swaps.values())))} AR takes "
              f"({len(words)} words x {len(args.seeds)} seeds)")
        for name, scores in swaps.items():
            print(f"  {name:42s} {np.mean(scores):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(run_cli("single_word_alignment", __doc__, add_arguments, main))
