"""Corpus -> teacher renderings (audio, latents, durations) -> codec tokens aligned to phonemes -> examples.

Steps, each resumable (a re-run continues where an interruption stopped):
1. render: corpus sentences are normalised and split into chunks as the voice splits text at inference
   (`EmbeddedBackend.chunk_phonemes` symbols), each chunk rendered by the teacher (`teacher.Teacher`: the
   prior's mean m_p for "prior" codes, seconds a shard; z and audio for "z" codes, minutes) into shards of
   `SHARD` sentences (latents float16 + JSON), in `workers` processes;
2. codec: k-means centroids of the latents of the training shards (`speech.latent_codec.fit_codebook`; with
   `symbol_codes`, of each phoneme symbol's frames, `fit_symbol_codebooks`) and the teacher's decoder cut out
   of its graph;
3. examples: every chunk's latents -> nearest centroids, given to its symbols by the teacher's durations:
   prompt [BOS] symbols [SPEECH_START] first symbol, stream of frames / NEXT / next symbol (`VocabLayout`).
A held-out split of sentences (never rendered into the codebook fit or training) gives test loss.
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
from tqdm import tqdm

from .. import text as text_frontend
from ..backends.vocab import VocabLayout
from ..speech.latent_codec import DECODER_NAME, LatentCodec, LatentCodecConfig, fit_codebook, fit_symbol_codebooks
from ..errors import InputError
from .corpus import CorpusConfig, build_corpus, short_corpus, split_corpus
from .recipe import DataConfig
from .teacher import Teacher, analysis_graph, extract_decoder, prior_graph, teacher_phonemes

DATASET_NAME = "dataset.npz"
SHARD = 100


def _render_shard(job: tuple[Path, Path, list[str], int, tuple[float, float, float], int]) -> int:
    """Render one shard of sentences (a worker process); returns its number of chunks."""
    graph, path, sentences, budget, scales, first = job
    teacher = Teacher(graph, threads=1, scales=scales)
    meta, latents = [], []
    for offset, sentence in enumerate(sentences):
        spoken = text_frontend.normalize_text(sentence)
        for index, chunk in enumerate(text_frontend.split_text(spoken, budget=budget, count=teacher.phonemes.count)):
            rendering = teacher.render(chunk.text)
            if rendering is None:
                continue
            meta.append({"sentence": first + offset, "chunk": index, "text": chunk.text, "symbols": rendering.symbols,
                         "frames": rendering.frames, "seconds": rendering.seconds})
            latents.append(rendering.latents)
    tmp = path.with_name(path.stem + ".tmp.npz")
    np.savez(tmp, z=np.concatenate(latents) if latents else np.zeros((0, 192), np.float16))
    path.with_suffix(".json").write_text(json.dumps(meta))
    os.replace(tmp, path)  # the shard exists only once complete
    return len(meta)


def render_corpus(out: Path, sentences: list[str], config: DataConfig, log=print) -> list[Path]:
    """Shards of rendered chunks under out/corpus (existing shards are kept: the step resumes)."""
    folder = out / "corpus"
    folder.mkdir(parents=True, exist_ok=True)
    graph = out / ("teacher_prior.onnx" if config.latent == "prior" else "teacher_analysis.onnx")
    if not graph.exists():
        (prior_graph if config.latent == "prior" else analysis_graph)(graph)
    shards = [folder / f"shard{i:04d}.npz" for i in range((len(sentences) + SHARD - 1) // SHARD)]
    jobs = [(graph, path, sentences[i * SHARD : (i + 1) * SHARD], config.chunk_symbols, config.scales, i * SHARD)
            for i, path in enumerate(shards) if not path.exists()]
    if jobs:
        log(f"render: {sum(len(job[2]) for job in jobs)} of {len(sentences)} sentences to render with the teacher "
            f"({len(jobs)} of {len(shards)} shards)")
        start = time.perf_counter()
        with ProcessPoolExecutor(max_workers=config.workers) as pool:
            for _ in tqdm(pool.map(_render_shard, jobs), total=len(jobs), desc="render", mininterval=10):
                pass
        log(f"render: {time.perf_counter() - start:.0f} s")
    return shards


def load_shard(path: Path) -> tuple[list[dict], np.ndarray]:
    return json.loads(path.with_suffix(".json").read_text()), np.load(path)["z"]


def frame_symbols(chunks: list[dict]) -> np.ndarray:
    """The symbol each frame of `chunks` (a shard's metadata, in order) belongs to."""
    if not chunks:
        return np.zeros(0, dtype=np.int64)
    return np.concatenate([np.repeat(np.asarray(c["symbols"], dtype=np.int64), c["frames"]) for c in chunks])


def build_examples(shards: list[Path], codec: LatentCodec, layout: VocabLayout, max_frames: int,
                   leading_run: int | None = None) -> list[dict]:
    """Every rendered chunk as {"sentence", "text", "prompt", "speech"} (frames past `max_frames` - 1 dropped:
    the decoder ends a symbol there itself; the opening pause cut to `leading_run` frames)."""
    examples = []
    for path in shards:
        meta, z = load_shard(path)
        codes = codec.encode_latents(z.astype(np.float32), frame_symbols(meta) if codec.config.symbols else None)
        start = 0
        for chunk in meta:
            frames, position = [], start
            for count in chunk["frames"]:
                frames.append(codes[position : position + count][: max_frames - 1].tolist())
                position += count
            start = position
            speech = layout.stream(chunk["symbols"], frames)
            if leading_run is not None:
                speech = trim_leading_run(speech, layout, leading_run)
            examples.append({"sentence": chunk["sentence"], "text": chunk["text"],
                             "prompt": layout.prompt(chunk["symbols"]), "speech": speech})
        if start != len(z):
            raise ValueError(f"{path}: chunk frames cover {start} of {len(z)} latents")
    return examples


def build_dataset(out: Path, config: DataConfig, log=print) -> dict:
    """Render, fit the codec, tokenise; reuses out/dataset.npz when built with the same config."""
    path = out / DATASET_NAME
    if path.exists():
        data = load_dataset(path)
        if data["config"] == json.loads(json.dumps(asdict(config))):
            log(f"dataset: reusing {path}")
            return data
    start = time.perf_counter()
    sentences = build_corpus(CorpusConfig(size=config.corpus_size, seed=config.seed, free_share=config.free_share))
    train_text, test_text = split_corpus(sentences, config.test_size, seed=config.seed)
    test_ids = {sentences.index(s) for s in test_text}
    shards = render_corpus(out, sentences, config, log)
    train_latents, train_symbols = [], []
    for shard in shards:
        meta, z = load_shard(shard)
        keep, position = [], 0
        for chunk in meta:
            n = sum(chunk["frames"])
            if chunk["sentence"] not in test_ids:
                keep.append(z[position : position + n])
                train_symbols.append(frame_symbols([chunk]))
            position += n
        train_latents.append(np.concatenate(keep) if keep else z[:0])
    latents = np.concatenate(train_latents).astype(np.float32)
    phonemes = teacher_phonemes()
    symbols = phonemes.n_symbols if config.symbol_codes else 0
    if symbols:
        log(f"codec: fitting {config.codebook_size} centroids per phoneme symbol on {len(latents)} training frames")
        codebook = fit_symbol_codebooks(latents, np.concatenate(train_symbols), symbols, config.codebook_size,
                                        seed=config.seed)
    else:
        log(f"codec: fitting {config.codebook_size} centroids on {len(latents)} training frames")
        codebook = fit_codebook(latents, config.codebook_size, seed=config.seed)
    decoder = extract_decoder(out / "codec" / DECODER_NAME, config.latent)
    codec = LatentCodec(LatentCodecConfig(codebook_size=config.codebook_size, latent=config.latent, symbols=symbols),
                        codebook, decoder)
    codec.save(out / "codec")
    layout = VocabLayout(n_phonemes=phonemes.n_symbols, n_speech=config.codebook_size, lookahead=config.lookahead,
                         symbol_codes=bool(symbols))
    examples = build_examples(shards, codec, layout, config.max_symbol_frames, config.leading_run)
    data = {"config": json.loads(json.dumps(asdict(config))), "layout": layout.to_dict(),
            "phonemes": phonemes.to_dict(),
            "train": [e for e in examples if e["sentence"] not in test_ids],
            "test": [e for e in examples if e["sentence"] in test_ids],
            "audio_hours": sum(c["seconds"] for s in shards for c in load_shard(s)[0]) / 3600,
            "build_seconds": time.perf_counter() - start}
    if config.short_utterances:
        data = add_utterances(data, short_corpus(config.short_utterances, config.seed), codec, out / "short",
                              "short utterances", log)
    save_dataset(path, data)
    (out / "split.json").write_text(json.dumps({"train": train_text, "test": test_text}, indent=1) + "\n")
    n_tokens = sum(len(e["prompt"]) + len(e["speech"]) for e in data["train"])
    log(f"dataset: {len(data['train'])} train / {len(data['test'])} test chunks, {data['audio_hours']:.2f} h of audio, "
        f"{n_tokens} train tokens, {data['build_seconds']:.0f} s")
    return data


def add_utterances(data: dict, sentences: list[str], codec: LatentCodec, work: Path, kind: str,
                   log=print) -> dict:
    """`data` with `sentences` rendered by the teacher and tokenised by `codec` (the codebook the dataset was
    made with) added to its training split, and recorded under "supplements"; the held-out split is untouched,
    so held-out loss stays comparable with runs on the dataset before. Rendering resumes in `work`."""
    config = DataConfig(**{k: v for k, v in data["config"].items() if k in DataConfig.__dataclass_fields__})
    config = replace(config, scales=tuple(config.scales))
    if codec.config.codebook_size != config.codebook_size:
        raise InputError(f"the codec has {codec.config.codebook_size} codes but the dataset was made with "
                         f"{config.codebook_size}")
    start = time.perf_counter()
    shards = render_corpus(work, sentences, config, log)
    layout = VocabLayout.from_dict(data["layout"])
    first = 1 + max(e["sentence"] for e in data["train"] + data["test"])  # ids after the corpus's
    added = [{**example, "sentence": first + example["sentence"]}
             for example in build_examples(shards, codec, layout, config.max_symbol_frames, config.leading_run)]
    hours = sum(chunk["seconds"] for shard in shards for chunk in load_shard(shard)[0]) / 3600
    record = {"kind": kind, "sentences": len(sentences), "chunks": len(added), "audio_hours": round(hours, 4),
              "seconds": round(time.perf_counter() - start, 1)}
    log(f"dataset: {len(added)} chunks of {kind} added ({hours * 60:.1f} min of audio)")
    return {**data, "train": data["train"] + added, "audio_hours": data.get("audio_hours", 0.0) + hours,
            "supplements": [*data.get("supplements", []), record]}


def trim_leading_run(speech: list[int], layout: VocabLayout, keep: int) -> list[int]:
    """A training stream whose opening run of one code (the teacher's leading pause) lasts at most `keep` frames.

    Piper's stochastic durations open ~2 % of chunks with a 6-47 frame pause where 97 % have 1-5 frames; a
    target that learns that tail holds the pause for seconds once it has repeated the code a few times
    (tempered sampling favours the repeat), so the tail is cut to the common length."""
    run = 0
    while run < len(speech) and speech[run] == speech[0] and speech[0] >= layout.speech_offset:
        run += 1
    return speech[:keep] + speech[run:] if run > keep else speech


def opening_cut(budget: dict, config: dict) -> int | None:
    """The `leading_run` a training run used: its budget's, else its dataset's, else today's default (datasets made
    before the cut are cut when loaded); None keeps whole pauses."""
    return budget.get("leading_run", config.get("leading_run", DataConfig.leading_run))


def longest_symbol(speech: np.ndarray, offsets: np.ndarray, layout: VocabLayout) -> int:
    """The most frames any one phoneme holds in packed speech streams (`save_dataset`'s flat arrays)."""
    frames = (speech >= layout.speech_offset).astype(np.int64)
    # A phoneme's frames end at its NEXT; a row's start also starts a phoneme (rows end with NEXT, END).
    ends = speech == layout.next_phoneme_id
    ends[offsets[1:] - 1] = True
    counted = np.concatenate([[0], np.cumsum(frames)])[np.flatnonzero(ends) + 1]
    return int(np.diff(counted, prepend=0).max(initial=0))


def longest_opening(speech: np.ndarray, offsets: np.ndarray, layout: VocabLayout) -> int:
    """The most frames a row's first phoneme holds (its speech before the first NEXT) in packed streams."""
    longest = 0
    for start, end in zip(offsets[:-1], offsets[1:]):
        row = speech[start:end]
        ends = np.flatnonzero(row == layout.next_phoneme_id)
        head = row[: ends[0]] if len(ends) else row
        longest = max(longest, int((head >= layout.speech_offset).sum()))
    return longest


def phoneme_caps(speech: np.ndarray, offsets: np.ndarray, layout: VocabLayout) -> dict[str, int]:
    """voice.json's caps from the training streams (as trained on: opening pauses already cut)."""
    return {"max_symbol_frames": symbol_frame_cap(longest_symbol(speech, offsets, layout)),
            "max_opening_frames": symbol_frame_cap(longest_opening(speech, offsets, layout))}


def symbol_frame_cap(longest: int, margin: float = 0.2) -> int:
    """How long the voice may hold one phoneme before NEXT is inserted (`PhonemeSchedule.max_frames`): the
    longest the teacher ever held one in training, plus `margin`. A bigger cap only lets a target stuck on a
    phoneme (typically the first one's leading pause) hold silence for seconds the teacher never did."""
    return int(np.ceil(longest * (1 + margin)))


def pack(sequences: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    flat = np.concatenate([np.asarray(s, dtype=np.int32) for s in sequences]) if sequences else np.zeros(0, np.int32)
    return flat, np.cumsum([0] + [len(s) for s in sequences]).astype(np.int64)


def save_dataset(path: Path, data: dict) -> None:
    """Token sequences packed flat (a few MB; travels to a GPU machine as one file)."""
    arrays = {}
    for split in ("train", "test"):
        for field in ("prompt", "speech"):
            arrays[f"{split}_{field}"], arrays[f"{split}_{field}_offsets"] = pack([e[field] for e in data[split]])
        arrays[f"{split}_text"] = np.array([e["text"] for e in data[split]])
        arrays[f"{split}_sentence"] = np.array([e["sentence"] for e in data[split]], dtype=np.int64)
    meta = {k: data[k] for k in ("config", "layout", "phonemes", "audio_hours", "build_seconds", "supplements")
            if k in data}
    np.savez_compressed(path, meta=json.dumps(meta), **arrays)


def load_dataset(path: Path) -> dict:
    stored = np.load(path)
    data = json.loads(str(stored["meta"]))
    for split in ("train", "test"):
        def rows(field):
            flat, offsets = stored[f"{split}_{field}"], stored[f"{split}_{field}_offsets"]
            return [flat[offsets[i] : offsets[i + 1]].tolist() for i in range(len(offsets) - 1)]
        prompts, speech = rows("prompt"), rows("speech")
        data[split] = [{"sentence": int(s), "text": str(t), "prompt": p, "speech": q}
                       for s, t, p, q in zip(stored[f"{split}_sentence"], stored[f"{split}_text"], prompts, speech)]
    return data
