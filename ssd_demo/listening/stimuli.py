"""Building stimulus sets for listening tests: WAV files plus a manifest, rendered once and reused.

Each sentence is rendered under every system with the same seed, so only the decoding differs;
the set is written atomically (a half-written set never appears). Rendering needs a synthesizer
(`render_stimulus_set`, `build_small_set`, the CLI) or any `Renderer` (`tone_renderer` needs no
model). Where sets live and how they are read back and verified is `ssd_demo.listening.stimulus_sets`.
A system is a `ssd_demo.speech.system.DecodingSystem`, named as `parse_system` reads it (imported here too).

CLI: python -m ssd_demo stimuli --name pilot --systems "AR" "SSD beta=0.3 K=4" "exact speculative"
With `--engine vllm` (Llasa presets) each system's sentences go to the vLLM engine in one batch (`batch_renderer`).
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from ..config import SETTINGS
from ..errors import InputError
from . import anchors, attention
from ..backends.registry import MODEL_JOB_LOCK, load_preset
from ..backends.vllm import engine_choice, use_engine
from ..backends.vllm.worker import require_vllm_python
from ..speech.system import DecodingSystem, parse_system
from .stimulus_sets import (MANIFEST_FORMAT, MANIFEST_NAME, MANIFEST_VERSION, SET_NAME, StimulusSet, load_stimulus_set,
                            stimuli_root)


DEFAULT_SYSTEMS = ("AR", "SSD beta=0.3 K=4", "exact speculative")
# The settings an AR decode uses: the sampling ones (a manifest's AR clips record only these).
AR_SETTINGS = frozenset(name for name, spec in SETTINGS.items() if spec.control and spec.control.section == "sampling")

# Harvard sentences (IEEE 1969, public domain): phonetically balanced, common in listening tests.
DEFAULT_SENTENCES = (
    "The birch canoe slid on the smooth planks.",
    "Glue the sheet to the dark blue background.",
    "It's easy to tell the depth of a well.",
    "These days a chicken leg is a rare dish.",
    "Rice is often served in round bowls.",
    "The juice of lemons makes fine punch.",
    "The box was thrown beside the parked truck.",
    "The hogs were fed chopped corn and garbage.",
)


# ----------------------------------------------------------------------------- derived clips


def derive_clip(system: DecodingSystem, reference_audio: np.ndarray, sample_rate: int, seed: int,
                reference: str) -> tuple[np.ndarray, dict[str, Any]]:
    """An anchor or attention clip made from the reference's clip of the same sentence."""
    if system.mode == "anchor":
        cutoff = system.overrides["lowpass_hz"]
        try:
            audio = anchors.lowpass(reference_audio, sample_rate, cutoff)
        except ValueError as error:
            raise InputError(f"system {system.label!r}: {error}") from None
        return audio, {"mode": "anchor", "source": reference, "lowpass_hz": cutoff,
                       "filter": f"Butterworth order {anchors.FILTER_ORDER}, zero phase"}
    return anchors.attention_noise(reference_audio, seed), {
        "mode": "attention", "source": reference, "noise_db_above_signal": anchors.NOISE_DB}


# ----------------------------------------------------------------------------- writing a set


# (audio float32 mono, sample rate, settings to record) for one sentence under one system and seed.
Renderer = Callable[[str, DecodingSystem, int], tuple[np.ndarray, int, dict[str, Any]]]


