"""Add short utterances (one to three words, `training.corpus.short_corpus`) to a tokenised teacher corpus
(developer tool).

The corpus of sentences holds almost no utterance of a word or two (and the voice says them less clearly than
sentences; adding 4,000 of them to the shipped voice's training changed nothing measurable: docs/benchmarks.md,
"Short utterances"). This renders COUNT of them with the teacher, tokenises them with the voice's own codebook (so a voice
trained on the dataset before can go on training on the new one) and writes the dataset with them in its
training split; the held-out split is unchanged.

Usage (repository root): python scripts/add_short_utterances.py DATASET.npz CODEC_DIR COUNT OUT.npz [SEED]
(CODEC_DIR: a voice's codec folder, e.g. assets/embedded/codec; rendering resumes in OUT.npz's folder).
"""
import os
import sys
from pathlib import Path

sys.path.insert(0, os.getcwd())
from ssd_demo.speech.latent_codec import LatentCodec
from ssd_demo.training.corpus import short_corpus
from ssd_demo.training.dataset import add_utterances, load_dataset, save_dataset


def main(dataset: str, codec_dir: str, count: str, out: str, seed: str = "0") -> None:
    data = load_dataset(Path(dataset))
    sentences = short_corpus(int(count), int(seed))
    work = Path(out).parent / (Path(out).stem + "_render")
    data = add_utterances(data, sentences, LatentCodec.load(codec_dir), work, f"short utterances (seed {seed})")
    save_dataset(Path(out), data)
    print(f"{out}: {len(data['train'])} training chunks, {len(data['test'])} held out")


if __name__ == "__main__":
    if len(sys.argv) not in (5, 6):
        sys.exit(__doc__)
    try:
        if int(sys.argv[3]) < 1 or int(sys.argv[5] if len(sys.argv) == 6 else 0) < 0:
            raise ValueError("COUNT must be 1 or more and SEED 0 or more")
        main(*sys.argv[1:])
    except (OSError, ValueError) as error:  # a missing file, a codec of another size (InputError), a bad number
        sys.exit(f"error: {error}")
