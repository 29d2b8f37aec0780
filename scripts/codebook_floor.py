"""What perfect tokens would sound like with a larger codebook: the codec's floor on words said alone (issue 60).

The embedded voice's codes are nearest centroids of the teacher's prior latent (m_p over frames). Its 2,048
centroids lose words said alone even when the tokens are the teacher's own: Whisper tiny.en hears the teacher's
codes, decoded, at 14-19 % WER on tests/data/single_words.txt against 2-4 % for the teacher. This script renders the
prior latents of `--sentences` corpus sentences (the training corpus's generator and seed), fits codebooks of each
`--sizes` on them (the data stage's k-means), and for every line of each test set decodes the teacher's latent
unquantised and quantised with each codebook (and with the shipped one) through the voice's own decoder, then
prints Whisper tiny.en's WER per set and codebook: mean over texts, and corpus WER (all errors / all words).

    python -m scripts.codebook_floor [--sentences 1500] [--sizes 2048,4096,8192] [--per-symbol 64,256]
        [--sets tests/data/single_words.txt,tests/data/short_replies.txt]

`--per-symbol` adds codebooks relative to the phoneme being said (`train --symbol-codes N`: N centroids of each
phoneme symbol's frames, `fit_symbol_codebooks`), each frame quantised among its own symbol's centroids.

Developer-only (imported by nothing); about 10-20 minutes on a 2-core CPU.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from ssd_demo.backends.embedded import default_path
from ssd_demo.measure import judge
from ssd_demo.measure.test_sets import read_test_set
from ssd_demo.speech.latent_codec import LatentCodec, fit_codebook, fit_symbol_codebooks, nearest
from ssd_demo.training.corpus import CorpusConfig, build_corpus
from ssd_demo.training.teacher import Teacher, prior_graph

SHIPPED = "shipped 2,048"


def render_latents(teacher: Teacher, texts: list[str], what: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """The teacher's prior latent [frames, 192] of each text and each frame's symbol (every text has phonemes)."""
    renderings = [teacher.render(text) for text in tqdm(texts, desc=what)]
    return [(r.latents.astype(np.float32), np.repeat(np.asarray(r.symbols), r.frames)) for r in renderings]


def quantised(latent: np.ndarray, symbols: np.ndarray, codebook: np.ndarray, per_symbol: int) -> np.ndarray:
    """The latent through `codebook`: each frame's nearest centroid, among its symbol's with `per_symbol` > 0."""
    if not per_symbol:
        return codebook[nearest(latent, codebook)]
    rows = np.array([symbol * per_symbol for symbol in symbols])
    for symbol in np.unique(symbols):
        frames = symbols == symbol
        rows[frames] += nearest(latent[frames], codebook[symbol * per_symbol : (symbol + 1) * per_symbol])
    return codebook[rows]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=1500, help="corpus sentences the codebooks are fitted on")
    parser.add_argument("--sizes", default="2048,4096,8192")
    parser.add_argument("--per-symbol", default="", help="centroids per phoneme symbol, comma-separated (none)")
    parser.add_argument("--sets", default="tests/data/single_words.txt,tests/data/short_replies.txt")
    args = parser.parse_args(argv)
    codec = LatentCodec.load(default_path() / "codec")
    with tempfile.TemporaryDirectory() as folder:
        teacher = Teacher(prior_graph(Path(folder) / "prior.onnx"), threads=2)
        corpus = build_corpus(CorpusConfig(size=args.sentences, seed=1234, free_share=0.35))
        rendered = render_latents(teacher, corpus, "corpus latents")
        frames = np.concatenate([latent for latent, _ in rendered])
        frame_symbols = np.concatenate([symbols for _, symbols in rendered])
        n_symbols = teacher.phonemes.n_symbols
        tests: dict[str, list[tuple[str, tuple[np.ndarray, np.ndarray]]]] = {}
        for name in args.sets.split(","):
            texts = [item.text for item in read_test_set(name).items]
            tests[Path(name).stem] = list(zip(texts, render_latents(teacher, texts, name)))
    codebooks = {SHIPPED: (codec.codebook, 0)}
    for size in [int(size) for size in args.sizes.split(",") if size]:
        start = time.monotonic()
        codebooks[f"fitted {size:,}"] = (fit_codebook(frames, size, seed=1234), 0)
        print(f"fitted {size:,} centroids on {len(frames):,} frames in {time.monotonic() - start:.0f} s", flush=True)
    for size in [int(size) for size in args.per_symbol.split(",") if size]:
        start = time.monotonic()
        table = fit_symbol_codebooks(frames, frame_symbols, n_symbols, size, seed=1234)
        codebooks[f"{size:,} per symbol"] = (table, size)
        print(f"fitted {size:,} centroids per symbol in {time.monotonic() - start:.0f} s", flush=True)
    print(f"\n{len(corpus)} corpus sentences, {len(frames):,} frames; Whisper tiny.en WER, mean over texts / corpus")
    print("| decoded from | " + " | ".join(f"{name} ({len(items)})" for name, items in tests.items()) + " |")
    print("|---|" + "---|" * len(tests))
    rows = {"the unquantised latent": None, **codebooks}
    for label, book in rows.items():
        cells = []
        for name, items in tests.items():
            rates, errors, words = [], 0, 0
            for text, (latent, symbols) in tqdm(items, desc=f"{label}: {name}", leave=False):
                z = latent if book is None else quantised(latent, symbols, *book)
                wrong, count = judge.word_errors(text, judge.transcribe(codec.decode_latents(z), codec.sample_rate))
                rates.append(wrong / max(count, 1))
                errors, words = errors + wrong, words + count
            cells.append(f"{100 * np.mean(rates):.1f} / {100 * errors / max(words, 1):.1f} %")
        print(f"| {label} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