def _wav_bytes(audio: np.ndarray, sample_rate: int) -> bytes:
    audio = np.asarray(audio, dtype=np.float32)
    if audio.ndim != 1 or audio.size == 0:
        raise ValueError(f"a clip must be non-empty mono audio, got shape {audio.shape}")
    if not np.all(np.isfinite(audio)):
        raise ValueError("a clip contains NaN or infinite samples")
    buffer = io.BytesIO()
    # 16-bit PCM: what every browser plays, and the clip is stored exactly as the rater hears it.
    sf.write(buffer, np.clip(audio, -1.0, 1.0), sample_rate, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


def create_stimulus_set(
    name: str,
    texts: Sequence[str],
    systems: Sequence[DecodingSystem | str],
    render: Renderer,
    *,
    root: Path | None = None,
    base_seed: int = 0,
    preset: str = "",
    model_revision: str = "unknown",
    overwrite: bool = False,
    progress: Callable[[str], None] | None = None,
    reference: str = "AR",
) -> StimulusSet:
    """Render every text under every system and write the set atomically (a half-written set never appears).
    Anchors and the attention clip are made from the `reference` system's clip of the same sentence."""
    if not SET_NAME.match(name):
        raise InputError(f"stimulus set name {name!r}: use 1-64 letters, digits, '.', '_' or '-'")
    chosen = _checked_systems(systems, reference)
    texts = _checked_texts(texts)
    destination = stimuli_root(root) / name
    if destination.exists() and not overwrite:
        raise InputError(f"stimulus set {name!r} already exists at {destination}; pick another name or overwrite")
    destination.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=destination.parent))
    try:
        (staging / "clips").mkdir()
        items, spoken = [], {}  # spoken checks: rendered for the first sentence, the same clips for every other
        for index, text in enumerate(texts):  # the same seed for every system: only the decoding differs
            position = f"[{index + 1}/{len(texts)}]"
            items.append(_render_item(staging, f"s{index + 1:03d}", text, chosen, render, (base_seed + index, base_seed),
                                      reference, progress and (lambda line, at=position: progress(f"{at} {line}")),
                                      spoken))
        manifest = {
            "format": MANIFEST_FORMAT,
            "format_version": MANIFEST_VERSION,
            "name": name,
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "preset": preset,
            "model_revision": model_revision,
            "base_seed": base_seed,
            "systems": [{"name": s.label, "mode": s.mode, "overrides": s.overrides, "draft": s.draft} for s in chosen],
            "items": items,
        }
        (staging / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n",
                                             encoding="utf-8")
        if destination.exists():
            shutil.rmtree(destination)
        staging.rename(destination)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return load_stimulus_set(destination)


def _checked_systems(systems: Sequence[DecodingSystem | str], reference: str) -> list[DecodingSystem]:
    """The systems, names parsed; InputError for fewer than two, a name twice, or derived clips without their
    reference."""
    chosen = [parse_system(s) if isinstance(s, str) else s for s in systems]
    labels = [s.label for s in chosen]
    if len(chosen) < 2:
        raise InputError("a listening test needs at least two systems to compare")
    if len(set(labels)) != len(labels):
        raise InputError(f"system names must be unique, got {labels}")
    if any(s.derived for s in chosen) and reference not in [s.label for s in chosen if not s.derived]:
        raise InputError(f"anchors and attention clips are made from the reference {reference!r}: list it among the systems")
    return chosen


def _checked_texts(texts: Sequence[str]) -> list[str]:
    texts = [t.strip() for t in texts]
    if not texts or any(not t for t in texts):
        raise InputError("give at least one sentence, and no empty ones")
    return texts


def _render_item(staging: Path, item_id: str, text: str, systems: list[DecodingSystem], render: Renderer,
                 seeds: tuple[int, int], reference: str, progress: Callable[[str], None] | None,
                 spoken: dict) -> dict[str, Any]:
    """One sentence under every system, its clips written into `staging`: the item's manifest entry. `seeds`: the
    sentence's, and the set's for the spoken checks (one clip per target, `spoken` keeps them between sentences)."""
    (seed, set_seed), clips, rendered = seeds, [], {}
    voice = next((s for s in systems if s.label == reference), None)  # a spoken check's voice
    for system in sorted(systems, key=lambda s: s.derived):  # the reference before what is made from it
        if progress:
            progress(f"{system.label}: {text}")
        if system.derived and "spoken" in system.overrides:
            for name, audio, sample_rate, settings in attention.render_spoken(system, voice, render, set_seed, spoken):
                clips.append(_write_clip(staging, name, audio, sample_rate, set_seed, settings))
            continue
        if system.derived:
            reference_audio, sample_rate = rendered[reference]
            audio, settings = derive_clip(system, reference_audio, sample_rate, seed, reference)
        else:
            audio, sample_rate, settings = render(text, system, seed)
            rendered[system.label] = (audio, sample_rate)
        clips.append(_write_clip(staging, system.label, audio, sample_rate, seed, settings))
    return {"item_id": item_id, "text": text, "clips": clips}


def _write_clip(staging: Path, system: str, audio: np.ndarray, sample_rate: int, seed: int,
                settings: dict[str, Any]) -> dict[str, Any]:
    """The clip's WAV under its content hash, and its manifest entry."""
    data = _wav_bytes(audio, sample_rate)
    digest = hashlib.sha256(data).hexdigest()
    relative = f"clips/{digest[:24]}.wav"
    (staging / relative).write_bytes(data)
    return {
        "system": system,
        "path": relative,
        "sha256": digest,
        "duration_seconds": round(len(audio) / sample_rate, 4),
        "sample_rate": int(sample_rate),
        "seed": seed,
        "settings": settings,
    }


def tone_renderer(sample_rate: int = 16000, seconds: float = 0.3) -> Renderer:
    """A model-free Renderer: a tone per system plus seeded noise. For trying the app and for tests."""

    def render(text: str, system: DecodingSystem, seed: int) -> tuple[np.ndarray, int, dict[str, Any]]:
        frequency = 220.0 + 40.0 * (int(hashlib.sha256(system.label.encode()).hexdigest(), 16) % 16)
        # Length varies a little with the text, like speech does; never with the system.
        t = np.arange(int(sample_rate * (seconds + 0.001 * (len(text) % 50)))) / sample_rate
        noise = np.random.default_rng(seed).standard_normal(t.size)
        audio = 0.3 * np.sin(2 * np.pi * frequency * t) + 0.02 * noise
        return audio.astype(np.float32), sample_rate, {"mode": system.mode, **system.overrides, "renderer": "tone"}

    return render


# ----------------------------------------------------------------------------- rendering with a model


def model_revision(synthesizer) -> str:
    """A short fingerprint of the weights: a declared revision if the model has one, else a hash of the
    local folders the target and drafts were loaded from; "unknown" for models built in memory."""
    revision = getattr(synthesizer, "revision", None)  # a synthesizer that declares its weights' revision
    if revision:
        return str(revision)
    models = [getattr(synthesizer, "target", None), *getattr(synthesizer, "drafts", {}).values()]
    folders = []
    for model in models:
        source = getattr(getattr(model, "config", None), "_name_or_path", "") or ""
        if source and Path(source).is_dir():
            folders.append(Path(source))
    if not folders:
        return "unknown"
    digest = hashlib.sha256()
    for folder in folders:
        for file in sorted(p for p in folder.rglob("*") if p.is_file()):
            digest.update(f"{folder.name}/{file.relative_to(folder).as_posix()}".encode())
            with file.open("rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
    return f"sha256:{digest.hexdigest()[:16]}"


def synthesizer_renderer(synthesizer) -> Renderer:
    """A Renderer that speaks with `synthesizer` (ssd_demo.Synthesizer)."""

    def render(text: str, system: DecodingSystem, seed: int) -> tuple[np.ndarray, int, dict[str, Any]]:
        config = synthesizer.config(seed=seed, **system.overrides)
        result = synthesizer.synthesize(text, mode=system.mode, config=config, draft=system.draft)
        return result.audio, result.sample_rate, _recorded_settings(result.config, system, synthesizer)

    return render


def _recorded_settings(config, system: DecodingSystem, synthesizer) -> dict[str, Any]:
    """The decoding settings a clip's manifest entry records."""
    settings = {k: v for k, v in asdict(config).items() if k != "allowed_token_ids"}
    if not system.speculates:  # AR ignores the speculative settings (K, beta, rule...): recording them would mislead
        settings = {k: v for k, v in settings.items() if k not in SETTINGS or k in AR_SETTINGS}
    settings["mode"] = system.mode
    if system.speculates:
        settings["draft"] = system.draft or synthesizer.draft_name
    elif system.mode == "draft":  # the draft that decoded alone
        settings["draft"] = synthesizer.solo_draft(system.draft)
    return settings


def batch_renderer(synthesizer, texts: Sequence[str], base_seed: int = 0,
                   progress: Callable[[str], None] | None = None, end_engines: bool = True) -> Renderer:
    """A Renderer on the vLLM engine: a system's first clip renders all `texts` under it in one batch (continuous
    batching; `progress` gets its throughput line), the rest are read from that batch. The batch seeds text i with
    base_seed + its first chunk's index among all chunks (base_seed + i when every text is one chunk); with `end_engines` its
    engine process ends before the next system's starts (engines hold their models). The draft alone and texts outside
    `texts` (spoken attention checks) render one clip at a time on our engine, with the same models."""
    from ..measure.vllm_batch import summary, summary_line  # deferred: it loads the CLI's model flags
    from ..speech.synthesis import Synthesizer  # deferred: torch loads to render, not for `stimuli --help`

    texts = [t.strip() for t in texts]
    batches: dict[str, Any] = {}

    def render(text: str, system: DecodingSystem, seed: int) -> tuple[np.ndarray, int, dict[str, Any]]:
        if system.mode == "draft" or text not in texts:  # the draft alone, a spoken check: one clip, on our engine
            ours = Synthesizer(synthesizer.backend, synthesizer.target, synthesizer.drafts, synthesizer.draft_name)
            return synthesizer_renderer(ours)(text, system, seed)
        if system.label not in batches:
            config = synthesizer.config(seed=base_seed, **system.overrides)
            try:
                batches[system.label] = synthesizer.render_batch(texts, mode=system.mode, config=config, draft=system.draft)
            finally:
                if end_engines:
                    synthesizer.close()
            if progress:
                progress(f"{system.label} on vLLM: " + summary_line(summary(batches[system.label])))
        batch = batches[system.label]
        clip = batch.texts[seed - base_seed]
        if clip.text != text:
            raise ValueError(f"sentence {seed - base_seed} of the batch is {clip.text!r}, not {text!r}")
        return clip.audio, batch.sample_rate, {**_recorded_settings(batch.config, system, synthesizer), "engine": "vllm"}

    return render


def render_stimulus_set(
    name: str,
    texts: Sequence[str],
    systems: Sequence[str] = DEFAULT_SYSTEMS,
    *,
    preset: str = "embedded",
    synthesizer=None,
    root: Path | None = None,
    base_seed: int = 0,
    overwrite: bool = False,
    device: str | None = None,
    progress: Callable[[str], None] | None = None,
    reference: str = "AR",
    engine: str | None = None,
) -> StimulusSet:
    """Render `texts` under `systems` with a preset's synthesizer into a new stimulus set (`engine="vllm"`: each
    system's texts in one vLLM batch)."""
    chosen = [parse_system(s) for s in systems]  # fail on a bad name before loading a model
    on_vllm = engine is not None and engine_choice(engine) == "vllm"
    if on_vllm and synthesizer is None and not preset.startswith("llasa"):
        raise InputError(f"--engine vllm serves the Llasa presets; preset {preset!r} runs on our engine only (leave "
                         "out --engine)")
    if on_vllm:
        require_vllm_python()  # before the models load
    if synthesizer is None:
        # Rendering with the resident models: one model job at a time (see presets.MODEL_JOB_LOCK).
        with MODEL_JOB_LOCK:
            return render_stimulus_set(
                name, texts, systems, preset=preset, synthesizer=load_preset(preset, device=device),
                root=root, base_seed=base_seed, overwrite=overwrite, progress=progress, reference=reference,
                engine=engine)
    if engine is not None:
        synthesizer = use_engine(synthesizer, engine)  # an InputError for a voice vLLM does not serve
    # also a voice SSD_DEMO_ENGINE=vllm moved there on loading (the app's: its engines are kept running)
    batched = getattr(synthesizer, "on_vllm", False)
    render = (batch_renderer(synthesizer, texts, base_seed, progress, end_engines=on_vllm) if batched
              else synthesizer_renderer(synthesizer))
    return create_stimulus_set(
        name,
        texts,
        chosen,
        render,
        root=root,
        base_seed=base_seed,
        preset=preset,
        model_revision=model_revision(synthesizer),
        overwrite=overwrite,
        progress=progress,
        reference=reference,
    )


def build_small_set(
    root: Path | None = None, n_sentences: int = 4, name: str = "quick", synthesizer=None
) -> StimulusSet:
    """The app's on-demand set: a few default sentences under the default systems (reused if present)."""
    existing = stimuli_root(root) / name
    if (existing / MANIFEST_NAME).is_file():
        return load_stimulus_set(existing)
    if not 1 <= n_sentences <= len(DEFAULT_SENTENCES):
        raise InputError(f"n_sentences must be between 1 and {len(DEFAULT_SENTENCES)}, got {n_sentences}")
    return render_stimulus_set(
        name, DEFAULT_SENTENCES[:n_sentences], DEFAULT_SYSTEMS, synthesizer=synthesizer, root=root
    )


def stimulus_texts(texts_file: Path | None = None, sentences: Sequence[str] | None = None,
                   count: int = len(DEFAULT_SENTENCES)) -> list[str]:
    """The sentences of a set: a UTF-8 file's non-empty lines, else the given sentences, else the first `count`
    default ones."""
    if texts_file is not None:
        return [line.strip() for line in texts_file.read_text(encoding="utf-8").splitlines() if line.strip()]
    if sentences:
        return list(sentences)
    if not 1 <= count <= len(DEFAULT_SENTENCES):
        raise InputError(f"--count must be between 1 and {len(DEFAULT_SENTENCES)}")
    return list(DEFAULT_SENTENCES[:count])
